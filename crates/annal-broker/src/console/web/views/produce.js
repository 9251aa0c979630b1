// #/topics/NAME/produce : write one record (acks=all) with a key, a value and headers; without a partition the
// key picks it (murmur2, as the Java client does).
import { path, post } from "../api.js";
import { clear, errorBox, field, h, link, markRendered, parsePairs } from "../dom.js";

export async function render(main, { topic }) {
  const enc = encodeURIComponent(topic);
  const partition = h("input", { testid: "produce-partition", placeholder: "by key", size: 6 });
  const key = h("input", { testid: "produce-key", placeholder: "(no key)" });
  const nullKey = h("input", { type: "checkbox", testid: "produce-null-key", checked: true });
  const value = h("textarea", { testid: "produce-value", rows: 8, placeholder: '{"hello": "world"}' });
  const headers = h("textarea", { testid: "produce-headers", rows: 3, placeholder: "trace-id=abc" });
  const result = h("div", { testid: "produce-result" });
  key.addEventListener("input", () => { nullKey.checked = key.value === ""; });
  const form = h("form", { class: "card", testid: "produce-form" },
    field("Partition", partition),
    field("Key", key), h("label", { class: "check" }, nullKey, " null key"),
    field("Value", value),
    field("Headers (key=value, one a line)", headers),
    h("button", { type: "submit", testid: "produce-submit" }, "Produce"),
    result);
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    clear(result);
    try {
      const p = partition.value.trim();
      const answer = await post(path("topics", topic, "messages"), {
        partition: p === "" ? null : Number(p),
        key: nullKey.checked && key.value === "" ? null : key.value,
        value: value.value,
        headers: parsePairs(headers.value).map(([k, v]) => ({ key: k, value: v })),
      });
      result.append(h("p", { class: "good", testid: "produced" },
        `Written to partition ${answer.partition} at offset ${answer.offset}. `,
        link(`#/topics/${enc}/messages?from=offset&partition=${answer.partition}&offset=${answer.offset}&limit=1`,
          "Show it", "produced-link")));
    } catch (e) {
      result.append(errorBox(e));
    }
  });
  main.append(h("h1", null, "Produce to ", h("a", { href: `#/topics/${enc}`, testid: "topic-name" }, topic)), form);
  markRendered("produce");
}
