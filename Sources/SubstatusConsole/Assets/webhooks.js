// Webhooks of the selected app (EventService): list, add (the signing secret shown once, with a
// copy button), test, remove; a webhook's deliveries with their attempts (failed only, if asked),
// page by page; and replaying the log's events to one webhook or all.
import { call, int64 } from "./api.js";
import { $, el, enumName, onSubmit, showDone, showError, table, time } from "./ui.js";
import { eventTypes, typeName } from "./events.js";

let ctx;
let deliveries = null; // {appId, webhookId, failedOnly, pageToken}: the list shown, and where it continues

export function init(context) {
  ctx = context;
  $("webhook-types").replaceChildren(...eventTypes.map((type) => {
    const id = `webhook-type-${typeName(type).toLowerCase()}`;
    return el("div", { class: "check" }, el("input", { id, type: "checkbox", name: "eventTypes", value: type }),
      el("label", { for: id }, typeName(type)));
  }));
  onSubmit($("webhook-form"), async (data) => {
    const { webhook, signingSecret } = await call("EventService", "CreateWebhook", {
      appId: ctx.appId(), url: data.get("url").trim(), eventTypes: data.getAll("eventTypes"),
    });
    $("webhook-form").reset();
    $("new-secret-value").textContent = signingSecret;
    $("new-secret-status").textContent = "";
    $("new-secret").hidden = false;
    await render();
    return `Added webhook ${webhook.webhookId} (secret ${webhook.secretFingerprint}).`;
  });
  $("new-secret-copy").addEventListener("click", () => copySecret());
  $("new-secret-done").addEventListener("click", () => {
    forgetSecret();
    $("webhook-url").focus();
  });
  onSubmit($("deliveries-form"), async (data) => {
    await showDeliveries({ appId: ctx.appId(), webhookId: data.get("webhookId"), failedOnly: data.has("failedOnly"), pageToken: "" });
  });
  $("deliveries-more").addEventListener("click", () => {
    showDeliveries(deliveries, true).catch((error) => showError($("deliveries-form"), error));
  });
  onSubmit($("replay-form"), async (data) => {
    const request = { appId: ctx.appId(), webhookId: data.get("webhookId"), sinceCursor: data.get("sinceCursor").trim() };
    const to = request.webhookId ? `webhook ${request.webhookId}` : "every webhook";
    const since = request.sinceCursor ? "the events after that cursor" : "every event of the log";
    if (!confirm(`Deliver ${since} again to ${to}?`)) return "";
    const reply = await call("EventService", "ReplayEvents", request);
    return `Replay: ${int64(reply.deliveriesCreated)} new deliveries to ${to}.`;
  });
}

export function show() {
  forgetSecret();
  for (const form of ["webhook-form", "deliveries-form", "replay-form"]) $(form).querySelector(".status").textContent = "";
  $("deliveries-list").replaceChildren();
  $("deliveries-more").hidden = true;
  deliveries = null;
  render().catch(status);
}

/** The signing secret leaves the page: it was shown once. */
function forgetSecret() {
  $("new-secret").hidden = true;
  $("new-secret-value").textContent = "";
}

async function copySecret() {
  const secret = $("new-secret-value").textContent;
  const line = $("new-secret-status");
  try {
    await navigator.clipboard.writeText(secret);
    line.classList.remove("error");
    line.textContent = "Copied to the clipboard.";
  } catch (error) {
    // No clipboard permission (an insecure origin): select the text for Ctrl+C instead.
    getSelection().selectAllChildren($("new-secret-value"));
    line.classList.add("error");
    line.textContent = `The browser refused the clipboard (${error.message}): the secret is selected, press Ctrl+C.`;
  }
}

function status(error, text = "") {
  $("webhooks-status").classList.toggle("error", !!error);
  $("webhooks-status").textContent = error ? `${error.code ?? "ERROR"}: ${error.message}` : text;
}

/** A button of a webhook's row whose outcome shows in the page's status line. */
function action(label, attributes, run) {
  return el("button", {
    type: "button", class: "small", ...attributes,
    onclick: async (event) => {
      event.target.disabled = true;
      try {
        status(null, await run());
      } catch (error) {
        status(error);
      } finally {
        event.target.disabled = false;
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
  const { webhooks = [] } = await call("EventService", "ListWebhooks", { appId });
  $("webhooks-list").replaceChildren(table(`Webhooks of ${appId}`, ["URL", "Event types", "Signing secret", "Created", ""],
    webhooks.map((w) => [
      el("code", {}, w.url),
      (w.eventTypes ?? []).map(typeName).join(", ") || "every type",
      w.secretFingerprint ?? "", time(int64(w.createdMs)),
      el("div", { class: "actions" },
        action(`Test ${w.webhookId}`, { "data-test": w.webhookId }, async () => {
          const { attempt = {}, delivered } = await call("EventService", "TestWebhook", { appId, webhookId: w.webhookId });
          return `Test of ${w.webhookId}: ${delivered ? "delivered" : "not delivered"}, ${attemptText(attempt)}.`;
        }),
        action(`Deliveries of ${w.webhookId}`, { "data-deliveries": w.webhookId }, async () => {
          $("deliveries-webhook").value = w.webhookId;
          $("deliveries-failed").checked = false;
          await showDeliveries({ appId, webhookId: w.webhookId, failedOnly: false, pageToken: "" });
          $("deliveries-title").scrollIntoView();
          return "";
        }),
        el("button", {
          type: "button", class: "small danger", "data-remove": w.webhookId,
          onclick: async (event) => {
            if (!confirm(`Remove the webhook ${w.webhookId} (${w.url})? Its pending deliveries are dropped.`)) return;
            event.target.disabled = true;
            try {
              await call("EventService", "DeleteWebhook", { appId, webhookId: w.webhookId });
              await render();
              status(null, `Removed ${w.webhookId}.`);
            } catch (error) {
              event.target.disabled = false;
              status(error);
            }
          },
        }, `Remove ${w.webhookId}`)),
    ])));
  const chosen = $("deliveries-webhook").value;
  $("deliveries-webhook").replaceChildren(...webhooks.map((w) => new Option(`${w.webhookId} (${w.url})`, w.webhookId)));
  if (webhooks.some((w) => w.webhookId === chosen)) $("deliveries-webhook").value = chosen;
  $("deliveries-form").querySelector("button[type=submit]").disabled = !webhooks.length;
  const replayTo = $("replay-webhook").value;
  $("replay-webhook").replaceChildren(new Option("every webhook of the app", ""),
    ...webhooks.map((w) => new Option(`${w.webhookId} (${w.url})`, w.webhookId)));
  if (webhooks.some((w) => w.webhookId === replayTo)) $("replay-webhook").value = replayTo;
}

/** One attempt for people: "HTTP 500 after 12 ms: server error", "no answer after 10000 ms: timeout". */
function attemptText(a) {
  const code = a.httpStatus ? `HTTP ${a.httpStatus}` : "no answer";
  return `${code} after ${int64(a.durationMs)} ms${a.error ? `: ${a.error}` : ""}`;
}

/** Shows the first page of `request`'s deliveries, or (`more`) appends its next page. */
async function showDeliveries(request, more = false) {
  const reply = await call("EventService", "ListDeliveries", {
    appId: request.appId, webhookId: request.webhookId, failedOnly: request.failedOnly, pageSize: 50, pageToken: request.pageToken,
  });
  deliveries = { ...request, pageToken: reply.nextPageToken ?? "" };
  const rows = (reply.deliveries ?? []).map((d) => {
    const e = d.event ?? {};
    const state = enumName(d.state, "DELIVERY_STATE_");
    return [
      el("span", { class: `delivery-state state-${state.toLowerCase()}`, "data-delivery-id": d.deliveryId }, state),
      [el("strong", {}, typeName(e.type)), ` of ${e.userId || "—"}, occurred ${time(int64(e.occurredMs))}`],
      el("ol", { class: "attempts" }, (d.attempts ?? []).map((a) =>
        el("li", { class: a.httpStatus >= 200 && a.httpStatus < 300 ? "ok" : "failed" },
          `${time(int64(a.attemptedMs))}: ${attemptText(a)}`))),
      d.state === "DELIVERY_STATE_PENDING" ? time(int64(d.nextAttemptMs)) : "—",
      time(int64(d.createdMs)),
      el("code", { class: "cursor" }, e.cursor ?? ""),
    ];
  });
  const caption = `${request.failedOnly ? "Failed deliveries" : "Deliveries"} to ${request.webhookId}, newest first`;
  const headers = ["State", "Event", "Attempts (status, HTTP code, time, error)", "Next attempt", "Created", "Event cursor"];
  if (more) {
    const body = $("deliveries-list").querySelector("tbody");
    body.append(...rows.map((r) => el("tr", {}, r.map((c) => el("td", {}, c)))));
  } else {
    $("deliveries-list").replaceChildren(table(caption, headers, rows));
  }
  $("deliveries-more").hidden = !deliveries.pageToken;
  showDone($("deliveries-form"), `${$("deliveries-list").querySelectorAll("tbody code.cursor").length} shown.`);
}
