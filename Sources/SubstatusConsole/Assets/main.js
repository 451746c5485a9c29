// The console's shell: sign-in, what the key may do, the selected app and the page router.
// Each page is a module exporting `init(context)` (wires its forms once) and `show(context)` (draws it
// when it is opened); pages and actions a key may not use (`data-needs="admin"`) are hidden, not refused.
import { call, callAll, apiKey, setApiKey } from "./api.js";
import { $, onSubmit, showError } from "./ui.js";
import * as apps from "./apps.js";
import * as catalog from "./catalog.js";
import * as keys from "./keys.js";
import * as webhooks from "./webhooks.js";
import * as user from "./user.js";
import * as reports from "./reports.js";
import * as retention from "./retention.js";

/** Page name → [module, whether it needs an ADMIN key]. */
const pages = {
  apps: [apps, true],
  catalog: [catalog, true],
  keys: [keys, true],
  webhooks: [webhooks, true],
  user: [user, false],
  reports: [reports, true],
  retention: [retention, true],
};

/** What every page reads: the caller's key description and the selected app. */
const context = {
  caller: null,
  isAdmin: false,
  appId() {
    return $("app-id").value.trim();
  },
  selectApp(appId) {
    $("app-id").value = appId;
    sessionStorage.setItem("substatus.appId", appId);
  },
  async refreshApps() {
    const list = $("app-ids");
    list.replaceChildren();
    let ids = this.caller.info?.appIds ?? [];
    if (this.isAdmin) {
      const found = await callAll("AdminService", "ListApps", {}, "apps");
      ids = found.map((a) => a.appId);
      for (const app of found) list.append(new Option(app.displayName || app.bundleId, app.appId));
    } else {
      for (const id of ids) list.append(new Option(id, id));
    }
    if (!this.appId() && ids.length) this.selectApp(ids[0]);
    return ids;
  },
};

async function signIn(key) {
  setApiKey(key);
  try {
    const caller = await call("AdminService", "GetCallerApiKey", {});
    if (caller.operatorKey) {
      throw { code: "PERMISSION_DENIED", message: "the operator key manages tenants, not what is inside them: sign in with a key of a tenant" };
    }
    context.caller = caller;
    context.isAdmin = caller.info?.role === "API_KEY_ROLE_ADMIN";
  } catch (error) {
    setApiKey(null);
    throw error;
  }
  const role = (context.caller.info?.role ?? "").replace("API_KEY_ROLE_", "");
  const scope = context.caller.info?.appIds?.length ? ` limited to ${context.caller.info.appIds.join(", ")}` : "";
  $("whoami").textContent = `${role} key ${context.caller.info?.displayPrefix ?? ""}${scope}`;
  document.body.dataset.role = role.toLowerCase();
  for (const node of document.querySelectorAll("[data-needs=admin]")) {
    if (!context.isAdmin) node.hidden = true;
  }
  $("app-id").value = sessionStorage.getItem("substatus.appId") ?? "";
  await context.refreshApps();
  $("page-signin").hidden = true;
  $("nav").hidden = false;
  $("session").hidden = false;
}

function signOut() {
  context.caller = null;
  setApiKey(null);
  sessionStorage.removeItem("substatus.appId");
  location.hash = "";
  location.reload();
}

/** Shows the page named by the URL's fragment (the first one the key may use otherwise). */
function route() {
  if (!context.caller) return;
  let name = location.hash.slice(1);
  if (!pages[name] || (pages[name][1] && !context.isAdmin)) name = context.isAdmin ? "apps" : "user";
  for (const [other, [, needsAdmin]] of Object.entries(pages)) {
    const section = $(`page-${other}`);
    section.hidden = other !== name || (needsAdmin && !context.isAdmin);
  }
  for (const link of document.querySelectorAll("#nav a")) {
    if (link.getAttribute("href") === `#${name}`) link.setAttribute("aria-current", "page");
    else link.removeAttribute("aria-current");
  }
  pages[name][0].show(context);
}

onSubmit($("signin-form"), async (data) => {
  await signIn(String(data.get("key")).trim());
  $("signin-key").value = "";
  route();
  $("main").focus();
});
$("sign-out").addEventListener("click", signOut);
$("app-id").addEventListener("change", () => {
  context.selectApp(context.appId());
  route();
});
window.addEventListener("hashchange", () => {
  route();
  $("main").focus();
});
for (const [module] of Object.values(pages)) module.init(context);

if (apiKey()) {
  signIn(apiKey()).then(route, (error) => showError($("signin-form"), error));
}
