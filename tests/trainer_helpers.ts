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

/** How `startInitialised` starts and initialises a CPU worker (fp32, one torch thread). */
export interface InitialisedWorkerOptions {
  config?: BuiltinModelConfigInput;
  seed?: number;
  lr?: number;
  gradClip?: number;
  /** Data-parallel ranks (gloo on the CPU); 1 by default. */
  ranks?: number;
  collectiveTimeoutS?: number;
}

/** Starts a one-thread CPU worker and initialises the built-in model on it (fp32). */
export async function startInitialised(
  options: InitialisedWorkerOptions = {},
): Promise<LocalWorker> {
  const worker = await startLocalWorker({
    threads: 1,
    ...(options.ranks !== undefined ? { ranks: options.ranks } : {}),
    ...(options.collectiveTimeoutS !== undefined
      ? { collectiveTimeoutS: options.collectiveTimeoutS }
      : {}),
  });
  try {
    await worker.client.init({
      model: { kind: "builtin", config: options.config ?? TINY, seed: options.seed ?? 0 },
      optimizer: { lr: options.lr ?? 1e-3, grad_clip: options.gradClip ?? 0 },
      device: "cpu",
      dtype: "float32",
    });
  } catch (e) {
    await worker.close();
    throw e;
  }
  return worker;
}

/** Starts a worker, initialises the tiny model, runs `fn`, always stops the worker. */
export async function withWorker(
  fn: (worker: LocalWorker) => Promise<void>,
  options: { config?: BuiltinModelConfigInput; seed?: number; lr?: number; init?: boolean } = {},
): Promise<void> {
  const worker = options.init === false
    ? await startLocalWorker({ threads: 1 })
    : await startInitialised(options);
  try {
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

/** One sample of a grouped batch: its tokens, which of them are trained, its group's index. */
export interface SampleShape {
  tokens: number[];
  mask: (0 | 1)[];
  group: number;
}

/**
 * Training rows of grouped samples, as one optimizer step sees them: rollout `g{group}-r{i}` in
 * group `g{group}`, loss weight 1 / (trained tokens of the whole batch) on each trained token,
 * and the advantage and behaviour logprob the callbacks give for sample `i` (0 on untrained
 * tokens).
 */
export function groupedRows(
  shapes: SampleShape[],
  values: {
    advantage: (i: number, group: number) => number;
    logprob: (i: number, t: number) => number;
  },
): TrainingRow[] {
  const trained = shapes.reduce((n, s) => n + s.mask.reduce((a: number, m) => a + m, 0), 0);
  return shapes.map((s, i) =>
    row(s.tokens, {
      rollout_id: `g${s.group}-r${i}`,
      group_id: `g${s.group}`,
      loss_mask: s.mask,
      advantages: s.mask.map((m) => (m ? values.advantage(i, s.group) : 0)),
      loss_weights: s.mask.map((m) => (m ? 1 / trained : 0)),
      rollout_logprobs: s.mask.map((m, t) => (m ? values.logprob(i, t) : 0)),
    })
  );
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
