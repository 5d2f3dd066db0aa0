/**
 * The metric explorer: every metric the chosen runs logged (nested records flattened to
 * `timings_ms.train`, `filtered.zero_variance`, …), one small chart each with the runs
 * overlaid, a name filter, smoothing, a log scale, units in the axis (ms shown as s once a value
 * reaches 1,000), and the data as CSV, Parquet or a TensorBoard event file.
 *
 * @module
 */
import { z } from "zod";
import { lineChart } from "./charts.ts";
import { html, type SafeHtml } from "./html.ts";
import { displayUnit, metricNames, metricSeries, unitOf } from "./metrics.ts";
import { smoothingSelect } from "./overview.ts";
import { labelRuns, type RunInfo } from "./runs.ts";
import { PALETTE } from "./runs_view.ts";

const many = z.preprocess(
  (v) => v === undefined ? [] : Array.isArray(v) ? v : [v],
  z.array(z.string().max(400)).max(200),
);

/** The explorer's query string. */
export const ExplorerQuerySchema = z.object({
  /** Runs to overlay (default: every run this gateway reports, else the first one). */
  run: many,
  /** Only metrics whose name contains this (case-insensitive). */
  q: z.string().max(200).optional(),
  smooth: z.preprocess(
    (v) => v === undefined || v === "" ? 0 : Number(v),
    z.number().min(0).lt(1),
  ),
  log: z.enum(["1", "0", ""]).optional(),
});
/** The explorer's parsed query. */
export type ExplorerQuery = z.infer<typeof ExplorerQuerySchema>;

/** Most charts on one page (narrow with the filter for the rest). */
export const MAX_CHARTS = 80;

/** The runs the explorer shows for a query. */
export function explorerRuns(runs: readonly RunInfo[], query: ExplorerQuery): RunInfo[] {
  const picked = runs.filter((r) => query.run.includes(r.id));
  if (picked.length) return picked;
  const gateway = runs.filter((r) => r.source === "gateway");
  return gateway.length ? gateway : runs.slice(0, 1);
}

/** The explorer page body. */
export function explorerFragment(
  base: string,
  runs: readonly RunInfo[],
  query: ExplorerQuery,
): SafeHtml {
  const shown = explorerRuns(runs, query);
  if (!shown.length) {
    return html`<p class="muted" id="no-metrics">No run has logged step metrics yet.</p>`;
  }
  const labels = labelRuns(shown);
  const colors = new Map(
    shown.map((r, i) => [labels.label.get(r.id)!, PALETTE[i % PALETTE.length]]),
  );
  const all = metricNames(shown.flatMap((r) => r.steps));
  const needle = query.q?.toLowerCase() ?? "";
  const names = all.filter((n) => n.toLowerCase().includes(needle));
  const runParams = shown.map((r) => `run=${encodeURIComponent(r.id)}`).join("&");
  const charts = names.slice(0, MAX_CHARTS).map((name) => {
    const raw = shown.flatMap((r) =>
      metricSeries(r.steps, name).map((p) => ({ ...p, series: labels.label.get(r.id)! }))
    );
    const { unit, factor } = displayUnit(unitOf(name), raw.map((p) => p.y));
    return lineChart(raw.map((p) => ({ ...p, y: p.y * factor })), {
      title: unit ? `${name} (${unit})` : name,
      id: `metric-${name}`,
      smoothing: query.smooth,
      log: query.log === "1",
      width: 440,
      height: 220,
      colors,
      legend: false,
    });
  });
  const form = html`<form method="get" action="${base}/metrics" class="filters" id="explorer">
${shown.map((r) => html`<input type="hidden" name="run" value="${r.id}">`)}
<label>metric name contains <input name="q" id="f-q" value="${query.q ?? ""}" size="24"></label>
${smoothingSelect(query.smooth)}
<label class="check"><input type="checkbox" name="log" value="1" id="f-log" ${
    query.log === "1" ? "checked" : ""
  }> log scale</label>
<button type="submit" id="apply">Apply</button>
<span>export: <a href="${base}/api/metrics.csv?${runParams}" id="export-csv" download>CSV</a> ·
<a href="${base}/api/metrics.parquet?${runParams}" id="export-parquet" download>Parquet</a>${
    shown.length === 1
      ? html`
        · <a href="${base}/api/metrics.tfevents?${runParams}" id="export-tfevents"
          download>TensorBoard</a>
      `
      : ""
  }</span></form>`;
  const legend = html`
    <div class="legend"
      id="metrics-legend">${shown.map((r) => {
        const label = labels.label.get(r.id)!;
        return html`<span class="key"><i style="background:${
          colors.get(label)
        }"></i>${label}</span>`;
      })}<a href="${base}/runs?${runParams}">compare these runs →</a></div>
  `;
  const otherRuns = runs.filter((r) => !shown.includes(r)).slice(0, 200);
  const add = otherRuns.length
    ? html`
      <details>
        <summary>add a run</summary>
        <ul>${otherRuns.map((r) =>
          html`<li><a href="${base}/metrics?${runParams}&run=${
            encodeURIComponent(r.id)
          }">${r.name}</a></li>`
        )}</ul>
      </details>
    `
    : "";
  return html`
    ${form}${legend}${add}
    <p class="muted"
      id="metric-count">${names.length} of ${all.length} metric(s)${names.length > MAX_CHARTS
        ? `, the first ${MAX_CHARTS} charted (narrow with the filter)`
        : ""}; steps counted from 1.</p>
    <div class="charts small" id="metric-charts">${charts}</div>
  `;
}
