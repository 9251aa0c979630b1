// #/groups : consumer groups, paged, searched, filtered by state and lag health and sorted on the server; a
// group whose health is not OK carries a visible flag.
import { get, query } from "../api.js";
import { clear, debounce, errorBox, fmtMs, fmtNum, h, latestOnly, markRendered, pager, select, statusBadge, table } from "../dom.js";

const PAGE_SIZE = 50;

export async function render(main, _params, q) {
  const state = { q: q.get("q") || "", page: Number(q.get("page")) || 1, state: q.get("state") || "",
    status: q.get("status") || "", sort: q.get("sort") || "name" };
  const list = h("div", { testid: "group-list" });
  const search = h("input", { type: "search", placeholder: "search groups", value: state.q, testid: "group-search" });
  const stateSel = select("group-state", [["", "any state"], ["Stable", "Stable"], ["Empty", "Empty"],
    ["PreparingRebalance", "PreparingRebalance"], ["CompletingRebalance", "CompletingRebalance"], ["Dead", "Dead"]], state.state);
  const statusSel = select("group-status", [["", "any health"], ["OK", "OK"], ["WARN", "WARN"], ["ERR", "ERR"],
    ["STOP", "STOP"], ["STALL", "STALL"]], state.status);
  const sort = select("group-sort", [["name", "name"], ["-lag", "most lag"], ["-time_lag_ms", "most time lag"],
    ["status", "health"], ["state", "state"]], state.sort);
  const newest = latestOnly();
  const load = () => newest(
    () => get("/v1/groups" + query({ page: state.page, page_size: PAGE_SIZE, q: state.q, state: state.state,
      status: state.status, sort: state.sort })).catch((e) => e),
    (answer) => show(list, answer, (p) => { state.page = p; load(); }),
  );
  search.addEventListener("input", debounce(() => { state.q = search.value; state.page = 1; load(); }));
  for (const [sel, k] of [[stateSel, "state"], [statusSel, "status"], [sort, "sort"]]) {
    sel.addEventListener("change", () => { state[k] = sel.value; state.page = 1; load(); });
  }
  main.append(h("h1", null, "Consumer groups"), h("div", { class: "toolbar" }, search, stateSel, statusSel, sort), list);
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
    list.append(errorBox(new Error("this broker does not page /v1/groups (docs/http-api.md, Paging): upgrade it")));
    return;
  }
  list.append(
    table(
      [
        {
          title: "Group",
          cell: (g) => [
            h("a", { href: `#/groups/${encodeURIComponent(g.group)}`, testid: "group-link" }, g.group),
            g.status && g.status !== "OK" ? h("span", { class: "flag", testid: "group-flag", title: "lagging" }, "⚑ lagging") : null,
          ],
        },
        { title: "State", cell: (g) => g.state },
        { title: "Members", cell: (g) => fmtNum(g.members), class: "num" },
        { title: "Health", cell: (g) => statusBadge(g.status) },
        { title: "Lag", cell: (g) => fmtNum(g.lag_records_sum), class: "num" },
        { title: "Time lag", cell: (g) => fmtMs(g.time_lag_ms_max), class: "num" },
        {
          title: "Retention",
          cell: (g) => (g.retention_time_to_loss_ms_min == null ? "–"
            : h("span", { class: g.retention_warning ? "bad" : null }, `loss in ${fmtMs(g.retention_time_to_loss_ms_min)}`)),
        },
      ],
      answer.items,
      {
        testid: "groups", rowTestid: "group-row", empty: "no group matches",
        rowAttrs: (g) => ({ "data-name": g.group, "data-status": g.status, class: g.status && g.status !== "OK" ? "lagging" : null }),
      },
    ),
    pager(answer, onPage),
  );
  markRendered("groups");
}
