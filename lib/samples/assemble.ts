/**
 * Sample assembly for one rollout: validate → select calls (attempts, failures, retry dedup) →
 * merge with the chosen strategy → diagnose every break → metrics.
 *
 * @module
 */
import {
  type MergeStrategy,
  parseOrThrow,
  type RolloutEvent,
  type Sample,
  ValidationError,
} from "../schema.ts";
import {
  type AssembleConfig,
  AssembleConfigSchema,
  type AssemblySummary,
  type BreakDiagnosis,
  type CallPlacement,
  type DroppedCall,
  type RolloutAssemblyMetrics,
} from "./schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { materialize, type SampleMeta, type SamplePlan } from "./build.ts";
import { selectCalls } from "./dedup.ts";
import type { DecodeFn } from "./diagnose.ts";
import { rolloutMetrics, summarizeAssembly } from "./metrics.ts";
import { planPerCall } from "./per_call.ts";
import { planLinear } from "./prefix_merge.ts";
import { planBufferSubstitute } from "./buffer_substitute.ts";
import { buildTree } from "./tree.ts";
import { collectCalls } from "./validate.ts";
import { applyCallSampling, type MaskedCall } from "./sampling.ts";

/** Options of {@link assembleRollout}: the plain config plus an optional decoder. */
export interface AssembleOptions extends AssembleConfig {
  /** Text decoder for diagnosis and `buffer_substitute` (overrides `tokenizer.decode`). */
  decode?: DecodeFn;
  /** A tokenizer: its `decode` and `vocabSize` are used when not given otherwise. */
  tokenizer?: Pick<ChatTokenizer, "decode" | "vocabSize">;
}

/** A `buffer_substitute` repair, kept for measuring its harm. */
export interface Substitution {
  seq: number;
  sample_index: number;
  /** The prompt the response was really sampled on. */
  real_prompt: Uint32Array;
  /** The context training conditions it on (a view into the sample's tokens). */
  substituted_prompt: Uint32Array;
  diagnosis: BreakDiagnosis;
}

/** Everything assembly produced for one rollout. */
export interface AssemblyResult {
  rollout_id: string;
  group_id: string;
  strategy: MergeStrategy;
  samples: Sample[];
  /** Where each used call's response landed (seq order). */
  calls: CallPlacement[];
  /** Calls left out, each with its reason (seq order). */
  dropped: DroppedCall[];
  /** Where exact prefix merging breaks, and why (independent of the strategy). */
  breaks: BreakDiagnosis[];
  substitutions: Substitution[];
  /**
   * Calls whose response tokens are context only: sampled with a truncation (top-p/top-k/min-p)
   * or greedily, so their behaviour logprobs are not the policy's (lib/samples/sampling.ts).
   */
  masked_calls: MaskedCall[];
  metrics: RolloutAssemblyMetrics;
}

/** The last reward named "reward", else the last reward of any name. */
function lastRewardOf(events: readonly RolloutEvent[]): number | undefined {
  let main: { seq: number; value: number } | undefined;
  let any: { seq: number; value: number } | undefined;
  for (const e of events) {
    if (e.type !== "reward") continue;
    const entry = { seq: e.seq, value: e.payload.value };
    if (!any || e.seq > any.seq) any = entry;
    if (e.payload.name === "reward" && (!main || e.seq > main.seq)) main = entry;
  }
  return (main ?? any)?.value;
}

function finalAttemptOf(events: readonly RolloutEvent[]): string | null {
  let best: RolloutEvent | null = null;
  for (const e of events) if (!best || e.seq > best.seq) best = e;
  return best ? best.attempt_id : null;
}

/**
 * Turns one rollout's events (model_request events, optionally with reward and other events)
 * into training samples, with provenance, break diagnoses and metrics. Pure: no I/O.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { assembleRollout } from "./assemble.ts";
 * const call = (seq: number, prompt: number[], response: number[]) => ({
 *   type: "model_request" as const, seq, rollout_id: "r1", attempt_id: "a1",
 *   event_key: null, created_at: 0, payload: {
 *     flavor: "generate" as const, request: {}, prompt_token_ids: Uint32Array.from(prompt),
 *     response_token_ids: Uint32Array.from(response),
 *     response_logprobs: new Float32Array(response.length).fill(-0.5), policy_version: 3,
 *     finish_reason: "stop", upstream: null, latency_ms: 1, retry_count: 0, http_status: 200,
 *     error: null, segment: null, mode: "faithful" as const, client_disconnected: false,
 *   },
 * });
 * const result = assembleRollout([call(1, [1, 2], [3, 4]), call(2, [1, 2, 3, 4, 5], [6])]);
 * assert.equal(result.samples.length, 1); // the second prompt extends the first call exactly
 * assert.deepEqual(result.samples[0].loss_mask, new Uint8Array([0, 0, 1, 1, 0, 1]));
 * ```
 */
export function assembleRollout(
  events: readonly RolloutEvent[],
  options: AssembleOptions = {},
): AssemblyResult {
  const { decode: decodeOption, tokenizer, ...plain } = options;
  const config = parseOrThrow(AssembleConfigSchema, plain, "options");
  if (decodeOption !== undefined && typeof decodeOption !== "function") {
    throw new ValidationError("options.decode", ["options.decode: must be a function"]);
  }
  const decode = decodeOption ??
    (tokenizer ? (ids: Uint32Array) => tokenizer.decode(ids) : undefined);
  if (config.strategy === "buffer_substitute" && !decode) {
    throw new ValidationError("options.decode", [
      "options.decode: buffer_substitute compares decoded texts; pass a tokenizer or decode",
    ]);
  }
  const vocabSize = config.vocab_size ?? tokenizer?.vocabSize;
  const all = collectCalls(events, vocabSize);
  const rolloutId = events.length > 0 ? events[0].rollout_id : (config.rollout_id ?? "");
  if (config.rollout_id !== undefined && events.length > 0 && config.rollout_id !== rolloutId) {
    throw new ValidationError("options.rollout_id", [
      `options.rollout_id: "${config.rollout_id}" does not match the events' "${rolloutId}"`,
    ]);
  }
  const groupId = config.group_id ?? rolloutId;
  const reward = config.reward ?? lastRewardOf(events) ?? 0;
  const finalAttempt = config.attempts === "final" ? finalAttemptOf(events) : null;
  const { used, dropped } = selectCalls(all, finalAttempt);
  const meta: SampleMeta = {
    rollout_id: rolloutId,
    group_id: groupId,
    reward,
    strategy: config.strategy,
  };
  const linearOptions = { decode, evidenceTokens: config.evidence_tokens };
  const exact = planLinear(used, linearOptions);

  let samples: Sample[];
  let placements: CallPlacement[];
  const substitutions: Substitution[] = [];
  if (config.strategy === "tree") {
    const tree = buildTree(used, meta);
    samples = used.length > 0 ? [tree.sample] : [];
    placements = tree.placements;
  } else {
    let plans: SamplePlan[];
    if (config.strategy === "per_call") plans = planPerCall(used);
    else if (config.strategy === "prefix_merge") plans = exact.plans;
    else {
      // Checked above: buffer_substitute cannot compare texts without a decoder.
      const sub = planBufferSubstitute(used, { ...linearOptions, decode: decode! });
      plans = sub.plans;
      for (const s of sub.substitutions) {
        substitutions.push({
          seq: s.call.seq,
          sample_index: plans.indexOf(s.plan),
          real_prompt: s.call.request.prompt_token_ids,
          substituted_prompt: new Uint32Array(0),
          diagnosis: s.diagnosis,
        });
      }
    }
    samples = plans.map((plan) => materialize(plan, meta));
    placements = [];
    plans.forEach((plan, index) => {
      plan.calls.forEach((call, k) => {
        placements.push({
          seq: call.seq,
          sample_index: index,
          response_start: plan.responseStarts[k],
          response_length: call.request.response_token_ids.length,
          prompt_length: call.request.prompt_token_ids.length,
        });
      });
    });
    placements.sort((a, b) => a.seq - b.seq);
    for (const s of substitutions) {
      const at = placements.find((p) => p.seq === s.seq)!;
      s.substituted_prompt = samples[s.sample_index].tokens.subarray(0, at.response_start);
    }
  }
  const maskedCalls = applyCallSampling(samples, placements, used);
  const metrics = rolloutMetrics({
    rollout_id: rolloutId,
    strategy: config.strategy,
    calls: all.length,
    used,
    dropped,
    samples,
    breaks: exact.breaks,
    substitutions: substitutions.length,
  });
  return {
    rollout_id: rolloutId,
    group_id: groupId,
    strategy: config.strategy,
    samples,
    calls: placements,
    dropped,
    breaks: exact.breaks,
    substitutions,
    masked_calls: maskedCalls,
    metrics,
  };
}

/**
 * Assembles many rollouts (one event list each) and summarises their metrics.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { assembleRollouts } from "./assemble.ts";
 * const { results, summary } = assembleRollouts([]);
 * assert.equal(results.length + summary.rollouts, 0);
 * ```
 */
export function assembleRollouts(
  rollouts: Iterable<readonly RolloutEvent[]>,
  options: AssembleOptions = {},
): { results: AssemblyResult[]; summary: AssemblySummary } {
  const results: AssemblyResult[] = [];
  for (const events of rollouts) results.push(assembleRollout(events, options));
  return { results, summary: summarizeAssembly(results.map((r) => r.metrics)) };
}
