// Retention: the selected app's retention rules (what its Get Retention Message endpoint answers
// Apple when a subscriber opens the cancel page), replaced as a whole from their JSON form, and a
// "test a user" box: what the user would be offered now, which rule decided, and the facts of the
// user's summary the rules were matched against (AdminService.TestRetentionRules).
import { call, int64 } from "./api.js";
import { $, el, onSubmit, table, time } from "./ui.js";

let ctx;

export function init(context) {
  ctx = context;
  onSubmit($("retention-rules-form"), async (data) => {
    let rules;
    try {
      rules = JSON.parse(String(data.get("rules")));
    } catch (error) {
      throw { code: "INVALID_ARGUMENT", message: `the rules are not JSON: ${error.message}` };
    }
    const reply = await call("AdminService", "PutRetentionRules", { appId: ctx.appId(), rules });
    draw(reply.rules);
    return `Saved ${(reply.rules?.rules ?? []).length} rules.`;
  });
  onSubmit($("retention-test-form"), async (data) => {
    const reply = await call("AdminService", "TestRetentionRules", {
      appId: ctx.appId(), userId: String(data.get("userId")).trim(),
      productId: String(data.get("productId")).trim(), environment: data.get("environment"),
    });
    drawTest(reply);
    const rule = reply.answer?.ruleId;
    return rule ? `Rule ${rule} decides.` : "No rule matches: the default message.";
  });
}

export function show() {
  $("retention-result").replaceChildren();
  render().catch(status);
}

function status(error) {
  $("retention-status").classList.toggle("error", !!error);
  $("retention-status").textContent = error ? `${error.code ?? "ERROR"}: ${error.message}` : "";
}

async function render() {
  const appId = ctx.appId();
  if (!appId) {
    status({ code: "INVALID_ARGUMENT", message: "choose an app in the App field above" });
    return;
  }
  try {
    const reply = await call("AdminService", "GetRetentionRules", { appId });
    status(null);
    draw(reply.rules);
  } catch (error) {
    if (error.code !== "NOT_FOUND") throw error;
    status(null);
    draw(null);
  }
}

/** What a rule answers, for people. */
function answerText(answer) {
  if (answer?.promotionalOffer) {
    const o = answer.promotionalOffer;
    return `promotional offer ${o.offerId}${o.productId ? ` of ${o.productId}` : ""} (message ${o.messageIdentifier})`;
  }
  if (answer?.alternateProduct) {
    const a = answer.alternateProduct;
    return `alternate product ${a.productId} (message ${a.messageIdentifier})`;
  }
  if (answer?.message) return `message ${answer.message.messageIdentifier}`;
  return "—";
}

/** A rule's condition, one clause per set field, for people. */
function conditionText(when = {}) {
  const clauses = [];
  const names = {
    productIds: "product is", billingPlanTypes: "billing plan is", minPaidPeriods: "paid periods ≥",
    maxPaidPeriods: "paid periods ≤", minTenureDays: "tenure days ≥", maxTenureDays: "tenure days ≤",
    introUsed: "intro used", trialUsed: "trial used", maxPromotionalOffersUsed: "promotional offers used ≤",
    promotionalOfferEligible: "promotional offer eligible", winBackEligible: "win-back eligible",
    billingIssue: "billing issue", refunded: "refunded", autoRenewEnabled: "auto-renew on",
  };
  for (const [field, label] of Object.entries(names)) {
    const value = when[field];
    if (value === undefined || (Array.isArray(value) && !value.length)) continue;
    if (Array.isArray(value)) clauses.push(`${label} ${value.join(" or ")}`);
    else if (typeof value === "boolean") clauses.push(value ? label : `not ${label}`);
    else clauses.push(`${label} ${value}`);
  }
  return clauses.join("; ") || "always";
}

function draw(rules) {
  const list = rules?.rules ?? [];
  $("retention-default").textContent = rules ? (rules.defaultMessageIdentifier ?? "—") : "no rules put yet";
  $("retention-updated").textContent = rules ? time(int64(rules.updatedMs)) : "—";
  $("retention-rules-list").replaceChildren(table(`Retention rules of ${ctx.appId()}, first match answers`,
    ["#", "Rule", "When", "Answer"],
    list.map((r, i) => [String(i + 1), el("code", {}, r.ruleId), conditionText(r.when), answerText(r)])));
  const editable = rules ? { defaultMessageIdentifier: rules.defaultMessageIdentifier, rules: list } : null;
  $("retention-rules-json").value = editable ? JSON.stringify(editable, null, 2) : "";
}

function drawTest(reply) {
  const answer = reply.answer ?? {};
  const facts = reply.facts ?? {};
  const rows = [
    ["Product", facts.productId ?? "—"], ["Subscription group", facts.subscriptionGroupId || "—"],
    ["Known history in the group", facts.known ? "yes" : "no"], ["Paid periods", String(facts.paidPeriods ?? 0)],
    ["Tenure (days)", String(facts.tenureDays ?? 0)], ["Introductory offer used", facts.introUsed ? "yes" : "no"],
    ["Free trial used", facts.trialUsed ? "yes" : "no"],
    ["Promotional offers used", String(facts.promotionalOffersUsed ?? 0)],
    ["Promotional offer eligible", facts.promotionalOfferEligible ? "yes" : "no"],
    ["Win-back eligible", facts.winBackEligible ? "yes" : "no"], ["Billing issue", facts.billingIssue ? "yes" : "no"],
    ["Refunded", facts.refunded ? "yes" : "no"], ["Billing plan", facts.billingPlanType || "—"],
    ["Auto-renew on", facts.autoRenewEnabled ? "yes" : "no"],
  ];
  $("retention-result").replaceChildren(
    el("p", { id: "retention-decision" },
      answer.ruleId ? "Rule " : "No rule matches: ", answer.ruleId ? el("code", {}, answer.ruleId) : "the default message",
      answer.ruleId ? " decides: " : ": ", answerText(answer), "."),
    table("Facts the rules were matched against", ["Fact", "Value"], rows));
}

