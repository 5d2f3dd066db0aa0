/**
 * A full training plan for one batch of samples: optimizer steps over whole rollouts, §6 loss
 * weights from each step's global denominators, data-parallel ranks balanced by workload, and
 * packed micro-batches under a token budget.
 *
 * @module
 */
import { parseOrThrow, type Sample, ValidationError } from "../schema.ts";
import { type TrainingPlanOptions, TrainingPlanOptionsSchema } from "./schema.ts";
import type { BalanceMethod, MicroBatch, PackOptions } from "./schema.ts";
import { computeLossWeights, type LossWeightPlan } from "../algo/normalization.ts";
import { assertSamples } from "../algo/validate.ts";
import { balance, imbalance, workload } from "./balance.ts";
import { rolloutUnits } from "./flatten.ts";
import { type PackableRow, packMicroBatches, sampleRowView } from "./packing.ts";
import { planOptimizerSteps } from "./steps.ts";

/** One data-parallel rank's share of an optimizer step. */
export interface RankBatch {
  rank: number;
  /** Packed micro-batches; each segment's `source` is the sample's index in the input. */
  micro_batches: MicroBatch[];
  tokens: number;
  /** Σ a·L + L² over the rank's rows. */
  workload: number;
}

/** One optimizer step of a {@link TrainingPlan}. */
export interface StepBatch {
  index: number;
  rollout_ids: string[];
  /** Indices of the step's samples in the input, ascending. */
  samples: number[];
  /** The step's loss weights (the whole batch's plan when `weight_scope` is `batch`). */
  weights: LossWeightPlan;
  ranks: RankBatch[];
  /** Workload imbalance between ranks (max / mean − 1). */
  rank_imbalance: number;
}

/** What {@link planTrainingBatch} returns. */
export interface TrainingPlan {
  steps: StepBatch[];
  /** Rollouts larger than `steps.step_tokens`, each given its own step. */
  oversized_rollouts: string[];
  stats: {
    rollouts: number;
    samples: number;
    tokens: number;
    trained_tokens: number;
    micro_batches: number;
    /** Rows longer than `micro_token_budget`, each alone in its micro-batch. */
    oversized_rows: number;
    step_token_imbalance: number;
    max_rank_imbalance: number;
  };
}

/**
 * Plans how a batch of samples (advantages already filled) is trained.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { planTrainingBatch } from "./plan.ts";
 * const s = (rollout_id: string, n: number) => ({
 *   rollout_id, group_id: "g", reward: 1, tokens: new Uint32Array(n).fill(3),
 *   loss_mask: new Uint8Array(n).fill(1), rollout_logprobs: new Float32Array(n).fill(-1),
 *   advantage: new Float32Array(n).fill(0.5), policy_version: 0,
 *   provenance: { request_seqs: [1], split_reason: null, strategy: "prefix_merge" as const,
 *     off_policy: false, response_starts: [0] },
 * });
 * const plan = planTrainingBatch([s("a", 8), s("a", 4), s("b", 6), s("c", 9)], {
 *   ranks: 2, micro_token_budget: 10,
 * });
 * assert.equal(plan.steps[0].ranks.length, 2);
 * ```
 */
export function planTrainingBatch(
  samples: readonly Sample[],
  options: TrainingPlanOptions,
): TrainingPlan {
  const opts = parseOrThrow(TrainingPlanOptionsSchema, options, "options");
  assertSamples(samples, { advantage: true });
  const units = rolloutUnits(samples);
  const stepPlan = planOptimizerSteps(units, opts.steps);
  const batchWeights = opts.weight_scope === "batch"
    ? computeLossWeights(samples, opts.normalization)
    : null;

  let microBatches = 0;
  let oversizedRows = 0;
  let maxRankImbalance = 0;
  const steps: StepBatch[] = stepPlan.steps.map((planned, index) => {
    const indices = planned.units.flatMap((u) => units[u].rows).sort((a, b) => a - b);
    let weighted: Sample[];
    let weights: LossWeightPlan;
    if (batchWeights) {
      weighted = indices.map((i) => batchWeights.samples[i]);
      weights = batchWeights.plan;
    } else {
      const result = computeLossWeights(indices.map((i) => samples[i]), opts.normalization);
      weighted = result.samples;
      weights = result.plan;
    }
    // Zero-copy views: the packer writes each token once, straight into its micro-batch row.
    const rows = weighted.map(sampleRowView);
    const costs = rows.map((r) => workload(r.tokens.length, opts.workload_a));
    const split = balance(costs, opts.ranks, opts.balance);
    const ranks = split.parts.map((part, rank) => {
      const mbs = packMicroBatches(part.map((i) => rows[i]), {
        token_budget: opts.micro_token_budget,
        order: opts.pack_order,
      });
      for (const mb of mbs) {
        for (const seg of mb.segments) seg.source = indices[part[seg.source]];
        if (mb.oversized) oversizedRows += 1;
      }
      microBatches += mbs.length;
      return {
        rank,
        micro_batches: mbs,
        tokens: part.reduce((acc, i) => acc + rows[i].tokens.length, 0),
        workload: split.loads[rank],
      };
    });
    const rankImbalance = imbalance(split.loads);
    maxRankImbalance = Math.max(maxRankImbalance, rankImbalance);
    return {
      index,
      rollout_ids: planned.rollout_ids,
      samples: indices,
      weights,
      ranks,
      rank_imbalance: rankImbalance,
    };
  });

  return {
    steps,
    oversized_rollouts: stepPlan.oversized,
    stats: {
      rollouts: units.length,
      samples: samples.length,
      tokens: units.reduce((acc, u) => acc + u.tokens, 0),
      trained_tokens: units.reduce((acc, u) => acc + u.trained_tokens, 0),
      micro_batches: microBatches,
      oversized_rows: oversizedRows,
      step_token_imbalance: stepPlan.imbalance,
      max_rank_imbalance: maxRankImbalance,
    },
  };
}

/** Options of {@link planRankMicroBatches}. */
export interface RankMicroBatchOptions {
  /** Data-parallel ranks of the worker. */
  ranks: number;
  /** Most tokens in one packed micro-batch row. */
  token_budget: number;
  /**
   * What ranks are balanced by: `tokens` (default), or `attention`, the packed attention cost
   * a·L + L² of each row (packed segments never attend across each other, so a micro-batch
   * costs the sum over its rows).
   */
  balance_by?: "tokens" | "attention";
  /** The a of a·L + L² (default 6144, about 6·d_model for d_model 1024). */
  workload_a?: number;
  method?: BalanceMethod;
  /** The packer of each rank's share (default {@link packMicroBatches}). */
  pack?: (rows: readonly PackableRow[], options: PackOptions) => MicroBatch[];
  /** Keep the rows of one group on one rank (shared-prefix packing stores their prompt once). */
  keep_groups?: boolean;
}

/** What {@link planRankMicroBatches} returns. */
export interface RankMicroBatches {
  /** Rank 0's micro-batches first, then rank 1's, …; each segment's `source` indexes the input. */
  micro_batches: MicroBatch[];
  /** The rank of each micro-batch (`rank_of_row` of a `forward_backward` call). */
  rank_of_row: number[];
  /** Packed tokens per rank. */
  rank_tokens: number[];
  /** Max over mean of `rank_tokens` (1: perfectly even; 0 with no tokens at all). */
  token_ratio: number;
}

/**
 * One optimizer step's rows split over data-parallel ranks (Karmarkar–Karp by default), then
 * each rank's share packed into micro-batches, so that every rank gets about the same work
 * whatever the micro-batch count. The rows' loss weights are left as they are: computed over the
 * whole batch before the split, the ranks' gradients sum to the one-process gradient.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { planRankMicroBatches } from "./plan.ts";
 * const row = (id: string, n: number) => ({
 *   rollout_id: id, group_id: "g", tokens: new Array(n).fill(7),
 *   loss_mask: new Array(n).fill(1), advantages: new Array(n).fill(1),
 *   loss_weights: new Array(n).fill(0.01), rollout_logprobs: new Array(n).fill(-1),
 * });
 * const plan = planRankMicroBatches([row("a", 90), row("b", 50), row("c", 40), row("d", 10)], {
 *   ranks: 2, token_budget: 64,
 * });
 * assert.deepEqual(plan.rank_tokens, [100, 90]);
 * assert.deepEqual(plan.rank_of_row, [0, 0, 1, 1]);
 * assert.equal(plan.micro_batches.length, 4);
 * ```
 */
export function planRankMicroBatches(
  rows: readonly PackableRow[],
  options: RankMicroBatchOptions,
): RankMicroBatches {
  const ranks = options.ranks;
  if (!Number.isInteger(ranks) || ranks < 1) {
    throw new ValidationError("ranks", [`ranks: must be an integer >= 1, got ${ranks}`]);
  }
  const a = options.workload_a ?? 6144;
  const cost = (i: number) =>
    options.balance_by === "attention" ? workload(rows[i].tokens.length, a) : rows[i].tokens.length;
  const units: number[][] = [];
  if (options.keep_groups) {
    const byGroup = new Map<string, number[]>();
    rows.forEach((r, i) => {
      let unit = byGroup.get(r.group_id);
      if (!unit) byGroup.set(r.group_id, unit = []);
      unit.push(i);
    });
    units.push(...byGroup.values());
  } else {
    rows.forEach((_, i) => units.push([i]));
  }
  const split = balance(
    units.map((u) => u.reduce((acc, i) => acc + cost(i), 0)),
    ranks,
    options.method ?? "kk",
  );
  const pack = options.pack ?? packMicroBatches;
  const micro_batches: MicroBatch[] = [];
  const rank_of_row: number[] = [];
  const rank_tokens: number[] = [];
  split.parts.forEach((part, rank) => {
    const members = part.flatMap((u) => units[u]).sort((x, y) => x - y);
    const mbs = members.length > 0
      ? pack(members.map((i) => rows[i]), { token_budget: options.token_budget })
      : [];
    let tokens = 0;
    for (const mb of mbs) {
      for (const seg of mb.segments) seg.source = members[seg.source];
      micro_batches.push(mb);
      rank_of_row.push(rank);
      tokens += mb.tokens;
    }
    rank_tokens.push(tokens);
  });
  const total = rank_tokens.reduce((x, y) => x + y, 0);
  return {
    micro_batches,
    rank_of_row,
    rank_tokens,
    token_ratio: total > 0 ? Math.max(...rank_tokens) / (total / ranks) : 0,
  };
}
