/**
 * One policy update from a set of finished GRPO groups: assemble samples → filter (errors,
 * empty rollouts, stale samples, zero-variance groups; every drop counted by reason) →
 * advantages → loss weights over the whole batch → rollout-whole packed micro-batches (a shared
 * prompt stored once per micro-batch under `share_prefix`) →
 * `forward_backward` (fresh samples with the configured loss; stale ones, under `tis`, with
 * truncated importance sampling against their behaviour logprobs) → `optim_step`, repeated
 * `ppo_epochs` times over the same batch.
 *
 * Alignment is measured inside the same forward passes, on the trained tokens of samples that
 * were sampled at exactly the version being trained (for older samples the policy moved in
 * between, so a gap is expected and says nothing about token alignment).
 *
 * @module
 */
import { alignmentMetrics, computeAdvantages, computeLossWeights } from "../algo/mod.ts";
import {
  packMicroBatches,
  packSharedPrefix,
  sampleRowView,
  segmentTokenIndex,
} from "../batching/mod.ts";
import { assembleRollout } from "../samples/mod.ts";
import type {
  AlignmentMetrics,
  LossConfigInput,
  Rollout,
  RolloutEvent,
  Sample,
} from "../schema.ts";
import type { LoopConfig, LoopFilterReason } from "../schema/loop.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import type { TrainerClient } from "../trainer/client.ts";

/** A finished rollout with its events. */
export interface RolloutData {
  rollout: Rollout;
  events: RolloutEvent[];
}

/** What one update did (the step metrics are built from it). */
export interface UpdateResult {
  /** Policy version after the update (unchanged when nothing was trained). */
  policy_version: number;
  updated: boolean;
  rollouts: number;
  rewards: number[];
  samples: number;
  break_reasons: Record<string, number>;
  filtered: Record<LoopFilterReason, number>;
  /** Every trained rollout with the number of its samples in this (single) optimizer step. */
  trained: { rollout_id: string; group_id: string; samples: number; assembled: number }[];
  trained_samples: number;
  trained_tokens: number;
  tis_samples: number;
  staleness: number[];
  advantages: number[];
  alignment: AlignmentMetrics | null;
  loss: number;
  entropy: number;
  clip_fraction: number;
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

const emptyFiltered = (): Record<LoopFilterReason, number> => ({
  error: 0,
  no_samples: 0,
  zero_variance: 0,
  stale: 0,
});

/**
 * Trains one optimizer step on `groups` (each a list of finished rollouts of one task).
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
  const filtered = emptyFiltered();
  const breakReasons: Record<string, number> = {};
  const assembledCount = new Map<string, number>();
  const rewards: number[] = [];
  const fresh: Sample[] = [];
  let totalSamples = 0;
  let rollouts = 0;
  // Copies made downstream keep the same token arrays, which identify the stale samples.
  const staleTokens = new Set<Uint32Array>();
  // Each update advances the version by `ppo_epochs`; the staleness bound counts updates.
  const updatesBehind = (versions: number) =>
    versions < 0 ? versions : Math.ceil(versions / config.ppo_epochs);

  for (const group of groups) {
    for (const { rollout, events } of group) {
      rollouts++;
      const reward = rollout.reward ?? 0;
      rewards.push(reward);
      if (rollout.status !== "succeeded" && config.filters.drop_errors) {
        filtered.error++;
        continue;
      }
      const assembled = assembleRollout(events, {
        strategy: config.merge_strategy,
        group_id: rollout.group_id,
        reward,
        ...(options.tokenizer ? { tokenizer: options.tokenizer } : {}),
      });
      for (const [reason, n] of Object.entries(assembled.metrics.break_reasons)) {
        breakReasons[reason] = (breakReasons[reason] ?? 0) + n;
      }
      totalSamples += assembled.samples.length;
      assembledCount.set(rollout.rollout_id, assembled.samples.length);
      if (assembled.samples.length === 0) {
        filtered.no_samples++;
        continue;
      }
      for (const sample of assembled.samples) {
        const lag = updatesBehind(version - sample.policy_version);
        // lag < 0: sampled by a policy a killed run produced after its last checkpoint.
        if (lag < 0 || lag > config.schedule.max_staleness) {
          if (lag >= 0 && config.schedule.stale_policy === "tis") {
            staleTokens.add(sample.tokens);
          } else {
            filtered.stale++;
            continue;
          }
        }
        fresh.push(sample);
      }
    }
  }

  const advantaged = fresh.length > 0
    ? computeAdvantages(fresh, {
      ...config.advantage,
      zero_variance: config.filters.drop_zero_variance ? "drop" : "keep",
    })
    : null;
  // A singleton group has no variance either.
  filtered.zero_variance = (advantaged?.dropped.rollouts.zero_variance ?? 0) +
    (advantaged?.dropped.rollouts.singleton ?? 0);
  const kept = advantaged?.samples ?? [];
  const assembleMs = performance.now() - t0;

  const base: UpdateResult = {
    policy_version: version,
    updated: false,
    rollouts,
    rewards,
    samples: totalSamples,
    break_reasons: breakReasons,
    filtered,
    trained: [],
    trained_samples: 0,
    trained_tokens: 0,
    tis_samples: 0,
    staleness: [],
    advantages: advantaged?.rollouts.filter((r) => !r.dropped).map((r) => r.advantage) ?? [],
    alignment: null,
    loss: 0,
    entropy: 0,
    clip_fraction: 0,
    grad_norm: 0,
    timings_ms: { assemble: assembleMs, train: 0 },
  };
  if (kept.length === 0) return base;

  // Weights come from the whole batch's denominators, so however rows are split into
  // micro-batches and calls, the gradient is that of one batch.
  const { samples: weighted } = computeLossWeights(kept, config.normalization);
  const isStale = (s: Sample) => staleTokens.has(s.tokens);
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
  const packed = parts.map((part) => ({
    ...part,
    mbs: pack(part.samples.map(sampleRowView), { token_budget: config.micro_token_budget }),
  }));
  const alignInputs: { rollout_logprobs: number[]; trainer_logprobs: number[] }[] = [];
  let lossSum = 0;
  let entropySum = 0;
  let firstTokens = 0;
  let clipSum = 0;
  let tokenSum = 0;
  let gradNormSum = 0;
  let policyVersion = version;
  for (let epoch = 0; epoch < config.ppo_epochs; epoch++) {
    // Loss, entropy and alignment come from the first epoch: the pass at the behaviour policy.
    const first = epoch === 0;
    for (const part of packed) {
      for (const mb of part.mbs) {
        const out = await client.forwardBackward({
          rows: [mb.row],
          loss: part.loss,
          return_logprobs: first,
        });
        const n = out.metrics.tokens;
        clipSum += out.metrics.clip_fraction * n;
        tokenSum += n;
        if (!first) continue;
        lossSum += out.loss;
        entropySum += out.metrics.entropy * n;
        firstTokens += n;
        const lp = out.logprobs?.[0];
        if (!lp) continue;
        for (const seg of mb.segments) {
          const sample = part.samples[seg.source];
          if (sample.policy_version !== version) continue;
          // Where each of the sample's tokens sits in the packed row (shared prompts included).
          const at = segmentTokenIndex(mb, seg);
          const rolloutLp: number[] = [];
          const trainerLp: number[] = [];
          for (let t = 0; t < at.length; t++) {
            if (!sample.loss_mask[t]) continue;
            rolloutLp.push(sample.rollout_logprobs[t]);
            trainerLp.push(lp[at[t]]);
          }
          alignInputs.push({ rollout_logprobs: rolloutLp, trainer_logprobs: trainerLp });
        }
      }
    }
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
      assembled: assembledCount.get(rollout_id) ?? 0,
    })),
    trained_samples: weighted.length,
    trained_tokens: trainedTokens,
    tis_samples: tisPart.length,
    staleness: weighted.map((s) => updatesBehind(version - s.policy_version)),
    alignment: alignInputs.length > 0 ? alignmentMetrics(alignInputs) : null,
    loss: lossSum,
    entropy: firstTokens > 0 ? entropySum / firstTokens : 0,
    clip_fraction: tokenSum > 0 ? clipSum / tokenSum : 0,
    grad_norm: gradNormSum / config.ppo_epochs,
    timings_ms: { assemble: assembleMs, train: trainMs },
  };
}
