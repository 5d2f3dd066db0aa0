/**
 * Engine parity: the same token sequences scored by the torch worker and by llama.cpp on the
 * worker's GGUF export, compared with the alignment metrics the loop reports (Pearson of
 * probabilities, |Δp|, |Δlogprob|, k3 KL). With an f32 export the two must agree to ~1e-6 —
 * a check of RoPE, q/k-norm, GQA and tied embeddings against an implementation nobody here
 * wrote; with f16 or q8_0 the figures measure what quantization costs.
 *
 * @example
 * ```ts ignore
 * import { llamaParity } from "./parity.ts";
 * const { metrics } = await llamaParity({ client, gguf: "policy-f32.gguf", sequences });
 * console.log(metrics.max_abs_dlogprob); // ≤ 1e-3 for f32
 * ```
 *
 * @module
 */
import { alignmentMetrics } from "../algo/alignment.ts";
import type { AlignmentMetrics } from "../algo/schema.ts";
import type { TrainerClient } from "../trainer/client.ts";
import { type LlamaGpu, loadGguf, teacherForcedLogprobs } from "./llama_eval.ts";

/** Input of {@link llamaParity}. */
export interface ParityInput {
  /** A worker holding the policy the GGUF was exported from. */
  client: TrainerClient;
  /** The export. */
  gguf: string;
  /** Token ids; the first token of each is context only. */
  sequences: number[][];
  /** Temperature both sides score at (default 1). */
  temperature?: number;
  gpu?: LlamaGpu;
  /** llama.cpp's KV cache precision (default F32). */
  kvCacheType?: "F32" | "F16";
  /** llama.cpp's CPU threads (default 1, see TeacherForcedOptionsSchema). */
  threads?: number;
}

/** What {@link llamaParity} measured. */
export interface ParityResult {
  /** llama.cpp as the rollout engine, the worker as the trainer, over every predicted token. */
  metrics: AlignmentMetrics;
  /** Per-token logprobs, entry 0 of each sequence 0 (as `POST /logprobs`). */
  llama: number[][];
  worker: number[][];
  /** Wall time of llama.cpp's load + scoring. */
  llamaMs: number;
}

/**
 * Scores `sequences` on both sides and compares them.
 *
 * @example
 * ```ts ignore
 * import { llamaParity } from "./parity.ts";
 * const r = await llamaParity({ client, gguf: "p.gguf", sequences: [[1, 2, 3]] });
 * r.metrics.tokens; // 2
 * ```
 */
export async function llamaParity(input: ParityInput): Promise<ParityResult> {
  const temperature = input.temperature ?? 1;
  const started = performance.now();
  const model = await loadGguf(input.gguf, { gpu: input.gpu ?? false });
  let llama: number[][];
  try {
    llama = await teacherForcedLogprobs(model, input.sequences, {
      temperature,
      kvCacheType: input.kvCacheType ?? "F32",
      threads: input.threads ?? 1,
    });
  } finally {
    await model.dispose();
  }
  const llamaMs = performance.now() - started;
  const { logprobs: worker } = await input.client.logprobs(input.sequences, { temperature });
  const metrics = alignmentMetrics(input.sequences.map((seq, i) => ({
    rollout_logprobs: llama[i],
    trainer_logprobs: worker[i],
    loss_mask: seq.map((_, t) => (t === 0 ? 0 : 1)),
  })));
  return { metrics, llama, worker, llamaMs };
}
