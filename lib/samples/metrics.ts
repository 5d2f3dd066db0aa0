/**
 * Assembly metrics: per rollout (samples, breaks by reason, tokens stored vs naive, trained
 * tokens) and summarised over many rollouts (samples per rollout, share of single-sample
 * rollouts — the paper reports mean 2.41 and 36% on its coding runs).
 *
 * @module
 */
import { type BreakReason, BreakReasonSchema, type MergeStrategy, type Sample } from "../schema.ts";
import {
  type AssemblySummary,
  type BreakDiagnosis,
  type BreakReasonCounts,
  type DroppedCall,
  type DropReasonCounts,
  DropReasonSchema,
  type RolloutAssemblyMetrics,
} from "./schema.ts";
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
  const sum = (of: (m: RolloutAssemblyMetrics) => number) =>
    metrics.reduce((total, m) => total + of(m), 0);
  const dropped = emptyDropCounts();
  const reasons = emptyBreakCounts();
  const histogram: Record<string, number> = {};
  for (const m of metrics) {
    histogram[String(m.samples)] = (histogram[String(m.samples)] ?? 0) + 1;
    for (const r of DropReasonSchema.options) dropped[r] += m.dropped[r];
    for (const r of BreakReasonSchema.options as readonly BreakReason[]) {
      reasons[r] += m.break_reasons[r];
    }
  }
  const samples = sum((m) => m.samples);
  const withSamples = sum((m) => (m.samples > 0 ? 1 : 0));
  const single = sum((m) => (m.samples === 1 ? 1 : 0));
  const total = sum((m) => m.tokens_total);
  const naive = sum((m) => m.tokens_naive);
  return {
    rollouts: metrics.length,
    samples,
    samples_per_rollout_mean: withSamples ? samples / withSamples : 0,
    single_sample_share: withSamples ? single / withSamples : 0,
    samples_per_rollout_histogram: histogram,
    calls: sum((m) => m.calls),
    calls_used: sum((m) => m.calls_used),
    dropped,
    break_reasons: reasons,
    tokens_total: total,
    tokens_trained: sum((m) => m.tokens_trained),
    tokens_naive: naive,
    storage_ratio: naive ? total / naive : 0,
    off_policy_samples: sum((m) => m.off_policy_samples),
  };
}
