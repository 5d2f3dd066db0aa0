/**
 * Loss normalization as per-token weights (SPEC §6).
 *
 * Every mode is expressed as a weight w on each trained token so that the batch loss is
 * Σ w·ℓ. The weights are computed once, on the whole batch (one optimizer step), before the
 * batch is split into ranks and micro-batches; each split then only sums its share, and the
 * gradient does not depend on how the batch was cut.
 *
 * With R rollouts, N = Σ_ρ N_ρ samples and L_{ρ,j} trained tokens in sample j of rollout ρ:
 *
 * | mode                  | w on each trained token of sample (ρ, j) |
 * | --------------------- | ---------------------------------------- |
 * | `token_mean`          | 1 / Σ_ρ Σ_j L_{ρ,j}                      |
 * | `seq_mean_token_mean` | 1 / (N · L_{ρ,j})                        |
 * | `seq_mean_token_sum`  | 1 / N                                    |
 * | `seq_sum_const`       | 1 / (N · C)                              |
 * | `rollout_token_mean`  | 1 / (R · Σ_j L_{ρ,j})                    |
 *
 * Context tokens (loss_mask 0) get weight 0. Samples without any trained token contribute
 * nothing in any mode, so they are not counted in N, and rollouts without any trained token are
 * not counted in R (counting them would only shrink everybody else's weight).
 *
 * @module
 */
import { type NormalizationMode, parseOrThrow, type Sample } from "../schema.ts";
import { type NormalizationOptions, NormalizationOptionsSchema } from "./schema.ts";
import { assertSamples, trainedTokens } from "./validate.ts";

/** The per-sample weights of a normalization, in float64, before they are written to tokens. */
export interface LossWeightPlan {
  mode: NormalizationMode;
  /** Weight of each trained token of `samples[i]` (float64; 0 for samples without any). */
  sample_weights: number[];
  /** Trained tokens per sample. */
  sample_tokens: number[];
  /** Σ over each rollout's trained tokens of their weight (float64), by rollout id. */
  rollout_shares: Record<string, number>;
  /** The denominators' ingredients. */
  tokens: number;
  samples: number;
  rollouts: number;
  constant: number | null;
  /** Σ of all token weights (1 for every mode except `seq_mean_token_sum`/`seq_sum_const`). */
  total_weight: number;
}

/** What {@link computeLossWeights} returns. */
export interface LossWeightResult {
  /** Copies of the samples with `loss_weight` filled (0 on context tokens). */
  samples: Sample[];
  plan: LossWeightPlan;
}

/**
 * Plans the per-token weights of `samples` without writing them: exact float64 values, for
 * tests, notebooks and figures.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { planLossWeights } from "./normalization.ts";
 * const s = (rollout_id: string, trained: number) => ({
 *   rollout_id, group_id: "g", reward: 0, tokens: new Uint32Array(trained),
 *   loss_mask: new Uint8Array(trained).fill(1), rollout_logprobs: new Float32Array(trained),
 *   policy_version: 0,
 *   provenance: { request_seqs: [], split_reason: null, strategy: "prefix_merge" as const,
 *     off_policy: false, response_starts: [] },
 * });
 * // Figure 5: A = {50, 100}, B = {30, 30, 30}, C = {40}.
 * const batch = [s("A", 50), s("A", 100), s("B", 30), s("B", 30), s("B", 30), s("C", 40)];
 * assert.equal(planLossWeights(batch, { mode: "rollout_token_mean" }).sample_weights[0], 1 / 450);
 * assert.equal(planLossWeights(batch, { mode: "token_mean" }).sample_weights[0], 1 / 280);
 * ```
 */
export function planLossWeights(
  samples: readonly Sample[],
  options: NormalizationOptions = {},
): LossWeightPlan {
  const opts = parseOrThrow(NormalizationOptionsSchema, options, "options");
  assertSamples(samples);
  const sampleTokens = samples.map(trainedTokens);
  const rolloutTokens = new Map<string, number>();
  let tokens = 0;
  let nSamples = 0;
  samples.forEach((s, i) => {
    const L = sampleTokens[i];
    tokens += L;
    if (L > 0) nSamples += 1;
    rolloutTokens.set(s.rollout_id, (rolloutTokens.get(s.rollout_id) ?? 0) + L);
  });
  let nRollouts = 0;
  for (const L of rolloutTokens.values()) if (L > 0) nRollouts += 1;
  const C = opts.constant ?? null;

  const weights = samples.map((s, i) => {
    const L = sampleTokens[i];
    if (L === 0) return 0;
    switch (opts.mode) {
      case "token_mean":
        return 1 / tokens;
      case "seq_mean_token_mean":
        return 1 / (nSamples * L);
      case "seq_mean_token_sum":
        return 1 / nSamples;
      case "seq_sum_const":
        return 1 / (nSamples * (C as number));
      case "rollout_token_mean":
        return 1 / (nRollouts * (rolloutTokens.get(s.rollout_id) as number));
    }
  });

  const shares: Record<string, number> = {};
  let total = 0;
  samples.forEach((s, i) => {
    const part = weights[i] * sampleTokens[i];
    shares[s.rollout_id] = (shares[s.rollout_id] ?? 0) + part;
    total += part;
  });
  return {
    mode: opts.mode,
    sample_weights: weights,
    sample_tokens: sampleTokens,
    rollout_shares: shares,
    tokens,
    samples: nSamples,
    rollouts: nRollouts,
    constant: C,
    total_weight: total,
  };
}

/**
 * Computes the per-token loss weights of a whole batch and writes them into copies of the
 * samples (`loss_weight`, a Float32Array with 0 on context tokens).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { computeLossWeights } from "./normalization.ts";
 * const sample = {
 *   rollout_id: "r", group_id: "g", reward: 1, tokens: new Uint32Array([5, 6, 7]),
 *   loss_mask: new Uint8Array([0, 1, 1]), rollout_logprobs: new Float32Array([0, -1, -2]),
 *   policy_version: 0,
 *   provenance: { request_seqs: [1], split_reason: null, strategy: "prefix_merge" as const,
 *     off_policy: false, response_starts: [1] },
 * };
 * const { samples } = computeLossWeights([sample], { mode: "token_mean" });
 * assert.deepEqual(samples[0].loss_weight, new Float32Array([0, 0.5, 0.5]));
 * ```
 */
export function computeLossWeights(
  samples: readonly Sample[],
  options: NormalizationOptions = {},
): LossWeightResult {
  const plan = planLossWeights(samples, options);
  const out = samples.map((s, i) => {
    const w = plan.sample_weights[i];
    const weights = new Float32Array(s.tokens.length);
    for (let t = 0; t < weights.length; t++) if (s.loss_mask[t]) weights[t] = w;
    return { ...s, loss_weight: weights };
  });
  return { samples: out, plan };
}

/**
 * Each rollout's share of the gradient: Σ of `loss_weight` over its trained tokens, summed in
 * float64 from the weights actually written on the samples.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { computeLossWeights, rolloutShares } from "./normalization.ts";
 * const s = (rollout_id: string, trained: number) => ({
 *   rollout_id, group_id: "g", reward: 0, tokens: new Uint32Array(trained),
 *   loss_mask: new Uint8Array(trained).fill(1), rollout_logprobs: new Float32Array(trained),
 *   policy_version: 0,
 *   provenance: { request_seqs: [], split_reason: null, strategy: "prefix_merge" as const,
 *     off_policy: false, response_starts: [] },
 * });
 * const { samples } = computeLossWeights([s("A", 10), s("B", 30)], { mode: "token_mean" });
 * const shares = rolloutShares(samples);
 * // float32 weights: equal up to rounding
 * assert.ok(Math.abs(shares.A - 0.25) < 1e-6 && Math.abs(shares.B - 0.75) < 1e-6);
 * ```
 */
export function rolloutShares(samples: readonly Sample[]): Record<string, number> {
  assertSamples(samples, { loss_weight: true });
  const shares: Record<string, number> = {};
  for (const s of samples) {
    let sum = 0;
    const w = s.loss_weight as Float32Array;
    for (let t = 0; t < w.length; t++) if (s.loss_mask[t]) sum += w[t];
    shares[s.rollout_id] = (shares[s.rollout_id] ?? 0) + sum;
  }
  return shares;
}
