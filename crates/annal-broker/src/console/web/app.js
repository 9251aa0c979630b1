// The Annal console: see docs/decisions/0018-console.md and docs/console.md.
// The router: the location hash names the screen (#/topics/NAME/messages?from=oldest); each screen is a module
// under views/ with render(main, params, query) that builds its part of the page and loads its data.

import { currentSession, loadSession, logout } from "./api.js";
import { clear, errorBox, h } from "./dom.js";

// [pattern, screen module loader, nav entry]; `:name` matches one path segment (URI-decoded). Screens are
// imported when first shown, so a first visit loads and compiles one screen's code, not all of them.
const ROUTES = [
  ["/", () => import("./views/overview.js"), "overview"],
  ["/topics", () => import("./views/topics.js"), "topics"],
  ["/topics/:topic", () => import("./views/topic.js"), "topics"],
  ["/topics/:topic/messages", () => import("./views/messages.js"), "topics"],
  ["/topics/:topic/produce", () => import("./views/produce.js"), "topics"],
  ["/groups", () => import("./views/groups.js"), "groups"],
  ["/groups/:group", () => import("./views/group.js"), "groups"],
  ["/acls", () => import("./views/acls.js"), "acls"],
  ["/users", () => import("./views/users.js"), "users"],
];
const loadLogin = () => import("./views/login.js");

const NAV = [
  ["#/", "Overview", "overview"],
  ["#/topics", "Topics", "topics"],
  ["#/groups", "Consumer groups", "groups"],
  ["#/acls", "ACLs", "acls"],
  ["#/users", "Users", "users"],
];

function parseHash() {
  const raw = location.hash.replace(/^#/, "") || "/";
  const [pathPart, queryPart = ""] = raw.split("?", 2);
  const segments = pathPart.split("/").filter(Boolean);
  return { segments, query: new URLSearchParams(queryPart) };
}

function match(segments) {
  for (const [pattern, load, nav] of ROUTES) {
    const parts = pattern.split("/").filter(Boolean);
    if (parts.length !== segments.length) continue;
    const params = {};
    let ok = true;
    for (let i = 0; i < parts.length; i++) {
      if (parts[i].startsWith(":")) params[parts[i].slice(1)] = decodeURIComponent(segments[i]);
      else if (parts[i] !== segments[i]) ok = false;
    }
    if (ok) return { load, params, nav };
  }
  return null;
}

function header(active) {
  const s = currentSession();
  const who = s && s.authenticated
    ? h("span", { class: "who" }, h("span", { testid: "principal" }, s.principal),
      h("button", { testid: "logout", onclick: async () => { await logout(); route(); } }, "log out"))
    : null;
  return h(
    "header",
    null,
    h("a", { href: "#/", class: "brand" }, "Annal"),
    h("nav", null, NAV.map(([href, text, key]) =>
      h("a", { href, class: key === active ? "active" : null, testid: `nav-${key}` }, text))),
    who,
  );
}

// One render per hash change; a newer navigation makes an older screen's late answers harmless because each
// screen writes only into the <main> it was given, which is detached from the page by then.
//
// The session (GET /v1/session) is asked for at the same time as the screen's code and the screen's first list
// request, not before them: a first visit costs one round trip less. The header's principal is filled in when
// the session answers; if it says a login is required, the login form replaces the screen (whose requests were
// refused with 401 and land in its detached <main>).
let navigation = 0;

async function route() {
  const mine = ++navigation;
  const current = () => mine === navigation;
  const app = document.getElementById("app");
  const { segments, query } = parseHash();
  const known = currentSession();
  const sessionAnswer = (known ? Promise.resolve(known) : loadSession()).then((s) => s, (e) => e);
  if (known && known.login_required && !known.authenticated) {
    await showLogin(app, current);
    return;
  }
  const found = match(segments);
  const main = h("main");
  let head = header(found ? found.nav : null);
  clear(app).append(head, main);
  const sessionShown = sessionAnswer.then(async (s) => {
    if (!current()) return;
    if (s instanceof Error) {
      clear(app).append(header(null), h("main", null, errorBox(s)));
    } else if (s.login_required && !s.authenticated) {
      await showLogin(app, current);
    } else if (!known) {
      const fresh = header(found ? found.nav : null);
      head.replaceWith(fresh);
      head = fresh;
    }
  });
  if (!found) {
    main.append(h("h1", null, "Not found"), h("p", null, "No such screen. "), h("a", { href: "#/" }, "Overview"));
    await sessionShown;
    return;
  }
  try {
    const screen = await found.load();
    if (!current()) return;
    await screen.render(main, found.params, query);
  } catch (e) {
    main.append(errorBox(e));
  }
  await sessionShown;
}

async function showLogin(app, current) {
  const loginView = await loadLogin();
  if (!current()) return;
  const main = h("main");
  clear(app).append(header(null), main);
  loginView.render(main, () => route());
}

window.addEventListener("hashchange", route);
route();
