/**
 * Power calculations for comparing two settings' mean scores over seeds (two-sided t-test).
 *
 * With n seeds per setting, per-seed standard deviation σ (of the score, or of the paired
 * difference when seeds share their random numbers across settings), level α (divided by the
 * number of comparisons, Bonferroni) and target power 1 − β:
 *
 * | design        | standard error of the difference | degrees of freedom |
 * | ------------- | -------------------------------- | ------------------ |
 * | `independent` | σ·√(2/n)                         | 2n − 2             |
 * | `paired`      | σ_d/√n                           | n − 1              |
 *
 * power(n) = P(T_df > t_{1−α/2, df} − δ/se) (the central-t shift approximation of the
 * noncentral t; it errs by well under a percentage point of power at the n used here), and the
 * smallest detectable effect at n is δ = (t_{1−α/2, df} + t_{1−β, df})·se.
 *
 * Example: the quick loop grid of issue #18 (σ = 0.123 per cell, 3 seeds) detects ≈ 0.37 at
 * 80% power; a 3-point effect needs ≈ 230 seeds per setting.
 *
 * @module
 */
import tCdf from "@stdlib/stats-base-dists-t-cdf";
import tQuantile from "@stdlib/stats-base-dists-t-quantile";

/** The test's design: settings on independent seeds, or paired seed by seed. */
export type PowerDesign = "independent" | "paired";

/** Inputs of a power calculation. */
export interface PowerInput {
  /** Per-seed standard deviation of the score (independent) or of the paired difference. */
  sd: number;
  design?: PowerDesign;
  /** Two-sided level before the Bonferroni division (default 0.05). */
  alpha?: number;
  /** Comparisons the level is shared by (default 1). */
  comparisons?: number;
}

function parts(n: number, input: PowerInput): { se: number; df: number; alpha: number } {
  if (!(input.sd >= 0) || !Number.isFinite(input.sd)) {
    throw new Error(`sd: expected a finite number ≥ 0, got ${input.sd}`);
  }
  if (!Number.isInteger(n) || n < 2) throw new Error(`n: expected an integer ≥ 2, got ${n}`);
  const paired = (input.design ?? "independent") === "paired";
  const alpha = (input.alpha ?? 0.05) / (input.comparisons ?? 1);
  if (!(alpha > 0 && alpha < 1)) throw new Error(`alpha: expected a level in (0, 1), got ${alpha}`);
  return {
    se: paired ? input.sd / Math.sqrt(n) : input.sd * Math.sqrt(2 / n),
    df: paired ? n - 1 : 2 * n - 2,
    alpha,
  };
}

/**
 * Power to detect `effect` with `n` seeds per setting.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { power } from "./power.ts";
 * const p = power(0.37, 3, { sd: 0.123 });
 * assert.ok(p > 0.5 && p < 0.95);
 * ```
 */
export function power(effect: number, n: number, input: PowerInput): number {
  const { se, df, alpha } = parts(n, input);
  if (se === 0) return effect === 0 ? alpha : 1;
  const crit = tQuantile(1 - alpha / 2, df);
  return 1 - tCdf(crit - Math.abs(effect) / se, df);
}

/**
 * The smallest effect detectable with `n` seeds per setting at power `target`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { detectableEffect } from "./power.ts";
 * // Issue #18: the quick grid (σ 0.123, 3 seeds per setting) detects ≈ 0.37.
 * assert.equal(detectableEffect(3, { sd: 0.123 }).toFixed(2), "0.37");
 * ```
 */
export function detectableEffect(n: number, input: PowerInput, target = 0.8): number {
  const { se, df, alpha } = parts(n, input);
  return (tQuantile(1 - alpha / 2, df) + tQuantile(target, df)) * se;
}

/**
 * The seeds per setting needed to detect `effect` at power `target` (the smallest n with
 * power(n) ≥ target).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { seedsFor } from "./power.ts";
 * // Issue #18: a 3-point effect at σ 0.123 needs ≈ 230 seeds per setting.
 * const n = seedsFor(0.032, { sd: 0.123 });
 * assert.ok(n > 220 && n < 240);
 * ```
 */
export function seedsFor(effect: number, input: PowerInput, target = 0.8, max = 1_000_000): number {
  if (!(Math.abs(effect) > 0)) throw new Error("effect: expected a non-zero effect");
  if (!(target > 0 && target < 1)) throw new Error(`target: expected a power in (0, 1)`);
  let lo = 2;
  if (power(effect, lo, input) >= target) return lo;
  let hi = 4;
  while (power(effect, hi, input) < target) {
    lo = hi;
    hi *= 2;
    if (hi > max) throw new Error(`seedsFor: more than ${max} seeds needed`);
  }
  while (hi - lo > 1) {
    const mid = Math.floor((lo + hi) / 2);
    if (power(effect, mid, input) >= target) hi = mid;
    else lo = mid;
  }
  return hi;
}
