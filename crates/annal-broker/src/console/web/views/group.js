// #/groups/NAME : a group's members, per-partition lag and time lag with their health, a lag-over-time chart (from
// each partition's `window` of commits), the retention guard's time to loss, and an offset reset that always
// shows a dry run's plan before it can be applied.
import { get, path, post } from "../api.js";
import { clear, errorBox, field, fmtMs, fmtNum, fmtTime, h, markRendered, select, statusBadge, svg, table } from "../dom.js";

export async function render(main, { group }) {
  main.append(h("h1", null, "Group ", h("span", { testid: "group-name" }, group)));
  const body = h("div");
  main.append(body);
  let g;
  try {
    g = await get(path("groups", group));
  } catch (e) {
    body.append(errorBox(e));
    return;
  }
  const partitions = g.partitions || [];
  body.append(
    h("dl", { class: "facts", testid: "group-facts" },
      h("dt", null, "State"), h("dd", { testid: "group-state" }, g.state),
      h("dt", null, "Health"), h("dd", null, statusBadge(g.status, "group-status"),
        g.status !== "OK" ? h("span", { class: "flag", testid: "group-flag" }, "⚑ lagging") : null),
      h("dt", null, "Lag (records)"), h("dd", { testid: "group-lag" }, fmtNum(g.lag_records_sum)),
      h("dt", null, "Time lag (max)"), h("dd", null, fmtMs(g.time_lag_ms_max)),
      h("dt", null, "Retention: time to loss"), h("dd", { class: g.retention_warning ? "bad" : null, testid: "time-to-loss" },
        g.retention_time_to_loss_ms_min == null ? "no loss in sight" : fmtMs(g.retention_time_to_loss_ms_min)),
      h("dt", null, "Records lost to retention"), h("dd", null, fmtNum(g.records_lost_to_retention)),
      h("dt", null, "Coordinator"), h("dd", null, g.coordinator ?? "–")),
    h("h2", null, "Members"),
    table(
      [
        { title: "Member", cell: (m) => m.member_id },
        { title: "Instance", cell: (m) => m.group_instance_id ?? "–" },
        { title: "Client", cell: (m) => `${m.client_id} (${m.client_host})` },
        { title: "Assignment", cell: (m) => (m.assignment || []).map((a) => `${a.topic}: ${a.partitions.join(", ")}`).join("; ") },
      ],
      g.member_list || [],
      { testid: "members", rowTestid: "member-row", empty: "no members (the group is empty)" },
    ),
    h("h2", null, "Partitions"),
    table(
      [
        { title: "Topic", cell: (p) => h("a", { href: `#/topics/${encodeURIComponent(p.topic)}` }, p.topic) },
        { title: "Partition", cell: (p) => String(p.partition), class: "num" },
        { title: "Committed", cell: (p) => h("span", { testid: "committed" }, String(p.committed_offset)), class: "num" },
        { title: "High watermark", cell: (p) => fmtNum(p.high_watermark), class: "num" },
        { title: "Lag", cell: (p) => h("span", { testid: "lag" }, String(p.lag)), class: "num" },
        { title: "Time lag", cell: (p) => fmtMs(p.time_lag_ms), class: "num" },
        { title: "Health", cell: (p) => statusBadge(p.status, "partition-status") },
        {
          title: "Time to loss",
          cell: (p) => (p.retention_time_to_loss_ms == null ? "–"
            : h("span", { class: p.retention_warning ? "bad" : null }, fmtMs(p.retention_time_to_loss_ms))),
        },
      ],
      partitions,
      { testid: "group-partitions", rowTestid: "group-partition-row",
        rowAttrs: (p) => ({ "data-topic": p.topic, "data-partition": p.partition }) },
    ),
    h("h2", null, "Lag over time"),
    lagChart(partitions),
    resetForm(group, partitions),
  );
  markRendered("group");
}

// One line per partition: lag (y) against commit time (x), from the partition's window of commits.
export function lagChart(partitions) {
  const series = partitions.filter((p) => (p.window || []).length > 0);
  if (!series.length) return h("p", { testid: "lag-chart-empty" }, "no commits in the window yet");
  const W = 640, H = 200, L = 56, B = 24, T = 8, R = 8;
  const all = series.flatMap((p) => p.window);
  const t0 = Math.min(...all.map((c) => c.timestamp_ms));
  const t1 = Math.max(...all.map((c) => c.timestamp_ms), t0 + 1);
  const lagMax = Math.max(1, ...all.map((c) => c.lag));
  const x = (t) => L + ((t - t0) / (t1 - t0)) * (W - L - R);
  const y = (lag) => T + (1 - lag / lagMax) * (H - T - B);
  const chart = svg("svg", { viewBox: `0 0 ${W} ${H}`, class: "chart", role: "img", "data-testid": "lag-chart" },
    svg("line", { x1: L, y1: H - B, x2: W - R, y2: H - B, class: "axis" }),
    svg("line", { x1: L, y1: T, x2: L, y2: H - B, class: "axis" }),
    svg("text", { x: L - 4, y: T + 10, class: "tick", "text-anchor": "end" }, fmtNum(lagMax)),
    svg("text", { x: L - 4, y: H - B, class: "tick", "text-anchor": "end" }, "0"),
    svg("text", { x: L, y: H - 6, class: "tick" }, fmtTime(t0)),
    svg("text", { x: W - R, y: H - 6, class: "tick", "text-anchor": "end" }, fmtTime(t1)));
  series.forEach((p, i) => {
    const points = p.window.map((c) => `${x(c.timestamp_ms).toFixed(1)},${y(c.lag).toFixed(1)}`).join(" ");
    chart.append(svg("polyline", { points, class: `series s${i % 6}`, "data-testid": "lag-series" },
      svg("title", null, `${p.topic}-${p.partition}`)));
    for (const c of p.window) {
      chart.append(svg("circle", { cx: x(c.timestamp_ms).toFixed(1), cy: y(c.lag).toFixed(1), r: 2.5, class: `dot s${i % 6}` },
        svg("title", null, `${p.topic}-${p.partition} at ${fmtTime(c.timestamp_ms)}: offset ${c.offset}, lag ${c.lag}`)));
    }
  });
  const legend = h("ul", { class: "legend" },
    series.map((p, i) => h("li", { class: `s${i % 6}` }, `${p.topic}-${p.partition}`)));
  return h("figure", { class: "card" }, chart, legend);
}

// Dry run first: Apply is enabled only once a dry run of exactly the same request has been shown.
function resetForm(group, partitions) {
  const topics = [...new Set(partitions.map((p) => p.topic))].sort();
  const topic = select("reset-topic", [["", "all the group's topics"], ...topics.map((t) => [t, t])], "");
  const to = select("reset-to", [["earliest", "earliest"], ["latest", "latest"], ["offset", "offset"],
    ["timestamp", "time (ms)"], ["shift", "shift by"]], "latest");
  const amount = h("input", { testid: "reset-value", type: "number", placeholder: "offset, ms or shift" });
  const plan = h("div", { testid: "reset-plan-box" });
  const dry = h("button", { type: "submit", testid: "reset-dry-run" }, "Dry run");
  const apply = h("button", { type: "button", class: "danger", disabled: true, testid: "reset-apply" }, "Apply");
  let planned = null;
  const request = () => {
    const body = { topic: topic.value || null, partitions: null, to: to.value };
    const n = Number(amount.value);
    if (to.value === "offset") body.offset = n;
    if (to.value === "timestamp") body.timestamp_ms = n;
    if (to.value === "shift") body.shift = n;
    return body;
  };
  const invalidate = () => { planned = null; apply.disabled = true; };
  for (const input of [topic, to, amount]) input.addEventListener("input", invalidate);
  const run = async (dryRun) => {
    const body = { ...request(), dry_run: dryRun };
    clear(plan);
    try {
      const answer = await post(path("groups", group, "offsets"), body);
      plan.append(planTable(answer));
      if (dryRun) {
        planned = JSON.stringify(request());
        apply.disabled = false;
      } else {
        invalidate();
        plan.append(h("p", { class: "good", testid: "reset-applied" }, "Offsets committed. "),
          h("a", { href: location.hash, onclick: () => window.dispatchEvent(new HashChangeEvent("hashchange")) }, "Reload the group"));
      }
    } catch (e) {
      plan.append(errorBox(e));
    }
  };
  const form = h("form", { class: "card", testid: "reset-form" },
    h("h2", null, "Reset offsets"),
    h("p", null, "The group must have no members. A dry run shows the plan; nothing is committed until Apply."),
    field("Topic", topic), field("To", to), field("Value", amount), dry, " ", apply, plan);
  form.addEventListener("submit", (ev) => { ev.preventDefault(); run(true); });
  apply.addEventListener("click", () => { if (planned === JSON.stringify(request())) run(false); });
  return form;
}

function planTable(answer) {
  return h("div", { testid: answer.dry_run ? "reset-plan" : "reset-result" },
    h("p", null, answer.dry_run ? "Plan (dry run: nothing committed):" : "Committed:"),
    table(
      [
        { title: "Topic", cell: (p) => p.topic },
        { title: "Partition", cell: (p) => String(p.partition), class: "num" },
        { title: "Current", cell: (p) => h("span", { testid: "plan-current" }, String(p.current_offset)), class: "num" },
        { title: "New", cell: (p) => h("span", { testid: "plan-new" }, String(p.new_offset)), class: "num" },
        { title: "Lag before", cell: (p) => fmtNum(p.lag_before), class: "num" },
        { title: "Lag after", cell: (p) => fmtNum(p.lag_after), class: "num" },
      ],
      answer.partitions || [],
      { rowTestid: "plan-row", rowAttrs: (p) => ({ "data-topic": p.topic, "data-partition": p.partition }) },
    ));
}
