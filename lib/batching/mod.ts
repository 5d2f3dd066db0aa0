/**
 * Batching of reins (SPEC §7): B_train rows that keep `(rollout_id, group_id)`, optimizer steps
 * that never split a rollout, data-parallel balancing by workload (Karmarkar–Karp or LPT on
 * a·L + L²), and micro-batch packing under a token budget with position resets, or with a
 * shared prompt stored once per micro-batch (`packSharedPrefix`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { planTrainingBatch } from "./mod.ts";
 * const s = (rollout_id: string, n: number) => ({
 *   rollout_id, group_id: "g", reward: 1, tokens: new Uint32Array(n).fill(3),
 *   loss_mask: new Uint8Array(n).fill(1), rollout_logprobs: new Float32Array(n).fill(-1),
 *   advantage: new Float32Array(n).fill(0.5), policy_version: 0,
 *   provenance: { request_seqs: [1], split_reason: null, strategy: "prefix_merge" as const,
 *     off_policy: false, response_starts: [0] },
 * });
 * const plan = planTrainingBatch([s("a", 8), s("b", 6)], {
 *   normalization: { mode: "token_mean" }, micro_token_budget: 16,
 * });
 * assert.equal(plan.stats.micro_batches, 1);
 * ```
 *
 * @module
 */
export * from "./flatten.ts";
export * from "./balance.ts";
export * from "./steps.ts";
export * from "./packing.ts";
export * from "./shared_prefix.ts";
export * from "./plan.ts";
export * from "./schema.ts";
