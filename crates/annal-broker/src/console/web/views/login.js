// The login form, shown instead of every screen while /v1/session says login_required and the session is not
// authenticated. The broker checks the credentials with a real SASL exchange.
import { login } from "../api.js";
import { clear, errorBox, field, h, select } from "../dom.js";

export function render(main, onDone) {
  const username = h("input", { testid: "login-username", autocomplete: "username" });
  const password = h("input", { type: "password", testid: "login-password", autocomplete: "current-password" });
  const mechanism = select("login-mechanism", [["SCRAM-SHA-256", "SCRAM-SHA-256"], ["SCRAM-SHA-512", "SCRAM-SHA-512"],
    ["PLAIN", "PLAIN"]], "SCRAM-SHA-256");
  const result = h("div");
  const form = h("form", { class: "card login", testid: "login-form" },
    h("h1", null, "Log in"),
    h("p", null, "This broker requires authentication: use a SASL user of the cluster."),
    field("User", username), field("Password", password), field("Mechanism", mechanism),
    h("button", { type: "submit", testid: "login-submit" }, "Log in"), result);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(result);
    try {
      await login(username.value, password.value, mechanism.value);
      onDone();
    } catch (e) {
      result.append(errorBox(e));
    }
  });
  main.append(form);
}
