// User lookup: status (groups and named entitlements), eligibility for the catalog with reasons and
// evidence, the history as a timeline whose as-of line re-asks status and eligibility, and the
// user's events (EventService.ListEvents), marked on the timeline and listed page by page.
import { call, int64 } from "./api.js";
import { $, el, enumName, instantValue, onSubmit, parseInstant, showError, table, time } from "./ui.js";
import { buildLanes, drawTimeline, kinds } from "./timeline.js";
import { money, offerOf, states, typeName } from "./events.js";

let ctx;
let lookup = null; // {appId, userId, environment}
let drawn = null; // {lanes, asOfMs}: redrawn when the window's width changes
let resizing = null;
let events = { list: [], page: 0 }; // the looked-up user's events, in log order, and the page shown

export function init(context) {
  ctx = context;
  $("timeline-legend").replaceChildren(...kinds.map(([kind, label]) =>
    el("li", {}, el("span", { class: `swatch period-${kind}`, "aria-hidden": "true" }), label)),
    el("li", {}, el("span", { class: "swatch mark-refund", "aria-hidden": "true" }), "Refund or revocation"),
    el("li", {}, el("span", { class: "swatch mark-upgrade", "aria-hidden": "true" }), "Upgrade"),
    el("li", {}, el("span", { class: "swatch event-swatch", "aria-hidden": "true" }), "Event (listed under Events)"));
  $("events-order").addEventListener("change", () => { events.page = 0; renderEvents(); });
  $("events-page-size").addEventListener("change", () => { events.page = 0; renderEvents(); });
  $("events-previous").addEventListener("click", () => { events.page -= 1; renderEvents(); });
  $("events-next").addEventListener("click", () => { events.page += 1; renderEvents(); });
  onSubmit($("user-form"), async (data) => {
    const appId = ctx.appId();
    if (!appId) throw { code: "INVALID_ARGUMENT", message: "choose an app in the App field above" };
    await look({ appId, userId: data.get("userId").trim(), environment: data.get("environment") }, parseInstant(data.get("asOf")));
  });
  onSubmit($("erase-form"), async () => {
    const { appId, userId, environment } = lookup;
    if (!confirm(`Erase every piece of data of ${userId} in ${appId}? This cannot be undone.`)) return "";
    const reply = await call("AdminService", "DeleteUser", { appId, userId });
    await look({ appId, userId, environment }, 0);
    return `Erased ${int64(reply.transactionsErased)} transactions and ${int64(reply.renewalInfosErased)} renewal infos of ${userId}.`;
  });
}

export function show() {}

function draw(lanes, asOfMs) {
  drawn = { lanes, asOfMs };
  drawTimeline($("timeline"), lanes, asOfMs, (ms) => {
    drawn.asOfMs = ms;
    reask(ms).catch((error) => showError($("user-form"), error));
  });
}

window.addEventListener("resize", () => {
  clearTimeout(resizing);
  resizing = setTimeout(() => { if (drawn && !$("page-user").hidden) draw(drawn.lanes, drawn.asOfMs); }, 150);
});

async function look(request, asOfMs) {
  const now = Date.now();
  const at = asOfMs || now;
  const [history, logged, status, eligibility] = await Promise.all([
    historyOf(request), eventsOf(request), call("StatusService", "GetStatus", { ...request, asOfMs: String(asOfMs) }),
    eligibilityAt(request, at)]);
  lookup = { ...request };
  events = { list: logged, page: 0 };
  // Eligibility answers for the whole catalog (a query without product ids), to READ keys too, with
  // each product's group: the timeline's lanes need no catalog listing (ListProducts is ADMIN's).
  const groupOfProduct = new Map((eligibility.products ?? []).filter((p) => p.subscriptionGroupId)
    .map((p) => [p.productId, p.subscriptionGroupId]));
  const groupOfOriginal = new Map((status.groups ?? []).filter((g) => g.originalTransactionId)
    .map((g) => [g.originalTransactionId, g.subscriptionGroupId]));
  const groupOf = (t) => t.subscriptionGroupId || groupOfProduct.get(t.productId)
    || groupOfOriginal.get(t.originalTransactionId || t.transactionId) || "(one-time purchases)";

  $("user-result").hidden = false;
  const lanes = buildLanes(history.transactions, history.renewalInfos, groupOf, now, logged);
  if (lanes.length) {
    draw(lanes, at);
  } else {
    drawn = null;
    $("timeline").replaceChildren(el("p", {}, `No transactions for ${request.userId} in this environment.`));
  }
  $("transactions-result").replaceChildren(table(`Transactions of ${request.userId}`,
    ["Transaction", "Original", "Product", "Group", "Purchased", "Expires", "Offer", "Ownership", "Revoked", "Upgraded"],
    history.transactions.map((t) => [
      el("code", {}, t.transactionId), t.originalTransactionId ?? "", t.productId, groupOf(t),
      time(int64(t.purchaseDateMs)), time(int64(t.expiresDateMs)),
      t.isTrialPeriod ? "free trial" : t.isInIntroOfferPeriod ? "introductory" : enumName(t.offerType, "OFFER_TYPE_"),
      enumName(t.ownership ?? "OWNERSHIP_TYPE_PURCHASED", "OWNERSHIP_TYPE_"),
      t.revocationDateMs ? [time(int64(t.revocationDateMs)), t.revocationType && enumName(t.revocationType, "REVOCATION_TYPE_")].filter(Boolean).join(" ") : "—",
      t.isUpgraded ? "yes" : "—",
    ])));
  renderEvents();
  renderStatus(status, at);
  renderEligibility(eligibility, at);
}

/** Re-asks status and eligibility at `ms` (the as-of line moved). */
async function reask(ms) {
  $("user-as-of").value = instantValue(ms);
  const [status, eligibility] = await Promise.all([
    call("StatusService", "GetStatus", { appId: lookup.appId, userId: lookup.userId, environment: lookup.environment, asOfMs: String(ms) }),
    eligibilityAt(lookup, ms)]);
  renderStatus(status, ms);
  renderEligibility(eligibility, ms);
}

async function historyOf(request) {
  const transactions = [];
  let renewalInfos = [];
  let pageToken = "";
  do {
    const reply = await call("StatusService", "GetTransactionHistory", { ...request, pageSize: 1000, pageToken });
    transactions.push(...(reply.transactions ?? []));
    if (!pageToken) renewalInfos = reply.renewalInfos ?? [];
    pageToken = reply.nextPageToken ?? "";
  } while (pageToken);
  return { transactions, renewalInfos };
}

/** Every event of the user in the looked-up environment, in log order (1,000 per call). */
async function eventsOf(request) {
  const found = [];
  let sinceCursor = "";
  for (;;) {
    const reply = await call("EventService", "ListEvents", { ...request, sinceCursor, limit: 1000 });
    found.push(...(reply.events ?? []));
    sinceCursor = reply.nextCursor ?? "";
    if ((reply.events ?? []).length < 1000) return found;
  }
}

/** The page of the user's events shown, in the order chosen: by when each happened, then by log order. */
function renderEvents() {
  const newest = $("events-order").value === "newest";
  const sorted = events.list.map((e, i) => [e, i])
    .sort(([a, i], [b, j]) => (int64(a.occurredMs) - int64(b.occurredMs) || i - j) * (newest ? -1 : 1))
    .map(([e]) => e);
  const size = Number($("events-page-size").value);
  const pages = Math.max(1, Math.ceil(sorted.length / size));
  events.page = Math.min(Math.max(events.page, 0), pages - 1);
  const first = events.page * size;
  const shown = sorted.slice(first, first + size);
  $("events-previous").disabled = events.page === 0;
  $("events-next").disabled = events.page >= pages - 1;
  $("events-status").textContent = sorted.length
    ? `Events ${first + 1}–${first + shown.length} of ${sorted.length}, ${newest ? "newest" : "oldest"} first (page ${events.page + 1} of ${pages}).`
    : "";
  $("events-result").replaceChildren(table(`Events of ${lookup.userId}`,
    ["Event", "Occurred", "Detected", "Group", "Product", "Offer", "Price", "State before → after", "Cursor"],
    shown.map((e) => [
      [el("strong", { class: "event-type", "data-event-id": e.eventId }, typeName(e.type)),
        e.expirationReason ? ` (${e.expirationReason})` : "", e.previousUserId ? ` from ${e.previousUserId}` : ""],
      time(int64(e.occurredMs)), time(int64(e.detectedMs)), e.subscriptionGroupId || "—",
      [e.productId || "—", e.previousProductId ? ` (from ${e.previousProductId})` : ""].join(""),
      offerOf(e), money(e.priceMilliunits, e.currency), states(e),
      el("code", { class: "cursor" }, e.cursor ?? ""),
    ])));
}

function renderStatus(status, at) {
  $("status-title").textContent = `Status at ${time(at)}`;
  const groups = table("Subscription groups", ["Group", "State", "Product", "Expires", "Grace period ends", "Auto-renew", "Ownership", "Billing issue", "Offer now"],
    (status.groups ?? []).map((g) => [
      el("code", {}, g.subscriptionGroupId), el("span", { class: "state", "data-group": g.subscriptionGroupId }, enumName(g.state, "SUBSCRIPTION_STATE_")),
      g.productId ?? "—", time(int64(g.expiresMs)), time(int64(g.gracePeriodExpiresMs)),
      g.autoRenewEnabled ? `on → ${g.autoRenewProductId ?? g.productId}` : "off",
      enumName(g.ownership, "OWNERSHIP_TYPE_"), g.billingIssue ? "yes: ask for a new payment method" : "no",
      g.inTrial ? "free trial" : g.inIntroOffer ? "introductory" : "—",
    ]));
  const named = table("Named entitlements", ["Entitlement", "Active", "State", "Product", "Expires", "Will renew"],
    (status.namedEntitlements ?? []).map((e) => [
      el("code", {}, e.entitlementId), e.active ? "yes" : "no", enumName(e.state, "SUBSCRIPTION_STATE_"),
      e.productId ?? "—", e.expiresMs ? time(int64(e.expiresMs)) : "no end", e.willRenew ? "yes" : "no",
    ]));
  $("status-result").replaceChildren(groups, named);
}

/**
 * The user's eligibility at `at` for every product of the catalog: a query without product ids
 * asks for the whole catalog, which any key that may check eligibility may do.
 */
async function eligibilityAt({ appId, userId, environment }, at) {
  const reply = await call("EligibilityService", "CheckEligibility", {
    appId, environment, asOfMs: String(at), queries: [{ userId }],
  });
  const user = reply.users?.[0] ?? {};
  if (user.error) throw { code: `code ${user.error.code}`, message: user.error.message };
  return user;
}

function renderEligibility(user, at) {
  $("eligibility-title").textContent = `Eligibility at ${time(at)}`;
  if (!user.products?.length) {
    $("eligibility-result").replaceChildren(el("p", {}, "The app's catalog has no products to check."));
    return;
  }
  const offer = (o) => o ? `${o.eligible ? "eligible" : "not eligible"}: ${enumName(o.reason, "ELIGIBILITY_REASON_")}${o.evidenceTransactionId ? ` (transaction ${o.evidenceTransactionId})` : ""}` : "—";
  $("eligibility-result").replaceChildren(table("Offer eligibility by product", ["Product", "Group", "Introductory offer", "Promotional offers", "Win-back offers"],
    user.products.map((p) => [
      el("code", {}, p.productId), p.subscriptionGroupId ?? "—", offer(p.introductory), offer(p.promotional),
      (p.winBackOffers ?? []).map((w) => `${w.offerId}: ${w.eligible ? "eligible" : "not eligible"}`).join(", ") || "—",
    ])));
}
