// The console's only way to the broker: fetch() on the /v1/ JSON API (docs/http-api.md), same origin only.
// Every mutation carries the session's CSRF token (X-CSRF-Token); an API error becomes an ApiError whose message
// is the API's own `error` text, which the screens show to the person as it is.

let session = null; // the last GET/POST /v1/session answer

export class ApiError extends Error {
  constructor(status, code, message) {
    super(message);
    this.status = status;
    this.code = code;
  }
}

// Paths are built by the callers with path() and query(), which encode every piece.
export function path(...segments) {
  return "/v1/" + segments.map((s) => encodeURIComponent(String(s))).join("/");
}

// ?a=1&b=2 from an object; empty strings, null and undefined are left out.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (v !== undefined && v !== null && v !== "") q.set(k, String(v));
  }
  const s = q.toString();
  return s ? "?" + s : "";
}

async function request(method, url, body) {
  const headers = { Accept: "application/json" };
  if (body !== undefined) headers["Content-Type"] = "application/json";
  if (method !== "GET") {
    if (!session) await loadSession();
    if (session && session.csrf_token) headers["X-CSRF-Token"] = session.csrf_token;
  }
  let response;
  try {
    response = await fetch(url, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
    });
  } catch (e) {
    throw new ApiError(0, "NETWORK", `cannot reach the broker (${e.message}): is annal serve running?`);
  }
  if (response.status === 204) return null;
  const text = await response.text();
  let data = null;
  try {
    data = text ? JSON.parse(text) : null;
  } catch (_) {
    data = null;
  }
  if (!response.ok) {
    const message = (data && data.error) || `${method} ${url} answered HTTP ${response.status}`;
    throw new ApiError(response.status, (data && data.code) || String(response.status), message);
  }
  return data;
}

export const get = (url) => request("GET", url);
export const post = (url, body) => request("POST", url, body ?? {});
export const patch = (url, body) => request("PATCH", url, body ?? {});
export const del = (url) => request("DELETE", url);

// GET /v1/session (creates the session cookie and its CSRF token). A broker without sessions answers 404:
// then there is no login and no token to send. Callers at the same time (the router, a first mutation) share
// one request.
let sessionLoading = null;

export function loadSession() {
  if (!sessionLoading) {
    sessionLoading = (async () => {
      try {
        session = await request("GET", "/v1/session");
      } catch (e) {
        if (e.status !== 404) throw e;
        session = { authenticated: false, principal: null, login_required: false, csrf_token: null };
      }
      return session;
    })().finally(() => { sessionLoading = null; });
  }
  return sessionLoading;
}

export async function login(username, password, mechanism) {
  session = await request("POST", "/v1/session", { username, password, mechanism });
  return session;
}

export async function logout() {
  await request("DELETE", "/v1/session");
  session = null;
  return loadSession();
}

export const currentSession = () => session;
