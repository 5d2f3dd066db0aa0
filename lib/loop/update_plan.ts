/**
 * The pure half of a policy update: what will train and how, computed without a worker.
 *
 * {@link planSelection} selects the samples (`select.ts`: every exclusion counted), computes their
 * advantages and notes one-member groups; {@link planBatches} weights them over the whole batch,
 * splits the stale ones into a decoupled-PPO part and packs every part into micro-batches (per
 * rank for a data-parallel worker). {@link planUpdate} does both. `train.ts` runs the plan's
 * epochs on the worker and summarises them.
 *
 * @example
 * ```ts ignore
 * const plan = planUpdate(groups, { config, version: 3, ranks: 1 });
 * plan.batches?.parts[0].calls.length; // forward_backward calls per epoch for fresh samples
 * ```
 *
 * @module
 */
import {
  type AdvantageResult,
  callIndex,
  computeAdvantages,
  computeLossWeights,
} from "../algo/mod.ts";
import {
  packMicroBatches,
  packSharedPrefix,
  planRankMicroBatches,
  sampleRowView,
  segmentTokenIndex,
} from "../batching/mod.ts";
import type { LossConfigInput, Sample } from "../schema.ts";
import type { AlignmentMetrics } from "../algo/schema.ts";
import type { MicroBatch } from "../batching/schema.ts";
import type { LoopConfig, LoopFilterReason } from "./schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { type RolloutData, type Selection, selectSamples } from "./select.ts";

/** A rollout that did not train this step, or trained as a one-member group. */
export interface RolloutNote {
  rollout_id: string;
  /** Its last attempt (where the note is posted); null when it never started. */
  attempt_id: string | null;
  reason: LoopFilterReason | "singleton_group";
  /** For `singleton_group`: the advantage its samples got. */
  advantage?: number;
}

/** Alignment of one trained model call (posted as an `alignment` event on its attempt). */
export interface CallAlignmentRecord {
  rollout_id: string;
  attempt_id: string;
  request_seq: number;
  policy_version: number;
  metrics: AlignmentMetrics;
}

/** What the epochs of an update measured on the worker (`runEpochs` in `train.ts`). */
export interface EpochsResult {
  /** Policy version after the update (unchanged when nothing was trained). */
  policy_version: number;
  alignment: AlignmentMetrics | null;
  call_alignment: CallAlignmentRecord[];
  /** Σ loss over the first epoch's calls. */
  loss: number;
  /** Token-weighted mean over the first epoch. */
  entropy: number;
  /** Token-weighted mean over the first epoch of the KL(π_θ ‖ π_ref) estimate (0: no KL). */
  kl_ref_mean: number;
  /** Token-weighted mean over the update's epochs. */
  clip_fraction: number;
  /** Clip fraction of each epoch. */
  clip_fraction_epochs: number[];
  /** Mean over the update's optimizer steps. */
  grad_norm: number;
}

/** What one update did (the step metrics are built from it): the plan's counts and the epochs'. */
export interface UpdateResult extends EpochsResult {
  updated: boolean;
  rollouts: number;
  /** Rewards of the rollouts that have one (each once). */
  rewards: number[];
  samples: number;
  break_reasons: Record<string, number>;
  filtered: Record<LoopFilterReason, number>;
  /** Groups with one member among the step's samples (see `advantage.singleton`). */
  singleton_groups: number;
  /** Rollouts left out whole, and rollouts that trained as one-member groups. */
  notes: RolloutNote[];
  /** Every trained rollout with the number of its samples in this (single) optimizer step. */
  trained: { rollout_id: string; group_id: string; samples: number; assembled: number }[];
  trained_samples: number;
  trained_tokens: number;
  tis_samples: number;
  staleness: number[];
  advantages: number[];
  timings_ms: { assemble: number; train: number };
}

/** Attempt and policy version of a rollout's model call. */
export interface ModelCallMeta {
  attempt_id: string;
  policy_version: number;
}

/** Options of {@link planSelection} and {@link planUpdate}. */
export interface PlanOptions {
  config: LoopConfig;
  /** The worker's policy version now (the version this update trains from). */
  version: number;
  /** Decodes ids for break diagnosis (optional). */
  tokenizer?: Pick<ChatTokenizer, "decode" | "vocabSize">;
}

/** The samples an update trains, with what was left out and why. */
export interface SelectionPlan {
  selection: Selection;
  advantaged: AdvantageResult | null;
  /** The samples that train (advantages filled), in selection order. */
  kept: Sample[];
  /** Per rollout, its model calls by seq. */
  calls: Map<string, Map<number, ModelCallMeta>>;
  /** The result of an update that trains nothing (the epochs fill in the rest). */
  untrained: UpdateResult;
}

/** One loss config's share of the batch, packed. */
export interface PlannedPart {
  samples: Sample[];
  loss: LossConfigInput;
  mbs: MicroBatch[];
  /** Micro-batch indices of each forward_backward call. */
  calls: number[][];
  /** Data-parallel workers: the rank of each micro-batch row. */
  rankOf: number[] | undefined;
}

/** Weighted, split and packed samples of an update. */
export interface BatchPlan {
  /** Every trained sample with its loss weight (fresh and stale). */
  weighted: Sample[];
  /** Samples trained with decoupled PPO because they were older than the bound. */
  tis_samples: number;
  parts: PlannedPart[];
}

/** A whole update plan: the selection, and the batches when anything trains. */
export interface UpdatePlan extends SelectionPlan {
  batches: BatchPlan | null;
}

/** Per rollout, its model calls by seq (attempt and policy version). */
function callsOf(groups: RolloutData[][]): Map<string, Map<number, ModelCallMeta>> {
  const out = new Map<string, Map<number, ModelCallMeta>>();
  for (const group of groups) {
    for (const { rollout, events } of group) {
      const calls = new Map<number, ModelCallMeta>();
      for (const e of events) {
        if (e.type !== "model_request") continue;
        calls.set(e.seq, { attempt_id: e.attempt_id, policy_version: e.payload.policy_version });
      }
      out.set(rollout.rollout_id, calls);
    }
  }
  return out;
}

/**
 * Gives every model call of every packed sample its own `sequence_ids` value (GSPO with
 * `gspo_sequence: "call"`): trained tokens of one call share an id; context tokens keep 0
 * (they are never trained, so their id is never read).
 */
function withCallSequences(mb: MicroBatch, samples: readonly Sample[]): MicroBatch {
  const ids = new Array<number>(mb.row.tokens.length).fill(0);
  const idOf = new Map<string, number>();
  mb.segments.forEach((seg, k) => {
    const sample = samples[seg.source];
    const at = segmentTokenIndex(mb, seg);
    const call = callIndex(sample);
    for (let t = 0; t < at.length; t++) {
      if (!sample.loss_mask[t]) continue;
      const key = `${k}:${call[t]}`;
      let id = idOf.get(key);
      if (id === undefined) idOf.set(key, id = idOf.size);
      ids[at[t]] = id;
    }
  });
  return { ...mb, row: { ...mb.row, sequence_ids: ids } };
}

/**
 * Selects the samples of `groups` and computes their advantages: the update's first, pure stage.
 *
 * @example
 * ```ts ignore
 * const plan = planSelection(groups, { config, version: 3 });
 * plan.untrained.filtered.no_reward; // rollouts left out for want of a reward event
 * ```
 */
export function planSelection(groups: RolloutData[][], options: PlanOptions): SelectionPlan {
  const { config, version } = options;
  const selection = selectSamples(groups, {
    config,
    version,
    ...(options.tokenizer ? { tokenizer: options.tokenizer } : {}),
  });
  const { filtered } = selection;
  const lastAttempt = new Map(
    groups.flat().map(({ rollout }) => [
      rollout.rollout_id,
      rollout.attempts.at(-1)?.attempt_id ?? null,
    ]),
  );
  const notes: RolloutNote[] = selection.excluded.map((e) => ({
    ...e,
    attempt_id: lastAttempt.get(e.rollout_id) ?? null,
  }));

  const advantaged = selection.samples.length > 0
    ? computeAdvantages(selection.samples, {
      ...config.advantage,
      zero_variance: config.filters.drop_zero_variance ? "drop" : "keep",
    })
    : null;
  filtered.zero_variance = advantaged?.dropped.rollouts.zero_variance ?? 0;
  filtered.singleton = advantaged?.dropped.rollouts.singleton ?? 0;
  const singletons = new Set(
    (advantaged?.groups ?? []).filter((g) => g.singleton).map((g) => g.group_id),
  );
  for (const r of advantaged?.rollouts ?? []) {
    if (!singletons.has(r.group_id)) continue;
    notes.push({
      rollout_id: r.rollout_id,
      attempt_id: lastAttempt.get(r.rollout_id) ?? null,
      reason: r.dropped ? "singleton" : "singleton_group",
      advantage: r.advantage,
    });
  }
  const untrained: UpdateResult = {
    policy_version: version,
    updated: false,
    rollouts: selection.rollouts,
    rewards: selection.rewards,
    samples: selection.total_samples,
    break_reasons: selection.break_reasons,
    filtered,
    singleton_groups: singletons.size,
    notes,
    trained: [],
    trained_samples: 0,
    trained_tokens: 0,
    tis_samples: 0,
    staleness: [],
    advantages: advantaged?.rollouts.filter((r) => !r.dropped).map((r) => r.advantage) ?? [],
    alignment: null,
    call_alignment: [],
    loss: 0,
    entropy: 0,
    kl_ref_mean: 0,
    clip_fraction: 0,
    clip_fraction_epochs: [],
    grad_norm: 0,
    timings_ms: { assemble: 0, train: 0 },
  };
  return {
    selection,
    advantaged,
    kept: advantaged?.samples ?? [],
    calls: callsOf(groups),
    untrained,
  };
}

/**
 * Weights the kept samples over the whole batch, splits off the stale ones (decoupled PPO with
 * `tis_cap`) and packs each part into micro-batches, per rank for a data-parallel worker (one
 * `forward_backward` per part) or one call per micro-batch for a single process.
 *
 * @example
 * ```ts ignore
 * const batches = planBatches(planSelection(groups, { config, version }), config, 1);
 * batches.parts.map((p) => p.loss.old_logprobs); // ["rollout"] (+ "recompute" for stale ones)
 * ```
 */
export function planBatches(plan: SelectionPlan, config: LoopConfig, ranks: number): BatchPlan {
  // Weights come from the whole batch's denominators, so however rows are split into
  // micro-batches and calls, the gradient is that of one batch.
  const { samples: weighted } = computeLossWeights(plan.kept, config.normalization);
  // Copies made downstream keep the same token arrays, which identify the stale samples.
  const isStale = (s: Sample) => plan.selection.stale.has(s.tokens);
  const parts: { samples: Sample[]; loss: LossConfigInput }[] = [];
  const freshPart = weighted.filter((s) => !isStale(s));
  const tisPart = weighted.filter((s) => isStale(s));
  if (freshPart.length > 0) parts.push({ samples: freshPart, loss: config.loss });
  if (tisPart.length > 0) {
    parts.push({
      samples: tisPart,
      loss: { ...config.loss, old_logprobs: "recompute", tis_cap: config.schedule.tis_cap },
    });
  }
  // Shared-prefix packing stores a prompt shared by several samples once per micro-batch; the
  // worker computes the same logprobs and gradient either way (tests/trainer_shared_prefix_test).
  const pack = config.share_prefix ? packSharedPrefix : packMicroBatches;
  const perCall = config.loss.kind === "gspo" && config.loss.gspo_sequence === "call";
  // A data-parallel worker gets each part in one call: its samples balanced over the ranks
  // (Karmarkar–Karp on tokens), each rank's share packed; a single process gets one call per
  // micro-batch.
  const packed = parts.map((part): PlannedPart => {
    const rows = part.samples.map(sampleRowView);
    const rankPlan = ranks > 1
      ? planRankMicroBatches(rows, {
        ranks,
        token_budget: config.micro_token_budget,
        pack,
        keep_groups: config.share_prefix,
      })
      : null;
    const mbs = rankPlan?.micro_batches ?? pack(rows, { token_budget: config.micro_token_budget });
    return {
      ...part,
      mbs: perCall ? mbs.map((mb) => withCallSequences(mb, part.samples)) : mbs,
      calls: rankPlan ? [mbs.map((_, m) => m)] : mbs.map((_, m) => [m]),
      rankOf: rankPlan?.rank_of_row,
    };
  });
  return { weighted, tis_samples: tisPart.length, parts: packed };
}

/**
 * The whole plan of an update, without a worker: selection and advantages, then (when anything
 * trains) weights, the decoupled-PPO split and packing for a worker of `ranks` ranks.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "../schema.ts";
 * import { LoopConfigSchema } from "./schema.ts";
 * import { planUpdate } from "./update_plan.ts";
 * const config = parseOrThrow(LoopConfigSchema, {
 *   name: "doc",
 *   tasks: [{ id: "t", input: {} }],
 *   harness: { name: "command", options: { command: ["true"] } },
 * });
 * const plan = planUpdate([], { config, version: 0, ranks: 1 });
 * assert.equal(plan.batches, null); // nothing to train
 * ```
 */
export function planUpdate(
  groups: RolloutData[][],
  options: PlanOptions & { ranks: number },
): UpdatePlan {
  const selected = planSelection(groups, options);
  const batches = selected.kept.length > 0
    ? planBatches(selected, options.config, options.ranks)
    : null;
  return { ...selected, batches };
}
