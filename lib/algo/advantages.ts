/**
 * GRPO advantages at the `rollout` or `sample` level (SPEC §6).
 *
 * A group is the set of rollouts sharing a `group_id` (same task input). Rewards are outcome
 * rewards, so every sample of a rollout carries its rollout's reward. The two levels differ
 * only in what the baseline is taken over:
 *
 * - `rollout` (Agent Lightning's choice): mean/std over the group's rollouts; every sample of a
 *   rollout gets its rollout's advantage, however many samples the rollout split into;
 * - `sample`: mean/std over the group's samples, so a rollout that split into many samples pulls
 *   the baseline towards its own reward (Figure 4: baseline 3/4 instead of 1/2).
 *
 * @module
 */
import { parseOrThrow, type Sample, ValidationError } from "../schema.ts";
import {
  type AdvantageDropCounts,
  type AdvantageDropReason,
  type AdvantageOptions,
  AdvantageOptionsSchema,
  type GroupStats,
  type RolloutOutcome,
  RolloutOutcomeSchema,
} from "./schema.ts";
import { assertSamples } from "./validate.ts";

/** What {@link computeAdvantages} returns. */
export interface AdvantageResult {
  /** Copies of the kept samples, in input order, each with `advantage` filled on every token. */
  samples: Sample[];
  /** One entry per group, in order of first appearance. */
  groups: GroupStats[];
  /** One entry per rollout (outcome-only and dropped ones included), grouped by group. */
  rollouts: RolloutAdvantage[];
  /** What was dropped, per reason (all zero unless `zero_variance: "drop"`). */
  dropped: AdvantageDropCounts;
}

/** A rollout's reward and the advantage its samples got. */
export interface RolloutAdvantage {
  rollout_id: string;
  group_id: string;
  reward: number;
  /** Number of samples the rollout contributed (0 for an outcome-only rollout). */
  samples: number;
  advantage: number;
  dropped: boolean;
}

interface RolloutEntry {
  reward: number;
  samples: number[];
}

function zeroCounts(): Record<AdvantageDropReason, number> {
  return { zero_variance: 0, singleton: 0 };
}

/**
 * Mean and standard deviation of `values` (`unbiased` divides by n − 1; a single value has
 * std 0 either way).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { meanStd } from "./advantages.ts";
 * assert.deepEqual(meanStd([1, 0], "population"), { mean: 0.5, std: 0.5 });
 * ```
 */
export function meanStd(
  values: readonly number[],
  kind: "population" | "unbiased",
): { mean: number; std: number } {
  const n = values.length;
  if (n === 0) return { mean: 0, std: 0 };
  let sum = 0;
  for (const v of values) sum += v;
  const mean = sum / n;
  let ss = 0;
  for (const v of values) ss += (v - mean) * (v - mean);
  const denom = kind === "unbiased" ? n - 1 : n;
  return { mean, std: denom > 0 ? Math.sqrt(ss / denom) : 0 };
}

/**
 * Computes GRPO advantages and writes them on every token of every sample.
 *
 * Context tokens carry the same value as trained tokens: the outcome advantage has no
 * per-token structure, and masking lives in one place only (`loss_mask` and the zero
 * `loss_weight` of context tokens), so a masking bug cannot hide behind a zeroed advantage.
 *
 * A group with all-equal rewards (zero variance) has advantage 0, and so has a group with one
 * rollout (singleton) unless `singleton: "baseline"` gives it A = r − `singleton_baseline`
 * (verl-style; no std division). With `zero_variance: "drop"` the samples of groups left at 0
 * are removed instead and counted in `dropped` (singletons under `singleton`, the rest under
 * `zero_variance`). Every singleton is visible in `groups[].singleton` either way.
 *
 * `outcomes` adds rollouts that produced no sample (e.g. a harness that failed before its first
 * model call) to the rollout-level baseline; the sample-level baseline only sees samples.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { computeAdvantages } from "./advantages.ts";
 * const s = (rollout_id: string, reward: number) => ({
 *   rollout_id, group_id: "g", reward, tokens: new Uint32Array([1, 2]),
 *   loss_mask: new Uint8Array([0, 1]), rollout_logprobs: new Float32Array([0, -1]),
 *   policy_version: 0,
 *   provenance: { request_seqs: [1], split_reason: null, strategy: "prefix_merge" as const,
 *     off_policy: false, response_starts: [1] },
 * });
 * // Figure 4: rollout 1 (reward 1) split into 3 samples, rollout 2 (reward 0) one sample.
 * const batch = [s("r1", 1), s("r1", 1), s("r1", 1), s("r2", 0)];
 * const { samples } = computeAdvantages(batch, { level: "rollout", normalize_std: false });
 * assert.deepEqual(samples.map((x) => x.advantage![1]), [0.5, 0.5, 0.5, -0.5]);
 * ```
 */
export function computeAdvantages(
  samples: readonly Sample[],
  options: AdvantageOptions = {},
  outcomes: readonly RolloutOutcome[] = [],
): AdvantageResult {
  const opts = parseOrThrow(AdvantageOptionsSchema, options, "options");
  assertSamples(samples);
  const groups = new Map<string, Map<string, RolloutEntry>>();
  samples.forEach((s, i) => {
    let rollouts = groups.get(s.group_id);
    if (!rollouts) groups.set(s.group_id, rollouts = new Map());
    let entry = rollouts.get(s.rollout_id);
    if (!entry) rollouts.set(s.rollout_id, entry = { reward: s.reward, samples: [] });
    entry.samples.push(i);
  });
  const groupOf = new Map<string, string>();
  for (const s of samples) groupOf.set(s.rollout_id, s.group_id);
  outcomes.forEach((raw, i) => {
    const o = parseOrThrow(RolloutOutcomeSchema, raw, `outcomes[${i}]`);
    const known = groupOf.get(o.rollout_id);
    if (known !== undefined && known !== o.group_id) {
      throw new ValidationError(`outcomes[${i}].group_id`, [
        `outcomes[${i}].group_id: rollout ${o.rollout_id} is in group ${known} in the samples`,
      ]);
    }
    let rollouts = groups.get(o.group_id);
    if (!rollouts) groups.set(o.group_id, rollouts = new Map());
    const entry = rollouts.get(o.rollout_id);
    if (!entry) {
      rollouts.set(o.rollout_id, { reward: o.reward, samples: [] });
      groupOf.set(o.rollout_id, o.group_id);
    } else if (entry.reward !== o.reward) {
      throw new ValidationError(`outcomes[${i}].reward`, [
        `outcomes[${i}].reward: rollout ${o.rollout_id} has reward ${entry.reward} ` +
        `in the samples but ${o.reward} here`,
      ]);
    }
  });

  const advantageOf = new Float64Array(samples.length);
  const keep = new Uint8Array(samples.length).fill(1);
  const stats: GroupStats[] = [];
  const perRollout: RolloutAdvantage[] = [];
  const dropped: AdvantageDropCounts = {
    groups: zeroCounts(),
    rollouts: zeroCounts(),
    samples: zeroCounts(),
  };

  for (const [group_id, rollouts] of groups) {
    const entries = [...rollouts.values()];
    const ids = [...rollouts.keys()];
    const nSamples = entries.reduce((acc, e) => acc + e.samples.length, 0);
    const values = opts.level === "rollout"
      ? entries.map((e) => e.reward)
      : entries.flatMap((e) => e.samples.map(() => e.reward));
    const { mean, std } = meanStd(values, opts.std);
    const min = values.length ? Math.min(...values) : 0;
    const max = values.length ? Math.max(...values) : 0;
    const singleton = entries.length === 1;
    // Exact equality: equal rewards give no learning signal, however they were computed.
    const zeroVariance = min === max;
    const singletonBaseline = singleton && opts.singleton === "baseline";
    const flat = !singletonBaseline && (singleton || zeroVariance);
    const drop = flat && opts.zero_variance === "drop";
    const scale = opts.normalize_std ? std + opts.epsilon : 1;
    let advMin = Infinity;
    let advMax = -Infinity;
    entries.forEach((e, k) => {
      // Rewards are per rollout, so at both levels a sample's advantage is its rollout's
      // reward against the group baseline; only the baseline's population differs.
      const a = singletonBaseline
        ? e.reward - opts.singleton_baseline
        : flat
        ? 0
        : (e.reward - mean) / scale;
      perRollout.push({
        rollout_id: ids[k],
        group_id,
        reward: e.reward,
        samples: e.samples.length,
        advantage: a,
        dropped: drop,
      });
      for (const i of e.samples) {
        advantageOf[i] = a;
        if (drop) keep[i] = 0;
      }
      if (e.samples.length) {
        advMin = Math.min(advMin, a);
        advMax = Math.max(advMax, a);
      }
    });
    if (drop) {
      const reason: AdvantageDropReason = singleton ? "singleton" : "zero_variance";
      dropped.groups[reason] += 1;
      dropped.rollouts[reason] += entries.length;
      dropped.samples[reason] += nSamples;
    }
    stats.push({
      group_id,
      level: opts.level,
      n_rollouts: entries.length,
      n_samples: nSamples,
      n_members: values.length,
      reward_mean: mean,
      reward_std: std,
      reward_min: min,
      reward_max: max,
      zero_variance: zeroVariance,
      singleton,
      dropped: drop,
      advantage_min: nSamples ? advMin : 0,
      advantage_max: nSamples ? advMax : 0,
    });
  }

  const out: Sample[] = [];
  samples.forEach((s, i) => {
    if (!keep[i]) return;
    out.push({ ...s, advantage: new Float32Array(s.tokens.length).fill(advantageOf[i]) });
  });
  return { samples: out, groups: stats, rollouts: perRollout, dropped };
}

/** Step-level figures of an {@link AdvantageResult}, for the training log. */
export interface AdvantageSummary {
  groups: number;
  zero_variance_groups: number;
  singleton_groups: number;
  rollouts: number;
  /** Samples kept (after any drop). */
  samples: number;
  dropped_samples: number;
  /** Mean reward over all rollouts (each once, however many samples; dropped ones included). */
  reward_mean: number;
  /** Mean, std and mean |A| of the kept samples' advantages (one value per sample). */
  advantage_mean: number;
  advantage_std: number;
  advantage_abs_mean: number;
}

/**
 * Summarises an advantage computation into a few numbers per training step.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { computeAdvantages, summarizeAdvantages } from "./advantages.ts";
 * assert.equal(summarizeAdvantages(computeAdvantages([])).groups, 0);
 * ```
 */
export function summarizeAdvantages(result: AdvantageResult): AdvantageSummary {
  const rollouts = result.rollouts;
  const values = result.samples.map((s) => (s.advantage?.length ? s.advantage[0] : 0));
  const { mean, std } = meanStd(values, "population");
  const dropped = result.dropped.samples;
  return {
    groups: result.groups.length,
    zero_variance_groups: result.groups.filter((g) => g.zero_variance && !g.singleton).length,
    singleton_groups: result.groups.filter((g) => g.singleton).length,
    rollouts: rollouts.length,
    samples: result.samples.length,
    dropped_samples: dropped.zero_variance + dropped.singleton,
    reward_mean: rollouts.length
      ? rollouts.reduce((acc, r) => acc + r.reward, 0) / rollouts.length
      : 0,
    advantage_mean: mean,
    advantage_std: std,
    advantage_abs_mean: values.length
      ? values.reduce((acc, v) => acc + Math.abs(v), 0) / values.length
      : 0,
  };
}
