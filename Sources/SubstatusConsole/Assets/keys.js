// API keys: create (the key is shown once), list, revoke.
import { call, callAll, int64 } from "./api.js";
import { $, el, list, onSubmit, table, time } from "./ui.js";

export function init() {
  onSubmit($("key-form"), async (data) => {
    const reply = await call("AdminService", "CreateApiKey", {
      role: data.get("role"), appIds: list(data.get("appIds")), description: data.get("description").trim(),
    });
    $("key-form").reset();
    $("new-key-value").textContent = reply.key;
    $("new-key").hidden = false;
    await render();
    return `Created key ${reply.info.keyId}.`;
  });
  $("keys-revoked").addEventListener("change", () => render().catch(status));
}

export function show() {
  $("key-form").querySelector(".status").textContent = "";
  $("new-key").hidden = true;
  $("new-key-value").textContent = "";
  render().catch(status);
}

function status(error) {
  $("keys-status").classList.toggle("error", !!error);
  $("keys-status").textContent = error ? `${error.code ?? "ERROR"}: ${error.message}` : "";
}

async function render() {
  const keys = await callAll("AdminService", "ListApiKeys", { showRevoked: $("keys-revoked").checked }, "apiKeys");
  status(null);
  $("keys-list").replaceChildren(table("API keys of the tenant",
    ["Key", "Role", "Apps", "Description", "Created", "Last used", ""],
    keys.map((k) => [
      el("code", {}, k.displayPrefix), (k.role ?? "").replace("API_KEY_ROLE_", ""),
      (k.appIds ?? []).join(", ") || "every app", k.description ?? "", time(int64(k.createdMs)),
      time(int64(k.lastUsedMs)),
      k.revoked ? `revoked ${time(int64(k.revokedMs))}` : el("button", {
        type: "button", class: "small danger", "data-key-id": k.keyId,
        onclick: async (event) => {
          if (!confirm(`Revoke the key ${k.displayPrefix}? Calls with it fail at once.`)) return;
          event.target.disabled = true;
          try {
            await call("AdminService", "RevokeApiKey", { keyId: k.keyId });
            await render();
          } catch (error) {
            event.target.disabled = false;
            status(error);
          }
        },
      }, `Revoke ${k.displayPrefix}`),
    ])));
}
