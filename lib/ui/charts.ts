/**
 * The UI's charts: Observable Plot rendered to SVG on the server. Line charts draw the raw
 * series faintly under an exponentially smoothed one (TensorBoard's debiased EMA) with an
 * optional confidence band; stacked bars take disjoint parts only. Y ticks are chosen here
 * (1-2-5 steps) and formatted with as many decimals as their spacing needs, and the left margin
 * grows with the longest label, so that 0.999998 is never clipped to "999998".
 *
 * @module
 */
import * as Plot from "@observablehq/plot";
import { plot } from "../plot/figure.ts";
import { type SafeHtml, unsafeRaw } from "./html.ts";

/** One point of a series; `lo`/`hi` bound its confidence band when known. */
export interface SeriesPoint {
  x: number;
  series: string;
  y: number;
  lo?: number;
  hi?: number;
}

/**
 * Debiased exponential moving average (weight `alpha` on the past; 0 = no smoothing).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { smooth } from "./charts.ts";
 * assert.deepEqual(smooth([1, 1, 1], 0.9), [1, 1, 1]);
 * assert.deepEqual(smooth([0, 2], 0), [0, 2]);
 * assert.ok(Math.abs(smooth([0, 2], 0.5)[1] - 4 / 3) < 1e-12);
 * ```
 */
export function smooth(values: readonly number[], alpha: number): number[] {
  if (!(alpha > 0)) return [...values];
  let acc = 0;
  let weight = 0;
  return values.map((v) => {
    acc = alpha * acc + (1 - alpha) * v;
    weight = alpha * weight + (1 - alpha);
    return acc / weight;
  });
}

/**
 * Ticks at 1-2-5 steps covering `[lo, hi]`, each formatted with the decimals its step needs.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { niceTicks } from "./charts.ts";
 * const { labels } = niceTicks(0.999991, 0.999998);
 * assert.ok(labels.includes("0.999998") || labels.includes("0.999996"), labels.join());
 * assert.deepEqual(niceTicks(0, 10).labels, ["0", "2", "4", "6", "8", "10"]);
 * ```
 */
export function niceTicks(
  lo: number,
  hi: number,
  count = 5,
): { ticks: number[]; labels: string[]; format: (v: number) => string } {
  if (!Number.isFinite(lo) || !Number.isFinite(hi)) {
    return { ticks: [], labels: [], format: String };
  }
  if (hi < lo) [lo, hi] = [hi, lo];
  if (hi === lo) {
    const pad = lo === 0 ? 1 : Math.abs(lo) * 1e-3;
    lo -= pad;
    hi += pad;
  }
  const raw = (hi - lo) / count;
  const power = Math.pow(10, Math.floor(Math.log10(raw)));
  const step = [1, 2, 5, 10].map((m) => m * power).find((s) => s >= raw) ?? 10 * power;
  const decimals = Math.max(0, Math.min(12, -Math.floor(Math.log10(step) + 1e-9)));
  const format = (v: number) => {
    const text = Math.abs(v) >= 1e5 || (Math.abs(v) < 1e-4 && v !== 0 && decimals > 8)
      ? v.toExponential(2)
      : v.toFixed(decimals);
    return text === `-${(0).toFixed(decimals)}` ? text.slice(1) : text;
  };
  const ticks: number[] = [];
  for (let k = Math.ceil(lo / step - 1e-9); k * step <= hi + step * 1e-9; k++) {
    ticks.push(Number((k * step).toFixed(decimals + 2)));
  }
  return { ticks, labels: ticks.map(format), format };
}

function yAxis(values: number[]): Record<string, unknown> {
  const finite = values.filter(Number.isFinite);
  if (!finite.length) return {};
  const { ticks, labels, format } = niceTicks(Math.min(...finite), Math.max(...finite));
  const widest = Math.max(...labels.map((l) => l.length), 1);
  return { ticks, tickFormat: format, marginLeft: Math.max(40, 12 + 7 * widest) };
}

/** Options of {@link lineChart}. */
export interface LineChartOptions {
  title: string;
  /** x axis label (default `step`). */
  xLabel?: string;
  /** EMA weight on the past (0: none). */
  smoothing?: number;
  /** Fixed y domain. */
  yDomain?: [number, number];
  width?: number;
  height?: number;
  /** `data-chart` attribute (tests and links find charts by it). */
  id?: string;
  /** Shown under the title: the assumption behind a band, say. */
  note?: string;
  /** Dashed horizontal rules: the healthy bound of a metric (a monitor's threshold). */
  thresholds?: readonly { y: number; label: string }[];
}

/**
 * A line chart of several series: raw points faint, smoothed line solid, bands when points
 * carry `lo`/`hi`. Empty input renders nothing.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { lineChart } from "./charts.ts";
 * const svg = lineChart([{ x: 0, series: "a", y: 0.999991 }, { x: 1, series: "a", y: 0.999998 }], {
 *   title: "alignment",
 * }).toString();
 * assert.match(svg, /0\.99999/);
 * ```
 */
export function lineChart(points: readonly SeriesPoint[], options: LineChartOptions): SafeHtml {
  if (points.length === 0) return unsafeRaw("");
  const alpha = options.smoothing ?? 0;
  const bySeries = new Map<string, SeriesPoint[]>();
  for (const p of points) {
    if (!bySeries.has(p.series)) bySeries.set(p.series, []);
    bySeries.get(p.series)!.push(p);
  }
  const smoothed: SeriesPoint[] = [];
  const bands: SeriesPoint[] = [];
  for (const [, list] of bySeries) {
    list.sort((a, b) => a.x - b.x);
    const ys = smooth(list.map((p) => p.y), alpha);
    const los = smooth(list.map((p) => p.lo ?? p.y), alpha);
    const his = smooth(list.map((p) => p.hi ?? p.y), alpha);
    list.forEach((p, i) => {
      smoothed.push({ ...p, y: ys[i] });
      if (p.lo !== undefined && p.hi !== undefined) {
        bands.push({ ...p, lo: los[i], hi: his[i] });
      }
    });
  }
  const rules = options.thresholds ?? [];
  const ys = [...points.flatMap((p) => [p.y, p.lo ?? p.y, p.hi ?? p.y]), ...rules.map((r) => r.y)];
  const axis = options.yDomain ? {} : yAxis(ys);
  const { marginLeft, ...y } = axis as { marginLeft?: number };
  const marks: Plot.Markish[] = [];
  if (bands.length) {
    marks.push(
      Plot.areaY(bands, {
        x: "x",
        y1: "lo",
        y2: "hi",
        fill: "series",
        z: "series",
        fillOpacity: 0.15,
      }),
    );
  }
  if (alpha > 0) {
    marks.push(
      Plot.line(points, { x: "x", y: "y", stroke: "series", z: "series", strokeOpacity: 0.3 }),
    );
  }
  marks.push(
    Plot.line(smoothed, {
      x: "x",
      y: "y",
      stroke: "series",
      z: "series",
      marker: points.length <= 60 ? "circle" : null,
    }),
  );
  if (rules.length) {
    marks.push(
      Plot.ruleY(rules, { y: "y", stroke: "#c0392b", strokeDasharray: "4,3" }),
      Plot.text(rules, { y: "y", text: "label", frameAnchor: "right", dy: -6, fill: "#c0392b" }),
    );
  }
  return chartFigure(options, {
    marginLeft,
    x: { tickFormat: (v: number) => Number.isInteger(v) ? String(v) : "" },
    y: options.yDomain ? { domain: options.yDomain } : y,
    marks,
  });
}

/**
 * Stacked bars of parts that do not overlap (their sum is meaningful), one bar per x.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { stackedChart } from "./charts.ts";
 * const svg = stackedChart([{ x: 0, series: "a", y: 2 }, { x: 0, series: "b", y: 3 }], { title: "t" });
 * assert.match(svg.toString(), /<svg/);
 * ```
 */
export function stackedChart(
  points: readonly SeriesPoint[],
  options: Omit<LineChartOptions, "smoothing" | "yDomain">,
): SafeHtml {
  if (points.length === 0) return unsafeRaw("");
  const totals = new Map<number, number>();
  for (const p of points) totals.set(p.x, (totals.get(p.x) ?? 0) + p.y);
  const { marginLeft, ...y } = yAxis([0, ...totals.values()]) as { marginLeft?: number };
  return chartFigure(options, {
    marginLeft,
    x: { type: "band" },
    y,
    marks: [Plot.barY(points, { x: "x", y: "y", fill: "series" }), Plot.ruleY([0])],
  });
}

/** A chart's figure in its `<div class="chart">`: the options' frame with these axes and marks. */
function chartFigure(
  options: Omit<LineChartOptions, "smoothing" | "yDomain">,
  parts: {
    marginLeft: number | undefined;
    x: Record<string, unknown>;
    y: Record<string, unknown>;
    marks: Plot.Markish[];
  },
): SafeHtml {
  const fig = plot({
    title: options.title,
    ...(options.note ? { subtitle: options.note } : {}),
    width: options.width ?? 420,
    height: options.height ?? 240,
    marginLeft: parts.marginLeft ?? 48,
    x: { label: options.xLabel ?? "step", ...parts.x },
    y: { grid: true, label: null, ...parts.y },
    color: { legend: true },
    marks: parts.marks,
  });
  return unsafeRaw(`<div class="chart" data-chart="${options.id ?? ""}">${fig.svg()}</div>`);
}

/**
 * The disjoint parts of a step's phase timings. The loops report `step` (the whole step) and,
 * in async mode, `update` (which contains `drain`, `assemble` and `train`); those two are
 * totals, not parts. The parts are the other keys plus `other` = the total minus the parts.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { disjointTimings } from "./charts.ts";
 * assert.deepEqual(
 *   disjointTimings({ rollout: 4, step: 10, assemble: 1, train: 4 }),
 *   { rollout: 4, assemble: 1, train: 4, other: 1 },
 * );
 * assert.deepEqual(
 *   disjointTimings({ rollout: 3, drain: 1, update: 6, step: 9, assemble: 1, train: 3 }),
 *   { rollout: 3, drain: 1, assemble: 1, train: 3, other: 1 },
 * );
 * ```
 */
export function disjointTimings(timings: Record<string, number>): Record<string, number> {
  const parts: Record<string, number> = {};
  for (const [k, v] of Object.entries(timings)) {
    if (k !== "step" && k !== "update" && Number.isFinite(v)) parts[k] = v;
  }
  const total = timings.step;
  if (Number.isFinite(total)) {
    const rest = total - Object.values(parts).reduce((a, b) => a + b, 0);
    if (rest > 0.5) parts.other = rest;
  }
  return parts;
}
