/**
 * Schemas of the sample-assembly area (lib/samples): assembly options, why a call was left out,
 * break diagnoses with their evidence, where each call landed, and the assembly metrics.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "../schema/core.ts";
 * import { AssembleConfigSchema } from "./schema.ts";
 * const config = parseOrThrow(AssembleConfigSchema, { strategy: "tree" });
 * assert.equal(config.attempts, "all");
 * ```
 *
 * @module
 */
import { z } from "zod";
import { BreakReasonSchema, IdSchema, MergeStrategySchema } from "../schema/core.ts";

/** Which attempts' calls feed the samples: every attempt, or only the last one. */
export const AttemptSelectionSchema = z.enum(["all", "final"]);
/** Which attempts' calls feed the samples. */
export type AttemptSelection = z.infer<typeof AttemptSelectionSchema>;

/**
 * Plain-data options of the assembler (the decode callback / tokenizer are passed beside them).
 * `vocab_size`, when known, makes ids `>= vocab_size` an error.
 */
export const AssembleConfigSchema = z.object({
  strategy: MergeStrategySchema.default("prefix_merge"),
  attempts: AttemptSelectionSchema.default("all"),
  /** Expected rollout id: names an empty rollout; must match the events' otherwise. */
  rollout_id: IdSchema.optional(),
  /** Overrides the group id (default: the rollout id, i.e. a singleton group). */
  group_id: IdSchema.optional(),
  /** Outcome reward given to every sample (default: the last `reward` event, else 0). */
  reward: z.number().refine(Number.isFinite, "must be a finite number").optional(),
  vocab_size: z.number().int().positive().optional(),
  /** Tokens of context shown on each side of a break in its evidence. */
  evidence_tokens: z.number().int().min(1).max(256).default(8),
});
/** Plain-data options of the assembler (input form: every field optional). */
export type AssembleConfig = z.input<typeof AssembleConfigSchema>;

/**
 * Why a call did not become part of any sample (each one is listed and counted):
 * - `error`: the call carries an error message;
 * - `http_status`: non-2xx status;
 * - `empty_response`: no response token;
 * - `retry_duplicate`: a later call had the identical prompt and nothing extended this one;
 * - `other_attempt`: `attempts: "final"` and the call belongs to an earlier attempt.
 */
export const DropReasonSchema = z.enum([
  "error",
  "http_status",
  "empty_response",
  "retry_duplicate",
  "other_attempt",
]);
/** Why a call was left out. */
export type DropReason = z.infer<typeof DropReasonSchema>;

/** A call left out of the samples, with why. */
export const DroppedCallSchema = z.object({
  seq: z.number().int(),
  attempt_id: z.string(),
  reason: DropReasonSchema,
  /** For `retry_duplicate`: the seq of the call that superseded it. */
  superseded_by: z.number().int().nullable(),
  detail: z.string(),
});
/** A call left out of the samples. */
export type DroppedCall = z.infer<typeof DroppedCallSchema>;

/** Which evidence decided a break reason. */
export const DiagnosisBasisSchema = z.enum(["segment", "messages", "text", "tokens"]);
/** Which evidence decided a break reason. */
export type DiagnosisBasis = z.infer<typeof DiagnosisBasisSchema>;

/**
 * Why call `seq` did not extend the sample of call `previous_seq`, with evidence: the first
 * token of the new prompt that differs from `prompt ∥ response` of the previous call, and the
 * decoded text around it (null without a decoder).
 */
export const BreakDiagnosisSchema = z.object({
  seq: z.number().int(),
  /** The call it was compared against (null: no earlier call to compare with). */
  previous_seq: z.number().int().nullable(),
  reason: BreakReasonSchema,
  basis: DiagnosisBasisSchema,
  /** Index in the new prompt of the first token that differs from the previous sequence. */
  first_diff_token: z.number().int().min(0),
  /** Up to `evidence_tokens` shared ids just before the difference. */
  context_ids: z.array(z.number().int()),
  /** Ids the previous sequence has from the difference on (up to `evidence_tokens`). */
  expected_ids: z.array(z.number().int()),
  /** Ids the new prompt has from the difference on (up to `evidence_tokens`). */
  actual_ids: z.array(z.number().int()),
  context_text: z.string().nullable(),
  expected_text: z.string().nullable(),
  actual_text: z.string().nullable(),
  /** One sentence saying what established the reason. */
  detail: z.string(),
});
/** Why a call did not extend the previous sample. */
export type BreakDiagnosis = z.infer<typeof BreakDiagnosisSchema>;

/** Where a used call landed: its sample, and its response's span in that sample's `tokens`. */
export const CallPlacementSchema = z.object({
  seq: z.number().int(),
  sample_index: z.number().int().min(0),
  response_start: z.number().int().min(0),
  response_length: z.number().int().min(1),
  prompt_length: z.number().int().min(0),
});
/** Where a used call landed. */
export type CallPlacement = z.infer<typeof CallPlacementSchema>;

const reasonCounts = z.record(BreakReasonSchema, z.number().int().min(0));
const dropCounts = z.record(DropReasonSchema, z.number().int().min(0));

/** Counts per break reason (every reason present, zero when absent). */
export type BreakReasonCounts = z.infer<typeof reasonCounts>;
/** Counts per drop reason (every reason present, zero when absent). */
export type DropReasonCounts = z.infer<typeof dropCounts>;

/** Assembly metrics of one rollout. */
export const RolloutAssemblyMetricsSchema = z.object({
  rollout_id: z.string(),
  strategy: MergeStrategySchema,
  /** model_request events given. */
  calls: z.number().int().min(0),
  /** Calls that made it into samples. */
  calls_used: z.number().int().min(0),
  dropped: dropCounts,
  samples: z.number().int().min(0),
  /** Breaks of exact prefix merging, by reason (the rollout's property, whatever the strategy). */
  break_reasons: reasonCounts,
  /** Sum of the samples' token counts (what training stores and processes). */
  tokens_total: z.number().int().min(0),
  /** Tokens with loss_mask 1. */
  tokens_trained: z.number().int().min(0),
  /** Sum over used calls of prompt + response lengths (what `per_call` would store). */
  tokens_naive: z.number().int().min(0),
  off_policy_samples: z.number().int().min(0),
  substitutions: z.number().int().min(0),
});
/** Assembly metrics of one rollout. */
export type RolloutAssemblyMetrics = z.infer<typeof RolloutAssemblyMetricsSchema>;

/** Assembly metrics summarised over many rollouts. */
export const AssemblySummarySchema = z.object({
  rollouts: z.number().int().min(0),
  samples: z.number().int().min(0),
  samples_per_rollout_mean: z.number(),
  /** Share (0..1) of rollouts (with at least one sample) that stayed a single sample. */
  single_sample_share: z.number(),
  /** samples-per-rollout value → number of rollouts. */
  samples_per_rollout_histogram: z.record(z.string(), z.number().int().min(0)),
  calls: z.number().int().min(0),
  calls_used: z.number().int().min(0),
  dropped: dropCounts,
  break_reasons: reasonCounts,
  tokens_total: z.number().int().min(0),
  tokens_trained: z.number().int().min(0),
  tokens_naive: z.number().int().min(0),
  /** tokens_total / tokens_naive (1 = no sharing; smaller = more prefix reuse). */
  storage_ratio: z.number(),
  off_policy_samples: z.number().int().min(0),
});
/** Assembly metrics summarised over many rollouts. */
export type AssemblySummary = z.infer<typeof AssemblySummarySchema>;
