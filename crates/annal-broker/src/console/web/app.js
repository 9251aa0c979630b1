// The Annal console: see docs/decisions/0018-console.md and docs/console.md.
// The router: the location hash names the screen (#/topics/NAME/messages?from=oldest); each screen is a module
// under views/ with render(main, params, query) that builds its part of the page and loads its data.

import { currentSession, loadSession, logout } from "./api.js";
import { clear, errorBox, h } from "./dom.js";
import * as overview from "./views/overview.js";
import * as topics from "./views/topics.js";
import * as topic from "./views/topic.js";
import * as messages from "./views/messages.js";
import * as produce from "./views/produce.js";
import * as groups from "./views/groups.js";
import * as group from "./views/group.js";
import * as acls from "./views/acls.js";
import * as users from "./views/users.js";
import * as loginView from "./views/login.js";

// [pattern, screen, nav entry]; `:name` matches one path segment (URI-decoded).
const ROUTES = [
  ["/", overview, "overview"],
  ["/topics", topics, "topics"],
  ["/topics/:topic", topic, "topics"],
  ["/topics/:topic/messages", messages, "topics"],
  ["/topics/:topic/produce", produce, "topics"],
  ["/groups", groups, "groups"],
  ["/groups/:group", group, "groups"],
  ["/acls", acls, "acls"],
  ["/users", users, "users"],
];

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
  for (const [pattern, screen, nav] of ROUTES) {
    const parts = pattern.split("/").filter(Boolean);
    if (parts.length !== segments.length) continue;
    const params = {};
    let ok = true;
    for (let i = 0; i < parts.length; i++) {
      if (parts[i].startsWith(":")) params[parts[i].slice(1)] = decodeURIComponent(segments[i]);
      else if (parts[i] !== segments[i]) ok = false;
    }
    if (ok) return { screen, params, nav };
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
async function route() {
  const app = document.getElementById("app");
  const { segments, query } = parseHash();
  let session;
  try {
    session = currentSession() || (await loadSession());
  } catch (e) {
    clear(app).append(header(null), h("main", null, errorBox(e)));
    return;
  }
  const main = h("main");
  if (session.login_required && !session.authenticated) {
    clear(app).append(header(null), main);
    loginView.render(main, () => route());
    return;
  }
  const found = match(segments);
  clear(app).append(header(found ? found.nav : null), main);
  if (!found) {
    main.append(h("h1", null, "Not found"), h("p", null, "No such screen. "), h("a", { href: "#/" }, "Overview"));
    return;
  }
  try {
    await found.screen.render(main, found.params, query);
  } catch (e) {
    main.append(errorBox(e));
  }
}

window.addEventListener("hashchange", route);
route();
