// #/topics : every topic, paged, searched and sorted on the server (10,000 topics cost one page), with the
// groups reading each one and their lag inline; the create form.
import { get, post, query } from "../api.js";
import {
  clear, debounce, errorBox, field, fmtBytes, fmtNum, h, latestOnly, link, markRendered, pager, parsePairs,
  select, table,
} from "../dom.js";

const PAGE_SIZE = 50;

export async function render(main, _params, q) {
  const state = { q: q.get("q") || "", page: Number(q.get("page")) || 1, sort: q.get("sort") || "name", internal: "" };
  const list = h("div", { testid: "topic-list" });
  const search = h("input", { type: "search", placeholder: "search topics", value: state.q, testid: "topic-search" });
  const sort = select("topic-sort", [
    ["name", "name"], ["-size_bytes", "largest"], ["-partitions", "most partitions"], ["-records", "most records"],
  ], state.sort);
  const internal = select("topic-internal", [["", "all topics"], ["false", "not internal"], ["true", "internal only"]], "");
  const newest = latestOnly();

  const load = () => newest(
    () => get("/v1/topics" + query({ page: state.page, page_size: PAGE_SIZE, q: state.q, sort: state.sort, internal: state.internal }))
      .catch((e) => e),
    (answer) => show(list, answer, (p) => { state.page = p; load(); }),
  );
  search.addEventListener("input", debounce(() => { state.q = search.value; state.page = 1; load(); }));
  sort.addEventListener("change", () => { state.sort = sort.value; state.page = 1; load(); });
  internal.addEventListener("change", () => { state.internal = internal.value; state.page = 1; load(); });

  main.append(
    h("h1", null, "Topics"),
    h("div", { class: "toolbar" }, search, sort, internal),
    list,
    createForm(),
  );
  await load();
}

function show(list, answer, onPage) {
  clear(list);
  if (answer instanceof Error) {
    list.append(errorBox(answer));
    return;
  }
  if (!answer || !Array.isArray(answer.items)) {
    // A broker from before paging answers the whole list: refuse rather than render 10,000 rows.
    list.append(errorBox(new Error("this broker does not page /v1/topics (docs/http-api.md, Paging): upgrade it")));
    return;
  }
  list.append(
    table(
      [
        { title: "Topic", cell: (t) => link(`#/topics/${encodeURIComponent(t.name)}`, t.name, "topic-link") },
        { title: "Partitions", cell: (t) => fmtNum(t.partitions), class: "num" },
        { title: "RF", cell: (t) => fmtNum(t.replication_factor), class: "num" },
        { title: "Size", cell: (t) => fmtBytes(t.size_bytes), class: "num" },
        { title: "Records", cell: (t) => fmtNum(t.records), class: "num" },
        { title: "In", cell: (t) => (t.produce_bytes_per_s == null ? "–" : `${fmtBytes(t.produce_bytes_per_s)}/s`), class: "num" },
        {
          title: "At risk",
          cell: (t) => {
            const urp = t.under_replicated_partitions || 0;
            const off = t.offline_partitions || 0;
            return urp || off ? h("span", { class: "bad" }, `${urp} under-replicated, ${off} offline`) : "";
          },
        },
        {
          title: "Groups (lag)",
          // At most 10 groups come inline (the most lagging); groups_total says how many read the topic, and the
          // topic's own screen lists them all.
          cell: (t) => {
            const groups = t.groups || [];
            const more = (t.groups_total || 0) - groups.length;
            return [
              ...groups.map((g) =>
                h("a", { href: `#/groups/${encodeURIComponent(g.group)}`, class: "chip", testid: "topic-group" }, `${g.group}: ${fmtNum(g.lag)}`)),
              more > 0
                ? h("a", { href: `#/topics/${encodeURIComponent(t.name)}`, class: "chip", testid: "topic-groups-more" }, `+${fmtNum(more)} more`)
                : null,
            ];
          },
        },
      ],
      answer.items,
      { testid: "topics", rowTestid: "topic-row", rowAttrs: (t) => ({ "data-name": t.name }), empty: "no topic matches" },
    ),
    pager(answer, onPage),
  );
  markRendered("topics");
}

function createForm() {
  const name = h("input", { testid: "create-name", placeholder: "name", required: true });
  const partitions = h("input", { testid: "create-partitions", type: "number", min: 1, value: "1" });
  const rf = h("input", { testid: "create-rf", type: "number", value: "-1", title: "-1: the broker's default" });
  const configs = h("textarea", { testid: "create-configs", rows: 3, placeholder: "cleanup.policy=compact\nkey.index.enable=true" });
  const result = h("div", { testid: "create-result" });
  const form = h("form", { class: "card", testid: "create-topic" },
    h("h2", null, "Create a topic"),
    field("Name", name), field("Partitions", partitions), field("Replication factor", rf),
    field("Configs (key=value, one a line)", configs),
    h("button", { type: "submit", testid: "create-submit" }, "Create"),
    result);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(result);
    try {
      const created = await post("/v1/topics", {
        name: name.value.trim(),
        partitions: Number(partitions.value),
        replication_factor: Number(rf.value),
        configs: Object.fromEntries(parsePairs(configs.value)),
        validate_only: false,
      });
      location.hash = `#/topics/${encodeURIComponent(created.name || name.value.trim())}`;
    } catch (e) {
      result.append(errorBox(e));
    }
  });
  return form;
}

