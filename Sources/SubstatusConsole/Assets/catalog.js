// Catalog: products (with their subscription groups and offers) and named entitlements: put, list,
// delete. All calls name the selected app.
import { call, callAll } from "./api.js";
import { $, el, list, onSubmit, table } from "./ui.js";

let ctx;

export function init(context) {
  ctx = context;
  onSubmit($("product-form"), async (data) => {
    const product = {
      productId: data.get("productId").trim(), type: data.get("type"),
      subscriptionGroupId: data.get("subscriptionGroupId").trim(), duration: data.get("duration").trim(),
      hasIntroductoryOffer: data.has("hasIntroductoryOffer"), promotionalOfferIds: list(data.get("promotionalOfferIds")),
    };
    await call("AdminService", "PutProducts", { appId: ctx.appId(), products: [product] });
    $("product-form").reset();
    await render();
    return `Saved ${product.productId}.`;
  });
  onSubmit($("entitlement-form"), async (data) => {
    const entitlement = {
      entitlementId: data.get("entitlementId").trim(), displayName: data.get("displayName").trim(),
      productIds: list(data.get("productIds")),
    };
    await call("AdminService", "PutEntitlements", { appId: ctx.appId(), entitlements: [entitlement] });
    $("entitlement-form").reset();
    await render();
    return `Saved ${entitlement.entitlementId}.`;
  });
}

export function show() {
  render().catch((error) => status(error));
}

function status(error) {
  $("catalog-status").classList.toggle("error", !!error);
  $("catalog-status").textContent = error ? `${error.code ?? "ERROR"}: ${error.message}` : "";
}

/** A delete button whose errors show in the catalog's status line, next to the tables. */
function deleteButton(label, action) {
  return el("button", {
    type: "button", class: "small danger",
    onclick: async (event) => {
      if (!confirm(`${label}?`)) return;
      event.target.disabled = true;
      try {
        await action();
        status(null);
        await render();
      } catch (error) {
        event.target.disabled = false;
        status(error);
      }
    },
  }, label);
}

async function render() {
  const appId = ctx.appId();
  if (!appId) {
    status({ code: "INVALID_ARGUMENT", message: "choose an app in the App field above" });
    return;
  }
  const [products, entitlements] = await Promise.all([
    callAll("AdminService", "ListProducts", { appId }, "products"),
    callAll("AdminService", "ListEntitlements", { appId }, "entitlements"),
  ]);
  status(null);
  $("products-list").replaceChildren(table(`Products of ${appId}`,
    ["Product", "Type", "Group", "Duration", "Offers", ""],
    products.map((p) => [
      el("code", {}, p.productId), (p.type ?? "").replace("PRODUCT_TYPE_", ""), p.subscriptionGroupId ?? "—",
      p.duration ?? "—",
      [p.hasIntroductoryOffer ? "introductory" : "", ...(p.promotionalOfferIds ?? []).map((o) => `promotional ${o}`)]
        .filter(Boolean).join(", ") || "—",
      deleteButton(`Delete ${p.productId}`, () =>
        call("AdminService", "DeleteProducts", { appId, productIds: [p.productId] })),
    ])));
  const groups = new Map();
  for (const p of products) {
    if (!p.subscriptionGroupId) continue;
    groups.set(p.subscriptionGroupId, [...(groups.get(p.subscriptionGroupId) ?? []), p.productId]);
  }
  $("groups-list").replaceChildren(table("Subscription groups", ["Group", "Products"],
    [...groups].map(([g, ids]) => [el("code", {}, g), ids.join(", ")])));
  $("entitlements-list").replaceChildren(table("Named entitlements", ["Entitlement", "Display name", "Products", ""],
    entitlements.map((e) => [
      el("code", {}, e.entitlementId), e.displayName ?? "", (e.productIds ?? []).join(", "),
      deleteButton(`Delete ${e.entitlementId}`, () =>
        call("AdminService", "DeleteEntitlements", { appId, entitlementIds: [e.entitlementId] })),
    ])));
}
