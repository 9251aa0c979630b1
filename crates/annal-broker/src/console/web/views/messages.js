// #/topics/NAME/messages : the message browser. From the newest records, the oldest, an offset or a time, with
// key/value/header filters applied on the server (bounded by max_scan), and "lookup by key" through the key
// index (/v1/topics/NAME/records?key=). JSON is shown pretty-printed, binary as hex, headers listed.
// The form's state lives in the hash (#/topics/t/messages?from=offset&offset=42) so a view can be linked.
import { get, path, query } from "../api.js";
import { clear, errorBox, field, fmtNum, fmtTime, h, markRendered, select, table } from "../dom.js";

const FIELDS = ["partition", "from", "offset", "timestamp_ms", "limit", "key", "value", "header", "lookup"];

export async function render(main, { topic }, q) {
  const enc = encodeURIComponent(topic);
  const state = Object.fromEntries(FIELDS.map((f) => [f, q.get(f) || ""]));
  const from = select("from", [["newest", "newest"], ["oldest", "oldest"], ["offset", "offset"], ["timestamp", "time"]],
    state.from || "newest");
  const partition = h("input", { testid: "partition", placeholder: "all", value: state.partition, size: 4 });
  const offset = h("input", { testid: "offset", type: "number", min: 0, value: state.offset });
  const time = h("input", { testid: "timestamp", type: "datetime-local", step: 1 });
  if (state.timestamp_ms) time.value = new Date(Number(state.timestamp_ms)).toISOString().slice(0, 19);
  const limit = h("input", { testid: "limit", type: "number", min: 1, max: 500, value: state.limit || "50", size: 4 });
  const key = h("input", { testid: "filter-key", placeholder: "key contains", value: state.key });
  const value = h("input", { testid: "filter-value", placeholder: "value contains", value: state.value });
  const header = h("input", { testid: "filter-header", placeholder: "header contains", value: state.header });
  const lookup = h("input", { testid: "lookup-key", placeholder: "exact key", value: state.lookup });
  const results = h("div", { testid: "messages-result" });

  const browse = h("form", { class: "card inline", testid: "browse-form" },
    field("From", from), field("Partition", partition), field("Offset", offset), field("Time (UTC)", time),
    field("Limit", limit), field("Key", key), field("Value", value), field("Header", header),
    h("button", { type: "submit", testid: "browse-submit" }, "Browse"));
  browse.addEventListener("submit", (ev) => {
    ev.preventDefault();
    const ts = time.value ? Date.parse(time.value + "Z") : "";
    go(enc, { from: from.value, partition: partition.value.trim(), offset: offset.value, timestamp_ms: ts,
      limit: limit.value, key: key.value, value: value.value, header: header.value });
  });
  const byKey = h("form", { class: "card inline", testid: "lookup-form" },
    field("Lookup by key (key index)", lookup), h("button", { type: "submit", testid: "lookup-submit" }, "Find"));
  byKey.addEventListener("submit", (ev) => {
    ev.preventDefault();
    go(enc, { lookup: lookup.value });
  });

  main.append(
    h("h1", null, "Messages in ", h("a", { href: `#/topics/${enc}`, testid: "topic-name" }, topic)),
    browse, byKey, results,
  );
  try {
    if (state.lookup) await showLookup(results, topic, state.lookup);
    else await showBrowse(results, topic, state);
  } catch (e) {
    results.append(errorBox(e));
  }
  markRendered("messages");
}

// Browsing again with the same form is a reload: the hash does not change, so no hashchange fires by itself.
function go(enc, params) {
  const hash = `#/topics/${enc}/messages` + query(params);
  if (location.hash === hash) window.dispatchEvent(new HashChangeEvent("hashchange"));
  else location.hash = hash;
}

async function showBrowse(box, topic, s) {
  const answer = await get(path("topics", topic, "messages") + query({
    partition: s.partition || "all", from: s.from || "newest", offset: s.offset, timestamp_ms: s.timestamp_ms,
    limit: s.limit || 50, key: s.key, value: s.value, header: s.header,
  }));
  clear(box);
  box.append(
    h("p", { testid: "scan-info" }, `${answer.messages.length} messages, ${fmtNum(answer.scanned)} scanned`,
      answer.truncated ? h("span", { class: "bad", testid: "truncated" }, " (scan limit reached: narrow the range)") : ""),
    messageTable(answer.messages),
  );
}

async function showLookup(box, topic, key) {
  const answer = await get(path("topics", topic, "records") + query({ key, partition: "all" }));
  const rows = [];
  for (const p of answer.partitions || []) {
    for (const r of p.records || []) {
      rows.push({ partition: p.partition, offset: r.offset, timestamp_ms: r.timestamp, key: r.key, value: r.value, headers: r.headers || [] });
    }
  }
  clear(box);
  box.append(h("p", { testid: "scan-info" }, `${rows.length} records with key "${key}" (key index)`));
  const missing = (answer.not_leader || []).map((n) => `${n.partition} (leader ${n.leader})`);
  if (missing.length) box.append(h("p", { class: "bad" }, `partitions this broker cannot answer for: ${missing.join(", ")}`));
  box.append(messageTable(rows));
}

function messageTable(rows) {
  return table(
    [
      { title: "Partition", cell: (m) => String(m.partition), class: "num" },
      { title: "Offset", cell: (m) => h("span", { testid: "msg-offset" }, String(m.offset)), class: "num" },
      { title: "Time", cell: (m) => fmtTime(m.timestamp_ms) },
      { title: "Key", cell: (m) => data(m.key, "msg-key") },
      { title: "Value", cell: (m) => data(m.value, "msg-value") },
      {
        title: "Headers",
        cell: (m) => h("ul", { class: "headers", testid: "msg-headers" },
          (m.headers || []).map((hd) => h("li", null, h("b", null, hd.key), ": ", data(hd.value, "msg-header-value")))),
      },
    ],
    rows,
    { testid: "messages", rowTestid: "message-row", empty: "no messages" },
  );
}

// Data is {encoding: json|utf8|hex, text} from the messages API or {encoding: utf8|hex, data} from the key
// index's; UTF-8 that is a JSON object or array is pretty-printed here too.
function data(d, testid) {
  if (d === null || d === undefined) return h("span", { class: "null", testid, "data-encoding": "null" }, "null");
  let text = d.text ?? d.data ?? "";
  let encoding = d.encoding;
  if (encoding === "utf8" && /^\s*[[{]/.test(text)) {
    try {
      text = JSON.stringify(JSON.parse(text), null, 2);
      encoding = "json";
    } catch (_) { /* not JSON: shown as text */ }
  }
  return h("pre", { class: `data enc-${encoding}`, testid, "data-encoding": encoding, title: encoding }, text);
}
