/**
 * Sample assembly: turns one rollout's captured model calls into training samples.
 *
 * Retry dedup, the four merge strategies of SPEC §5 (`per_call`, `prefix_merge` — the default,
 * `buffer_substitute` — off-policy, for measurement only, `tree`), a diagnosis for every break
 * of exact prefix merging, and metrics (samples per rollout, break reasons, tokens).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { assembleRollout } from "./mod.ts";
 * const call = (seq: number, prompt: number[], response: number[]) => ({
 *   type: "model_request" as const, seq, rollout_id: "r1", attempt_id: "a1",
 *   event_key: null, created_at: 0, payload: {
 *     flavor: "generate" as const, request: {}, prompt_token_ids: Uint32Array.from(prompt),
 *     response_token_ids: Uint32Array.from(response),
 *     response_logprobs: new Float32Array(response.length), policy_version: 0,
 *     finish_reason: "stop", upstream: null, latency_ms: 1, retry_count: 0, http_status: 200,
 *     error: null, segment: null, mode: "faithful" as const, client_disconnected: false,
 *   },
 * });
 * const { samples, breaks, metrics } = assembleRollout(
 *   [call(1, [1, 2], [3]), call(2, [1, 2, 3, 4], [5]), call(3, [9], [8])],
 *   { strategy: "prefix_merge" },
 * );
 * assert.equal(samples.length, 2);
 * assert.equal(breaks[0].reason, "branch"); // the third prompt shares no token
 * assert.equal(metrics.tokens_trained, 3);
 * ```
 *
 * @module
 */
export {
  type AssembleOptions,
  assembleRollout,
  assembleRollouts,
  type AssemblyResult,
  type Substitution,
} from "./assemble.ts";
export {
  type DecodeFn,
  diagnoseBreak,
  type DiagnosedCall,
  type DiagnoseOptions,
} from "./diagnose.ts";
export {
  type BufferSubstitutePlan,
  findRetokenizedResponse,
  planBufferSubstitute,
  type SubstitutionPlan,
} from "./buffer_substitute.ts";
export { type CallSelection, selectCalls } from "./dedup.ts";
export { emptyBreakCounts, emptyDropCounts, rolloutMetrics, summarizeAssembly } from "./metrics.ts";
export {
  type LinearPlan,
  type LinearPlanOptions,
  type LinearRepair,
  planLinear,
} from "./prefix_merge.ts";
export { planPerCall } from "./per_call.ts";
export {
  applyCallSampling,
  type MaskedCall,
  type SampledCall,
  untrainableSampling,
} from "./sampling.ts";
export { buildTree, treeDepths, treePath, treePathNodes, type TreeResult } from "./tree.ts";
export { collectCalls, validateModelRequest, type ValidCall } from "./validate.ts";
export { commonPrefixConcat, sameIds, startsWith, startsWithConcat } from "./token_seq.ts";
export * from "./schema.ts";
