/**
 * What both schedules share: the run's services and mutable state, group creation (ids are a
 * pure function of the run name and group index, so a resumed run re-creating a group gets
 * the existing one back), group polling, and closing a step (metrics, model registry,
 * checkpoint).
 *
 * @module
 */
import type { GatewayClient } from "../gateway/client.ts";
import type { EventInput, Rollout, RolloutEvent } from "../schema.ts";
import { MONITOR_FLAGS_EVENT } from "../schema/ui.ts";
import { reinsEvent } from "../schema/gateway_api.ts";
import { alignmentFindings } from "../monitors/logprob.ts";
import { mismatchFindings } from "../monitors/mismatch.ts";
import { TERMINAL_ROLLOUT_STATUSES } from "../schema.ts";
import { type LoopConfig, type LoopStepMetrics, trainingRolloutSeed } from "./schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import type { TrainerClient } from "../trainer/client.ts";
import type { WeightSync } from "../engine/sync.ts";
import { saveCheckpoint } from "./checkpoint.ts";
import type { MetricsWriter } from "./metrics.ts";
import type { ProgressSink } from "./progress.ts";
import { taskIndexOf } from "../util/random.ts";
import type { RolloutData, UpdateResult } from "./train.ts";

/** Mutable progress of a run (what a checkpoint records). */
export interface LoopProgressState {
  nextStep: number;
  version: number;
  nextGroup: number;
  consumed: Set<string>;
  baseVersion: number;
  rewardBefore: number | null;
}

/** Hooks for tests and tools (called by the schedules; errors propagate). */
export interface LoopHooks {
  /** After a step's metrics were written (and its checkpoint saved). */
  afterStep?: (metrics: LoopStepMetrics, update: UpdateResult) => void | Promise<void>;
  /** Right before an update trains (the phase is `update` and calls have drained). */
  beforeTrain?: (step: number) => void | Promise<void>;
  /**
   * After a step has trained and its version is registered, before its metrics are written:
   * fields to add to the step's metrics (a held-out evaluation's `eval/*`), or null. Its
   * `eval/heldout_reward_mean` scores the step's checkpoint for keep-best.
   */
  evaluate?: (step: number) => Promise<Partial<LoopStepMetrics> | null>;
}

/** Everything a schedule needs. */
export interface LoopContext {
  config: LoopConfig;
  outDir: string;
  gateway: GatewayClient;
  client: TrainerClient;
  /** Endpoint registered for the policy in the model registry. */
  workerUrl: string;
  tokenizer?: ChatTokenizer;
  /** The engine every update is synced to before calls resume (absent: the worker samples). */
  engine?: WeightSync;
  progress: ProgressSink;
  metrics: MetricsWriter;
  state: LoopProgressState;
  hooks: LoopHooks;
  signal?: AbortSignal;
  /** Epoch ms when the run (this process) started its schedule. */
  startedAt: number;
}

/** Group id of group `k`. */
export function groupId(config: LoopConfig, k: number): string {
  return `${config.name}-g${k}`;
}

/** Rollout ids of group `k`. */
export function rolloutIds(config: LoopConfig, k: number): string[] {
  return Array.from({ length: config.group_size }, (_, j) => `${groupId(config, k)}-r${j}`);
}

/**
 * Declares group `k` (idempotent: an existing group comes back unchanged).
 *
 * @example
 * ```ts ignore
 * await createGroup(ctx, 0); // rollouts toy-g0-r0 … toy-g0-r3
 * ```
 */
export async function createGroup(ctx: LoopContext, k: number): Promise<void> {
  const { config } = ctx;
  const task = config.tasks[taskIndexOf(config.seed, k, config.tasks.length)];
  await ctx.gateway.createRollouts(
    rolloutIds(config, k).map((rollout_id, j) => ({
      rollout_id,
      group_id: groupId(config, k),
      input: task.input,
      mode: "train" as const,
      config: {
        timeout_s: config.rollout_timeout_s,
        max_attempts: config.max_attempts,
        harness: config.rollout_seeds
          ? {
            ...config.harness,
            options: {
              ...config.harness.options,
              seed: trainingRolloutSeed(config.seed, k, j),
            },
          }
          : config.harness,
      },
      // `step`: the step in progress when the group was declared (in sync mode the step that
      // trains on it; in async mode the policy it starts under may be older than the update).
      labels: {
        run: config.name,
        role: "train",
        step: String(ctx.state.nextStep),
        group: String(k),
        task: task.id,
      },
    })),
  );
}

/** True when a rollout reached a final status. */
export function isFinal(rollout: Rollout): boolean {
  return TERMINAL_ROLLOUT_STATUSES.includes(rollout.status);
}

/** The rollouts of a group (all of them, in creation order). */
export async function fetchGroup(ctx: LoopContext, group: string): Promise<Rollout[]> {
  const page = await ctx.gateway.listRollouts({ group_id: group, limit: 1000 });
  return page.items;
}

/** Loads every event of each rollout (the assembler picks the model calls and rewards). */
export async function loadGroupData(ctx: LoopContext, rollouts: Rollout[]): Promise<RolloutData[]> {
  return await Promise.all(rollouts.map(async (rollout) => ({
    rollout: await ctx.gateway.getRollout(rollout.rollout_id),
    events: await ctx.gateway.listEvents(rollout.rollout_id),
  })));
}

const mean = (xs: number[]) => (xs.length ? xs.reduce((a, b) => a + b, 0) / xs.length : 0);
const std = (xs: number[]) => {
  if (xs.length < 2) return 0;
  const m = mean(xs);
  return Math.sqrt(xs.reduce((a, x) => a + (x - m) ** 2, 0) / xs.length);
};

/** Extra per-step facts the schedule measured. */
export interface StepExtras {
  step: number;
  held_calls: number;
  in_flight_at_update: number;
  timings_ms: Record<string, number>;
  attempts_infra_retried?: number;
  attempts_burned_by_infra?: number;
}

/**
 * Builds, writes and reports the step's metrics, registers the new policy version, saves a
 * checkpoint when due, and advances the state.
 *
 * @example
 * ```ts ignore
 * await finishStep(ctx, update, { step: 0, held_calls: 0, in_flight_at_update: 0, timings_ms });
 * ```
 */
export async function finishStep(
  ctx: LoopContext,
  update: UpdateResult,
  extras: StepExtras,
): Promise<LoopStepMetrics> {
  const { config, state } = ctx;
  const trainedRollouts = update.trained.length;
  const f = update.filtered;
  const assembled = update.rollouts - f.unfinished - f.error - f.no_reward;
  const adv = update.advantages;
  const metrics: LoopStepMetrics = {
    step: extras.step,
    policy_version: update.policy_version,
    time: Date.now(),
    mode: config.schedule.mode,
    rollouts: update.rollouts,
    reward_mean: mean(update.rewards),
    reward_std: std(update.rewards),
    pass_rate: update.rewards.length
      ? update.rewards.filter((r) => r > config.pass_threshold).length / update.rewards.length
      : 0,
    samples: update.samples,
    samples_per_rollout: assembled > 0 ? update.samples / assembled : 0,
    trained_rollouts: trainedRollouts,
    trained_samples: update.trained_samples,
    trained_tokens: update.trained_tokens,
    advantage_mean: mean(adv),
    advantage_std: std(adv),
    advantage_abs_max: adv.reduce((a, x) => Math.max(a, Math.abs(x)), 0),
    break_reasons: update.break_reasons,
    filtered: update.filtered,
    singleton_groups: update.singleton_groups,
    tis_samples: update.tis_samples,
    staleness_max: update.staleness.reduce((a, x) => Math.max(a, x), 0),
    staleness_mean: mean(update.staleness),
    alignment_corr: clampCorr(update.alignment?.pearson_prob ?? null),
    alignment_logprob_corr: clampCorr(update.alignment?.pearson_logprob ?? null),
    alignment_tokens: update.alignment?.tokens ?? 0,
    alignment_max_abs_dp: update.alignment?.max_abs_dp ?? 0,
    alignment_mean_abs_dp: update.alignment?.mean_abs_dp ?? 0,
    alignment_max_abs_dlogprob: update.alignment?.max_abs_dlogprob ?? 0,
    alignment_k1_kl: update.alignment?.k1_kl ?? 0,
    alignment_k3_kl: update.alignment?.k3_kl ?? 0,
    alignment_ess: update.alignment?.ess ?? 1,
    loss: update.loss,
    entropy: update.entropy,
    kl_ref_mean: update.kl_ref_mean,
    is_masked_tokens: update.is_masked_tokens,
    is_masked_share: update.trained_tokens > 0
      ? update.is_masked_tokens / update.trained_tokens
      : 0,
    is_masked_sequences: update.is_masked_sequences,
    is_ess: update.is_ess,
    clip_fraction: update.clip_fraction,
    clip_fraction_last_epoch: update.clip_fraction_epochs.at(-1) ?? 0,
    grad_norm: update.grad_norm,
    held_calls: extras.held_calls,
    in_flight_at_update: extras.in_flight_at_update,
    ...(extras.attempts_infra_retried !== undefined
      ? { attempts_infra_retried: extras.attempts_infra_retried }
      : {}),
    ...(extras.attempts_burned_by_infra !== undefined
      ? { attempts_burned_by_infra: extras.attempts_burned_by_infra }
      : {}),
    timings_ms: {
      ...extras.timings_ms,
      assemble: update.timings_ms.assemble,
      train: update.timings_ms.train,
    },
  };
  state.version = update.policy_version;
  state.nextStep = extras.step + 1;
  await ctx.gateway.registerModel({
    name: config.policy_name,
    endpoints: [ctx.workerUrl],
    version: state.version,
    info: { run: config.name, step: extras.step },
  });
  Object.assign(metrics, await ctx.hooks.evaluate?.(extras.step) ?? {});
  // Metrics first: a run killed before the checkpoint repeats this step and rewrites its line.
  await ctx.metrics.write(metrics);
  await postRolloutEvents(ctx.gateway, update, extras.step);
  if (config.checkpoint_every > 0 && state.nextStep % config.checkpoint_every === 0) {
    await saveCheckpoint(ctx.client, ctx.outDir, {
      name: config.name,
      next_step: state.nextStep,
      policy_version: state.version,
      next_group: state.nextGroup,
      consumed_groups: [...state.consumed],
      base_version: state.baseVersion,
      reward_before: state.rewardBefore,
    }, {
      keepLast: config.checkpoint_keep_last,
      score: metrics["eval/heldout_reward_mean"] ?? null,
    });
  }
  ctx.progress.step(metrics, config.steps);
  await ctx.hooks.afterStep?.(metrics, update);
  return metrics;
}

/** Name of the per-call alignment event (read by the logprob monitor and the rollout page). */
export const ALIGNMENT_EVENT = "alignment";
/** Name of the event that says why a rollout did not train, or trained as a singleton. */
export const TRAINING_NOTE_EVENT = "training_note";

/**
 * Posts the update's per-rollout facts on the rollouts themselves: one `alignment` event per
 * trained model call (on the call's attempt) and one `training_note` per rollout left out or
 * trained as a one-member group. Calls whose probability correlation is below `minAlignment`
 * also get the logprob monitor's flag (a `monitor_flags` event, as the monitor runner writes:
 * it checked the rollout when it finished, before these events existed). Event keys make a
 * repeated step store nothing twice.
 *
 * @example
 * ```ts ignore
 * await postRolloutEvents(gateway, update, 3);
 * ```
 */
export async function postRolloutEvents(
  gateway: Pick<GatewayClient, "postEvents">,
  update: Pick<UpdateResult, "call_alignment" | "notes">,
  step: number,
  minAlignment = 0.99,
): Promise<void> {
  const byAttempt = new Map<
    string,
    { rollout_id: string; attempt_id: string; events: EventInput[] }
  >();
  const add = (rollout_id: string, attempt_id: string, event: EventInput) => {
    const key = `${rollout_id}\u0000${attempt_id}`;
    const entry = byAttempt.get(key) ?? { rollout_id, attempt_id, events: [] };
    entry.events.push(event);
    byAttempt.set(key, entry);
  };
  for (const c of update.call_alignment) {
    const m = c.metrics;
    add(
      c.rollout_id,
      c.attempt_id,
      reinsEvent(ALIGNMENT_EVENT, c.request_seq, {
        request_seq: c.request_seq,
        policy_version: c.policy_version,
        step,
        tokens: m.tokens,
        corr: m.pearson_prob,
        logprob_corr: m.pearson_logprob,
        max_abs_dlogprob: m.max_abs_dlogprob,
        mean_abs_dlogprob: m.mean_abs_dlogprob,
        max_abs_dp: m.max_abs_dp,
        mean_abs_dp: m.mean_abs_dp,
        k1_kl: m.k1_kl,
        k3_kl: m.k3_kl,
        ess: m.ess,
      }),
    );
  }
  for (const n of update.notes) {
    if (n.attempt_id === null) continue; // never started: nowhere to post
    add(
      n.rollout_id,
      n.attempt_id,
      reinsEvent(TRAINING_NOTE_EVENT, n.rollout_id, {
        step,
        reason: n.reason,
        trained: n.reason === "singleton_group",
        ...(n.advantage !== undefined ? { advantage: n.advantage } : {}),
      }),
    );
  }
  for (const { rollout_id, attempt_id, events } of byAttempt.values()) {
    // Posted in slices: a step can hold many calls of one attempt.
    const stored: RolloutEvent[] = [];
    for (let i = 0; i < events.length; i += 256) {
      stored.push(...await gateway.postEvents(rollout_id, attempt_id, events.slice(i, i + 256)));
    }
    // The monitors checked the rollout when it finished, before this evidence existed: the
    // logprob monitor's alignment check runs here on it, stored as monitor flags like theirs.
    const findings = [
      ...alignmentFindings(stored, minAlignment).map((f) => ({ monitor: "logprob", ...f })),
      ...mismatchFindings(stored).map((f) => ({ monitor: "mismatch", ...f })),
    ];
    if (findings.length === 0) continue;
    await gateway.postEvents(rollout_id, attempt_id, [
      reinsEvent(MONITOR_FLAGS_EVENT, `${attempt_id}:${ALIGNMENT_EVENT}`, {
        flags: findings.map((f) => ({
          ...f,
          evidence: f.evidence.map((e) => ({ ...e })),
        })),
        monitors: [...new Set(findings.map((f) => f.monitor))],
        checked_at: Date.now(),
      }),
    ]);
  }
}

function clampCorr(x: number | null): number | null {
  if (x === null || !Number.isFinite(x)) return null;
  return Math.max(-1, Math.min(1, x));
}
