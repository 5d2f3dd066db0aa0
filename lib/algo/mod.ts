/**
 * RL math of reins (docs/architecture.md#algorithms): GRPO advantages at the rollout or sample
 * level, loss normalization as per-token weights, reference policy losses, and rollout–training
 * alignment metrics. Pure functions over {@link Sample}s; no I/O.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { computeAdvantages, computeLossWeights } from "./mod.ts";
 * const s = (rollout_id: string, reward: number) => ({
 *   rollout_id, group_id: "g", reward, tokens: new Uint32Array([1, 2, 3]),
 *   loss_mask: new Uint8Array([0, 1, 1]), rollout_logprobs: new Float32Array([0, -1, -1]),
 *   policy_version: 0,
 *   provenance: { request_seqs: [1], split_reason: null, strategy: "prefix_merge" as const,
 *     off_policy: false, response_starts: [1] },
 * });
 * const adv = computeAdvantages([s("a", 1), s("b", 0)], { level: "rollout" });
 * const { samples } = computeLossWeights(adv.samples, { mode: "rollout_token_mean" });
 * assert.deepEqual(samples[0].loss_weight, new Float32Array([0, 0.25, 0.25]));
 * ```
 *
 * @module
 */
import type { Sample } from "../schema.ts";
export type { Sample };
export * from "./advantages.ts";
export * from "./normalization.ts";
export * from "./losses.ts";
export * from "./correction.ts";
export * from "./alignment.ts";
export * from "./calls.ts";
export { assertSamples, type SampleRequirements, trainedTokens } from "./validate.ts";
export * from "./schema.ts";
