// Small DOM helpers shared by the pages. Text always goes in as text (never as HTML).

/** Creates an element: el("td", {class: "x"}, "text", child). `on*` attributes become listeners. */
export function el(tag, attributes = {}, ...children) {
  const node = document.createElement(tag);
  for (const [name, value] of Object.entries(attributes)) {
    if (value === undefined || value === null || value === false) continue;
    if (name.startsWith("on")) node.addEventListener(name.slice(2), value);
    else node.setAttribute(name, value === true ? "" : String(value));
  }
  node.append(...children.flat().filter((c) => c !== undefined && c !== null));
  return node;
}

/** The element with `id`. */
export const $ = (id) => document.getElementById(id);

/** Shows `error` (an ApiError: "CODE: message") in the form's status line, where the person acted. */
export function showError(form, error) {
  const line = form.querySelector(".status");
  line.classList.add("error");
  line.textContent = error.code ? `${error.code}: ${error.message}` : String(error.message ?? error);
}

/** Shows a success note in the form's status line. */
export function showDone(form, text) {
  const line = form.querySelector(".status");
  line.classList.remove("error");
  line.textContent = text;
}

/** Runs `action` for the form's submit, with its button disabled meanwhile; errors land in the form. */
export function onSubmit(form, action) {
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const buttons = form.querySelectorAll("button");
    buttons.forEach((b) => (b.disabled = true));
    form.querySelector(".status").textContent = "";
    try {
      const done = await action(new FormData(form));
      if (done) showDone(form, done);
    } catch (error) {
      showError(form, error);
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  });
}

/** A table with a caption, headers and rows of cells (strings or nodes). */
export function table(caption, headers, rows) {
  return el("div", { class: "table-wrap", tabindex: "0", role: "region", "aria-label": caption },
    el("table", {},
      el("caption", {}, caption),
      el("thead", {}, el("tr", {}, headers.map((h) => el("th", { scope: "col" }, h)))),
      el("tbody", {}, rows.length
        ? rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c))))
        : [el("tr", {}, el("td", { colspan: headers.length }, "None."))])));
}

/** Milliseconds since the epoch as an ISO-8601 UTC string to the second, or "—" for 0. */
export function time(ms) {
  return ms ? `${new Date(ms).toISOString().slice(0, 19)}Z` : "—";
}

/** An enum value without its prefix, for people: SUBSCRIPTION_STATE_ACTIVE → ACTIVE. */
export function enumName(value, prefix) {
  return value ? String(value).replace(prefix, "") : "—";
}

/** A comma-separated field as a list of non-empty trimmed strings. */
export function list(text) {
  return String(text ?? "").split(",").map((s) => s.trim()).filter(Boolean);
}

/** A datetime-local value (UTC) as milliseconds, 0 when empty. */
export function parseInstant(text) {
  if (!text) return 0;
  const ms = Date.parse(text.endsWith("Z") ? text : `${text}Z`);
  if (Number.isNaN(ms)) throw new Error(`not a date and time: ${text}`);
  return ms;
}

/** Milliseconds as a datetime-local value in UTC (to the second). */
export function instantValue(ms) {
  return new Date(ms).toISOString().slice(0, 19);
}
