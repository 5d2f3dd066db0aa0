/**
 * The `buffer_substitute` strategy: `prefix_merge`, plus a repair where the text-level prefix
 * holds but the ids differ: find the re-tokenized response `â_i` inside `prompt_{i+1}` so that
 * the sampled `a_i` can stand in for it. The result is off-policy by construction (`a_{i+1}` was
 * sampled after `â_i`, not `a_i`); it exists to measure that harm.
 *
 * @module
 */
import type { ModelRequest } from "../schema.ts";
import type { BreakDiagnosis } from "./schema.ts";
import { extendPlan, type SamplePlan } from "./build.ts";
import { type DecodeFn, diagnoseBreak } from "./diagnose.ts";
import { lastCall, type LinearPlan, planLinear } from "./prefix_merge.ts";
import { startsWith } from "./token_seq.ts";
import type { ValidCall } from "./validate.ts";

/** A `buffer_substitute` repair: the call's real prompt and where its substitute lives. */
export interface SubstitutionPlan {
  call: ValidCall;
  plan: SamplePlan;
  /** Offset in the plan where the call's response starts (its substituted prompt ends). */
  responseStart: number;
  /** Why exact merging failed there (normally `token_boundary`). */
  diagnosis: BreakDiagnosis;
}

/** The samples of a rollout under `buffer_substitute`, its remaining breaks and the repairs. */
export interface BufferSubstitutePlan extends LinearPlan {
  substitutions: SubstitutionPlan[];
}

/**
 * Plans a rollout's calls (seq order) like `prefix_merge`, except that a call whose prompt holds
 * an earlier call's response re-tokenized (same text, other ids) extends that call's sample with
 * the sampled ids standing in: the sample is marked off-policy and the repair is recorded with
 * the diagnosis of the break it hid.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { planBufferSubstitute } from "./buffer_substitute.ts";
 * import type { ValidCall } from "./validate.ts";
 * const call = (seq: number, prompt: number[], response: number[]): ValidCall => ({
 *   seq, attempt_id: "a", rollout_id: "r", request: {
 *     flavor: "generate", request: {}, prompt_token_ids: Uint32Array.from(prompt),
 *     response_token_ids: Uint32Array.from(response),
 *     response_logprobs: new Float32Array(response.length), policy_version: 0,
 *     finish_reason: null, upstream: null, latency_ms: 0, retry_count: 0, http_status: 200,
 *     error: null, segment: null, mode: "faithful", client_disconnected: false,
 *   },
 * });
 * const decode = (ids: Uint32Array) =>
 *   [...ids].map((id) => id === 300 ? "ab" : String.fromCharCode(id)).join("");
 * // Seq 1 sampled "ab" as one id; seq 2's prompt spells it as two.
 * const plan = planBufferSubstitute([call(1, [120], [300]), call(2, [120, 97, 98, 33], [46])], {
 *   decode,
 * });
 * assert.equal(plan.plans.length, 1);
 * assert.equal(plan.plans[0].offPolicy, true);
 * assert.equal(plan.substitutions[0].diagnosis.reason, "token_boundary");
 * ```
 */
export function planBufferSubstitute(
  calls: readonly ValidCall[],
  options: { decode: DecodeFn; evidenceTokens?: number },
): BufferSubstitutePlan {
  const { decode } = options;
  const substitutions: SubstitutionPlan[] = [];
  const repair = (open: readonly SamplePlan[], call: ValidCall): SamplePlan | null => {
    const p = call.request.prompt_token_ids;
    for (let j = open.length - 1; j >= 0; j--) {
      const prev = lastCall(open[j]);
      const k = findRetokenizedResponse(p, prev.request, decode);
      if (k < 0) continue;
      const plan = open[j];
      extendPlan(plan, p.subarray(prev.request.prompt_token_ids.length + k), call);
      plan.offPolicy = true;
      substitutions.push({
        call,
        plan,
        responseStart: plan.responseStarts[plan.responseStarts.length - 1],
        diagnosis: diagnoseBreak(prev, call, options),
      });
      return plan;
    }
    return null;
  };
  return { ...planLinear(calls, { ...options, repair }), substitutions };
}

/**
 * Number of ids of `prompt` after `prev.prompt_token_ids` that decode to exactly the text of
 * `prev`'s sampled response, or -1 when the prompt does not repeat the earlier prompt exactly or
 * the response text is not found right after it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { findRetokenizedResponse } from "./buffer_substitute.ts";
 * const decode = (ids: Uint32Array) =>
 *   [...ids].map((id) => id === 300 ? "ab" : String.fromCharCode(id)).join("");
 * const prev = {
 *   prompt_token_ids: Uint32Array.of(120), response_token_ids: Uint32Array.of(300),
 * };
 * // The next prompt spells the response "ab" as two ids (97, 98) then adds "!".
 * assert.equal(findRetokenizedResponse(Uint32Array.of(120, 97, 98, 33), prev, decode), 2);
 * ```
 */
export function findRetokenizedResponse(
  prompt: Uint32Array,
  prev: Pick<ModelRequest, "prompt_token_ids" | "response_token_ids">,
  decode: DecodeFn,
): number {
  const base = prev.prompt_token_ids.length;
  if (!startsWith(prompt, prev.prompt_token_ids)) return -1;
  const target = decode(prev.response_token_ids);
  if (target.length === 0) return -1;
  const rest = prompt.subarray(base);
  // Every id decodes to at least one character, so the span has at most target.length ids.
  let lo = 1;
  let hi = Math.min(rest.length, target.length + 8);
  if (hi < 1 || decode(rest.subarray(0, hi)).length < target.length) return -1;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (decode(rest.subarray(0, mid)).length >= target.length) hi = mid;
    else lo = mid + 1;
  }
  for (let k = lo; k <= Math.min(rest.length, lo + 3); k++) {
    const text = decode(rest.subarray(0, k));
    if (text === target) return k;
    if (text.length > target.length + 4) break;
  }
  return -1;
}
