// DOM helpers shared by the screens. Everything is built with createElement and textContent: no data ever goes
// through an HTML parser (no inner or outer HTML setters), so names, keys and values from the broker cannot inject markup.

// h("a", {href: "#/", testid: "x", class: "y", onclick: f}, child, "text", [children]...)
export function h(tag, attrs, ...children) {
  const node = document.createElement(tag);
  setAttrs(node, attrs);
  append(node, children);
  return node;
}

const SVG_NS = "http://www.w3.org/2000/svg";

export function svg(tag, attrs, ...children) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v !== undefined && v !== null) node.setAttribute(k, String(v));
  }
  append(node, children);
  return node;
}

function setAttrs(node, attrs) {
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === "testid") node.dataset.testid = v;
    else if (k === "class") node.className = v;
    else if (k.startsWith("on")) node.addEventListener(k.slice(2), v);
    else if (k === "value") node.value = v;
    else if (k === "checked" || k === "disabled" || k === "selected") node[k] = Boolean(v);
    else node.setAttribute(k, v === true ? "" : String(v));
  }
}

function append(node, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    node.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

export function clear(node) {
  while (node.firstChild) node.removeChild(node.firstChild);
  return node;
}

// The API's `error` text, shown as it is.
export function errorBox(err) {
  return h("div", { class: "error", testid: "error", role: "alert" }, err && err.message ? err.message : String(err));
}

export function link(href, text, testid) {
  return h("a", { href, testid }, text);
}

// A table: columns [{title, cell(row) -> Node|string, class}], rows; rowTestid names each <tr>.
export function table(columns, rows, { testid, rowTestid, rowAttrs, empty = "nothing to show" } = {}) {
  const head = h("thead", null, h("tr", null, columns.map((c) => h("th", { class: c.class }, c.title))));
  const body = h("tbody");
  for (const row of rows) {
    const tr = h("tr", { testid: rowTestid, ...(rowAttrs ? rowAttrs(row) : {}) });
    for (const c of columns) tr.append(h("td", { class: c.class }, c.cell(row)));
    body.append(tr);
  }
  if (rows.length === 0) {
    body.append(h("tr", null, h("td", { colspan: columns.length, class: "empty", testid: "empty" }, empty)));
  }
  return h("table", { testid }, head, body);
}

// Page controls for a paged answer {total, page, page_size}; onPage(n) loads page n.
export function pager(answer, onPage, testid = "pager") {
  const pages = Math.max(1, Math.ceil(answer.total / answer.page_size));
  return h(
    "div",
    { class: "pager", testid },
    h("button", { testid: "page-prev", disabled: answer.page <= 1, onclick: () => onPage(answer.page - 1) }, "‹ prev"),
    h("span", { testid: "page-info" }, `page ${answer.page} of ${pages} (${answer.total} in all)`),
    h("button", { testid: "page-next", disabled: answer.page >= pages, onclick: () => onPage(answer.page + 1) }, "next ›"),
  );
}

// A lag-health word (OK/WARN/ERR/STOP/STALL/REWIND) as a coloured badge.
export function statusBadge(status, testid = "status") {
  const word = String(status || "?");
  return h("span", { class: `badge status-${word.toLowerCase()}`, testid }, word);
}

export function fmtBytes(n) {
  if (n === null || n === undefined) return "–";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = Number(n);
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${i === 0 ? v : v.toFixed(1)} ${units[i]}`;
}

export function fmtMs(ms) {
  if (ms === null || ms === undefined) return "–";
  const v = Number(ms);
  if (v < 1000) return `${v} ms`;
  if (v < 60_000) return `${(v / 1000).toFixed(1)} s`;
  if (v < 3_600_000) return `${(v / 60_000).toFixed(1)} min`;
  if (v < 86_400_000) return `${(v / 3_600_000).toFixed(1)} h`;
  return `${(v / 86_400_000).toFixed(1)} d`;
}

export function fmtTime(ms) {
  if (ms === null || ms === undefined || ms < 0) return "–";
  return new Date(Number(ms)).toISOString().replace("T", " ").replace("Z", " UTC");
}

export function fmtNum(n) {
  return n === null || n === undefined ? "–" : Number(n).toLocaleString("en-US");
}

// Calls fn at most once per `ms` of quiet (search boxes query the server as the person types).
export function debounce(fn, ms = 200) {
  let timer = null;
  return (...args) => {
    clearTimeout(timer);
    timer = setTimeout(() => fn(...args), ms);
  };
}

// Runs only the newest of overlapping loads: an older answer that arrives late is dropped.
export function latestOnly() {
  let seq = 0;
  return async (load, show) => {
    const mine = ++seq;
    const result = await load();
    if (mine === seq) show(result);
  };
}

// A labelled form field.
export function field(label, input) {
  return h("label", { class: "field" }, h("span", null, label), input);
}

export function select(testid, options, value) {
  return h(
    "select",
    { testid },
    options.map(([v, text]) => h("option", { value: v, selected: v === value }, text)),
  );
}

// Marks the first paint of a screen's list (the bench measures from navigation start to this mark).
export function markRendered(name) {
  if (!performance.getEntriesByName(`annal:${name}`).length) performance.mark(`annal:${name}`);
  document.body.dataset.rendered = name;
}

// "k=v" lines to an object (configs, headers).
export function parsePairs(text) {
  const out = [];
  for (const line of text.split("\n")) {
    const t = line.trim();
    if (!t) continue;
    const i = t.indexOf("=");
    if (i <= 0) throw new Error(`"${t}" is not key=value`);
    out.push([t.slice(0, i).trim(), t.slice(i + 1)]);
  }
  return out;
}
