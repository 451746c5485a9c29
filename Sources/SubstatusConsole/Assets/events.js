// What the event pages share: the event types with their labels, and an event's fields for people.
import { int64 } from "./api.js";
import { enumName } from "./ui.js";

/** EventService's event types (EventType without UNSPECIFIED), in the proto's order. */
export const eventTypes = [
  "SUBSCRIPTION_STARTED", "TRIAL_CONVERTED", "RENEWED", "PRODUCT_CHANGED", "AUTO_RENEW_DISABLED",
  "AUTO_RENEW_ENABLED", "BILLING_ISSUE", "BILLING_RECOVERED", "GRACE_PERIOD_EXPIRED", "EXPIRED", "REFUNDED",
  "REFUND_REVERSED", "FAMILY_ACCESS_REVOKED", "RESUBSCRIBED", "NON_RENEWING_PURCHASED", "ONE_TIME_PURCHASED",
  "OWNERSHIP_TRANSFERRED", "SUBSCRIPTION_EXTENDED", "CONSENT_RESCINDED", "APPLE_NOTIFICATION",
  "COMMITMENT_STARTED", "COMMITMENT_RENEWED", "COMMITMENT_ENDED", "CONSUMPTION_INFO_SENT", "CONSUMPTION_INFO_FAILED",
  "CONSUMPTION_INFO_NOT_SENT", "RETENTION_OFFERED",
].map((name) => `EVENT_TYPE_${name}`);

/** An event type for people: EVENT_TYPE_TRIAL_CONVERTED → TRIAL_CONVERTED; a webhook test → TEST. */
export function typeName(type) {
  return type && type !== "EVENT_TYPE_UNSPECIFIED" ? type.replace("EVENT_TYPE_", "") : "TEST";
}

/** Milliunits of a currency as money (9990 EUR → €9.99), or "—" without a currency. */
export function money(milliunits, currency) {
  if (!currency) return "—";
  const amount = int64(milliunits) / 1000;
  try {
    return new Intl.NumberFormat("en", { style: "currency", currency }).format(amount);
  } catch {
    return `${amount.toFixed(2)} ${currency}`;
  }
}

/** How the event's period was bought, with its offer id: "free trial", "promotional (spring)". */
export function offerOf(event) {
  const offer = enumName(event.offer, "EVENT_OFFER_");
  if (offer === "—") return "—";
  const label = offer.toLowerCase().replaceAll("_", " ");
  return event.offerId ? `${label} (${event.offerId})` : label;
}

/** The group's state before → after the event. */
export function states(event) {
  return `${enumName(event.stateBefore, "SUBSCRIPTION_STATE_")} → ${enumName(event.stateAfter, "SUBSCRIPTION_STATE_")}`;
}
