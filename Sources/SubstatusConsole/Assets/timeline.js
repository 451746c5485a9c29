// The user's history as an SVG timeline: one lane per subscription group, each transaction's
// period coloured by kind (trial, intro, promotional, paid), the current renewal state's grace
// period and billing retry after the last period, refunds and revocations marked, upgrades and
// family sharing labelled, the user's events as dots under their group's lane, and the `as_of`
// instant as a line to move by pointer or keyboard.
import { int64 } from "./api.js";
import { time } from "./ui.js";

const SVG = "http://www.w3.org/2000/svg";
const DAY = 86_400_000;
const RETRY_LIMIT = 60 * DAY; // Apple retries billing for up to 60 days.

/** The kinds of period, in legend order, with their labels. */
export const kinds = [
  ["trial", "Free trial"], ["intro", "Introductory offer"], ["promotional", "Promotional offer, offer code or win-back"],
  ["paid", "Paid"], ["grace", "Billing grace period"], ["retry", "Billing retry"],
];

/** The kind of a transaction's period. */
export function periodKind(t) {
  if (t.isTrialPeriod) return "trial";
  if (t.isInIntroOfferPeriod || t.offerType === "OFFER_TYPE_INTRODUCTORY") return "intro";
  if (["OFFER_TYPE_PROMOTIONAL", "OFFER_TYPE_OFFER_CODE", "OFFER_TYPE_WIN_BACK"].includes(t.offerType)) return "promotional";
  return "paid";
}

/**
 * Lanes from a history: `groupOf(transaction)` names its lane. Periods are transactions with an
 * expiry; the others (one-time purchases) become purchase marks. `nowMs` bounds an open retry.
 * `events` (EventService events) become dots of their group's lane, where the history has one.
 */
export function buildLanes(transactions, renewalInfos, groupOf, nowMs, events = []) {
  const lanes = new Map();
  const lane = (name) => {
    if (!lanes.has(name)) lanes.set(name, { group: name, periods: [], marks: [], events: [] });
    return lanes.get(name);
  };
  const lastOfOriginal = new Map();
  for (const t of transactions) {
    const l = lane(groupOf(t));
    const start = int64(t.purchaseDateMs);
    const expires = int64(t.expiresDateMs);
    const revoked = int64(t.revocationDateMs);
    const family = t.ownership === "OWNERSHIP_TYPE_FAMILY_SHARED";
    if (!expires) {
      l.marks.push({ at: start, kind: "purchase", label: t.productId, transactionId: t.transactionId });
    } else {
      // A refund, a revocation or (in receipts) an upgrade's cancellation ends the period early.
      const end = revoked && revoked < expires ? revoked : expires;
      l.periods.push({
        kind: periodKind(t), start, end, productId: t.productId, transactionId: t.transactionId,
        family, upgraded: !!t.isUpgraded, offerId: t.offerId ?? "",
      });
      const original = t.originalTransactionId || t.transactionId;
      const last = lastOfOriginal.get(original);
      if (!last || expires > last.expires) lastOfOriginal.set(original, { expires, lane: l });
    }
    if (t.isUpgraded) {
      l.marks.push({ at: revoked && (!expires || revoked < expires) ? revoked : expires, kind: "upgrade", label: "upgraded", transactionId: t.transactionId });
    } else if (revoked) {
      const familyRevoke = t.revocationType === "REVOCATION_TYPE_FAMILY_REVOKE";
      l.marks.push({ at: revoked, kind: familyRevoke ? "revocation" : "refund",
        label: familyRevoke ? "family access revoked" : "refund", transactionId: t.transactionId });
    }
  }
  for (const info of renewalInfos) {
    const last = lastOfOriginal.get(info.originalTransactionId);
    if (!last) continue;
    const graceEnd = int64(info.gracePeriodExpiresDateMs);
    if (graceEnd > last.expires) {
      last.lane.periods.push({ kind: "grace", start: last.expires, end: graceEnd, productId: info.productId ?? "", transactionId: "" });
    }
    if (info.isInBillingRetryPeriod) {
      const start = Math.max(last.expires, graceEnd);
      const end = Math.min(last.expires + RETRY_LIMIT, Math.max(nowMs, start));
      if (end > start) last.lane.periods.push({ kind: "retry", start, end, productId: info.productId ?? "", transactionId: "" });
    }
  }
  for (const e of events) {
    const l = lanes.get(e.subscriptionGroupId || groupOf({ productId: e.productId, originalTransactionId: e.originalTransactionId }));
    l?.events.push({ at: int64(e.occurredMs), type: e.type, eventId: e.eventId });
  }
  for (const l of lanes.values()) l.periods.sort((a, b) => a.start - b.start);
  return [...lanes.values()].sort((a, b) => a.group.localeCompare(b.group));
}

function node(tag, attributes = {}, text) {
  const n = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attributes)) n.setAttribute(k, String(v));
  if (text !== undefined) n.textContent = text;
  return n;
}

/**
 * Draws `lanes` into `container` with the as-of line at `asOfMs`. `onMove(ms)` runs once the line
 * comes to rest (pointer released, or keys released for 300 ms). Returns `setAsOf(ms)`.
 */
export function drawTimeline(container, lanes, asOfMs, onMove) {
  const all = lanes.flatMap((l) => [...l.periods.flatMap((p) => [p.start, p.end]), ...l.marks.map((m) => m.at),
    ...l.events.map((e) => e.at)]);
  let min = Math.min(...all, asOfMs);
  let max = Math.max(...all, asOfMs);
  if (!(max > min)) { min -= DAY; max += DAY; }
  // A margin on both sides, to whole seconds (the as-of line moves to the second).
  const pad = Math.ceil(((max - min) * 0.03) / 1000) * 1000;
  min = Math.floor((min - pad) / 1000) * 1000;
  max = Math.ceil((max + pad) / 1000) * 1000;
  const width = Math.max(320, container.clientWidth || 800);
  const left = 8, right = 8, top = 26, laneHeight = 52, bar = 22;
  const height = top + lanes.length * laneHeight + 34;
  const x = (ms) => left + ((ms - min) / (max - min)) * (width - left - right);
  const msAt = (px) => Math.round(min + ((px - left) / (width - left - right)) * (max - min));

  const svg = node("svg", { width, height, viewBox: `0 0 ${width} ${height}`, class: "timeline-svg",
    role: "group", "aria-labelledby": "timeline-title", "aria-describedby": "timeline-help" });
  lanes.forEach((l, i) => {
    const y = top + i * laneHeight;
    const g = node("g", { class: "lane", "data-group": l.group, role: "group", "aria-label": `Subscription group ${l.group}` });
    g.append(node("text", { x: left, y: y + 11, class: "lane-label", "aria-hidden": "true" }, `Group ${l.group}`));
    g.append(node("line", { x1: left, x2: width - right, y1: y + 18 + bar / 2, y2: y + 18 + bar / 2, class: "lane-axis" }));
    for (const p of l.periods) {
      const x1 = x(p.start), x2 = Math.max(x(p.end), x1 + 2);
      const label = [kinds.find(([k]) => k === p.kind)[1], p.productId, p.offerId, p.family ? "family-shared" : "",
        p.upgraded ? "upgraded" : "", `${time(p.start)} – ${time(p.end)}`, p.transactionId ? `transaction ${p.transactionId}` : ""]
        .filter(Boolean).join(", ");
      const r = node("rect", {
        x: x1, y: y + 18, width: x2 - x1, height: bar, rx: 3,
        class: `period period-${p.kind}${p.family ? " family" : ""}`, role: "img", "aria-label": label,
        "data-kind": p.kind, "data-start-ms": p.start, "data-end-ms": p.end, "data-transaction-id": p.transactionId,
        "data-product-id": p.productId, "data-family": p.family ? "true" : "false",
      });
      g.append(r);
      if (p.family && x2 - x1 > 44) {
        g.append(node("text", { x: x1 + 4, y: y + 33, class: "period-label", "aria-hidden": "true" }, "family"));
      }
    }
    for (const m of l.marks) {
      const mx = x(m.at);
      const mark = node("g", { class: `mark mark-${m.kind}`, role: "img", "data-kind": m.kind, "data-at-ms": m.at,
        "data-transaction-id": m.transactionId, "aria-label": `${m.label} at ${time(m.at)}` });
      mark.append(node("line", { x1: mx, x2: mx, y1: y + 14, y2: y + 18 + bar + 4 }));
      mark.append(node("path", { d: `M${mx - 5},${y + 12} L${mx + 5},${y + 12} L${mx},${y + 19} Z` }));
      mark.append(node("text", { x: Math.min(mx + 6, width - right - 70), y: y + 11 }, m.label));
      g.append(mark);
    }
    for (const e of l.events) {
      g.append(node("circle", { cx: x(e.at), cy: y + 18 + bar + 6, r: 3.5, class: "event-dot", role: "img",
        "data-event-id": e.eventId, "data-type": e.type, "data-at-ms": e.at,
        "aria-label": `Event ${e.type.replace("EVENT_TYPE_", "")} at ${time(e.at)}` }));
    }
    svg.append(g);
  });
  // The time axis: about five ticks.
  const axisY = top + lanes.length * laneHeight + 6;
  const axis = node("g", { class: "axis", "aria-hidden": "true" });
  const ticks = Math.max(2, Math.min(6, Math.floor(width / 150)));
  for (let i = 0; i <= ticks; i++) {
    const ms = min + pad + ((max - min - 2 * pad) * i) / ticks;
    const tx = x(ms);
    axis.append(node("line", { x1: tx, x2: tx, y1: axisY, y2: axisY + 5 }));
    axis.append(node("text", { x: tx, y: axisY + 18, "text-anchor": i === 0 ? "start" : i === ticks ? "end" : "middle" },
      new Date(ms).toISOString().slice(0, 10)));
  }
  svg.append(axis);

  // The as-of line: a slider.
  const line = node("g", { class: "as-of", tabindex: 0, role: "slider", "aria-label": "As of",
    "aria-valuemin": min, "aria-valuemax": max, "aria-orientation": "horizontal" });
  const stroke = node("line", { y1: 4, y2: axisY, class: "as-of-line" });
  const grip = node("rect", { y: 0, width: 14, height: 14, rx: 3, class: "as-of-grip" });
  const hit = node("rect", { y: 0, width: 24, height: axisY, class: "as-of-hit" });
  line.append(hit, stroke, grip);
  svg.append(line);

  let current = asOfMs;
  const setAsOf = (ms) => {
    current = Math.min(Math.max(Math.round(ms / 1000) * 1000, min), max);
    const px = x(current);
    stroke.setAttribute("x1", px);
    stroke.setAttribute("x2", px);
    grip.setAttribute("x", px - 7);
    hit.setAttribute("x", px - 12);
    line.setAttribute("aria-valuenow", current);
    line.setAttribute("aria-valuetext", time(current));
    line.dataset.asOfMs = String(current);
  };
  setAsOf(asOfMs);

  let dragging = false;
  const fromPointer = (event) => {
    const box = svg.getBoundingClientRect();
    setAsOf(msAt(((event.clientX - box.left) / box.width) * width));
  };
  svg.addEventListener("pointerdown", (event) => {
    dragging = true;
    svg.setPointerCapture(event.pointerId);
    fromPointer(event);
    line.focus();
  });
  svg.addEventListener("pointermove", (event) => { if (dragging) fromPointer(event); });
  svg.addEventListener("pointerup", (event) => {
    if (!dragging) return;
    dragging = false;
    fromPointer(event);
    onMove(current);
  });
  let settle = null;
  line.addEventListener("keydown", (event) => {
    const steps = { ArrowLeft: -DAY, ArrowRight: DAY, ArrowDown: -DAY, ArrowUp: DAY, PageDown: -30 * DAY, PageUp: 30 * DAY };
    let next;
    if (event.key in steps) next = current + (event.shiftKey && event.key.startsWith("Arrow") ? steps[event.key] / 24 : steps[event.key]);
    else if (event.key === "Home") next = min;
    else if (event.key === "End") next = max;
    else return;
    event.preventDefault();
    setAsOf(next);
    clearTimeout(settle);
    settle = setTimeout(() => onMove(current), 300);
  });
  container.replaceChildren(svg);
  return setAsOf;
}
