/**
 * One policy update from a set of GRPO groups: select samples (`select.ts`: unfinished,
 * reward-less, failed and empty rollouts and stale samples left out, each counted by reason) →
 * advantages (one-member groups counted) → loss weights over the whole batch → rollout-whole
 * packed micro-batches (a shared prompt stored once per micro-batch under `share_prefix`) →
 * `forward_backward` → `optim_step`, repeated `ppo_epochs` times over the same batch.
 *
 * The update has three seams: the pure plan (`update_plan.ts`: selection, advantages, weights,
 * packing — testable without a worker), the epochs on the worker ({@link runEpochs}) and the
 * summary ({@link summarizeUpdate}).
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
import { alignmentMetrics, callAlignments } from "../algo/mod.ts";
import { segmentTokenIndex } from "../batching/mod.ts";
import type { LoopConfig } from "./schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import type { TrainerClient } from "../trainer/client.ts";
import { type RolloutData, updatesBehind } from "./select.ts";
import {
  type BatchPlan,
  type CallAlignmentRecord,
  type EpochsResult,
  type ModelCallMeta,
  planBatches,
  planSelection,
  type SelectionPlan,
  type UpdateResult,
} from "./update_plan.ts";

export type { RolloutData };
export type {
  CallAlignmentRecord,
  EpochsResult,
  RolloutNote,
  UpdateResult,
} from "./update_plan.ts";

/** Options of {@link updatePolicy}. */
export interface UpdateOptions {
  client: TrainerClient;
  config: LoopConfig;
  /** The worker's policy version now (the version this update trains from). */
  version: number;
  /** Decodes ids for break diagnosis (optional). */
  tokenizer?: Pick<ChatTokenizer, "decode" | "vocabSize">;
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
  const selected = planSelection(groups, {
    config,
    version,
    ...(options.tokenizer ? { tokenizer: options.tokenizer } : {}),
  });
  const assembleMs = performance.now() - t0;
  const untrained = { ...selected.untrained, timings_ms: { assemble: assembleMs, train: 0 } };
  if (selected.kept.length === 0) return untrained;

  const t1 = performance.now();
  const ranks = (await client.health()).world_size ?? 1;
  const batches = planBatches(selected, config, ranks);
  const epochs = await runEpochs(client, batches, {
    epochs: config.ppo_epochs,
    version,
    calls: selected.calls,
  });
  const trainMs = performance.now() - t1;
  return summarizeUpdate(
    { ...selected, untrained },
    batches,
    epochs,
    { config, version, train_ms: trainMs },
  );
}

/**
 * Runs the planned batches for `epochs` PPO epochs: every part's calls, then one optimizer
 * step per epoch. Loss, entropy, the reference KL and alignment come from the first epoch (the
 * pass at the policy the update starts from), whose logprobs are also π_prox for the later
 * epochs of `recompute` parts.
 *
 * @example
 * ```ts ignore
 * const epochs = await runEpochs(client, planBatches(selected, config, 1), {
 *   epochs: 2, version: 3, calls: selected.calls,
 * });
 * epochs.clip_fraction_epochs.length; // 2
 * ```
 */
export async function runEpochs(
  client: TrainerClient,
  batches: BatchPlan,
  options: {
    epochs: number;
    version: number;
    calls: Map<string, Map<number, ModelCallMeta>>;
  },
): Promise<EpochsResult> {
  const { version, calls } = options;
  const packed = batches.parts.map((part) => ({
    ...part,
    // π_prox per micro-batch row, from the first epoch (recompute parts only).
    proximal: [] as number[][],
  }));
  const alignInputs: { rollout_logprobs: number[]; trainer_logprobs: number[] }[] = [];
  const callAlignment: CallAlignmentRecord[] = [];
  let lossSum = 0;
  let entropySum = 0;
  let klRefSum = 0;
  let firstTokens = 0;
  let clipSum = 0;
  let tokenSum = 0;
  let gradNormSum = 0;
  const clipEpochs: number[] = [];
  let policyVersion = version;
  for (let epoch = 0; epoch < options.epochs; epoch++) {
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
        klRefSum += (out.metrics.kl_ref_mean ?? 0) * n;
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
  return {
    policy_version: policyVersion,
    loss: lossSum,
    entropy: firstTokens > 0 ? entropySum / firstTokens : 0,
    kl_ref_mean: firstTokens > 0 ? klRefSum / firstTokens : 0,
    clip_fraction: tokenSum > 0 ? clipSum / tokenSum : 0,
    clip_fraction_epochs: clipEpochs,
    grad_norm: gradNormSum / options.epochs,
    alignment: alignInputs.length > 0 ? alignmentMetrics(alignInputs) : null,
    call_alignment: callAlignment,
  };
}

/**
 * The result of a trained update: the plan's counts with what the epochs measured.
 *
 * @example
 * ```ts ignore
 * const result = summarizeUpdate(selected, batches, epochs, { config, version, train_ms });
 * result.trained_tokens; // trained (loss_mask = 1) tokens of the batch
 * ```
 */
export function summarizeUpdate(
  selected: SelectionPlan,
  batches: BatchPlan,
  epochs: EpochsResult,
  options: { config: LoopConfig; version: number; train_ms: number },
): UpdateResult {
  const { weighted } = batches;
  const perRollout = new Map<string, { group_id: string; samples: number }>();
  let trainedTokens = 0;
  for (const s of weighted) {
    const entry = perRollout.get(s.rollout_id) ?? { group_id: s.group_id, samples: 0 };
    entry.samples++;
    perRollout.set(s.rollout_id, entry);
    for (let t = 0; t < s.loss_mask.length; t++) trainedTokens += s.loss_mask[t];
  }
  const base = selected.untrained;
  return {
    ...base,
    ...epochs,
    updated: true,
    trained: [...perRollout].map(([rollout_id, e]) => ({
      rollout_id,
      group_id: e.group_id,
      samples: e.samples,
      assembled: selected.selection.assembled.get(rollout_id) ?? 0,
    })),
    trained_samples: weighted.length,
    trained_tokens: trainedTokens,
    tis_samples: batches.tis_samples,
    staleness: weighted.map((s) =>
      updatesBehind(options.version - s.policy_version, options.config.ppo_epochs)
    ),
    timings_ms: { assemble: base.timings_ms.assemble, train: options.train_ms },
  };
}
