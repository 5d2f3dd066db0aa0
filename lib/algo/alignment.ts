/**
 * Rollout–training alignment: how well the trainer's logprobs reproduce the ones the inference
 * engine reported while sampling (LEGO-RL's health metric). On trained tokens, with the same
 * weights on both sides, the probability correlation should stay ≥ 0.99; anything lower points
 * at a token misalignment (a shifted mask, a template mismatch) or a policy that moved.
 *
 * @module
 */
import { type Sample, ValidationError } from "../schema.ts";
import type { AlignmentMetrics } from "./schema.ts";

/** Per-token logprobs of the same tokens under the rollout engine and the trainer. */
export interface AlignmentInput {
  rollout_logprobs: ArrayLike<number>;
  trainer_logprobs: ArrayLike<number>;
  /** Which tokens count (1 = trained); all tokens when absent. */
  loss_mask?: ArrayLike<number>;
}

class Pearson {
  n = 0;
  private mx = 0;
  private my = 0;
  private sxx = 0;
  private syy = 0;
  private sxy = 0;
  // Welford-style updates: stable for the near-identical series this metric usually sees.
  add(x: number, y: number): void {
    this.n += 1;
    const dx = x - this.mx;
    this.mx += dx / this.n;
    const dy = y - this.my;
    this.my += dy / this.n;
    this.sxx += dx * (x - this.mx);
    this.syy += dy * (y - this.my);
    this.sxy += dx * (y - this.my);
  }
  value(): number | null {
    if (this.n < 2 || this.sxx <= 0 || this.syy <= 0) return null;
    return Math.max(-1, Math.min(1, this.sxy / Math.sqrt(this.sxx * this.syy)));
  }
}

/** Mean and maximum of absolute differences. */
class AbsDiff {
  private sum = 0;
  max = 0;
  add(d: number): void {
    this.sum += d;
    if (d > this.max) this.max = d;
  }
  mean(n: number): number {
    return this.sum / n;
  }
}

/**
 * Alignment metrics over the trained tokens of one or more sequences: Pearson correlation of
 * probabilities exp(rollout_lp) vs exp(trainer_lp) and of the logprobs themselves, mean/max
 * |Δp| and |Δlogprob|, the mean k1 and k3 estimates of KL(rollout ‖ trainer) (x = trainer −
 * rollout, k1 = −x, k3 = eˣ − x − 1, on tokens the rollout policy sampled), the normalised
 * effective sample size of the importance weights eˣ, and the token count.
 *
 * A correlation is `null` when fewer than two tokens count or one side is constant (it is
 * undefined there, and reporting 1 would hide a real mismatch).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { alignmentMetrics } from "./alignment.ts";
 * const lp = [-0.1, -2.0, -0.7, -3.2];
 * const m = alignmentMetrics([{ rollout_logprobs: lp, trainer_logprobs: lp }]);
 * assert.equal(m.pearson_prob, 1);
 * assert.equal(m.k3_kl, 0);
 * ```
 */
export function alignmentMetrics(sequences: readonly AlignmentInput[]): AlignmentMetrics {
  const prob = new Pearson();
  const logp = new Pearson();
  const dp = new AbsDiff();
  const dl = new AbsDiff();
  let sumK3 = 0;
  let sumK1 = 0;
  let sumW = 0;
  let sumW2 = 0;
  sequences.forEach((seq, i) => {
    const len = seq.rollout_logprobs.length;
    if (seq.trainer_logprobs.length !== len) {
      throw new ValidationError(`sequences[${i}].trainer_logprobs`, [
        `sequences[${i}].trainer_logprobs: expected ${len} values, got ` +
        `${seq.trainer_logprobs.length}`,
      ]);
    }
    if (seq.loss_mask !== undefined && seq.loss_mask.length !== len) {
      throw new ValidationError(`sequences[${i}].loss_mask`, [
        `sequences[${i}].loss_mask: expected ${len} values, got ${seq.loss_mask.length}`,
      ]);
    }
    for (let t = 0; t < len; t++) {
      if (seq.loss_mask !== undefined && !seq.loss_mask[t]) continue;
      const a = seq.rollout_logprobs[t];
      const b = seq.trainer_logprobs[t];
      if (!Number.isFinite(a) || !Number.isFinite(b)) {
        const key = Number.isFinite(a) ? "trainer_logprobs" : "rollout_logprobs";
        throw new ValidationError(`sequences[${i}].${key}[${t}]`, [
          `sequences[${i}].${key}[${t}]: must be a finite logprob`,
        ]);
      }
      const pa = Math.exp(a);
      const pb = Math.exp(b);
      prob.add(pa, pb);
      logp.add(a, b);
      dp.add(Math.abs(pa - pb));
      dl.add(Math.abs(a - b));
      const x = b - a;
      sumK3 += Math.expm1(x) - x;
      sumK1 -= x;
      const w = Math.exp(x); // importance weight π_trainer / π_rollout of the token
      sumW += w;
      sumW2 += w * w;
    }
  });
  const n = prob.n; // every counted token entered both correlations
  const d = n || 1;
  return {
    tokens: n,
    pearson_prob: prob.value(),
    pearson_logprob: logp.value(),
    mean_abs_dp: dp.mean(d),
    max_abs_dp: dp.max,
    mean_abs_dlogprob: dl.mean(d),
    max_abs_dlogprob: dl.max,
    k3_kl: sumK3 / d,
    k1_kl: sumK1 / d,
    ess: n > 0 && sumW2 > 0 ? (sumW * sumW) / (n * sumW2) : 1,
  };
}

/**
 * The thresholds a healthy engine–trainer pair stays within (mismatch monitor, UI charts,
 * demo). Sources: LEGO-RL's probability correlation ≥ 0.99; verl's `rollout_probs_diff_mean`
 * (mean |Δp|) healthy below 0.005; IcePop's [0.5, 2] band on the token ratio, i.e. |Δlogprob| ≤
 * ln 2; a k3 KL of 1e-3 nats per token (a bf16 engine against an fp32 trainer stays well
 * below); an ESS of 0.9 (the weights are near-uniform).
 */
export const MISMATCH_THRESHOLDS = {
  pearson_prob_min: 0.99,
  mean_abs_dp_max: 0.005,
  max_abs_dlogprob_max: Math.LN2,
  k3_kl_max: 1e-3,
  ess_min: 0.9,
} as const;

/** Thresholds of {@link mismatchBreaches} (defaults: {@link MISMATCH_THRESHOLDS}). */
export type MismatchThresholds = { -readonly [K in keyof typeof MISMATCH_THRESHOLDS]: number };

/**
 * Which thresholds the metrics break, one sentence each (empty: healthy). A correlation that
 * is undefined (null: too few tokens or a constant side) breaks nothing.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { alignmentMetrics, mismatchBreaches } from "./alignment.ts";
 * const healthy = alignmentMetrics([{
 *   rollout_logprobs: [-0.1, -2.0, -0.7], trainer_logprobs: [-0.1001, -2.0, -0.7002],
 * }]);
 * assert.deepEqual(mismatchBreaches(healthy), []);
 * const off = alignmentMetrics([{
 *   rollout_logprobs: [-0.1, -2.0, -0.7], trainer_logprobs: [-0.9, -1.1, -0.2],
 * }]);
 * assert.ok(mismatchBreaches(off).some((b) => b.startsWith("mean |Δp|")));
 * ```
 */
export function mismatchBreaches(
  m: Pick<
    AlignmentMetrics,
    "pearson_prob" | "mean_abs_dp" | "max_abs_dlogprob" | "k3_kl" | "ess" | "tokens"
  >,
  thresholds: Partial<MismatchThresholds> = {},
): string[] {
  const t = { ...MISMATCH_THRESHOLDS, ...thresholds };
  if (m.tokens === 0) return [];
  const out: string[] = [];
  const f = (x: number) => (Math.abs(x) >= 0.01 ? x.toFixed(4) : x.toExponential(2));
  if (m.pearson_prob !== null && m.pearson_prob < t.pearson_prob_min) {
    out.push(`Pearson(p) ${m.pearson_prob.toFixed(4)} < ${t.pearson_prob_min}`);
  }
  if (m.mean_abs_dp > t.mean_abs_dp_max) {
    out.push(`mean |Δp| ${f(m.mean_abs_dp)} > ${t.mean_abs_dp_max}`);
  }
  if (m.max_abs_dlogprob > t.max_abs_dlogprob_max) {
    out.push(`max |Δlogprob| ${f(m.max_abs_dlogprob)} > ${f(t.max_abs_dlogprob_max)}`);
  }
  if (m.k3_kl > t.k3_kl_max) out.push(`k3 KL ${f(m.k3_kl)} > ${t.k3_kl_max}`);
  if (m.ess < t.ess_min) out.push(`ESS ${m.ess.toFixed(4)} < ${t.ess_min}`);
  return out;
}

/**
 * {@link alignmentMetrics} over samples and the trainer's logprobs for each of them (one array
 * per sample, aligned with `tokens`), on trained tokens only.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { alignmentFromSamples } from "./alignment.ts";
 * assert.equal(alignmentFromSamples([], []).tokens, 0);
 * ```
 */
export function alignmentFromSamples(
  samples: readonly Pick<Sample, "rollout_logprobs" | "loss_mask">[],
  trainerLogprobs: readonly ArrayLike<number>[],
): AlignmentMetrics {
  if (trainerLogprobs.length !== samples.length) {
    throw new ValidationError("trainerLogprobs", [
      `trainerLogprobs: expected one array per sample (${samples.length}), got ` +
      `${trainerLogprobs.length}`,
    ]);
  }
  return alignmentMetrics(samples.map((s, i) => ({
    rollout_logprobs: s.rollout_logprobs,
    trainer_logprobs: trainerLogprobs[i],
    loss_mask: s.loss_mask,
  })));
}
