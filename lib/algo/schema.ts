/**
 * Schemas of the algo area: advantage and loss-normalization options, and the shapes of the
 * statistics they report. (The policy-loss configuration is the worker's `LossConfigSchema`, in
 * `./trainer.ts`, so the TS reference losses and the worker read one config.)
 *
 * Options are parsed with {@link parseOrThrow}, so a bad option fails with an error naming it
 * (`options.epsilon: Too small: expected number to be >=0`).
 *
 * @module
 */
import { z } from "zod";
import { AdvantageLevelSchema, NormalizationModeSchema } from "../schema/core.ts";

/** Which standard deviation GRPO divides by. */
export const StdKindSchema = z.enum(["population", "unbiased"]);
/** Which standard deviation GRPO divides by. */
export type StdKind = z.infer<typeof StdKindSchema>;

/** What happens to a group whose members all have the same reward. */
export const ZeroVariancePolicySchema = z.enum(["keep", "drop"]);
/** What happens to a group whose members all have the same reward. */
export type ZeroVariancePolicy = z.infer<typeof ZeroVariancePolicySchema>;

/**
 * What a one-member group (a rollout created without `group_id`, or the only survivor of its
 * group) gets: `zero` — advantage 0, like a zero-variance group (it teaches nothing, and is
 * counted and flagged as a singleton); `baseline` — A = r − `singleton_baseline`, no std
 * division (verl's GRPO gives a one-member group mean 0 and std 1, i.e. A = r: the default
 * baseline 0 reproduces it).
 */
export const SingletonPolicySchema = z.enum(["zero", "baseline"]);
/** What a one-member group's advantage is. */
export type SingletonPolicy = z.infer<typeof SingletonPolicySchema>;

/**
 * GRPO advantage options.
 *
 * Defaults: `rollout` level (the paper's choice), std normalisation on, `epsilon` 1e-6, the
 * `unbiased` (n − 1) std that verl, TRL and OpenRLHF get from `torch.std`, zero-variance
 * groups kept with advantage 0, and one-member groups given advantage 0 (`singleton: "zero"`).
 */
export const AdvantageOptionsSchema = z.object({
  level: AdvantageLevelSchema.default("rollout"),
  /** Divide by the group std (GRPO); false gives Dr. GRPO's mean-centred advantage. */
  normalize_std: z.boolean().default(true),
  /** Added to the std before dividing. */
  epsilon: z.number().min(0).refine(Number.isFinite, "must be a finite number").default(1e-6),
  std: StdKindSchema.default("unbiased"),
  zero_variance: ZeroVariancePolicySchema.default("keep"),
  singleton: SingletonPolicySchema.default("zero"),
  /** The baseline b of `singleton: "baseline"` (A = r − b); 0 is verl's. */
  singleton_baseline: z.number().refine(Number.isFinite, "must be a finite number").default(0),
});
/** GRPO advantage options (input form: every field optional). */
export type AdvantageOptions = z.input<typeof AdvantageOptionsSchema>;
/** GRPO advantage options with defaults applied. */
export type ResolvedAdvantageOptions = z.infer<typeof AdvantageOptionsSchema>;

/** A rollout's outcome, for rollouts that may have produced no sample at all. */
export const RolloutOutcomeSchema = z.object({
  rollout_id: z.string().min(1),
  group_id: z.string().min(1),
  reward: z.number().refine(Number.isFinite, "must be a finite number"),
});
/** A rollout's outcome. */
export type RolloutOutcome = z.infer<typeof RolloutOutcomeSchema>;

/** Statistics of one GRPO group. */
export const GroupStatsSchema = z.object({
  group_id: z.string(),
  level: AdvantageLevelSchema,
  n_rollouts: z.number().int(),
  n_samples: z.number().int(),
  /** Members the baseline was taken over (rollouts or samples, by level). */
  n_members: z.number().int(),
  reward_mean: z.number(),
  reward_std: z.number(),
  reward_min: z.number(),
  reward_max: z.number(),
  zero_variance: z.boolean(),
  singleton: z.boolean(),
  dropped: z.boolean(),
  /** Smallest and largest advantage handed to the group's samples. */
  advantage_min: z.number(),
  advantage_max: z.number(),
});
/** Statistics of one GRPO group. */
export type GroupStats = z.infer<typeof GroupStatsSchema>;

/** Why samples were dropped by the advantage step. */
export const AdvantageDropReasonSchema = z.enum(["zero_variance", "singleton"]);
/** Why samples were dropped by the advantage step. */
export type AdvantageDropReason = z.infer<typeof AdvantageDropReasonSchema>;

/** Counts of what the advantage step dropped, per reason. */
export const AdvantageDropCountsSchema = z.object({
  groups: z.record(AdvantageDropReasonSchema, z.number().int()),
  rollouts: z.record(AdvantageDropReasonSchema, z.number().int()),
  samples: z.record(AdvantageDropReasonSchema, z.number().int()),
});
/** Counts of what the advantage step dropped, per reason. */
export type AdvantageDropCounts = z.infer<typeof AdvantageDropCountsSchema>;

/** Loss-normalization options. */
export const NormalizationOptionsSchema = z.object({
  mode: NormalizationModeSchema.default("rollout_token_mean"),
  /** `seq_sum_const`'s C (e.g. the maximum response length); required for that mode. */
  constant: z.number().positive().refine(Number.isFinite, "must be a finite number").optional(),
}).superRefine((value, ctx) => {
  if (value.mode === "seq_sum_const" && value.constant === undefined) {
    ctx.addIssue({
      code: "custom",
      path: ["constant"],
      message: "seq_sum_const needs a positive constant C (e.g. the maximum response length)",
    });
  }
});
/** Loss-normalization options (input form). */
export type NormalizationOptions = z.input<typeof NormalizationOptionsSchema>;

/** Rollout–training alignment metrics over trained tokens. */
export const AlignmentMetricsSchema = z.object({
  tokens: z.number().int(),
  /** Pearson r of exp(rollout_lp) vs exp(trainer_lp); null when either side is constant. */
  pearson_prob: z.number().nullable(),
  /** Pearson r of rollout_lp vs trainer_lp; null when either side is constant. */
  pearson_logprob: z.number().nullable(),
  mean_abs_dp: z.number(),
  max_abs_dp: z.number(),
  mean_abs_dlogprob: z.number(),
  max_abs_dlogprob: z.number(),
  /** Mean k3 estimate of KL(rollout ‖ trainer) on tokens sampled by the rollout policy. */
  k3_kl: z.number(),
  /** Mean k1 estimate of KL(rollout ‖ trainer): mean of rollout_lp − trainer_lp (unbiased, may
   * be negative on few tokens). */
  k1_kl: z.number().default(0),
  /**
   * Effective sample size of the importance weights w = π_trainer / π_rollout over the tokens,
   * normalised to (0, 1]: (Σw)² / (n Σw²). 1 = every token weighs the same.
   */
  ess: z.number().default(1),
});
/** Rollout–training alignment metrics. */
export type AlignmentMetrics = z.infer<typeof AlignmentMetricsSchema>;
