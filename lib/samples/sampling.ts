/**
 * What each call's sampling means for training. The behaviour logprob a sampler reports is that
 * of the distribution it drew from: softmax(logits / temperature), renormalised over what a
 * truncation (top-p < 1, top-k > 0, min-p > 0) kept. The trainer can recompute the first
 * exactly (it divides the logits by the call's temperature: `Sample.temperatures`); the second
 * it cannot without replaying the truncation, and a token-level importance weight against a
 * truncated distribution is not the policy's. So:
 *
 * - a call at temperature τ ∉ {0, 1} gets τ on its response tokens (`temperatures`);
 * - a call sampled with a truncation, or greedily (τ = 0: a point mass, no density), is
 *   **masked**: its response tokens stay in the sample as context (the later calls were
 *   conditioned on them) but are not trained (`loss_mask` 0, behaviour logprob 0). The call is
 *   listed in `AssemblyResult.masked_calls`.
 *
 * @module
 */
import type { CallSampling, Sample } from "../schema.ts";
import type { CallPlacement } from "./schema.ts";
import type { ValidCall } from "./validate.ts";

/** Why a call's tokens are not trained, or null when they are. */
export function untrainableSampling(sampling: CallSampling | undefined): string | null {
  if (!sampling) return null;
  if (sampling.temperature === 0) return "greedy (temperature 0)";
  if (sampling.top_p < 1) return `top_p ${sampling.top_p} < 1`;
  if (sampling.top_k > 0) return `top_k ${sampling.top_k} > 0`;
  if (sampling.min_p > 0) return `min_p ${sampling.min_p} > 0`;
  return null;
}

/** What {@link applyCallSampling} reads of a call. */
export interface SampledCall {
  seq: number;
  request: Pick<ValidCall["request"], "sampling">;
}

/** A call whose response tokens were masked, with why. */
export interface MaskedCall {
  seq: number;
  reason: string;
}

/**
 * Applies each placed call's sampling to its sample in place: temperatures on response tokens
 * sampled at τ ≠ 1, and the mask on calls that cannot be trained (see the module doc). Returns
 * the masked calls.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import type { Sample } from "../schema.ts";
 * import { applyCallSampling } from "./sampling.ts";
 * const sample: Sample = {
 *   rollout_id: "r", group_id: "g", reward: 1, tokens: Uint32Array.of(1, 2, 3, 4),
 *   loss_mask: Uint8Array.of(0, 1, 0, 1), rollout_logprobs: Float32Array.of(0, -1, 0, -2),
 *   policy_version: 0,
 *   provenance: { request_seqs: [1, 2], split_reason: null, strategy: "prefix_merge",
 *     off_policy: false, response_starts: [1, 3] },
 * };
 * const call = (seq: number, temperature: number, top_p: number) => ({
 *   seq, request: { sampling: { temperature, top_p, top_k: 0, min_p: 0 } },
 * });
 * const masked = applyCallSampling([sample], [
 *   { seq: 1, sample_index: 0, response_start: 1, response_length: 1, prompt_length: 1 },
 *   { seq: 2, sample_index: 0, response_start: 3, response_length: 1, prompt_length: 3 },
 * ], [call(1, 0.7, 1), call(2, 1, 0.9)]);
 * assert.deepEqual(Array.from(sample.temperatures!), [1, Math.fround(0.7), 1, 1]);
 * assert.deepEqual(Array.from(sample.loss_mask), [0, 1, 0, 0]);
 * assert.deepEqual(masked, [{ seq: 2, reason: "top_p 0.9 < 1" }]);
 * ```
 */
export function applyCallSampling(
  samples: Sample[],
  placements: readonly CallPlacement[],
  calls: readonly SampledCall[],
): MaskedCall[] {
  const bySeq = new Map(calls.map((c) => [c.seq, c.request.sampling]));
  const masked: MaskedCall[] = [];
  for (const p of placements) {
    const sampling = bySeq.get(p.seq);
    if (!sampling) continue;
    const sample = samples[p.sample_index];
    const end = p.response_start + p.response_length;
    const reason = untrainableSampling(sampling);
    if (reason !== null) {
      sample.loss_mask.fill(0, p.response_start, end);
      sample.rollout_logprobs.fill(0, p.response_start, end);
      masked.push({ seq: p.seq, reason });
      continue;
    }
    if (sampling.temperature === 1) continue;
    sample.temperatures ??= new Float32Array(sample.tokens.length).fill(1);
    sample.temperatures.fill(sampling.temperature, p.response_start, end);
  }
  return masked;
}
