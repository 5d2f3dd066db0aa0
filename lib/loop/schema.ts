/**
 * Schemas of the training loop (`lib/loop`): the one typed config of an RL run, the
 * per-step metrics it writes (a superset of the UI's `TrainStepMetrics`), and the checkpoint
 * state a resumed run continues from.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "../schema/core.ts";
 * import { LoopConfigSchema } from "./schema.ts";
 * const config = parseOrThrow(LoopConfigSchema, {
 *   name: "toy",
 *   tasks: [{ id: "t1", input: { prompt: "2+2?" } }],
 *   harness: { name: "builtin" },
 * });
 * assert.equal(config.schedule.mode, "collocated_async");
 * assert.equal(config.group_size, 4);
 * ```
 *
 * @module
 */
import { z } from "zod";
import { AdvantageOptionsSchema, NormalizationOptionsSchema } from "../algo/schema.ts";
import {
  HarnessSpecSchema,
  IdSchema,
  JsonValueSchema,
  MergeStrategySchema,
} from "../schema/core.ts";
import {
  LossConfigSchema,
  OptimizerConfigSchema,
  WorkerModelSpecSchema,
} from "../schema/trainer.ts";

const finite = z.number().refine(Number.isFinite, "must be a finite number");

/** One task of the run's dataset: a GRPO group runs `group_size` rollouts on its `input`. */
export const LoopTaskSchema = z.object({
  id: IdSchema,
  input: JsonValueSchema,
});
/** One task of the run's dataset. */
export type LoopTask = z.infer<typeof LoopTaskSchema>;

/** `sync` waits for the whole batch; `collocated_async` trains while other rollouts run. */
export const ScheduleModeSchema = z.enum(["sync", "collocated_async"]);
/** Schedule mode. */
export type ScheduleMode = z.infer<typeof ScheduleModeSchema>;

/** What happens to samples older than the staleness bound. */
export const StalePolicySchema = z.enum(["drop", "tis"]);
/** Stale-sample policy. */
export type StalePolicy = z.infer<typeof StalePolicySchema>;

/** Scheduling of rollouts and updates. */
export const ScheduleConfigSchema = z.object({
  mode: ScheduleModeSchema.default("collocated_async"),
  /**
   * Async: groups kept in flight beyond the ones the next update needs (more overlap, more
   * staleness). 0 = as many again as one step uses.
   */
  extra_groups_in_flight: z.number().int().min(0).default(0),
  /**
   * Samples whose policy version is more than this many updates behind the policy being
   * trained are dropped (`drop`) or kept with truncated importance sampling (`tis`).
   */
  max_staleness: z.number().int().min(0).default(1),
  stale_policy: StalePolicySchema.default("drop"),
  /**
   * Cap of the behaviour weight π_prox / μ of stale samples kept under `tis` (decoupled PPO:
   * their ratio is clipped against π_prox, the policy the update starts from).
   */
  tis_cap: z.number().positive().default(2),
  /** How long an update waits for in-flight LLM calls to finish (ms). */
  drain_timeout_ms: z.number().int().positive().default(120_000),
  /** How often rollout status is polled (ms). */
  poll_ms: z.number().int().min(10).default(200),
});
/** Scheduling of rollouts and updates (input form). */
export type ScheduleConfigInput = z.input<typeof ScheduleConfigSchema>;

/** Which rollouts never reach training, and what happens to groups that give no signal. */
export const FilterConfigSchema = z.object({
  /** Drop rollouts that did not succeed (failed, cancelled, harness error). */
  drop_errors: z.boolean().default(true),
  /** Drop groups whose rewards are all equal (no learning signal). */
  drop_zero_variance: z.boolean().default(true),
});

/**
 * SFT warm start on scripted trajectories before RL (the toy task's). Without `lr` (or with the
 * RL optimizer's), RL continues with the same AdamW state: a fresh AdamW's first steps move every
 * weight by about `lr` whatever its gradient, which can wreck a freshly warm-started tiny policy.
 */
export const SftConfigSchema = z.object({
  steps: z.number().int().min(0).default(0),
  batch_size: z.number().int().min(1).default(8),
  /** SFT learning rate (default: the RL optimizer's; a different one means a fresh optimizer). */
  lr: z.number().positive().optional(),
});
/** SFT warm start settings (input form). */
export type SftConfigInput = z.input<typeof SftConfigSchema>;

/** The one config of an RL run. */
export const LoopConfigSchema = z.object({
  /** Run name: `runs/<name>/` holds metrics, checkpoints and figures. */
  name: IdSchema,
  /** Output directory (default `runs/<name>`). */
  out_dir: z.string().min(1).optional(),
  tasks: z.array(LoopTaskSchema).min(1),
  harness: HarnessSpecSchema,
  /** Per-rollout timeout and attempts. */
  rollout_timeout_s: z.number().positive().default(300),
  max_attempts: z.number().int().min(1).max(10).default(2),
  /** Rollouts per group (same task input). */
  group_size: z.number().int().min(1).max(256).default(4),
  /** Groups per training step. */
  groups_per_step: z.number().int().min(1).max(1024).default(4),
  /** RL steps (policy updates). */
  steps: z.number().int().min(1).max(1_000_000).default(10),
  merge_strategy: MergeStrategySchema.default("prefix_merge"),
  advantage: AdvantageOptionsSchema.prefault({ level: "rollout" }),
  normalization: NormalizationOptionsSchema.prefault({ mode: "rollout_token_mean" }),
  loss: LossConfigSchema.prefault({ kind: "ppo" }),
  optimizer: OptimizerConfigSchema.prefault({ lr: 1e-3 }),
  /**
   * Optimizer steps per batch (PPO epochs): each a `forward_backward` over the whole batch and
   * an `optim_step`. Later epochs take the ratio against π_old — the behaviour logprobs under
   * `loss.old_logprobs: "rollout"`, the proximal logprobs the first epoch computed under
   * `"recompute"` (and always for stale samples under TIS) — so the clip keeps them inside a
   * trust region; the policy version advances by this much per update, and staleness is
   * counted in updates.
   */
  ppo_epochs: z.number().int().min(1).max(64).default(1),
  /** Token budget of one packed micro-batch row. */
  micro_token_budget: z.number().int().min(1).default(4096),
  /**
   * Shared-prefix packing (`packSharedPrefix`): a micro-batch stores the untrained prompt its
   * samples share once and hangs each sample's rest off it as a tree branch (same logprobs,
   * loss and gradient as plain packing; the budget counts the shared row). Tree samples are
   * packed as they are. `false`: plain packing, every sample whole.
   */
  share_prefix: z.boolean().default(true),
  schedule: ScheduleConfigSchema.prefault({ mode: "collocated_async" }),
  filters: FilterConfigSchema.prefault({ drop_errors: true, drop_zero_variance: true }),
  /** Save a checkpoint every N steps (0 = never). */
  checkpoint_every: z.number().int().min(0).default(1),
  /**
   * Checkpoints kept on disk: the last `checkpoint_keep_last`, plus the one with the best
   * held-out evaluation score (`eval/heldout_reward_mean` of its step) when one was scored.
   */
  checkpoint_keep_last: z.number().int().min(1).default(1),
  /** Policy initialisation when the run starts fresh (the worker is initialised with it). */
  model: WorkerModelSpecSchema.optional(),
  /**
   * Torch device the worker puts the policy on (`cpu`, `cuda`, `cuda:1`), sent with every
   * `init`; unset: the worker's choice (CUDA when torch sees a GPU).
   */
  device: z.string().min(1).optional(),
  sft: SftConfigSchema.prefault({ steps: 0 }),
  /** Name of the policy in the gateway's model registry. */
  policy_name: IdSchema.default("policy"),
  /** Reward above which a rollout counts as passed. */
  pass_threshold: finite.default(0.5),
  seed: z.number().int().default(0),
  /**
   * Seed each training rollout's sampling (built-in harnesses: the `seed` option, call `c`
   * samples with `seed + c`): rollout `j` of group `k` gets {@link trainingRolloutSeed}. Off by
   * default (the grid's cells sampled unseeded); the canaries (`experiments/canary.ts`) turn it
   * on so that two runs of the same code produce the same numbers.
   */
  rollout_seeds: z.boolean().default(false),
});
/**
 * Sampling seed of rollout `j` of group `k` when `rollout_seeds` is on, inside the harness's
 * seed range (≤ 2³¹): `1.5e9 + (seed mod 50)·1e7 + (k mod 10⁴)·1000 + 20·j` (a rollout's calls
 * add their index, < 20 apart). Disjoint from the CRN evaluation's seeds (`10_000 + 1000·i`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { trainingRolloutSeed } from "./schema.ts";
 * assert.equal(trainingRolloutSeed(3, 2, 1), 1_530_002_020);
 * assert.ok(trainingRolloutSeed(49, 9_999, 49) < 2 ** 31);
 * ```
 */
export function trainingRolloutSeed(seed: number, group: number, rollout: number): number {
  const s = ((seed % 50) + 50) % 50;
  return 1_500_000_000 + s * 10_000_000 + (group % 10_000) * 1_000 + 20 * rollout;
}
/** The config of an RL run (parsed). */
export type LoopConfig = z.infer<typeof LoopConfigSchema>;
/** The config of an RL run as a caller writes it. */
export type LoopConfigInput = z.input<typeof LoopConfigSchema>;

const count = z.number().int().min(0);
/**
 * How many rollouts or samples did not reach training in a step, per reason: `unfinished` (not
 * in a final status when the update read it), `no_reward` (final, but no reward event), `error`
 * (did not succeed, under `filters.drop_errors`), `no_samples`, `singleton` (a one-member group
 * left at advantage 0 and dropped under `filters.drop_zero_variance`), `zero_variance`, `stale`
 * (samples). Reasons added later default to 0 so older metrics files still read.
 */
export const LoopFilteredSchema = z.object({
  unfinished: count.default(0),
  no_reward: count.default(0),
  error: count,
  no_samples: count,
  singleton: count.default(0),
  zero_variance: count,
  stale: count,
});

/** Why rollouts or samples did not reach training: the keys of {@link LoopFilteredSchema}. */
export const LoopFilterReasonSchema = LoopFilteredSchema.keyof();
/** A filter reason. */
export type LoopFilterReason = z.infer<typeof LoopFilterReasonSchema>;

/**
 * Metrics of one RL step: one JSONL line and one `train_step` custom event (the UI's
 * `TrainStepMetrics` fields plus the loop's own).
 */
export const LoopStepMetricsSchema = z.object({
  step: z.number().int().min(0),
  policy_version: z.number().int().min(0),
  time: z.number(),
  mode: ScheduleModeSchema,
  rollouts: z.number().int().min(0),
  reward_mean: finite,
  reward_std: finite,
  pass_rate: z.number().min(0).max(1),
  samples: z.number().int().min(0),
  samples_per_rollout: finite,
  trained_rollouts: z.number().int().min(0),
  trained_samples: z.number().int().min(0),
  trained_tokens: z.number().int().min(0),
  advantage_mean: finite,
  advantage_std: finite,
  advantage_abs_max: finite,
  break_reasons: z.record(z.string(), z.number().min(0)),
  /** Rollouts (all reasons but stale) or samples (stale) left out, per reason. */
  filtered: LoopFilteredSchema,
  /**
   * Groups of the step with one member (a rollout without `group_id`, or the only one left of
   * its group): advantage 0 under `advantage.singleton: "zero"` (dropped, and counted under
   * `filtered.singleton`, with `filters.drop_zero_variance`), or r − baseline.
   */
  singleton_groups: count.default(0),
  /** Samples trained with TIS because they were older than the bound. */
  tis_samples: z.number().int().min(0),
  /** Policy versions of the trained samples: how far behind the updated policy they were. */
  staleness_max: z.number().int().min(0),
  staleness_mean: finite,
  /** Alignment on trained tokens of samples sampled at the version being trained (null: none). */
  alignment_corr: z.number().min(-1).max(1).nullable(),
  alignment_logprob_corr: z.number().min(-1).max(1).nullable(),
  alignment_tokens: z.number().int().min(0),
  alignment_max_abs_dp: finite,
  /**
   * Engine–trainer mismatch as the field measures it, on the same tokens as `alignment_corr`
   * (thresholds: lib/algo `MISMATCH_THRESHOLDS`): mean |Δp| (verl's `rollout_probs_diff_mean`),
   * max |Δlogprob|, the k1 and k3 estimates of KL(engine ‖ trainer), and the normalised
   * effective sample size of the importance weights π_trainer / π_engine.
   */
  alignment_mean_abs_dp: finite.default(0),
  alignment_max_abs_dlogprob: finite.default(0),
  alignment_k1_kl: finite.default(0),
  alignment_k3_kl: finite.default(0),
  alignment_ess: finite.default(1),
  loss: finite,
  entropy: finite,
  /** Mean KL(π_θ ‖ π_ref) estimate (`loss.kl_estimator`) over the update's first-epoch trained
   * tokens; 0 when `loss.kl_coef` is 0. */
  kl_ref_mean: finite.default(0),
  clip_fraction: finite,
  /** Clip fraction of the update's last PPO epoch (with `ppo_epochs` > 1, the trust region at
   * work; the first epoch's ratio is 1 wherever π_old is the proximal policy). */
  clip_fraction_last_epoch: finite.default(0),
  grad_norm: finite,
  /** LLM calls held by the phase gate when the update began. */
  held_calls: z.number().int().min(0),
  in_flight_at_update: z.number().int().min(0),
  timings_ms: z.record(z.string(), z.number().min(0)),
  /**
   * Held-out evaluation run after this step (absent on steps without one): mean reward with
   * the half-width of its 95% interval, pass rate and rollouts, on the held-out tasks; and
   * the same on the training tasks when the run evaluates those too (`eval/train_*`).
   */
  "eval/heldout_reward_mean": finite.optional(),
  "eval/heldout_reward_ci95": z.number().min(0).optional(),
  "eval/heldout_pass_rate": z.number().min(0).max(1).optional(),
  "eval/heldout_rollouts": count.optional(),
  "eval/train_reward_mean": finite.optional(),
  "eval/train_reward_ci95": z.number().min(0).optional(),
  "eval/train_pass_rate": z.number().min(0).max(1).optional(),
  "eval/train_rollouts": count.optional(),
  /** Attempts of this step's rollouts that the infrastructure ended (worker, proxy upstream or
   * controller gone), retried without counting against `max_attempts`. */
  attempts_infra_retried: count.optional(),
  /** Attempts of this step's rollouts that failed the way an infrastructure failure does but
   * counted against `max_attempts` anyway (should stay 0). */
  attempts_burned_by_infra: count.optional(),
});
/** Metrics of one RL step. */
export type LoopStepMetrics = z.infer<typeof LoopStepMetricsSchema>;

/** What a checkpoint records besides the worker's weights and optimizer. */
export const LoopStateSchema = z.object({
  name: IdSchema,
  /** Steps completed (the next step to run). */
  next_step: z.number().int().min(0),
  policy_version: z.number().int().min(0),
  /** Worker-side path of the weights + optimizer file. */
  worker_checkpoint: z.string().min(1),
  /** Groups created so far (the next group index). */
  next_group: z.number().int().min(0),
  /** Groups already trained on (never used twice). */
  consumed_groups: z.array(z.string()),
  /** The policy version before the first RL step (after SFT). */
  base_version: z.number().int().min(0),
  reward_before: finite.nullable(),
  saved_at: z.number(),
  /** Checkpoints on disk, oldest first (the last is `worker_checkpoint`). */
  checkpoints: z.array(z.object({
    next_step: z.number().int().min(0),
    path: z.string().min(1),
    /** Held-out evaluation score of the step it was saved after (null: not evaluated). */
    score: finite.nullable(),
  })).default([]),
  /** The checkpoint with the best held-out score so far (kept whatever keep-last says). */
  best: z.object({
    next_step: z.number().int().min(0),
    path: z.string().min(1),
    score: finite,
  }).nullable().default(null),
});
/** Checkpoint state of a run. */
export type LoopState = z.infer<typeof LoopStateSchema>;
