/**
 * Sample plans and their one-shot materialisation: a plan is a list of views (`subarray`s of
 * the calls' own arrays); the sample's arrays are allocated once, at their final length.
 *
 * @module
 */
import type { BreakReason, MergeStrategy, Sample } from "../schema.ts";
import type { BreakDiagnosis } from "./schema.ts";
import type { ValidCall } from "./validate.ts";

/** A run of tokens in a planned sample: context (`logprobs` null) or a sampled response. */
export interface Piece {
  ids: Uint32Array;
  logprobs: Float32Array | null;
}

/** A linear sample under construction (nothing copied yet). */
export interface SamplePlan {
  pieces: Piece[];
  /** Total tokens planned so far. */
  length: number;
  /** The calls merged, in order. */
  calls: ValidCall[];
  responseStarts: number[];
  /** Why this sample was started (null: the rollout's first sample, or per_call). */
  split: BreakDiagnosis | null;
  offPolicy: boolean;
}

/** Starts a plan holding one call's `prompt ∥ response`. */
export function planOf(call: ValidCall, split: BreakDiagnosis | null): SamplePlan {
  const p = call.request.prompt_token_ids;
  const r = call.request.response_token_ids;
  return {
    pieces: [{ ids: p, logprobs: null }, { ids: r, logprobs: call.request.response_logprobs }],
    length: p.length + r.length,
    calls: [call],
    responseStarts: [p.length],
    split,
    offPolicy: false,
  };
}

/** Appends context `delta` then `call`'s response to a plan. */
export function extendPlan(plan: SamplePlan, delta: Uint32Array, call: ValidCall): void {
  if (delta.length > 0) plan.pieces.push({ ids: delta, logprobs: null });
  plan.length += delta.length;
  plan.responseStarts.push(plan.length);
  const r = call.request.response_token_ids;
  plan.pieces.push({ ids: r, logprobs: call.request.response_logprobs });
  plan.length += r.length;
  plan.calls.push(call);
}

/** Identity and outcome fields every sample of a rollout shares. */
export interface SampleMeta {
  rollout_id: string;
  group_id: string;
  reward: number;
  strategy: MergeStrategy;
}

/**
 * Copies a plan into a {@link Sample}, allocating each array once at its final length.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { materialize, planOf } from "./build.ts";
 * import type { ValidCall } from "./validate.ts";
 * const call = {
 *   seq: 1, attempt_id: "a", rollout_id: "r", request: {
 *     flavor: "generate", request: {}, prompt_token_ids: Uint32Array.of(1, 2),
 *     response_token_ids: Uint32Array.of(3), response_logprobs: Float32Array.of(-0.5),
 *     policy_version: 0, finish_reason: null, upstream: null, latency_ms: 0, retry_count: 0,
 *     http_status: 200, error: null, segment: null, mode: "faithful", client_disconnected: false,
 *   },
 * } satisfies ValidCall;
 * const sample = materialize(planOf(call, null), {
 *   rollout_id: "r", group_id: "g", reward: 1, strategy: "prefix_merge",
 * });
 * assert.deepEqual(sample.loss_mask, new Uint8Array([0, 0, 1]));
 * ```
 */
export function materialize(plan: SamplePlan, meta: SampleMeta): Sample {
  const tokens = new Uint32Array(plan.length);
  const mask = new Uint8Array(plan.length);
  const logprobs = new Float32Array(plan.length);
  let at = 0;
  for (const piece of plan.pieces) {
    tokens.set(piece.ids, at);
    if (piece.logprobs) {
      mask.fill(1, at, at + piece.ids.length);
      logprobs.set(piece.logprobs, at);
    }
    at += piece.ids.length;
  }
  let version = Infinity;
  for (const call of plan.calls) version = Math.min(version, call.request.policy_version);
  const splitReason: BreakReason | null = plan.split ? plan.split.reason : null;
  return {
    rollout_id: meta.rollout_id,
    group_id: meta.group_id,
    tokens,
    loss_mask: mask,
    rollout_logprobs: logprobs,
    reward: meta.reward,
    policy_version: version,
    provenance: {
      request_seqs: plan.calls.map((c) => c.seq),
      split_reason: splitReason,
      strategy: meta.strategy,
      off_policy: plan.offPolicy,
      response_starts: plan.responseStarts.slice(),
    },
  };
}
