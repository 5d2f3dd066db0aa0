/**
 * Samples and training rows: what the merge strategies build from a rollout's calls and what
 * the trainer receives (re-exported by `./core.ts`).
 *
 * @module
 */
import { z } from "zod";

const tokenIds = z.array(z.number().int().min(0).max(0xffffffff));
const finite = z.number().refine(Number.isFinite, "must be a finite number");

/** The four merge strategies of SPEC §5. */
export const MergeStrategySchema = z.enum([
  "per_call",
  "prefix_merge",
  "buffer_substitute",
  "tree",
]);
/** A merge strategy. */
export type MergeStrategy = z.infer<typeof MergeStrategySchema>;

/**
 * Why a rollout's calls did not stay one sample:
 * - `token_boundary`: the text prefix holds, tokens differ at the response boundary;
 * - `template_rewrite`: the chat template re-rendered earlier turns (reasoning stripped, …);
 * - `response_rewrite`: the harness changed the response text (tool-call re-serialisation, …);
 * - `branch`: a different conversation (sub-agent, side conversation);
 * - `compaction`: earlier history was replaced by a summary;
 * - `unknown`: none of the above could be established (counted, never hidden).
 */
export const BreakReasonSchema = z.enum([
  "token_boundary",
  "template_rewrite",
  "response_rewrite",
  "branch",
  "compaction",
  "unknown",
]);
/** Why a sample split. */
export type BreakReason = z.infer<typeof BreakReasonSchema>;

/** Where a sample came from. */
export interface SampleProvenance {
  /** `seq` of every model_request merged into this sample, in order. */
  request_seqs: number[];
  /** The reason this sample was started instead of extending the previous one (null: first). */
  split_reason: BreakReason | null;
  strategy: MergeStrategy;
  /** True when the sample's context is not what the policy was actually conditioned on. */
  off_policy: boolean;
  /** Start offset (in `tokens`) of each merged call's response. */
  response_starts: number[];
}

/** One training sequence built from a rollout. */
export interface Sample {
  rollout_id: string;
  group_id: string;
  tokens: Uint32Array;
  /** 1 = sampled response token (trained), 0 = context. */
  loss_mask: Uint8Array;
  /** Behaviour-policy logprob per token (0 where `loss_mask` is 0). */
  rollout_logprobs: Float32Array;
  /** Tree samples: parent index per token (-1 for a root). Absent for linear samples. */
  parent?: Int32Array;
  reward: number;
  /** Per-token advantage (filled by lib/algo). */
  advantage?: Float32Array;
  /** Per-token loss weight (filled by lib/algo). */
  loss_weight?: Float32Array;
  /** Policy version(s) that sampled the response tokens (min over merged calls). */
  policy_version: number;
  provenance: SampleProvenance;
  /**
   * Sampling temperature per token (1 on context tokens), present when a merged call was sampled
   * at a temperature other than 1: the trainer recomputes each trained token's logprob under
   * softmax(logits / temperature), the distribution the behaviour logprob is of.
   */
  temperatures?: Float32Array;
}

/** The rollout-level or sample-level GRPO baseline. */
export const AdvantageLevelSchema = z.enum(["sample", "rollout"]);
/** Advantage level. */
export type AdvantageLevel = z.infer<typeof AdvantageLevelSchema>;

/** The five loss normalization modes of SPEC §6. */
export const NormalizationModeSchema = z.enum([
  "token_mean",
  "seq_mean_token_mean",
  "seq_mean_token_sum",
  "seq_sum_const",
  "rollout_token_mean",
]);
/** A loss normalization mode. */
export type NormalizationMode = z.infer<typeof NormalizationModeSchema>;

/** A row of B_train: a sample with everything the worker needs, as plain arrays for JSON. */
export const TrainingRowSchema = z.object({
  rollout_id: z.string(),
  group_id: z.string(),
  tokens: tokenIds.min(1),
  loss_mask: z.array(z.union([z.literal(0), z.literal(1)])),
  advantages: z.array(finite),
  loss_weights: z.array(finite),
  rollout_logprobs: z.array(finite),
  /** Tree attention parents (-1 = root); absent for linear rows. */
  parent: z.array(z.number().int().min(-1)).optional(),
  /** Packed rows: start offsets of each packed sequence (positions reset there). */
  segment_starts: z.array(z.number().int().min(0)).optional(),
  /**
   * Sequence id per token for sequence-level losses (GSPO): trained tokens with the same id form
   * one sequence. Absent: each packed segment (or the whole row) is one sequence. Shared-prefix
   * rows set it so that samples hanging off one shared prompt stay separate sequences.
   */
  sequence_ids: z.array(z.number().int().min(0)).optional(),
  /**
   * Sampling temperature per token (read on trained tokens; 1 elsewhere). Absent: every token
   * was sampled at temperature 1. The worker divides a trained token's logits by it.
   */
  temperatures: z.array(z.number().positive().refine(Number.isFinite, "must be finite"))
    .optional(),
}).superRefine((row, ctx) => {
  const n = row.tokens.length;
  for (const key of ["loss_mask", "advantages", "loss_weights", "rollout_logprobs"] as const) {
    if (row[key].length !== n) {
      ctx.addIssue({
        code: "custom",
        path: [key],
        message: `expected ${n} values (one per token), got ${row[key].length}`,
      });
    }
  }
  for (const key of ["parent", "sequence_ids", "temperatures"] as const) {
    const values = row[key];
    if (values && values.length !== n) {
      ctx.addIssue({
        code: "custom",
        path: [key],
        message: `expected ${n} values (one per token), got ${values.length}`,
      });
    }
  }
});
/** A row of B_train. */
export type TrainingRow = z.infer<typeof TrainingRowSchema>;
