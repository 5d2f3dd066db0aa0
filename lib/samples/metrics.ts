/**
 * Assembly metrics: per rollout (samples, breaks by reason, tokens stored vs naive, trained
 * tokens) and summarised over many rollouts (samples per rollout, share of single-sample
 * rollouts — the paper reports mean 2.41 and 36% on its coding runs).
 *
 * @module
 */
import {
  type AssemblySummary,
  type BreakDiagnosis,
  type BreakReason,
  type BreakReasonCounts,
  BreakReasonSchema,
  type DroppedCall,
  type DropReasonCounts,
  DropReasonSchema,
  type MergeStrategy,
  type RolloutAssemblyMetrics,
  type Sample,
} from "../schema.ts";
import type { ValidCall } from "./validate.ts";

/**
 * Zero count for every break reason.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { emptyBreakCounts } from "./metrics.ts";
 * assert.equal(emptyBreakCounts().branch, 0);
 * ```
 */
export function emptyBreakCounts(): BreakReasonCounts {
  return Object.fromEntries(BreakReasonSchema.options.map((r) => [r, 0])) as BreakReasonCounts;
}

/**
 * Zero count for every drop reason.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { emptyDropCounts } from "./metrics.ts";
 * assert.equal(emptyDropCounts().retry_duplicate, 0);
 * ```
 */
export function emptyDropCounts(): DropReasonCounts {
  return Object.fromEntries(DropReasonSchema.options.map((r) => [r, 0])) as DropReasonCounts;
}

/** What {@link rolloutMetrics} reads. */
export interface MetricsInput {
  rollout_id: string;
  strategy: MergeStrategy;
  calls: number;
  used: readonly ValidCall[];
  dropped: readonly DroppedCall[];
  samples: readonly Sample[];
  breaks: readonly BreakDiagnosis[];
  substitutions: number;
}

/**
 * Metrics of one rollout's assembly.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { rolloutMetrics } from "./metrics.ts";
 * const m = rolloutMetrics({
 *   rollout_id: "r", strategy: "prefix_merge", calls: 0, used: [], dropped: [], samples: [],
 *   breaks: [], substitutions: 0,
 * });
 * assert.equal(m.samples, 0);
 * ```
 */
export function rolloutMetrics(input: MetricsInput): RolloutAssemblyMetrics {
  const dropped = emptyDropCounts();
  for (const d of input.dropped) dropped[d.reason]++;
  const reasons = emptyBreakCounts();
  for (const b of input.breaks) reasons[b.reason]++;
  let total = 0;
  let trained = 0;
  let offPolicy = 0;
  for (const s of input.samples) {
    total += s.tokens.length;
    const mask = s.loss_mask;
    for (let i = 0; i < mask.length; i++) trained += mask[i];
    if (s.provenance.off_policy) offPolicy++;
  }
  let naive = 0;
  for (const c of input.used) {
    naive += c.request.prompt_token_ids.length + c.request.response_token_ids.length;
  }
  return {
    rollout_id: input.rollout_id,
    strategy: input.strategy,
    calls: input.calls,
    calls_used: input.used.length,
    dropped,
    samples: input.samples.length,
    break_reasons: reasons,
    tokens_total: total,
    tokens_trained: trained,
    tokens_naive: naive,
    off_policy_samples: offPolicy,
    substitutions: input.substitutions,
  };
}

/**
 * Summarises many rollouts' metrics. Rollouts without any sample count in `rollouts` but not in
 * the samples-per-rollout mean or the single-sample share.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { summarizeAssembly } from "./metrics.ts";
 * assert.equal(summarizeAssembly([]).rollouts, 0);
 * ```
 */
export function summarizeAssembly(metrics: readonly RolloutAssemblyMetrics[]): AssemblySummary {
  const dropped = emptyDropCounts();
  const reasons = emptyBreakCounts();
  const histogram: Record<string, number> = {};
  let samples = 0;
  let withSamples = 0;
  let single = 0;
  let calls = 0;
  let used = 0;
  let total = 0;
  let trained = 0;
  let naive = 0;
  let offPolicy = 0;
  for (const m of metrics) {
    samples += m.samples;
    if (m.samples > 0) withSamples++;
    if (m.samples === 1) single++;
    histogram[String(m.samples)] = (histogram[String(m.samples)] ?? 0) + 1;
    calls += m.calls;
    used += m.calls_used;
    for (const r of DropReasonSchema.options) dropped[r] += m.dropped[r];
    for (const r of BreakReasonSchema.options as readonly BreakReason[]) {
      reasons[r] += m.break_reasons[r];
    }
    total += m.tokens_total;
    trained += m.tokens_trained;
    naive += m.tokens_naive;
    offPolicy += m.off_policy_samples;
  }
  return {
    rollouts: metrics.length,
    samples,
    samples_per_rollout_mean: withSamples ? samples / withSamples : 0,
    single_sample_share: withSamples ? single / withSamples : 0,
    samples_per_rollout_histogram: histogram,
    calls,
    calls_used: used,
    dropped,
    break_reasons: reasons,
    tokens_total: total,
    tokens_trained: trained,
    tokens_naive: naive,
    storage_ratio: naive ? total / naive : 0,
    off_policy_samples: offPolicy,
  };
}
