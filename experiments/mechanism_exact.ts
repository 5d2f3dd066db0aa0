/**
 * The mechanism, exact (issue #18, part 1): what each setting does to a batch whose rollouts
 * split, computed with the project's own `computeAdvantages` and `planLossWeights` on real and
 * synthetic batches.
 *
 * A batch is a list of {@link BatchRollout}s (a rollout's group, reward and the trained tokens
 * of each of its samples): captured runs give them (the loop grid's `batches.jsonl`), replayed
 * transcripts give them (`lib/trajectories` → `lib/samples`), and the functions here build
 * synthetic ones whose split counts and lengths are controlled. Three measurements:
 *
 * | measurement | definition |
 * | ----------- | ---------- |
 * | rollout share | Σ of a rollout's token weights / Σ of all (`rollout_shares` of the plan) |
 * | baseline shift | sample-level group mean − rollout-level group mean (the same rewards) |
 * | split update share | Σ over rollouts that split of share·\|A\| / Σ over all rollouts of share·\|A\| |
 *
 * For a batch of R rollouts where rollout ρ has N_ρ samples and T_ρ trained tokens
 * (N = Σ N_ρ, T = Σ T_ρ), the shares are exactly: `token_mean` T_ρ/T, `seq_mean_token_mean`
 * N_ρ/N, `rollout_token_mean` 1/R.
 *
 * @module
 */
import { computeAdvantages } from "../lib/algo/advantages.ts";
import { planLossWeights } from "../lib/algo/normalization.ts";
import type { NormalizationMode, Sample } from "../lib/schema.ts";
import type { Setting } from "./grid.ts";
import { trainedSample, uniform } from "./testbed.ts";

/** One rollout of a batch: its group, reward and the trained tokens of each of its samples. */
export interface BatchRollout {
  rollout_id: string;
  group_id: string;
  reward: number;
  lengths: number[];
}

/**
 * The samples `lib/algo` reads for a batch (trained tokens only; rollouts with no trained
 * token are left out).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { batchSamples } from "./mechanism_exact.ts";
 * const s = batchSamples([{ rollout_id: "a", group_id: "g", reward: 1, lengths: [3, 4] }]);
 * assert.deepEqual(s.map((x) => x.tokens.length), [3, 4]);
 * ```
 */
export function batchSamples(batch: readonly BatchRollout[]): Sample[] {
  return batch.flatMap((r) =>
    r.lengths.filter((L) => L > 0).map((L) => trainedSample(r.rollout_id, r.group_id, r.reward, L))
  );
}

/** Each rollout's share of the total gradient weight under `mode`, by rollout id. */
export function rolloutShares(
  batch: readonly BatchRollout[],
  mode: NormalizationMode,
): Map<string, number> {
  const plan = planLossWeights(batchSamples(batch), { mode });
  const total = plan.total_weight;
  return new Map(Object.entries(plan.rollout_shares).map(([id, w]) => [id, w / total]));
}

/** One row of {@link shareVsSplits}. */
export interface ShareRow {
  mode: NormalizationMode;
  /** Samples the focal rollout split into. */
  splits: number;
  /** Trained tokens of each of its samples. */
  sample_tokens: number;
  /** Its share of the total weight, and that share × R (1 = a fair share). */
  share: number;
  relative: number;
}

/**
 * Synthetic batches with a controlled split: `others` rollouts of one `base_tokens`-token
 * sample each, and a focal rollout split into k = 1..`max_splits` samples of `sample_tokens`
 * each. Returns the focal rollout's share under each mode.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { shareVsSplits } from "./mechanism_exact.ts";
 * const rows = shareVsSplits({ max_splits: 3 });
 * const smtm = rows.filter((r) => r.mode === "seq_mean_token_mean").map((r) => r.relative);
 * // share = k / (k + 7), times R = 8
 * assert.deepEqual(smtm.map((x) => +x.toFixed(3)), [1, 1.778, 2.4]);
 * ```
 */
export function shareVsSplits(options: {
  others?: number;
  base_tokens?: number;
  sample_tokens?: number;
  max_splits?: number;
  modes?: NormalizationMode[];
} = {}): ShareRow[] {
  const others = options.others ?? 7;
  const base = options.base_tokens ?? 40;
  const L = options.sample_tokens ?? 40;
  const modes = options.modes ?? ["token_mean", "seq_mean_token_mean", "rollout_token_mean"];
  const rows: ShareRow[] = [];
  for (const mode of modes) {
    for (let k = 1; k <= (options.max_splits ?? 8); k++) {
      const batch: BatchRollout[] = [
        { rollout_id: "focal", group_id: "g", reward: 0, lengths: Array(k).fill(L) },
        ...Array.from({ length: others }, (_, i) => ({
          rollout_id: `o${i}`,
          group_id: "g",
          reward: 0,
          lengths: [base],
        })),
      ];
      const share = rolloutShares(batch, mode).get("focal") as number;
      rows.push({
        mode,
        splits: k,
        sample_tokens: L,
        share,
        relative: share * (others + 1),
      });
    }
  }
  return rows;
}

/** Sample- and rollout-level baselines of a batch's groups. */
export interface BaselineShift {
  groups: number;
  /** Mean over groups of (sample-level − rollout-level) baseline, and of its absolute value. */
  mean_shift: number;
  mean_abs_shift: number;
}

/**
 * The sample-level baseline against the rollout-level one on a batch, group by group, both
 * from `computeAdvantages` (its group reward means).
 */
export function baselineShift(batch: readonly BatchRollout[]): BaselineShift {
  const samples = batchSamples(batch);
  const rollout = computeAdvantages(samples, { level: "rollout" }).groups;
  const sample = computeAdvantages(samples, { level: "sample" }).groups;
  let sum = 0;
  let abs = 0;
  rollout.forEach((g, i) => {
    const d = sample[i].reward_mean - g.reward_mean;
    sum += d;
    abs += Math.abs(d);
  });
  const n = Math.max(1, rollout.length);
  return { groups: rollout.length, mean_shift: sum / n, mean_abs_shift: abs / n };
}

/** Options of {@link syntheticBatch}. */
export interface SyntheticBatchOptions {
  groups?: number;
  group_size?: number;
  /** Success probability of a rollout. */
  p?: number;
  /** Mean extra samples per rollout at a 50% success rate (as in the testbed). */
  split_rate: number;
  /** In [−1, 1]: < 0 failing rollouts split more, > 0 successful ones. */
  split_reward_corr: number;
  /** Trained tokens of a sample, and how much longer a failing rollout's samples are. */
  sample_tokens?: number;
  fail_length?: number;
  seed?: number;
}

/**
 * A synthetic batch with the testbed's split model (Poisson extra samples whose mean depends on
 * the outcome), deterministic in `seed`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { syntheticBatch } from "./mechanism_exact.ts";
 * const b = syntheticBatch({ split_rate: 0, split_reward_corr: 0 });
 * assert.ok(b.every((r) => r.lengths.length === 1));
 * ```
 */
export function syntheticBatch(options: SyntheticBatchOptions): BatchRollout[] {
  const groups = options.groups ?? 64;
  const size = options.group_size ?? 8;
  const p = options.p ?? 0.5;
  const L = options.sample_tokens ?? 40;
  const seed = options.seed ?? 0;
  const out: BatchRollout[] = [];
  for (let g = 0; g < groups; g++) {
    for (let m = 0; m < size; m++) {
      const reward = uniform(seed, g, m, 1) < p ? 1 : 0;
      const lambda = options.split_rate *
        (reward ? 1 + options.split_reward_corr : 1 - options.split_reward_corr);
      let k = 0;
      let prob = Math.exp(-lambda);
      let cdf = prob;
      const u = uniform(seed, g, m, 2);
      while (u > cdf && k < 7) {
        k += 1;
        prob *= lambda / k;
        cdf += prob;
      }
      const len = Math.round(L * (reward ? 1 : options.fail_length ?? 1));
      out.push({
        rollout_id: `g${g}-r${m}`,
        group_id: `g${g}`,
        reward,
        lengths: Array(k + 1).fill(len),
      });
    }
  }
  return out;
}

/** Where a setting sends the update on a batch. */
export interface SplitShare {
  setting: string;
  rollouts: number;
  /** Share of rollouts that split (more than one sample). */
  split_rollouts: number;
  /** Their share of the total weight, and of the update Σ share·|A|. */
  split_weight: number;
  split_update: number;
  /** Share of the update going to rollouts with reward 0 (failures). */
  failure_update: number;
}

/**
 * What share of the update a setting gives to the rollouts that split, compared with their
 * share of rollouts (groups with one reward get no update under any setting).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { splitShare } from "./mechanism_exact.ts";
 * const batch = [
 *   { rollout_id: "a", group_id: "g", reward: 1, lengths: [10, 10, 10] },
 *   { rollout_id: "b", group_id: "g", reward: 0, lengths: [10] },
 * ];
 * const rtm = splitShare(batch, { advantage: "rollout", normalization: "rollout_token_mean" });
 * assert.equal(rtm.split_rollouts, 0.5);
 * assert.equal(rtm.split_update, 0.5);
 * ```
 */
export function splitShare(batch: readonly BatchRollout[], setting: Setting): SplitShare {
  const samples = batchSamples(batch);
  const adv = computeAdvantages(samples, { level: setting.advantage });
  const advOf = new Map(adv.rollouts.map((r) => [r.rollout_id, r.advantage]));
  const shares = rolloutShares(batch, setting.normalization);
  let splitW = 0;
  let splitU = 0;
  let failU = 0;
  let totalU = 0;
  let splitN = 0;
  const kept = batch.filter((r) => shares.has(r.rollout_id));
  for (const r of kept) {
    const w = shares.get(r.rollout_id) as number;
    const u = w * Math.abs(advOf.get(r.rollout_id) ?? 0);
    totalU += u;
    if (r.reward === 0) failU += u;
    if (r.lengths.filter((L) => L > 0).length > 1) {
      splitN += 1;
      splitW += w;
      splitU += u;
    }
  }
  return {
    setting: `${setting.advantage}/${setting.normalization}`,
    rollouts: kept.length,
    split_rollouts: kept.length ? splitN / kept.length : 0,
    split_weight: splitW,
    split_update: totalU > 0 ? splitU / totalU : 0,
    failure_update: totalU > 0 ? failU / totalU : 0,
  };
}
