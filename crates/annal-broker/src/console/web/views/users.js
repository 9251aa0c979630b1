// #/users : SCRAM users (Describe/AlterUserScramCredentials).
import { del, get, path, post } from "../api.js";
import { clear, errorBox, field, h, markRendered, select, table } from "../dom.js";

export async function render(main) {
  const list = h("div", { testid: "user-list" });
  const load = async () => {
    clear(list);
    try {
      const users = await get("/v1/users");
      list.append(table(
        [
          { title: "User", cell: (u) => u.name },
          { title: "Mechanisms", cell: (u) => (u.mechanisms || []).join(", ") },
          {
            title: "",
            cell: (u) => h("button", { class: "danger", onclick: async () => {
              if (!window.confirm(`Delete user ${u.name}?`)) return;
              try { await del(path("users", u.name)); load(); } catch (e) { list.append(errorBox(e)); }
            } }, "delete"),
          },
        ],
        users,
        { testid: "users", rowTestid: "user-row", empty: "no SCRAM users" },
      ));
    } catch (e) {
      list.append(errorBox(e));
    }
    markRendered("users");
  };
  const name = h("input", { testid: "new-user-name" });
  const password = h("input", { type: "password", testid: "new-user-password", autocomplete: "new-password" });
  const mechanism = select("new-user-mechanism", [["SCRAM-SHA-256", "SCRAM-SHA-256"], ["SCRAM-SHA-512", "SCRAM-SHA-512"]], "SCRAM-SHA-256");
  const result = h("div");
  const form = h("form", { class: "card inline" }, h("h2", null, "Add or change a user"),
    field("Name", name), field("Password", password), field("Mechanism", mechanism),
    h("button", { type: "submit", testid: "user-create" }, "Save"), result);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(result);
    try {
      await post("/v1/users", { name: name.value, password: password.value, mechanism: mechanism.value, iterations: 8192 });
      password.value = "";
      load();
    } catch (e) {
      result.append(errorBox(e));
    }
  });
  main.append(h("h1", null, "Users"), list, form);
  await load();
}
