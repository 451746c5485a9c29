// Apps: the tenant's apps; register one; the selected app's names, shared secret (write-only: a
// fingerprint stands in), In-App Purchase key (its public key's fingerprint) and policy.
import { call, callAll, int64 } from "./api.js";
import { $, el, onSubmit, showError, table, time } from "./ui.js";

let ctx;

export function init(context) {
  ctx = context;
  onSubmit($("register-form"), async (data) => {
    const request = { bundleId: data.get("bundleId").trim(), displayName: data.get("displayName").trim() };
    if (data.get("appleAppId")) request.appleAppId = data.get("appleAppId");
    const { app } = await call("AdminService", "RegisterApp", request);
    $("register-form").reset();
    await ctx.refreshApps();
    ctx.selectApp(app.appId);
    await render();
    return `Registered ${app.bundleId} as ${app.appId}.`;
  });
  onSubmit($("update-app-form"), async (data) => {
    const { app } = await call("AdminService", "UpdateApp", {
      appId: ctx.appId(),
      app: { displayName: data.get("displayName").trim(), appleAppId: data.get("appleAppId") || "0" },
      updateMask: ["display_name", "apple_app_id"],
    });
    await ctx.refreshApps();
    await render();
    return `Saved ${app.displayName}.`;
  });
  onSubmit($("secret-form"), async (data) => {
    const reply = await call("AdminService", "SetSharedSecret", {
      appId: ctx.appId(), sharedSecret: data.get("sharedSecret"),
      previousSecretOverlapSeconds: data.get("overlap") || "0",
    });
    $("secret-value").value = "";
    await render();
    const previous = reply.previousFingerprint
      ? ` The previous secret ${reply.previousFingerprint} stays valid until ${time(int64(reply.previousValidUntilMs))}.` : "";
    return `Shared secret set: ${reply.fingerprint}.${previous}`;
  });
  onSubmit($("iap-form"), async (data) => {
    const { app } = await call("AdminService", "SetInAppPurchaseKey", {
      appId: ctx.appId(), issuerId: data.get("issuerId").trim(), keyId: data.get("keyId").trim(),
      privateKeyPem: data.get("privateKeyPem"),
    });
    $("iap-pem").value = "";
    await render();
    return `In-App Purchase key set: ${app.inAppPurchaseKey?.publicKeyFingerprint}.`;
  });
  onSubmit($("policy-form"), async (data) => {
    await call("AdminService", "SetPolicy", {
      appId: ctx.appId(),
      policy: {
        refundsBlockIntro: data.has("refundsBlockIntro"),
        lapsedSubscribersGetIntro: data.has("lapsedSubscribersGetIntro"),
        billingRetryEntitled: data.has("billingRetryEntitled"),
        promoScope: data.get("promoScope"),
        purchaseSharing: data.get("purchaseSharing"),
      },
      // Only the form's fields: the sandbox override and the paid-app entitlement keep their values.
      updateMask: [
        "refunds_block_intro", "lapsed_subscribers_get_intro", "billing_retry_entitled", "promo_scope",
        "purchase_sharing",
      ],
    });
    await render();
    return "Policy saved.";
  });
}

export function show() {
  render().catch((error) => showError($("register-form"), error));
}

async function render() {
  const apps = await callAll("AdminService", "ListApps", {}, "apps");
  $("apps-list").replaceChildren(table("Apps of the tenant", ["Name", "Bundle id", "App id", "Apple ID", "Shared secret", "In-App Purchase key", "Registered", ""],
    apps.map((a) => [
      a.displayName ?? "", a.bundleId, el("code", {}, a.appId), a.appleAppId ?? "—",
      a.sharedSecretFingerprint ?? "none", a.inAppPurchaseKey?.publicKeyFingerprint ?? "none", time(int64(a.createdMs)),
      a.appId === ctx.appId() ? "selected"
        : el("button", { type: "button", class: "small", onclick: () => { ctx.selectApp(a.appId); render(); } },
          `Select ${a.displayName || a.bundleId}`),
    ])));
  const app = apps.find((a) => a.appId === ctx.appId());
  $("app-settings").hidden = !app;
  $("app-settings-none").hidden = !!app;
  if (!app) return;
  $("app-settings-title").textContent = `Settings of ${app.displayName || app.bundleId} (${app.appId})`;
  $("update-name").value = app.displayName ?? "";
  $("update-apple-id").value = app.appleAppId ?? "";
  $("secret-fingerprint").textContent = app.sharedSecretFingerprint ?? "none set";
  $("iap-fingerprint").textContent = app.inAppPurchaseKey
    ? `${app.inAppPurchaseKey.publicKeyFingerprint} (key ${app.inAppPurchaseKey.keyId})` : "none set";
  const policy = app.policy ?? {};
  $("policy-refunds").checked = !!policy.refundsBlockIntro;
  $("policy-lapsed").checked = !!policy.lapsedSubscribersGetIntro;
  $("policy-retry").checked = !!policy.billingRetryEntitled;
  $("policy-scope").value = policy.promoScope ?? "PROMO_SCOPE_GROUP";
  $("policy-sharing").value = policy.purchaseSharing ?? "PURCHASE_SHARING_SHARE";
}
