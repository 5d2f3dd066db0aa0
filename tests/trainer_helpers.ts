/**
 * Shared fixtures of the trainer tests: a tiny model config, a worker per test, row builders.
 *
 * @module
 */
import type { BuiltinModelConfigInput, LossConfigInput, TrainingRow } from "../lib/schema.ts";
import { type LocalWorker, startLocalWorker } from "../lib/trainer/mod.ts";

/** A model small enough for CPU tests (≈ 20k parameters). */
export const TINY: BuiltinModelConfigInput = {
  vocab_size: 32,
  d_model: 32,
  n_layers: 2,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 64,
  max_seq_len: 64,
  tie_embeddings: false,
  rope_theta: 10_000,
};

/** Starts a worker, initialises the tiny model, runs `fn`, always stops the worker. */
export async function withWorker(
  fn: (worker: LocalWorker) => Promise<void>,
  options: { config?: BuiltinModelConfigInput; seed?: number; lr?: number; init?: boolean } = {},
): Promise<void> {
  const worker = await startLocalWorker({ threads: 1 });
  try {
    if (options.init !== false) {
      await worker.client.init({
        model: { kind: "builtin", config: options.config ?? TINY, seed: options.seed ?? 0 },
        optimizer: { lr: options.lr ?? 1e-3, grad_clip: 0 },
        device: "cpu",
        dtype: "float32",
      });
    }
    await fn(worker);
  } finally {
    await worker.close();
  }
}

/** Builds a training row; arrays not given default to zeros (mask) or 0-valued numbers. */
export function row(
  tokens: number[],
  fields: Partial<Omit<TrainingRow, "tokens">> = {},
): TrainingRow {
  const zeros = tokens.map(() => 0);
  return {
    rollout_id: fields.rollout_id ?? "r",
    group_id: fields.group_id ?? "g",
    tokens,
    loss_mask: fields.loss_mask ?? zeros.map(() => 0 as const),
    advantages: fields.advantages ?? zeros,
    loss_weights: fields.loss_weights ?? zeros,
    rollout_logprobs: fields.rollout_logprobs ?? zeros,
    ...(fields.parent ? { parent: fields.parent } : {}),
    ...(fields.segment_starts ? { segment_starts: fields.segment_starts } : {}),
  };
}

/** Largest |a_i − b_i|. */
export function maxAbsDiff(a: ArrayLike<number>, b: ArrayLike<number>): number {
  if (a.length !== b.length) throw new Error(`length ${a.length} vs ${b.length}`);
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i] - b[i]));
  return m;
}

/** Largest |a_i|. */
export function maxAbs(a: ArrayLike<number>): number {
  let m = 0;
  for (let i = 0; i < a.length; i++) m = Math.max(m, Math.abs(a[i]));
  return m;
}

/** A PPO loss config with symmetric clipping. */
export const PPO: LossConfigInput = { kind: "ppo", clip_low: 0.2, clip_high: 0.2 };
