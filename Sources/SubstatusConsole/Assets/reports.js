// Reports: an app's subscription counts at an instant (ReportService.GetReport), its trends over
// a range of days, weeks or months (ReportService.GetTrends) and its charts (ReportService.GetChart:
// MRR and its movement, revenue and proceeds, refund rate, actives and trials movement, cohort
// retention, realized LTV), each as a Chart.js chart with the same numbers in a table beside it.
// Each entry of `sections` renders one report.
import { call, int64 } from "./api.js";
import { $, el, onSubmit, parseInstant, table, time } from "./ui.js";
import { money } from "./events.js";

const DAY = 86_400_000;

const counts = [
  ["users", "Users"], ["subscriptions", "Subscriptions"], ["active", "Active"], ["inTrial", "In trial"], ["inIntro", "In intro offer"],
  ["inGrace", "In grace period"], ["inBillingRetry", "In billing retry"], ["expired", "Expired"],
  ["refunded", "Refunded"], ["familySharedBeneficiaries", "Family-shared beneficiaries"],
  ["familyAccessRevoked", "Family access revoked"],
];

/** Colours of a chart's series, in order (each meets 3:1 against white). */
const colours = ["#1f5fae", "#2e8b57", "#b35900", "#a4262c", "#6b4ea0", "#4a5562"];

/**
 * The trend charts: a title, and series of `[field, label, kind]` where kind is `bar`, `line` or
 * `rate` (a share, drawn as a line in percent on its own axis).
 */
const trendCharts = [
  { id: "active", title: "Active subscribers", series: [
    ["activeSubscribers", "Active subscribers (end of period)", "line"], ["activeTrials", "Of which in a free trial", "line"]] },
  { id: "trials", title: "Free trials", series: [
    ["trialsStarted", "Trials started", "bar"], ["trialsConverted", "Trials converted", "bar"],
    ["trialsLapsed", "Trials lapsed", "bar"], ["trialConversionRate", "Conversion rate", "rate"]] },
  { id: "subscriptions", title: "New paid subscriptions, renewals, churn and refunds", series: [
    ["newPaidSubscriptions", "New paid", "bar"], ["renewals", "Renewals", "bar"], ["churned", "Churned", "bar"],
    ["refunds", "Refunds", "bar"]] },
  { id: "billing", title: "Billing issues and recoveries", series: [
    ["billingIssues", "Billing issues", "bar"], ["billingRecoveries", "Billing recoveries", "bar"]] },
];

let ctx;
let charts = [];

/**
 * The report sections, in page order: each `render(request)` answers `{nodes, attached}`: the
 * nodes to show and what to run once they are in the page (drawing a chart needs its canvas laid out).
 */
export const sections = [
  { name: "counts", render: renderCounts },
  { name: "trends", render: renderTrends },
  { name: "charts", render: renderCharts },
];

/** GetChart's charts, in page order: the enum value, a title, and what its buckets are. */
const chartKinds = [
  ["CHART_MRR", "MRR (end of period)"], ["CHART_MRR_MOVEMENT", "MRR movement"],
  ["CHART_REVENUE", "Revenue and proceeds"], ["CHART_REFUND_RATE", "Refund rate (by purchase period)"],
  ["CHART_ACTIVES_MOVEMENT", "Paying subscriptions movement"], ["CHART_TRIALS_MOVEMENT", "Free trials movement"],
  ["CHART_COHORT_RETENTION", "Cohort retention by renewal (cohorts by first paid purchase)", "cohort"],
  ["CHART_REALIZED_LTV", "Realized LTV (cohorts by first purchase)", "cohort"],
];

/** Series drawn as lines (levels at a period's end); the others are bars, ratios are lines in %. */
const levelSeries = new Set(["mrr", "actives", "trials", "unpriced_subscriptions"]);

export function init(context) {
  ctx = context;
  // The default range: the last 26 weeks, through today.
  const today = Math.floor(Date.now() / DAY) * DAY;
  $("report-from").value = new Date(today - 182 * DAY).toISOString().slice(0, 10);
  $("report-through").value = new Date(today).toISOString().slice(0, 10);
  onSubmit($("report-form"), async (data) => {
    await render({
      appId: ctx.appId(), environment: data.get("environment"), asOfMs: String(parseInstant(data.get("asOf"))),
      fromMs: dateMs(data.get("from"), "from"), toMs: dateMs(data.get("through"), "through") + DAY,
      interval: data.get("interval"),
    });
  });
}

export function show() {
  for (const chart of charts) chart.destroy();
  charts = [];
  $("report-result").replaceChildren();
}

/** A date field's UTC midnight in milliseconds. */
function dateMs(text, field) {
  const ms = Date.parse(`${text}T00:00:00Z`);
  if (Number.isNaN(ms)) throw { code: "INVALID_ARGUMENT", message: `${field}: not a date: ${text}` };
  return ms;
}

async function render(request) {
  const rendered = [];
  for (const section of sections) rendered.push(await section.render(request));
  show();
  $("report-result").replaceChildren(...rendered.flatMap((r) => r.nodes));
  for (const r of rendered) r.attached?.();
}

/**
 * A chart's figure and the function that draws it once in the page: `config` is Chart.js's. Without
 * Chart.js on the server the figure says so, and the table beside it has the numbers.
 */
function chartFigure(id, title, config) {
  const canvas = el("canvas", { id, role: "img", "aria-label": `${title}: a chart; the table beside it has the numbers` });
  const figure = el("figure", { class: "chart" }, el("div", { class: "chart-box" }, canvas), el("figcaption", {}, title));
  const attached = () => {
    if (typeof window.Chart !== "function") {
      figure.replaceChildren(el("p", { class: "note" },
        "Chart.js is not installed on the server (Debian package libjs-chart.js): the numbers are in the table."));
      return;
    }
    config.options = { animation: false, responsive: true, maintainAspectRatio: false, ...config.options };
    charts.push(new window.Chart(canvas, config));
  };
  return { figure, attached };
}

async function renderCounts(request) {
  const { report = {} } = await call("ReportService", "GetReport",
    { appId: request.appId, environment: request.environment, asOfMs: request.asOfMs });
  const values = counts.map(([field]) => int64(report[field]));
  const title = `Subscriptions of ${request.appId} at ${time(int64(report.asOfMs))}`;
  const rows = counts.map(([, label], i) => [label, String(values[i])]);
  const { figure, attached } = chartFigure("report-chart", title, {
    type: "bar",
    data: { labels: counts.map(([, label]) => label), datasets: [{ label: "Subscriptions", data: values, backgroundColor: colours[0] }] },
    options: { plugins: { legend: { display: false } }, scales: { y: { beginAtZero: true, ticks: { precision: 0 } } } },
  });
  return { nodes: [el("h2", {}, "Counts"), figure, table(title, ["Count", "Value"], rows)], attached };
}

/** A bucket's label: its day (for a week, its first day), or its month. */
function bucketLabel(bucket, interval) {
  const day = new Date(int64(bucket.startMs)).toISOString().slice(0, 10);
  return interval === "TREND_INTERVAL_MONTH" ? day.slice(0, 7) : day;
}

/** The name of the periods of `interval`, as the tables' first column. */
function periodName(interval) {
  return { TREND_INTERVAL_WEEK: "Week from", TREND_INTERVAL_MONTH: "Month" }[interval] ?? "Day";
}

/** A bucket's series value: counts as numbers, the rate as a percentage. */
function value(bucket, field, kind) {
  return kind === "rate" ? Math.round((bucket[field] ?? 0) * 1000) / 10 : int64(bucket[field]);
}

/** The amount of `currency` in a bucket's list of CurrencyAmount, in milliunits. */
function amount(list, currency) {
  return int64((list ?? []).find((a) => a.currency === currency)?.amountMilliunits);
}

/** A chart and its table, side by side where the page is wide enough. */
function pair(heading, chart, tableNode) {
  return el("div", { class: "trend" }, el("h3", {}, heading), el("div", { class: "chart-pair" }, chart, tableNode));
}

async function renderTrends(request) {
  const reply = await call("ReportService", "GetTrends", {
    appId: request.appId, environment: request.environment, fromMs: String(request.fromMs), toMs: String(request.toMs),
    interval: request.interval,
  });
  const buckets = reply.buckets ?? [];
  const labels = buckets.map((b) => bucketLabel(b, reply.interval));
  const range = `${new Date(request.fromMs).toISOString().slice(0, 10)} to ${new Date(request.toMs - DAY).toISOString().slice(0, 10)}`;
  const nodes = [el("h2", {}, `Trends, ${range}`),
    el("p", { class: "note" }, "Counted from the event log by when each event happened: flows per period, states at each period's end.")];
  const drawings = [];
  const add = (heading, id, datasets, { rate = false, money: inMoney = false }, columns, rows) => {
    const { figure, attached } = chartFigure(`trend-${id}`, `${heading}, ${range}`, {
      type: "bar",
      data: { labels, datasets },
      options: {
        interaction: { mode: "index", intersect: false },
        scales: {
          y: { beginAtZero: true, ticks: inMoney ? {} : { precision: 0 } },
          ...(rate ? { rate: { position: "right", min: 0, max: 100, grid: { drawOnChartArea: false }, title: { display: true, text: "%" } } } : {}),
        },
      },
    });
    drawings.push(attached);
    nodes.push(pair(heading, figure, table(`${heading} by ${periodName(reply.interval).toLowerCase()}`, [periodName(reply.interval), ...columns],
      rows.map((r, i) => [labels[i], ...r]))));
  };
  for (const chart of trendCharts) {
    const datasets = chart.series.map(([field, label, kind], i) => ({
      label: kind === "rate" ? `${label} (%)` : label,
      data: buckets.map((b) => value(b, field, kind)),
      type: kind === "bar" ? "bar" : "line",
      yAxisID: kind === "rate" ? "rate" : "y",
      backgroundColor: colours[i], borderColor: colours[i], borderWidth: kind === "bar" ? 0 : 2, pointRadius: 2,
    }));
    add(chart.title, chart.id, datasets, { rate: chart.series.some(([, , kind]) => kind === "rate") },
      chart.series.map(([, label, kind]) => (kind === "rate" ? `${label} (%)` : label)),
      buckets.map((b) => chart.series.map(([field, , kind]) => String(value(b, field, kind)))));
  }
  const currencies = reply.currencies ?? [];
  const unpriced = buckets.reduce((n, b) => n + int64(b.unpricedPurchases), 0);
  const mrrUnpriced = buckets.length ? int64(buckets[buckets.length - 1].mrrUnpricedSubscriptions) : 0;
  nodes.push(el("h3", {}, "Revenue and MRR estimate"), el("p", { class: "note" },
    currencies.length ? `Gross sales, refunds and the monthly recurring revenue estimate, per currency (never converted). `
      : "No event of the range carries a price: revenue is unknown. ",
    `${unpriced} purchases in the range had no price; ${mrrUnpriced} active subscriptions at the range's end are left out of MRR for lack of a price or duration.`));
  for (const currency of currencies) {
    const series = [
      ["Revenue", (b) => amount(b.revenue, currency), "bar"],
      ["Refunded", (b) => amount(b.refundedRevenue, currency), "bar"],
      ["MRR (end of period)", (b) => amount(b.mrr, currency), "line"],
    ];
    const datasets = series.map(([label, of, kind], i) => ({
      label: `${label} (${currency})`, data: buckets.map((b) => of(b) / 1000), type: kind, yAxisID: "y",
      backgroundColor: colours[[0, 3, 1][i]], borderColor: colours[[0, 3, 1][i]], borderWidth: kind === "bar" ? 0 : 2, pointRadius: 2,
    }));
    add(`Revenue in ${currency}`, `revenue-${currency}`, datasets, { money: true }, series.map(([label]) => label),
      buckets.map((b) => series.map(([, of]) => money(of(b), currency))));
  }
  return { nodes, attached: () => drawings.forEach((draw) => draw()) };
}

/** A GetChart series' label: its name, with its currency for money. */
function seriesLabel(series) {
  const name = series.name.replaceAll("_", " ");
  if (series.unit === "CHART_UNIT_RATIO") return `${name} (%)`;
  return series.currency ? `${name} (${series.currency})` : name;
}

/** A GetChart series' values as numbers: money in units, ratios in percent. */
function seriesValues(series, count) {
  if (series.unit === "CHART_UNIT_RATIO") return Array.from({ length: count }, (_, i) => Math.round((series.ratios?.[i] ?? 0) * 1000) / 10);
  const values = Array.from({ length: count }, (_, i) => int64(series.values?.[i]));
  return series.unit === "CHART_UNIT_MILLIUNITS" ? values.map((v) => v / 1000) : values;
}

async function renderCharts(request) {
  const range = `${new Date(request.fromMs).toISOString().slice(0, 10)} to ${new Date(request.toMs - DAY).toISOString().slice(0, 10)}`;
  const nodes = [el("h2", {}, `Charts, ${range}`), el("p", { class: "note" },
    "Counted from the event log; money per currency (never converted), family-shared access not counted, refunds subtracted. "
    + "Proceeds are after Apple's commission (15 % in the Small Business Program, else 30 %, 15 % after a subscriber's first year).")];
  const drawings = [];
  for (const [chart, title, cohort] of chartKinds) {
    const reply = await call("ReportService", "GetChart", {
      appId: request.appId, chart, environment: request.environment, fromMs: String(request.fromMs),
      toMs: String(request.toMs), interval: request.interval,
    });
    const buckets = reply.buckets ?? [];
    const labels = buckets.map((b) => bucketLabel(b, reply.interval));
    const series = reply.series ?? [];
    const id = `chart-${chart.slice("CHART_".length).toLowerCase().replaceAll("_", "-")}`;
    const rate = series.some((s) => s.unit === "CHART_UNIT_RATIO");
    const datasets = series.map((s, i) => {
      const line = s.unit === "CHART_UNIT_RATIO" || levelSeries.has(s.name);
      return {
        label: seriesLabel(s), data: seriesValues(s, buckets.length), type: line ? "line" : "bar",
        yAxisID: s.unit === "CHART_UNIT_RATIO" ? "rate" : "y",
        backgroundColor: colours[i % colours.length], borderColor: colours[i % colours.length],
        borderWidth: line ? 2 : 0, pointRadius: 2,
      };
    });
    const heading = `${title}, ${range}`;
    const { figure, attached } = chartFigure(id, heading, {
      type: "bar",
      data: { labels, datasets },
      options: {
        interaction: { mode: "index", intersect: false },
        scales: {
          ...(series.some((s) => s.unit !== "CHART_UNIT_RATIO") ? { y: {} } : {}),
          ...(rate ? { rate: { position: "right", min: 0, max: 100, title: { display: true, text: "%" } } } : {}),
        },
      },
    });
    drawings.push(attached);
    const first = cohort ? "Cohort" : periodName(reply.interval);
    const rows = labels.map((label, i) => [label, ...series.map((s) => {
      if (s.unit === "CHART_UNIT_MILLIUNITS") return money(int64(s.values?.[i]), s.currency);
      return String(seriesValues(s, buckets.length)[i]);
    })]);
    const tableNode = series.length ? table(heading, [first, ...series.map(seriesLabel)], rows)
      : el("p", { class: "note" }, "Nothing to count in the range.");
    nodes.push(el("div", { class: "chart-section" }, el("h3", {}, title), el("div", { class: "chart-pair" }, figure, tableNode)));
  }
  return { nodes, attached: () => drawings.forEach((draw) => draw()) };
}
