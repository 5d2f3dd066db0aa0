/**
 * Means with 95% confidence intervals, computed one way everywhere: the Student-t interval
 * (quantiles from `@stdlib/stats-base-dists-t-quantile`) of independent observations. The
 * training loop's evaluation, the Live UI's bands, the experiments and the benches all use
 * these, so the CLI and the UI show the same interval for the same numbers.
 *
 * One rule for small samples: with fewer than 2 observations there is no interval; `std` and
 * `ci95` are `NaN` (and `mean` is `NaN` for no observations). Callers show the bare mean then.
 *
 * @module
 */
import tQuantile from "@stdlib/stats-base-dists-t-quantile";

/** A mean with its 95% confidence interval. */
export interface MeanCi {
  n: number;
  /** NaN when n = 0. */
  mean: number;
  /** Sample standard deviation (n − 1 in the denominator; NaN when n < 2). */
  std: number;
  /** Half-width of the 95% interval: mean ± ci95 (NaN when n < 2). */
  ci95: number;
}

/**
 * Half-width of the 95% Student-t interval of a mean from its sample standard deviation and
 * count (NaN when n < 2): what a summary that kept only `std` and `n` can still show.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ci95HalfWidth } from "./stats.ts";
 * assert.equal(ci95HalfWidth(1, 3).toFixed(3), "2.484"); // t(0.975, 2) = 4.303 × 1 / √3
 * assert.ok(Number.isNaN(ci95HalfWidth(1, 1)));
 * ```
 */
export function ci95HalfWidth(std: number, n: number): number {
  if (!(n >= 2) || !Number.isFinite(std)) return Number.NaN;
  return tQuantile(0.975, n - 1) * std / Math.sqrt(n);
}

/**
 * Mean ± 95% Student-t interval of independent observations. For rewards in {0, 1} the t
 * interval is the Wald interval: fine away from 0 and 1 at n ≥ 30.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { meanCi } from "./stats.ts";
 * const r = meanCi([1, 0, 1, 1, 0, 1, 1, 0]);
 * assert.equal(r.mean, 0.625);
 * assert.equal(r.ci95.toFixed(3), "0.433"); // t(0.975, 7) = 2.365 × 0.518 / √8
 * assert.ok(Number.isNaN(meanCi([1]).ci95)); // one observation: no interval
 * assert.ok(Number.isNaN(meanCi([]).mean));
 * ```
 */
export function meanCi(values: readonly number[]): MeanCi {
  const n = values.length;
  if (n === 0) return { n, mean: Number.NaN, std: Number.NaN, ci95: Number.NaN };
  const mean = values.reduce((a, b) => a + b, 0) / n;
  if (n < 2) return { n, mean, std: Number.NaN, ci95: Number.NaN };
  const std = Math.sqrt(values.reduce((a, x) => a + (x - mean) ** 2, 0) / (n - 1));
  return { n, mean, std, ci95: ci95HalfWidth(std, n) };
}

/**
 * Difference of two means (`xs` − `ys`) with a Welch 95% confidence interval (unequal
 * variances, Welch–Satterthwaite degrees of freedom) and its standard error, for intervals at
 * other levels; NaN interval when either side has fewer than 2 observations.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { welchDiff } from "./stats.ts";
 * const d = welchDiff([1, 2, 3], [0, 1, 2]);
 * assert.equal(d.mean, 1);
 * assert.ok(d.ci95 > 1.5 && d.ci95 < 2.5);
 * assert.equal(d.se, Math.sqrt(2 / 3));
 * ```
 */
export function welchDiff(
  xs: readonly number[],
  ys: readonly number[],
): { mean: number; ci95: number; se: number; df: number } {
  const a = meanCi(xs);
  const b = meanCi(ys);
  const va = a.std ** 2 / a.n;
  const vb = b.std ** 2 / b.n;
  const se = Math.sqrt(va + vb);
  const df = (va + vb) ** 2 / (va ** 2 / (a.n - 1) + vb ** 2 / (b.n - 1));
  const t = Number.isFinite(df) && df > 0 ? tQuantile(0.975, df) : Number.NaN;
  return { mean: a.mean - b.mean, ci95: t * se, se, df };
}

/**
 * The median of `values` (the mean of the two middle ones for an even count; NaN for none): what
 * the benches read a figure of several rounds as.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { median } from "./stats.ts";
 * assert.equal(median([3, 1, 2]), 2);
 * assert.equal(median([4, 1, 3, 2]), 2.5);
 * assert.ok(Number.isNaN(median([])));
 * ```
 */
export function median(values: readonly number[]): number {
  if (values.length === 0) return NaN;
  const sorted = [...values].sort((a, b) => a - b);
  const mid = sorted.length >> 1;
  return sorted.length % 2 ? sorted[mid] : (sorted[mid - 1] + sorted[mid]) / 2;
}
