/**
 * Means with Student-t 95% confidence intervals (quantiles from
 * `@stdlib/stats-base-dists-t-quantile`).
 *
 * @module
 */
import tQuantile from "@stdlib/stats-base-dists-t-quantile";

/** Mean, sample standard deviation (n − 1) and 95% CI half-width of `xs`. */
export interface MeanCi {
  n: number;
  mean: number;
  std: number;
  /** Half-width of the 95% confidence interval of the mean (NaN for n < 2). */
  ci95: number;
}

/**
 * Mean and 95% confidence interval of a sample.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { meanCi } from "./ci.ts";
 * const s = meanCi([1, 2, 3]);
 * assert.equal(s.mean, 2);
 * assert.equal(s.ci95.toFixed(3), "2.484"); // t(0.975, 2) = 4.303 × 1 / √3
 * ```
 */
export function meanCi(xs: number[]): MeanCi {
  const n = xs.length;
  if (n === 0) return { n, mean: Number.NaN, std: Number.NaN, ci95: Number.NaN };
  const mean = xs.reduce((a, b) => a + b, 0) / n;
  if (n < 2) return { n, mean, std: Number.NaN, ci95: Number.NaN };
  const std = Math.sqrt(xs.reduce((a, x) => a + (x - mean) ** 2, 0) / (n - 1));
  return { n, mean, std, ci95: (tQuantile(0.975, n - 1) * std) / Math.sqrt(n) };
}
