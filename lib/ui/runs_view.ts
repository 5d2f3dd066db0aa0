/**
 * The runs comparison, built to read a whole experiment grid (48 cells with long names): one
 * legend for all charts, labelled by the config keys that differ (not by run name) and coloured
 * by setting (the seeds of a setting share a colour, or pool into one mean with a 95% Student-t
 * band); charts first, each at least 600 px wide; any logged metric selectable; then the results
 * grouped by setting, the config differences (paths and bookkeeping left out) and the run
 * picker.
 *
 * @module
 */
import { z } from "zod";
import { ci95HalfWidth } from "../util/stats.ts";
import { lineChart, type SeriesPoint } from "./charts.ts";
import { html, type SafeHtml, tableHead } from "./html.ts";
import {
  displayStep,
  displayUnit,
  fmtMetric,
  metricNames,
  metricSeries,
  tMeanCi,
  unitOf,
} from "./metrics.ts";
import { cellText, smoothingSelect } from "./overview.ts";
import { labelRuns, type RunInfo, type RunLabels } from "./runs.ts";

const many = z.preprocess(
  (v) => v === undefined ? [] : Array.isArray(v) ? v : [v],
  z.array(z.string().max(400)).max(500),
);
const smoothing = z.preprocess(
  (v) => v === undefined || v === "" ? 0 : Number(v),
  z.number().min(0).lt(1),
);

/** The runs page's query string. */
export const RunsQuerySchema = z.object({
  /** Run ids to compare (`dir:<path>`, `gw:<rollout>`). */
  run: many,
  /** A whole grid (the parent directory of its runs). */
  grid: z.string().max(400).optional(),
  /** Metrics to chart (default: train reward, evaluation, entropy, alignment). */
  metric: many,
  smooth: smoothing,
  /** `seeds`: one curve per setting, the mean over its seeds with a 95% t band. */
  pool: z.enum(["seeds", ""]).optional(),
  /** `1`: log y axes. */
  log: z.enum(["1", "0", ""]).optional(),
});
/** The runs page's parsed query. */
export type RunsQuery = z.infer<typeof RunsQuerySchema>;

/** Most series a chart draws with bands (more would stack into a smear). */
export const MAX_BANDED_SERIES = 8;

/** The pseudo-metric of evaluation rewards read from labelled `val` rollouts. */
export const EVAL_ROLLOUTS = "eval reward (val rollouts)";

/** Colours for settings: Tableau 10, then their lighter twins (20 before repeating). */
export const PALETTE = [
  "#4e79a7",
  "#f28e2b",
  "#e15759",
  "#76b7b2",
  "#59a14f",
  "#edc948",
  "#b07aa1",
  "#ff9da7",
  "#9c755f",
  "#bab0ac",
  "#a0cbe8",
  "#ffbe7d",
  "#ff9d9a",
  "#86bcb6",
  "#8cd17d",
  "#f1ce63",
  "#d4a6c8",
  "#fabfd2",
  "#d7b5a6",
  "#79706e",
];

/** Metrics charted when none are chosen (those the runs have). */
export function defaultMetrics(runs: readonly RunInfo[]): string[] {
  const names = new Set(runs.flatMap((r) => metricNames(r.steps)));
  const evals = [...names].filter((n) => n.startsWith("eval") || n === "val_reward");
  const out = ["reward_mean", ...evals.slice(0, 2), "entropy", "alignment_corr"]
    .filter((n) => names.has(n));
  if (runs.some((r) => r.evals.length)) out.splice(1, 0, EVAL_ROLLOUTS);
  return out;
}

function pointsOf(run: RunInfo, metric: string): { x: number; y: number; band?: number }[] {
  if (metric === EVAL_ROLLOUTS) {
    return run.evals.map((e) => ({ x: e.step, y: e.mean, band: (e.hi - e.lo) / 2 }));
  }
  const series = metricSeries(run.steps, metric);
  if (metric !== "reward_mean") return series;
  const byStep = new Map(run.steps.map((s) => [displayStep(s.step), s]));
  return series.map((p) => {
    const s = byStep.get(p.x);
    const std = s?.reward_std;
    const n = s?.rollouts;
    const half = typeof std === "number" && typeof n === "number" ? ci95HalfWidth(std, n) : NaN;
    return Number.isFinite(half) ? { ...p, band: half } : p;
  });
}

/**
 * Points of `metric` for the runs: one series per run coloured by its setting, or per setting
 * pooled over its seeds (mean and 95% t interval at each step).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { overlayPoints } from "./runs_view.ts";
 * import { labelRuns } from "./runs.ts";
 * const run = (id: string, seed: number, r: number) => ({
 *   id, name: id, source: "dir" as const, grid: "g", done: null, evals: [],
 *   config: { norm: "tok", seed }, steps: [{ step: 0, reward_mean: r }],
 * });
 * const runs = [run("a", 0, 0.2), run("b", 1, 0.4)];
 * const [p] = overlayPoints(runs, "reward_mean", labelRuns(runs), true);
 * assert.equal(p.series, "all"); // only the seed differs: one setting
 * assert.ok(Math.abs(p.y - 0.3) < 1e-12 && p.lo! < 0.3 && p.hi! > 0.3);
 * ```
 */
export function overlayPoints(
  runs: readonly RunInfo[],
  metric: string,
  labels: RunLabels,
  poolSeeds: boolean,
): SeriesPoint[] {
  if (!poolSeeds) {
    return runs.flatMap((r) =>
      pointsOf(r, metric).map((p) => ({
        x: p.x,
        y: p.y,
        series: labels.label.get(r.id) ?? r.name,
        group: labels.setting.get(r.id) ?? r.name,
        ...(p.band !== undefined ? { lo: p.y - p.band, hi: p.y + p.band } : {}),
      }))
    );
  }
  const groups = new Map<string, Map<number, number[]>>();
  for (const r of runs) {
    const key = labels.setting.get(r.id) ?? r.name;
    if (!groups.has(key)) groups.set(key, new Map());
    const byStep = groups.get(key)!;
    for (const p of pointsOf(r, metric)) {
      if (!byStep.has(p.x)) byStep.set(p.x, []);
      byStep.get(p.x)!.push(p.y);
    }
  }
  const out: SeriesPoint[] = [];
  for (const [series, byStep] of groups) {
    for (const [x, values] of byStep) {
      const ci = tMeanCi(values);
      out.push({
        x,
        series,
        group: series,
        y: ci.mean,
        ...(values.length > 1 ? { lo: ci.lo, hi: ci.hi } : {}),
      });
    }
  }
  return out;
}

function runsUrl(base: string, query: Partial<RunsQuery>): string {
  const params = new URLSearchParams();
  for (const r of query.run ?? []) params.append("run", r);
  if (query.grid) params.set("grid", query.grid);
  for (const m of query.metric ?? []) params.append("metric", m);
  if (query.smooth) params.set("smooth", String(query.smooth));
  if (query.pool) params.set("pool", query.pool);
  if (query.log === "1") params.set("log", "1");
  const text = params.toString();
  return `${base}/runs${text ? `?${text}` : ""}`;
}

/** The runs chosen by a query (a grid's, the picked ones, else the first eight). */
export function chosenRuns(runs: readonly RunInfo[], query: RunsQuery): RunInfo[] {
  const chosen = runs.filter((r) =>
    query.run.includes(r.id) || (query.grid !== undefined && r.grid === query.grid)
  );
  return chosen.length ? chosen : runs.slice(0, 8);
}

/** The runs page body. */
export function runsFragment(base: string, runs: readonly RunInfo[], query: RunsQuery): SafeHtml {
  if (!runs.length) {
    return html`<p class="muted" id="no-runs">No runs yet: start the UI with a runs directory
(<code>deno task ui --runs-dir runs</code>, or <code>experiments/results</code>), or run a
training loop against this gateway.</p>`;
  }
  const shown = chosenRuns(runs, query);
  const labels = labelRuns(shown);
  const pool = query.pool === "seeds";
  const settings = [...new Set(shown.map((r) => labels.setting.get(r.id)!))];
  const colorKeys = pool ? settings : settings;
  const colors = new Map(colorKeys.map((k, i) => [k, PALETTE[i % PALETTE.length]]));
  const available = [...new Set([EVAL_ROLLOUTS, ...shown.flatMap((r) => metricNames(r.steps))])]
    .filter((m) => m !== EVAL_ROLLOUTS || shown.some((r) => r.evals.length));
  const metrics = query.metric.length ? query.metric : defaultMetrics(shown);
  const grids = [...new Set(runs.map((r) => r.grid).filter((g): g is string => g !== null))];
  const seedsPer = (setting: string) =>
    shown.filter((r) => labels.setting.get(r.id) === setting).length;

  const controls = html`<form method="get" action="${base}/runs" id="run-picker" class="filters">
${query.grid ? html`<input type="hidden" name="grid" value="${query.grid}">` : ""}
<label>metrics <select name="metric" id="f-metric" multiple size="4">${
    available.map((m) =>
      html`<option value="${m}" ${metrics.includes(m) ? "selected" : ""}>${m}</option>`
    )
  }</select></label>
${smoothingSelect(query.smooth)}
<label class="check"><input type="checkbox" name="pool" value="seeds" id="f-pool" ${
    pool ? "checked" : ""
  }> pool seeds (mean, 95% t interval)</label>
<label class="check"><input type="checkbox" name="log" value="1" id="f-log" ${
    query.log === "1" ? "checked" : ""
  }> log scale</label>
<button type="submit" id="compare">Compare</button>
<a href="${exportUrl(base, shown, metrics, "csv")}" id="export-csv" download>CSV</a> <a href="${
    exportUrl(base, shown, metrics, "parquet")
  }" id="export-parquet" download>Parquet</a></form>`;

  const legend = html`<div class="legend" id="runs-legend">${
    settings.map((s) =>
      html`
        <span class="key"
          data-setting="${s}"><i style="background:${colors.get(s)}"></i>${s}${seedsPer(s) > 1
            ? html`
              <span class="muted">(${seedsPer(s)} runs${pool ? ", pooled" : ""})</span>
            `
            : ""}</span>
      `
    )
  }<span class="muted">${
    labels.diff.keys.length
      ? `labelled by the ${labels.diff.keys.length} differing config key(s)`
      : "labelled by run name (no config key differs)"
  }</span></div>`;

  const charts = html`<div class="charts wide" id="runs-charts">${
    metrics.map((m) => {
      let points = overlayPoints(shown, m, labels, pool);
      // Per-run bands of many runs only stack into a smear: past a few series, lines only.
      const series = new Set(points.map((p) => p.series)).size;
      const banded = series <= MAX_BANDED_SERIES;
      if (!banded) points = points.map(({ lo: _lo, hi: _hi, ...p }) => p);
      const { unit, factor } = displayUnit(unitOf(m), points.map((p) => p.y));
      if (factor !== 1) {
        points = points.map((p) => ({
          ...p,
          y: p.y * factor,
          ...(p.lo !== undefined ? { lo: p.lo * factor, hi: p.hi! * factor } : {}),
        }));
      }
      const title = m === "reward_mean" ? "train reward (reward_mean)" : m;
      return lineChart(points, {
        title: unit ? `${title} (${unit})` : title,
        ...(banded && (m === "reward_mean" || pool)
          ? { note: pool ? "band: 95% t interval over seeds" : "band: 95% interval of the mean" }
          : {}),
        smoothing: query.smooth,
        id: `runs-${m}`,
        width: 680,
        height: 300,
        colors,
        legend: false,
        log: query.log === "1",
      });
    })
  }</div>`;

  // Results: what the runs wrote when they finished, grouped by setting.
  const doneKeys = [...new Set(shown.flatMap((r) => Object.keys(r.done ?? {})))]
    .filter((k) => !/^(id|name|cell|config|out_dir)$/.test(k)).slice(0, 8);
  const lastOf = (r: RunInfo, m: string) => pointsOf(r, m).at(-1)?.y;
  const results = html`
    <h2>Results</h2>
    <div class="scroll-x">
      <table id="run-results">
        <thead>
          <tr><th>run</th>${metrics.map((m) => html`<th class="num">last ${m}</th>`)}${doneKeys.map(
            (k) => html`<th>${k}</th>`,
          )}</tr>
        </thead>
        <tbody>${settings.map((setting) =>
          html`
            <tr class="group">
              <th colspan="${1 + metrics.length +
                doneKeys.length}"><i class="sw" style="background:${colors.get(
                  setting,
                )}"></i>${setting}</th>
            </tr>${shown.filter((r) => labels.setting.get(r.id) === setting).map((r) =>
              html`<tr data-run="${r.id}"><td title="${r.name}">${labels.label.get(r.id)}</td>${
                metrics.map((m) => html`<td class="num">${fmtMetric(m, lastOf(r, m))}</td>`)
              }${doneKeys.map((k) => html`<td>${cellText(r.done?.[k])}</td>`)}</tr>`
            )}
          `
        )}</tbody>
      </table>
    </div>
  `;

  const diff = labels.diff;
  const diffTable = html`
    <h2>Config differences</h2>
    <p class="muted"
      id="diff-summary">${diff.keys.length} differing key(s), ${diff
        .same} identical${diff.ignored.length
        ? html`; paths and bookkeeping not compared: <code>${diff.ignored.join(", ")}</code>`
        : ""}${diff.missing ? `; ${diff.missing} run(s) without a config (?)` : ""}.</p>
    ${diff.keys.length
      ? html`
        <div class="scroll-x">
          <table id="config-diff">
            <thead>
              <tr><th>key</th>${shown.map((r) =>
                html`<th title="${r.name}">${labels.label.get(r.id)}</th>`
              )}</tr>
            </thead>
            <tbody>${diff.keys.map((k, i) =>
              html`<tr><td><code>${k}</code></td>${
                diff.values[i].map((v) => html`<td><code>${v}</code></td>`)
              }</tr>`
            )}</tbody>
          </table>
        </div>
      `
      : ""}
  `;

  const gridLinks = grids.length
    ? html`<p id="grids">experiment grids: ${
      grids.map((g, k) =>
        html`${k ? " · " : ""}<a href="${runsUrl(base, { grid: g })}">${g}</a> (${
          runs.filter((r) => r.grid === g).length
        } runs)`
      )
    }</p>`
    : "";
  const picker = html`
    <h2>All runs</h2>
    <div class="scroll-x">
      <table id="runs">
        ${tableHead(["", "run", "grid / source", { num: "steps" }, ""])}
        <tbody>${runs.map((r) =>
          html`
            <tr data-run="${r.id}">
              <td><input type="checkbox" form="run-picker" name="run" value="${r
                .id}" ${shown.includes(r) ? "checked" : ""}></td>
              <td><a href="${runsUrl(base, { run: [r.id] })}">${r.name}</a></td>
              <td>${r.grid
                ? html`<a href="${runsUrl(base, { grid: r.grid })}">${r.grid}</a>`
                : r.source}</td>
              <td class="num">${r.steps.length}</td>
              <td>${r.source === "gateway"
                ? html`<a href="${base}/rollouts?run=${encodeURIComponent(r.name)}">rollouts</a>`
                : ""} <a href="${base}/metrics?run=${encodeURIComponent(r.id)}">metrics</a></td>
            </tr>
          `
        )}</tbody>
      </table>
    </div>
  `;
  return html`${gridLinks}${controls}${legend}${charts}${results}${diffTable}${picker}`;
}

/** The CSV/Parquet download of the shown runs' metrics. */
export function exportUrl(
  base: string,
  runs: readonly RunInfo[],
  metrics: readonly string[],
  format: "csv" | "parquet",
): string {
  const params = new URLSearchParams();
  for (const r of runs) params.append("run", r.id);
  for (const m of metrics) if (m !== EVAL_ROLLOUTS) params.append("metric", m);
  return `${base}/api/metrics.${format}?${params}`;
}
