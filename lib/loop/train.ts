/**
 * One policy update from a set of GRPO groups: select samples (`select.ts`: unfinished,
 * reward-less, failed and empty rollouts and stale samples left out, each counted by reason) →
 * advantages (one-member groups counted) → loss weights over the whole batch → rollout-whole
 * packed micro-batches (a shared prompt stored once per micro-batch under `share_prefix`) →
 * `forward_backward` → `optim_step`, repeated `ppo_epochs` times over the same batch.
 *
 * Decoupled PPO: samples older than the staleness bound (under `stale_policy: "tis"`) and every
 * sample under `loss.old_logprobs: "recompute"` take their ratio against the proximal policy
 * π_prox, the policy this update starts from. The first epoch's pass computes it (its own
 * logprobs, in the trainer's numerics, before any optimizer step) and returns it; later epochs
 * send it back as `proximal_logprobs`, so their ratio π_θ / π_prox is clipped. The behaviour
 * weight min(π_prox / μ, tis_cap) corrects for the sampling policy μ.
 *
 * Alignment is measured inside the first epoch's passes, on trained tokens sampled at exactly
 * the version being trained (for older ones the policy moved in between, so a gap is expected
 * and says nothing about token alignment): per step over whole samples of that version, and per
 * model call (`call_alignment`, posted as `alignment` events by the step's close).
 *
 * @module
 */
import {
  alignmentMetrics,
  callAlignments,
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
import type { TrainerClient } from "../trainer/client.ts";
import { type RolloutData, selectSamples, updatesBehind } from "./select.ts";

export type { RolloutData };

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

/** What one update did (the step metrics are built from it). */
export interface UpdateResult {
  /** Policy version after the update (unchanged when nothing was trained). */
  policy_version: number;
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
  alignment: AlignmentMetrics | null;
  call_alignment: CallAlignmentRecord[];
  loss: number;
  entropy: number;
  /** Token-weighted mean over the update's epochs. */
  clip_fraction: number;
  /** Clip fraction of each epoch. */
  clip_fraction_epochs: number[];
  /** Mean over the update's optimizer steps. */
  grad_norm: number;
  timings_ms: { assemble: number; train: number };
}

/** Options of {@link updatePolicy}. */
export interface UpdateOptions {
  client: TrainerClient;
  config: LoopConfig;
  /** The worker's policy version now (the version this update trains from). */
  version: number;
  /** Decodes ids for break diagnosis (optional). */
  tokenizer?: Pick<ChatTokenizer, "decode" | "vocabSize">;
}

interface CallMeta {
  attempt_id: string;
  policy_version: number;
}

/** Per rollout, its model calls by seq (attempt and policy version). */
function callsOf(groups: RolloutData[][]): Map<string, Map<number, CallMeta>> {
  const out = new Map<string, Map<number, CallMeta>>();
  for (const group of groups) {
    for (const { rollout, events } of group) {
      const calls = new Map<number, CallMeta>();
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
 * Trains one optimizer step per PPO epoch on `groups` (each a list of rollouts of one task).
 *
 * @example
 * ```ts ignore
 * const result = await updatePolicy(groups, { client, config, version: 3 });
 * result.policy_version; // 4 when anything was trained
 * ```
 */
export async function updatePolicy(
  groups: RolloutData[][],
  options: UpdateOptions,
): Promise<UpdateResult> {
  const { client, config, version } = options;
  const t0 = performance.now();
  const selection = selectSamples(groups, {
    config,
    version,
    ...(options.tokenizer ? { tokenizer: options.tokenizer } : {}),
  });
  const { filtered } = selection;
  const calls = callsOf(groups);
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
  const kept = advantaged?.samples ?? [];
  const assembleMs = performance.now() - t0;

  const base: UpdateResult = {
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
    clip_fraction: 0,
    clip_fraction_epochs: [],
    grad_norm: 0,
    timings_ms: { assemble: assembleMs, train: 0 },
  };
  if (kept.length === 0) return base;

  // Weights come from the whole batch's denominators, so however rows are split into
  // micro-batches and calls, the gradient is that of one batch.
  const { samples: weighted } = computeLossWeights(kept, config.normalization);
  // Copies made downstream keep the same token arrays, which identify the stale samples.
  const isStale = (s: Sample) => selection.stale.has(s.tokens);
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

  const t1 = performance.now();
  // Shared-prefix packing stores a prompt shared by several samples once per micro-batch; the
  // worker computes the same logprobs and gradient either way (tests/trainer_shared_prefix_test).
  const pack = config.share_prefix ? packSharedPrefix : packMicroBatches;
  const perCall = config.loss.kind === "gspo" && config.loss.gspo_sequence === "call";
  // A data-parallel worker gets each part in one call: its samples balanced over the ranks
  // (Karmarkar–Karp on tokens), each rank's share packed; a single process gets one call per
  // micro-batch.
  const ranks = (await client.health()).world_size ?? 1;
  const packed = parts.map((part) => {
    const rows = part.samples.map(sampleRowView);
    const plan = ranks > 1
      ? planRankMicroBatches(rows, {
        ranks,
        token_budget: config.micro_token_budget,
        pack,
        keep_groups: config.share_prefix,
      })
      : null;
    const mbs = plan?.micro_batches ?? pack(rows, { token_budget: config.micro_token_budget });
    return {
      ...part,
      mbs: perCall ? mbs.map((mb) => withCallSequences(mb, part.samples)) : mbs,
      // Micro-batch indices of each forward_backward call.
      calls: plan ? [mbs.map((_, m) => m)] : mbs.map((_, m) => [m]),
      rankOf: plan?.rank_of_row,
      // π_prox per micro-batch row, from the first epoch (recompute parts only).
      proximal: [] as number[][],
    };
  });
  const alignInputs: { rollout_logprobs: number[]; trainer_logprobs: number[] }[] = [];
  const callAlignment: CallAlignmentRecord[] = [];
  let lossSum = 0;
  let entropySum = 0;
  let firstTokens = 0;
  let clipSum = 0;
  let tokenSum = 0;
  let gradNormSum = 0;
  const clipEpochs: number[] = [];
  let policyVersion = version;
  for (let epoch = 0; epoch < config.ppo_epochs; epoch++) {
    // Loss, entropy and alignment come from the first epoch: the pass at the behaviour policy.
    const first = epoch === 0;
    let epochClip = 0;
    let epochTokens = 0;
    for (const part of packed) {
      const recompute = part.loss.old_logprobs === "recompute";
      for (const batch of part.calls) {
        const out = await client.forwardBackward({
          rows: batch.map((m) => part.mbs[m].row),
          loss: part.loss,
          return_logprobs: first,
          ...(part.rankOf ? { rank_of_row: batch.map((m) => part.rankOf![m]) } : {}),
          ...(!first && recompute ? { proximal_logprobs: batch.map((m) => part.proximal[m]) } : {}),
        });
        const n = out.metrics.tokens;
        epochClip += out.metrics.clip_fraction * n;
        epochTokens += n;
        if (!first) continue;
        lossSum += out.loss;
        entropySum += out.metrics.entropy * n;
        firstTokens += n;
        for (const [k, m] of batch.entries()) {
          const mb = part.mbs[m];
          const lp = out.logprobs?.[k];
          if (!lp) continue;
          if (recompute) part.proximal[m] = lp;
          for (const seg of mb.segments) {
            const sample = part.samples[seg.source];
            // Where each of the sample's tokens sits in the packed row (shared prompts included).
            const at = segmentTokenIndex(mb, seg);
            const trainer = Array.from(at, (i) => lp[i]);
            const meta = calls.get(sample.rollout_id);
            for (
              const c of callAlignments(
                sample,
                trainer,
                (s) => meta?.get(s)?.policy_version === version,
              )
            ) {
              const call = meta!.get(c.request_seq)!;
              callAlignment.push({
                rollout_id: sample.rollout_id,
                attempt_id: call.attempt_id,
                request_seq: c.request_seq,
                policy_version: call.policy_version,
                metrics: c.metrics,
              });
            }
            if (sample.policy_version !== version) continue;
            const rolloutLp: number[] = [];
            const trainerLp: number[] = [];
            for (let t = 0; t < at.length; t++) {
              if (!sample.loss_mask[t]) continue;
              rolloutLp.push(sample.rollout_logprobs[t]);
              trainerLp.push(trainer[t]);
            }
            alignInputs.push({ rollout_logprobs: rolloutLp, trainer_logprobs: trainerLp });
          }
        }
      }
    }
    clipSum += epochClip;
    tokenSum += epochTokens;
    clipEpochs.push(epochTokens > 0 ? epochClip / epochTokens : 0);
    const step = await client.optimStep();
    gradNormSum += step.grad_norm;
    policyVersion = step.policy_version;
  }
  const trainMs = performance.now() - t1;

  const perRollout = new Map<string, { group_id: string; samples: number }>();
  let trainedTokens = 0;
  for (const s of weighted) {
    const entry = perRollout.get(s.rollout_id) ?? { group_id: s.group_id, samples: 0 };
    entry.samples++;
    perRollout.set(s.rollout_id, entry);
    for (let t = 0; t < s.loss_mask.length; t++) trainedTokens += s.loss_mask[t];
  }
  return {
    ...base,
    policy_version: policyVersion,
    updated: true,
    trained: [...perRollout].map(([rollout_id, e]) => ({
      rollout_id,
      group_id: e.group_id,
      samples: e.samples,
      assembled: selection.assembled.get(rollout_id) ?? 0,
    })),
    trained_samples: weighted.length,
    trained_tokens: trainedTokens,
    tis_samples: tisPart.length,
    staleness: weighted.map((s) => updatesBehind(version - s.policy_version, config.ppo_epochs)),
    alignment: alignInputs.length > 0 ? alignmentMetrics(alignInputs) : null,
    call_alignment: callAlignment,
    loss: lossSum,
    entropy: firstTokens > 0 ? entropySum / firstTokens : 0,
    clip_fraction: tokenSum > 0 ? clipSum / tokenSum : 0,
    clip_fraction_epochs: clipEpochs,
    grad_norm: gradNormSum / config.ppo_epochs,
    timings_ms: { assemble: assembleMs, train: trainMs },
  };
}
