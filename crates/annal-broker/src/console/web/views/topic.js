// #/topics/NAME : a topic's partitions, configs (editable), ACLs and consumer groups; add partitions; delete
// with a typed confirmation.
import { del, get, patch, path, post } from "../api.js";
import { clear, errorBox, field, fmtBytes, fmtNum, h, markRendered, statusBadge, table } from "../dom.js";

export async function render(main, { topic }) {
  const enc = encodeURIComponent(topic);
  main.append(
    h("h1", null, "Topic ", h("span", { testid: "topic-name" }, topic)),
    h("div", { class: "toolbar" },
      h("a", { href: `#/topics/${enc}/messages`, class: "button", testid: "browse-messages" }, "Browse messages"),
      h("a", { href: `#/topics/${enc}/produce`, class: "button", testid: "produce-link" }, "Produce")),
  );
  const body = h("div");
  main.append(body);
  let t;
  try {
    t = await get(path("topics", topic));
  } catch (e) {
    body.append(errorBox(e));
    return;
  }
  const configsBox = h("div");
  body.append(
    h("h2", null, "Partitions"),
    table(
      [
        { title: "Partition", cell: (p) => String(p.partition), class: "num" },
        { title: "Leader", cell: (p) => (p.leader < 0 ? h("span", { class: "bad" }, "none") : String(p.leader)), class: "num" },
        { title: "Epoch", cell: (p) => String(p.leader_epoch), class: "num" },
        { title: "Replicas", cell: (p) => (p.replicas || []).join(", ") },
        {
          title: "ISR",
          cell: (p) => h("span", { class: (p.isr || []).length < (p.replicas || []).length ? "bad" : null }, (p.isr || []).join(", ")),
        },
        { title: "Log start", cell: (p) => fmtNum(p.log_start_offset), class: "num" },
        { title: "High watermark", cell: (p) => fmtNum(p.high_watermark), class: "num" },
        { title: "Size", cell: (p) => fmtBytes(p.size_bytes), class: "num" },
      ],
      t.partitions || [],
      { testid: "partitions", rowTestid: "partition-row" },
    ),
    addPartitions(topic, (t.partitions || []).length),
    h("h2", null, "Configs"),
    configsBox,
    h("h2", null, "Consumer groups"),
    table(
      [
        { title: "Group", cell: (g) => h("a", { href: `#/groups/${encodeURIComponent(g.group)}` }, g.group) },
        { title: "State", cell: (g) => g.state },
        { title: "Lag", cell: (g) => fmtNum(g.lag), class: "num" },
        { title: "Health", cell: (g) => (g.status ? statusBadge(g.status) : "") },
      ],
      t.groups || [],
      { testid: "topic-groups", rowTestid: "topic-group-row", empty: "no group has committed offsets here" },
    ),
    h("h2", null, "ACLs"),
    aclTable(t.acls || []),
    deleteForm(topic),
  );
  showConfigs(configsBox, topic, t.configs || []);
  markRendered("topic");
}

export function aclTable(acls) {
  return table(
    [
      { title: "Principal", cell: (a) => a.principal },
      { title: "Host", cell: (a) => a.host },
      { title: "Operation", cell: (a) => a.operation },
      { title: "Permission", cell: (a) => a.permission },
      { title: "Resource", cell: (a) => `${a.resource_type}:${a.resource_name}` },
      { title: "Pattern", cell: (a) => a.pattern_type },
    ],
    acls,
    { testid: "acls", rowTestid: "acl-row", empty: "no ACLs (or no permission to describe them)" },
  );
}

function showConfigs(box, topic, configs) {
  clear(box);
  const name = h("input", { testid: "config-name", placeholder: "retention.ms", list: "config-names" });
  const value = h("input", { testid: "config-value", placeholder: "value" });
  const result = h("div", { testid: "config-result" });
  const names = h("datalist", { id: "config-names" }, configs.map((c) => h("option", { value: c.name })));
  const submit = async (ev, remove) => {
    ev.preventDefault();
    clear(result);
    const key = name.value.trim();
    try {
      const body = remove ? { delete: [key], set: {} } : { set: { [key]: value.value }, delete: [] };
      const answer = await patch(path("topics", topic, "configs"), { ...body, validate_only: false });
      showConfigs(box, topic, Array.isArray(answer) ? answer : answer.configs || []);
    } catch (e) {
      result.append(errorBox(e));
    }
  };
  const form = h("form", { class: "inline", testid: "config-form" },
    field("Config", name), field("Value", value), names,
    h("button", { type: "submit", testid: "config-set" }, "Set"),
    h("button", { type: "button", testid: "config-delete", onclick: (ev) => submit(ev, true) }, "Reset to default"),
    result);
  form.addEventListener("submit", (ev) => submit(ev, false));
  box.append(
    table(
      [
        { title: "Name", cell: (c) => c.name },
        { title: "Value", cell: (c) => (c.sensitive ? "(sensitive)" : c.value ?? "–") },
        { title: "Source", cell: (c) => `${c.source}${c.read_only ? ", read-only" : ""}` },
      ],
      configs,
      { testid: "configs", rowTestid: "config-row", rowAttrs: (c) => ({ "data-name": c.name, class: c.default ? "default" : "set" }) },
    ),
    form,
  );
}

function addPartitions(topic, current) {
  const count = h("input", { type: "number", min: current + 1, value: String(current + 1), testid: "partitions-count" });
  const result = h("div", { testid: "partitions-result" });
  const form = h("form", { class: "inline" },
    field("Total partitions", count),
    h("button", { type: "submit", testid: "partitions-submit" }, "Add partitions"), result);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(result);
    try {
      await post(path("topics", topic, "partitions"), { count: Number(count.value) });
      window.dispatchEvent(new HashChangeEvent("hashchange"));
    } catch (e) {
      result.append(errorBox(e));
    }
  });
  return form;
}

// Delete needs the name typed again: the button stays disabled until it matches, and the API checks it too.
function deleteForm(topic) {
  const confirm = h("input", { testid: "delete-confirm", placeholder: topic, autocomplete: "off" });
  const button = h("button", { type: "submit", class: "danger", disabled: true, testid: "delete-submit" }, "Delete topic");
  const result = h("div", { testid: "delete-result" });
  confirm.addEventListener("input", () => { button.disabled = confirm.value !== topic; });
  const form = h("form", { class: "card danger-zone", testid: "delete-topic" },
    h("h2", null, "Delete"),
    h("p", null, "This deletes the topic and all its records. Type its name to confirm."),
    field("Topic name", confirm), button, result);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(result);
    try {
      await del(path("topics", topic) + "?confirm=" + encodeURIComponent(confirm.value));
      location.hash = "#/topics";
    } catch (e) {
      result.append(errorBox(e));
    }
  });
  return form;
}
