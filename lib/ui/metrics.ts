/**
 * Every logged metric as a numeric series: a step record flattened to dotted names
 * (`timings_ms.train`, `break_reasons.branch`, `eval/heldout_reward_mean`), step numbers as the
 * terminal and the figures print them, units read from the name, numbers with significant
 * digits, and the long table behind the CSV/Parquet export.
 *
 * Step numbering: `metrics.jsonl` and the rollouts' `step` label count from 0 (the step in
 * progress); the loop's terminal lines (`step 3/10`) and the figures count steps done, from 1.
 * The UI shows the latter ({@link displayStep}); an evaluation's `step` label already counts the
 * steps done before it (0 = before RL), so it is shown as it is.
 *
 * @module
 */
import pl from "nodejs-polars";
import type { TrainStepMetrics } from "../schema/ui.ts";
import { meanCi } from "../util/stats.ts";

/** The step number shown for a metrics record's 0-based `step`. */
export function displayStep(step: number): number {
  return step + 1;
}

/** Fields that are bookkeeping, not measurements (never charted). */
const NOT_METRICS = new Set(["step", "time"]);

/**
 * A step record's numeric values by dotted name (nested records flattened, nulls and text left
 * out).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { flattenStep } from "./metrics.ts";
 * assert.deepEqual(
 *   flattenStep({ step: 0, loss: -2e-5, alignment_corr: null, timings_ms: { train: 1200 } }),
 *   { loss: -2e-5, "timings_ms.train": 1200 },
 * );
 * ```
 */
export function flattenStep(step: TrainStepMetrics): Record<string, number> {
  const out: Record<string, number> = {};
  const walk = (value: unknown, name: string, depth: number) => {
    if (typeof value === "number") {
      if (Number.isFinite(value)) out[name] = value;
    } else if (typeof value === "boolean") out[name] = value ? 1 : 0;
    else if (value && typeof value === "object" && !Array.isArray(value) && depth < 3) {
      for (const [k, v] of Object.entries(value)) walk(v, `${name}.${k}`, depth + 1);
    }
  };
  for (const [key, value] of Object.entries(step)) {
    if (!NOT_METRICS.has(key)) walk(value, key, 0);
  }
  return out;
}

/**
 * Every metric name logged by any of the steps, sorted (evaluation metrics first).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { metricNames } from "./metrics.ts";
 * assert.deepEqual(
 *   metricNames([{ step: 0, loss: 1, "eval/heldout_reward_mean": 0.5 }, { step: 1, entropy: 2 }]),
 *   ["eval/heldout_reward_mean", "entropy", "loss"],
 * );
 * ```
 */
export function metricNames(steps: readonly TrainStepMetrics[]): string[] {
  const names = new Set<string>();
  for (const s of steps) for (const k of Object.keys(flattenStep(s))) names.add(k);
  return [...names].sort((a, b) =>
    Number(isEvalMetric(b)) - Number(isEvalMetric(a)) || (a < b ? -1 : a > b ? 1 : 0)
  );
}

/** Whether a metric is an evaluation series (`eval…` names, and the older `val_reward`). */
export function isEvalMetric(name: string): boolean {
  return name.startsWith("eval") || name === "val_reward";
}

/** A metric's values per (display) step. */
export function metricSeries(
  steps: readonly TrainStepMetrics[],
  name: string,
): { x: number; y: number }[] {
  const out: { x: number; y: number }[] = [];
  for (const s of steps) {
    const y = flattenStep(s)[name];
    if (y !== undefined) out.push({ x: displayStep(s.step), y });
  }
  return out;
}

/** The unit a metric's name implies (`ms` for `*_ms` and `timings_ms.*`), or null. */
export function unitOf(name: string): "ms" | null {
  return /(^|[._/])timings_ms\.|_ms$/.test(name) ? "ms" : null;
}

/**
 * How to show values of a unit: milliseconds become seconds once any value reaches 1,000.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { displayUnit } from "./metrics.ts";
 * assert.deepEqual(displayUnit("ms", [120, 4500]), { unit: "s", factor: 0.001 });
 * assert.deepEqual(displayUnit("ms", [120, 450]), { unit: "ms", factor: 1 });
 * assert.deepEqual(displayUnit(null, [1]), { unit: "", factor: 1 });
 * ```
 */
export function displayUnit(
  unit: "ms" | null,
  values: readonly number[],
): { unit: string; factor: number } {
  if (unit !== "ms") return { unit: "", factor: 1 };
  return values.some((v) => Math.abs(v) >= 1000)
    ? { unit: "s", factor: 0.001 }
    : { unit: "ms", factor: 1 };
}

/**
 * A number with `digits` significant digits: integers as they are, tiny and huge values in
 * exponent form, never `-0.000` for a small loss.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { fmtSig } from "./metrics.ts";
 * assert.equal(fmtSig(-0.0000231), "-2.31e-5");
 * assert.equal(fmtSig(0.41234), "0.4123");
 * assert.equal(fmtSig(1234567), "1234567");
 * assert.equal(fmtSig(12.5), "12.5");
 * assert.equal(fmtSig(0.999999999998), "1.000");
 * assert.equal(fmtSig(null), "–");
 * ```
 */
export function fmtSig(value: number | null | undefined, digits = 4): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  if (Number.isInteger(value) && Math.abs(value) < 1e15) return String(value);
  const abs = Math.abs(value);
  if (abs !== 0 && (abs < 1e-3 || abs >= 1e9)) {
    return value.toExponential(digits - 2).replace(/\.?0+e/, "e").replace("e+", "e");
  }
  const text = value.toPrecision(digits);
  return text.includes("e") ? String(Number(text)) : text.replace(/(\.\d*?[1-9])0+$/, "$1");
}

/**
 * A value with its unit (`1.23 s`, `450 ms`), scaled as {@link displayUnit} says for it alone.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { fmtMetric } from "./metrics.ts";
 * assert.equal(fmtMetric("timings_ms.train", 12345), "12.35 s");
 * assert.equal(fmtMetric("step_ms", 450), "450 ms");
 * assert.equal(fmtMetric("loss", -0.0000231), "-2.31e-5");
 * ```
 */
export function fmtMetric(name: string, value: number | null | undefined): string {
  if (value === null || value === undefined || !Number.isFinite(value)) return "–";
  const { unit, factor } = displayUnit(unitOf(name), [value]);
  return unit ? `${fmtSig(value * factor)} ${unit}` : fmtSig(value);
}

/** One row of the long table: a run's metric at a (display) step. */
export interface MetricRow {
  run: string;
  step: number;
  metric: string;
  value: number;
}

/** Runs' steps as the long table (`run, step, metric, value`) the exports write. */
export function metricRows(
  runs: readonly { name: string; steps: readonly TrainStepMetrics[] }[],
  only?: ReadonlySet<string>,
): MetricRow[] {
  const rows: MetricRow[] = [];
  for (const run of runs) {
    for (const s of run.steps) {
      for (const [metric, value] of Object.entries(flattenStep(s))) {
        if (!only || only.has(metric)) {
          rows.push({ run: run.name, step: displayStep(s.step), metric, value });
        }
      }
    }
  }
  return rows;
}

/**
 * The long table as CSV or Parquet bytes, written by nodejs-polars.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { metricsTable } from "./metrics.ts";
 * const csv = new TextDecoder().decode(
 *   metricsTable([{ run: "a", step: 1, metric: "loss", value: 0.5 }], "csv"),
 * );
 * assert.equal(csv.trim(), "run,step,metric,value\na,1,loss,0.5");
 * ```
 */
export function metricsTable(
  rows: readonly MetricRow[],
  format: "csv" | "parquet",
): Uint8Array<ArrayBuffer> {
  const df = pl.DataFrame({
    run: pl.Series("run", rows.map((r) => r.run), pl.Utf8),
    step: pl.Series("step", rows.map((r) => r.step), pl.Int64),
    metric: pl.Series("metric", rows.map((r) => r.metric), pl.Utf8),
    value: pl.Series("value", rows.map((r) => r.value), pl.Float64),
  });
  const bytes = format === "csv" ? df.writeCSV() : df.writeParquet();
  return new Uint8Array(bytes);
}

/**
 * Mean with its 95% Student-t interval as a band (`meanCi` of `lib/util/stats.ts`, the one
 * interval rule reins shows everywhere; fewer than 2 values: no interval, `lo` = `hi` = mean).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { tMeanCi } from "./metrics.ts";
 * const ci = tMeanCi([1, 2, 3]);
 * assert.equal(ci.mean, 2);
 * assert.ok(Math.abs(ci.hi - 2 - 4.303 / Math.sqrt(3)) < 1e-3);
 * assert.deepEqual(tMeanCi([5]), { mean: 5, lo: 5, hi: 5, n: 1 });
 * ```
 */
export function tMeanCi(
  values: readonly number[],
): { mean: number; lo: number; hi: number; n: number } {
  const { mean, ci95, n } = meanCi(values);
  const half = Number.isFinite(ci95) ? ci95 : 0;
  return { mean, lo: mean - half, hi: mean + half, n };
}
