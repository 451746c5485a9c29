// Reports: an app's subscription counts at an instant (ReportService.GetReport), as a table and a
// Chart.js bar chart. Each entry of `sections` renders one report; trends slot in as another.
import { call, int64 } from "./api.js";
import { $, el, onSubmit, parseInstant, table, time } from "./ui.js";

const counts = [
  ["users", "Users"], ["subscriptions", "Subscriptions"], ["active", "Active"], ["inTrial", "In trial"], ["inIntro", "In intro offer"],
  ["inGrace", "In grace period"], ["inBillingRetry", "In billing retry"], ["expired", "Expired"],
  ["refunded", "Refunded"], ["familySharedBeneficiaries", "Family-shared beneficiaries"],
  ["familyAccessRevoked", "Family access revoked"],
];

let ctx;
let chart = null;

/**
 * The report sections, in page order: each `render(request)` answers `{nodes, attached}`: the
 * nodes to show and what to run once they are in the page (drawing a chart needs its canvas laid out).
 */
export const sections = [
  { name: "counts", render: renderCounts },
];

export function init(context) {
  ctx = context;
  onSubmit($("report-form"), async (data) => {
    await render({ appId: ctx.appId(), environment: data.get("environment"), asOfMs: String(parseInstant(data.get("asOf"))) });
  });
}

export function show() {
  $("report-result").replaceChildren();
}

async function render(request) {
  const rendered = [];
  for (const section of sections) rendered.push(await section.render(request));
  $("report-result").replaceChildren(...rendered.flatMap((r) => r.nodes));
  for (const r of rendered) r.attached?.();
}

async function renderCounts(request) {
  const { report = {} } = await call("ReportService", "GetReport", request);
  const values = counts.map(([field]) => int64(report[field]));
  const title = `Subscriptions of ${request.appId} at ${time(int64(report.asOfMs))}`;
  const rows = counts.map(([, label], i) => [label, String(values[i])]);
  const canvas = el("canvas", { id: "report-chart", role: "img", "aria-label": `Bar chart: ${title}; the table below has the numbers` });
  const figure = el("figure", { class: "chart" }, el("div", { class: "chart-box" }, canvas), el("figcaption", {}, title));
  const attached = () => {
    chart?.destroy();
    chart = null;
    if (typeof window.Chart !== "function") {
      figure.replaceChildren(el("p", { class: "note" },
        "Chart.js is not installed on the server (Debian package libjs-chart.js): the counts are in the table."));
      return;
    }
    chart = new window.Chart(canvas, {
      type: "bar",
      data: { labels: counts.map(([, label]) => label), datasets: [{ label: "Subscriptions", data: values, backgroundColor: "#1f5fae" }] },
      options: { animation: false, responsive: true, maintainAspectRatio: false, plugins: { legend: { display: false } },
        scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
    });
  };
  return { nodes: [el("h2", {}, "Counts"), figure, table(title, ["Count", "Value"], rows)], attached };
}
