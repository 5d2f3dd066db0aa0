/**
 * llama.cpp (through `node-llama-cpp`) as a second implementation of the policy: loads a GGUF
 * export and scores token sequences teacher-forced, so its per-token logprobs can be set
 * against the torch worker's on the very same ids.
 *
 * The probabilities come from `controlledEvaluate` with `generateNext.probabilities`: the
 * softmax of llama.cpp's raw logits over the whole vocabulary. node-llama-cpp's sampler options
 * are left at temperature 0 there, which selects greedily WITHOUT rewriting the logits, so no
 * top-k/top-p/min-p default of its own leaks into the distribution; a temperature is applied
 * here, on the log-probabilities, as the trainer applies it. The KV cache is f32 by default
 * (llama.cpp's own default is f16, which alone moves logprobs by ~1e-3).
 *
 * @example
 * ```ts ignore
 * import { loadGguf, teacherForcedLogprobs } from "./llama_eval.ts";
 * const model = await loadGguf("policy.gguf");
 * const [lps] = await teacherForcedLogprobs(model, [[12, 40, 41, 2]]);
 * // lps[0] === 0 (nothing predicts the first token); lps[i] = log p(ids[i] | ids[<i])
 * await model.dispose();
 * ```
 *
 * @module
 */
import type { Llama, LlamaModel, Token } from "node-llama-cpp";
import { z } from "zod";

/** Where llama.cpp runs: `false` for its prebuilt CPU build, `"cuda"` on a GPU machine. */
export type LlamaGpu = false | "cuda" | "auto";

const llamas = new Map<string, Promise<Llama>>();

/**
 * The process's llama.cpp bindings for `gpu` (loaded once; prebuilt binaries only, never a
 * source build, which would need a toolchain and the network).
 *
 * @example
 * ```ts ignore
 * import { loadLlama } from "./llama_eval.ts";
 * const llama = await loadLlama(); // CPU
 * ```
 */
export function loadLlama(gpu: LlamaGpu = false): Promise<Llama> {
  const key = String(gpu);
  let llama = llamas.get(key);
  if (!llama) {
    // Imported here, not at the top: node-llama-cpp costs ~0.5 s to load, and every process that
    // imports the loop or the engine paid it, whether or not it ever sampled with llama.cpp.
    llama = import("node-llama-cpp").then(({ getLlama }) =>
      getLlama({ gpu, build: "never", logLevel: "error" as never })
    );
    llama.catch(() => llamas.delete(key));
    llamas.set(key, llama);
  }
  return llama;
}

/** Whether llama.cpp's binary loads here, and why not when it does not. */
export type LlamaStatus = { available: true; gpu: string | false } | {
  available: false;
  reason: string;
};

/**
 * Probes {@link loadLlama}: tests skip, with this reason, only when the binary cannot load.
 *
 * @example
 * ```ts ignore
 * import { llamaStatus } from "./llama_eval.ts";
 * const status = await llamaStatus();
 * if (!status.available) console.log(`skipped: ${status.reason}`);
 * ```
 */
export async function llamaStatus(gpu: LlamaGpu = false): Promise<LlamaStatus> {
  try {
    const llama = await loadLlama(gpu);
    return { available: true, gpu: llama.gpu };
  } catch (error) {
    return { available: false, reason: error instanceof Error ? error.message : String(error) };
  }
}

/** Options of {@link loadGguf}. */
export interface LoadGgufOptions {
  gpu?: LlamaGpu;
  /** Layers offloaded to the GPU (default: all when `gpu` is set, else none). */
  gpuLayers?: number;
}

/**
 * Loads a GGUF file into llama.cpp.
 *
 * @example
 * ```ts ignore
 * import { loadGguf } from "./llama_eval.ts";
 * const model = await loadGguf("policy.gguf");
 * console.log(model.fileInfo.metadata.general.architecture); // "qwen3"
 * ```
 */
export async function loadGguf(path: string, options: LoadGgufOptions = {}): Promise<LlamaModel> {
  const llama = await loadLlama(options.gpu ?? false);
  const gpuLayers = options.gpuLayers ?? (options.gpu ? "max" : 0);
  try {
    return await llama.loadModel({ modelPath: path, gpuLayers });
  } catch (error) {
    const message = error instanceof Error ? error.message : String(error);
    throw new Error(`gguf: llama.cpp cannot load ${path}: ${message}`);
  }
}

/**
 * Options of {@link teacherForcedLogprobs}, validated.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { TeacherForcedOptionsSchema } from "./llama_eval.ts";
 * assert.deepEqual(TeacherForcedOptionsSchema.parse({}), {
 *   temperature: 1,
 *   kvCacheType: "F32",
 *   parallel: 4,
 *   threads: 1,
 * });
 * assert.equal(TeacherForcedOptionsSchema.safeParse({ temperature: 0 }).success, false);
 * ```
 */
export const TeacherForcedOptionsSchema = z.object({
  /** Logprobs of softmax(logits / temperature); 1 = the model's own distribution. */
  temperature: z.number().positive().finite().default(1),
  /** KV cache precision: "F32" for exact comparisons, "F16" as llama.cpp serves by default. */
  kvCacheType: z.enum(["F32", "F16"]).default("F32"),
  /** Sequences scored at once (each its own context sequence). */
  parallel: z.number().int().min(1).max(64).default(4),
  /**
   * CPU threads (0: llama.cpp's choice, every core). One by default: llama.cpp's threads
   * spin-wait between ops, so on a shared or busy CPU more threads than free cores run orders
   * of magnitude slower (measured here: 1.2 s with one thread, 136 s with all, same work).
   */
  threads: z.number().int().min(0).default(1),
});
/** Input form of {@link TeacherForcedOptionsSchema}. */
export type TeacherForcedOptions = z.input<typeof TeacherForcedOptionsSchema>;

function checkSequences(sequences: readonly (readonly number[])[], vocab: number): number {
  let longest = 0;
  sequences.forEach((seq, i) => {
    if (!Array.isArray(seq) || seq.length === 0) {
      throw new Error(`sequences[${i}]: expected a non-empty array of token ids`);
    }
    seq.forEach((id, t) => {
      if (!Number.isInteger(id) || id < 0 || id >= vocab) {
        throw new Error(`sequences[${i}][${t}]: token id ${id} is outside [0, ${vocab})`);
      }
    });
    longest = Math.max(longest, seq.length);
  });
  return longest;
}

/**
 * The model's vocabulary size: the rows of `token_embd.weight` (the GGUF's own record of it).
 *
 * @example
 * ```ts ignore
 * import { loadGguf, vocabSize } from "./llama_eval.ts";
 * vocabSize(await loadGguf("policy.gguf")); // 107 for the char tokenizer's models
 * ```
 */
export function vocabSize(model: LlamaModel): number {
  const embedding = model.fileInfo.tensorInfo?.find((t) => t.name === "token_embd.weight");
  const rows = embedding?.dimensions[1];
  if (rows === undefined) throw new Error("gguf: the model has no token_embd.weight");
  return Number(rows);
}

/** log softmax(log p / temperature) at `token`, from a distribution given as probabilities. */
function temperedLogprob(probs: Map<Token, number>, token: number, temperature: number): number {
  const target = probs.get(token as Token) ?? 0;
  if (temperature === 1) return Math.log(target);
  let max = -Infinity;
  for (const p of probs.values()) max = Math.max(max, Math.log(p) / temperature);
  let sum = 0;
  for (const p of probs.values()) sum += Math.exp(Math.log(p) / temperature - max);
  return Math.log(target) / temperature - max - Math.log(sum);
}

/**
 * Per-token logprobs of each sequence under `model`, teacher-forced: entry i is
 * log p(ids[i] | ids[0..i-1]) and entry 0 is 0 (nothing predicts it), as the worker's
 * `POST /logprobs` reports them. A token whose probability underflows float32 in llama.cpp's
 * softmax gets -Infinity.
 *
 * @example
 * ```ts ignore
 * import { loadGguf, teacherForcedLogprobs } from "./llama_eval.ts";
 * const model = await loadGguf("policy.gguf");
 * const lps = await teacherForcedLogprobs(model, [[1, 2, 3], [4, 5]], { temperature: 0.7 });
 * ```
 */
export async function teacherForcedLogprobs(
  model: LlamaModel,
  sequences: readonly (readonly number[])[],
  options: TeacherForcedOptions = {},
): Promise<number[][]> {
  const opts = TeacherForcedOptionsSchema.parse(options);
  const longest = checkSequences(sequences, vocabSize(model));
  if (sequences.length === 0) return [];
  const parallel = Math.min(opts.parallel, sequences.length);
  const context = await model.createContext({
    contextSize: longest,
    batchSize: Math.min(longest, 512),
    sequences: parallel,
    flashAttention: false,
    threads: opts.threads,
    experimentalKvCacheKeyType: opts.kvCacheType,
    experimentalKvCacheValueType: opts.kvCacheType,
  });
  try {
    const out: number[][] = new Array(sequences.length);
    let next = 0;
    const lane = async () => {
      const seq = context.getSequence();
      try {
        while (next < sequences.length) {
          const index = next++;
          const ids = sequences[index];
          await seq.clearHistory();
          const input = ids.map((id, t) =>
            t + 1 < ids.length
              ? [id as Token, { generateNext: { probabilities: true } }] as const
              : id as Token
          );
          const results = await seq.controlledEvaluate(input as never);
          const lps = [0];
          for (let t = 1; t < ids.length; t++) {
            const probs = results[t - 1]?.next.probabilities;
            if (!probs) throw new Error(`llama.cpp returned no distribution at token ${t}`);
            lps.push(temperedLogprob(probs, ids[t], opts.temperature));
          }
          out[index] = lps;
        }
      } finally {
        seq.dispose();
      }
    };
    await Promise.all(Array.from({ length: parallel }, lane));
    return out;
  } finally {
    await context.dispose();
  }
}
