// #/acls : ACLs (Describe/Create/DeleteAcls), filtered by principal and resource on the server.
import { del, get, post, query } from "../api.js";
import { clear, errorBox, field, h, markRendered, select } from "../dom.js";
import { aclTable } from "./topic.js";

export async function render(main) {
  const principal = h("input", { testid: "acl-principal", placeholder: "User:alice" });
  const type = select("acl-resource-type", [["", "any"], ["TOPIC", "TOPIC"], ["GROUP", "GROUP"], ["CLUSTER", "CLUSTER"],
    ["TRANSACTIONAL_ID", "TRANSACTIONAL_ID"]], "");
  const name = h("input", { testid: "acl-resource-name", placeholder: "resource name" });
  const list = h("div", { testid: "acl-list" });
  const load = async () => {
    clear(list);
    try {
      const acls = await get("/v1/acls" + query({ principal: principal.value, resource_type: type.value, resource_name: name.value }));
      list.append(aclTable(acls));
    } catch (e) {
      list.append(errorBox(e));
    }
    markRendered("acls");
  };
  const filter = h("form", { class: "toolbar" }, principal, type, name, h("button", { type: "submit" }, "Filter"));
  filter.addEventListener("submit", (ev) => { ev.preventDefault(); load(); });
  main.append(h("h1", null, "ACLs"), filter, list, createForm(load));
  await load();
}

function createForm(reload) {
  const inputs = {
    principal: h("input", { testid: "new-acl-principal", placeholder: "User:alice" }),
    host: h("input", { value: "*" }),
    operation: select("new-acl-operation", ["ALL", "READ", "WRITE", "CREATE", "DELETE", "ALTER", "DESCRIBE",
      "DESCRIBE_CONFIGS", "ALTER_CONFIGS", "IDEMPOTENT_WRITE"].map((o) => [o, o]), "READ"),
    permission: select("new-acl-permission", [["ALLOW", "ALLOW"], ["DENY", "DENY"]], "ALLOW"),
    resource_type: select("new-acl-type", [["TOPIC", "TOPIC"], ["GROUP", "GROUP"], ["CLUSTER", "CLUSTER"],
      ["TRANSACTIONAL_ID", "TRANSACTIONAL_ID"]], "TOPIC"),
    resource_name: h("input", { testid: "new-acl-name", placeholder: "orders" }),
    pattern_type: select("new-acl-pattern", [["LITERAL", "LITERAL"], ["PREFIXED", "PREFIXED"]], "LITERAL"),
  };
  const result = h("div");
  const acl = () => Object.fromEntries(Object.entries(inputs).map(([k, v]) => [k, v.value]));
  const act = (method) => async (ev) => {
    ev.preventDefault();
    clear(result);
    try {
      await (method === "create" ? post("/v1/acls", acl()) : del("/v1/acls" + query(acl())));
      reload();
    } catch (e) {
      result.append(errorBox(e));
    }
  };
  const form = h("form", { class: "card inline" }, h("h2", null, "Add or remove an ACL"),
    Object.entries(inputs).map(([k, v]) => field(k.replace("_", " "), v)),
    h("button", { type: "submit", testid: "acl-create" }, "Add"),
    h("button", { type: "button", class: "danger", onclick: act("delete") }, "Remove matching"), result);
  form.addEventListener("submit", act("create"));
  return form;
}
