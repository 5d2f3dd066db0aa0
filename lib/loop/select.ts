/**
 * What of a step's rollouts reaches training, with every exclusion counted by reason — no
 * silent defaults: a rollout that is not final (`unfinished`) is left out; one that did not
 * succeed is left out under `filters.drop_errors` (`error`); one without a reward event
 * (`no_reward`) is left out, never trained as reward 0; one that assembled to no sample is
 * `no_samples`; and a sample older than the staleness bound is dropped (`stale`) or kept for
 * truncated importance sampling.
 *
 * @module
 */
import { assembleRollout } from "../samples/mod.ts";
import {
  type Rollout,
  type RolloutEvent,
  type Sample,
  TERMINAL_ROLLOUT_STATUSES,
} from "../schema.ts";
import { type LoopConfig, type LoopFilterReason, LoopFilterReasonSchema } from "./schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";

/** A rollout with its events. */
export interface RolloutData {
  rollout: Rollout;
  events: RolloutEvent[];
}

/** Per-reason exclusion counts, all zero (in the order of {@link LoopFilterReasonSchema}). */
export function emptyFiltered(): Record<LoopFilterReason, number> {
  const zeros = LoopFilterReasonSchema.options.map((reason) => [reason, 0]);
  return Object.fromEntries(zeros) as Record<LoopFilterReason, number>;
}

/** A rollout excluded from training, and why. */
export interface Exclusion {
  rollout_id: string;
  reason: LoopFilterReason;
}

/** What {@link selectSamples} keeps and counts. */
export interface Selection {
  rollouts: number;
  /** Rewards of the rollouts that have one (each once). */
  rewards: number[];
  filtered: Record<LoopFilterReason, number>;
  /** Rollouts left out whole (not samples dropped as stale). */
  excluded: Exclusion[];
  break_reasons: Record<string, number>;
  /** Samples assembled per rollout (assembled rollouts only). */
  assembled: Map<string, number>;
  /** Samples assembled in all (before the staleness filter). */
  total_samples: number;
  samples: Sample[];
  /** Token arrays of the kept samples older than the bound (trained with TIS). */
  stale: Set<Uint32Array>;
}

/** Options of {@link selectSamples}. */
export interface SelectOptions {
  config: LoopConfig;
  /** The policy version the update trains from. */
  version: number;
  tokenizer?: Pick<ChatTokenizer, "decode" | "vocabSize">;
}

/**
 * Assembles the samples of `groups` and filters them, counting every exclusion.
 *
 * @example
 * ```ts ignore
 * const selection = selectSamples(groups, { config, version: 3 });
 * selection.filtered.no_reward; // rollouts left out for want of a reward event
 * ```
 */
export function selectSamples(groups: RolloutData[][], options: SelectOptions): Selection {
  const { config, version } = options;
  const out: Selection = {
    rollouts: 0,
    rewards: [],
    filtered: emptyFiltered(),
    excluded: [],
    break_reasons: {},
    assembled: new Map(),
    total_samples: 0,
    samples: [],
    stale: new Set(),
  };
  const exclude = (rollout_id: string, reason: LoopFilterReason) => {
    out.filtered[reason]++;
    out.excluded.push({ rollout_id, reason });
  };
  for (const group of groups) {
    for (const { rollout, events } of group) {
      out.rollouts++;
      if (!TERMINAL_ROLLOUT_STATUSES.includes(rollout.status)) {
        exclude(rollout.rollout_id, "unfinished");
        continue;
      }
      if (rollout.status !== "succeeded" && config.filters.drop_errors) {
        if (rollout.reward !== null) out.rewards.push(rollout.reward);
        exclude(rollout.rollout_id, "error");
        continue;
      }
      if (rollout.reward === null) {
        exclude(rollout.rollout_id, "no_reward");
        continue;
      }
      const reward = rollout.reward;
      out.rewards.push(reward);
      const assembled = assembleRollout(events, {
        strategy: config.merge_strategy,
        group_id: rollout.group_id,
        reward,
        ...(options.tokenizer ? { tokenizer: options.tokenizer } : {}),
      });
      for (const [reason, n] of Object.entries(assembled.metrics.break_reasons)) {
        out.break_reasons[reason] = (out.break_reasons[reason] ?? 0) + n;
      }
      out.total_samples += assembled.samples.length;
      out.assembled.set(rollout.rollout_id, assembled.samples.length);
      if (assembled.samples.length === 0) {
        exclude(rollout.rollout_id, "no_samples");
        continue;
      }
      for (const sample of assembled.samples) {
        const lag = updatesBehind(version - sample.policy_version, config.ppo_epochs);
        // lag < 0: sampled by a policy a killed run produced after its last checkpoint.
        if (lag < 0 || lag > config.schedule.max_staleness) {
          if (lag >= 0 && config.schedule.stale_policy === "tis") {
            out.stale.add(sample.tokens);
          } else {
            out.filtered.stale++;
            continue;
          }
        }
        out.samples.push(sample);
      }
    }
  }
  return out;
}

/**
 * How many updates behind a sample `versions` policy versions old is (each update advances
 * the version by `ppo_epochs`); negative stays negative.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { updatesBehind } from "./select.ts";
 * assert.equal(updatesBehind(3, 3), 1);
 * assert.equal(updatesBehind(4, 3), 2);
 * ```
 */
export function updatesBehind(versions: number, ppoEpochs: number): number {
  return versions < 0 ? versions : Math.ceil(versions / ppoEpochs);
}
