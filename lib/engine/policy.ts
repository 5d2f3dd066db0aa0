/**
 * One loaded policy version in llama.cpp: a GGUF model, a context with `slots` sequences, and
 * the bookkeeping that lets a newer version take over while this one finishes what it started
 * (a request holds its slot, hence its version, from its first token to its last).
 *
 * Generation steps each sequence with `evaluateWithMetadata` at temperature 0 (greedy: the
 * logits untouched, no top-k/top-p stage in llama.cpp's chain) and reads the full next-token
 * distribution; the token fed back is the one `sampler.ts` drew, not llama.cpp's pick.
 * Sequences of one context evaluate in the same llama.cpp batch when their steps are queued
 * together.
 *
 * @module
 */
import type { Llama, LlamaContext, LlamaContextSequence, LlamaModel, Token } from "node-llama-cpp";
import { sampleToken, type SamplingParams, type Uniform } from "./sampler.ts";

/** How a {@link LlamaPolicy} is loaded. */
export interface PolicyLoadOptions {
  /** Sequences generated at once. */
  slots: number;
  /** CPU threads for llama.cpp (0: its choice). */
  threads: number;
  /** Layers offloaded to the GPU (0 on the CPU build). */
  gpuLayers: number | "max";
  /** KV cache precision: F32 keeps logprobs within ~1e-6 of the fp32 trainer; F16 saves memory. */
  kvCacheType: "F32" | "F16";
}

/** One request's generation. */
export interface GenerationSpec {
  promptIds: readonly number[];
  maxTokens: number;
  stopIds: ReadonlySet<number>;
  sampling: SamplingParams;
  uniform: Uniform;
  signal?: AbortSignal;
  /** Receives each sampled token and its logprob. */
  onToken(id: number, logprob: number): void;
}

/** How a generation ended. */
export interface GenerationEnd {
  finish_reason: "stop" | "length";
  policy_version: number;
}

/** A policy version loaded in llama.cpp. */
export class LlamaPolicy {
  readonly version: number;
  readonly path: string;
  readonly vocabSize: number;
  /** Longest sequence (prompt + response) one slot holds. */
  readonly maxSeqLen: number;
  readonly #model: LlamaModel;
  readonly #context: LlamaContext;
  readonly #free: LlamaContextSequence[] = [];
  readonly #waiting: ((seq: LlamaContextSequence) => void)[] = [];
  #active = 0;
  #retired = false;
  #disposed: Promise<void> | null = null;
  #idle: (() => void) | null = null;

  private constructor(
    version: number,
    path: string,
    model: LlamaModel,
    context: LlamaContext,
    vocabSize: number,
  ) {
    this.version = version;
    this.path = path;
    this.#model = model;
    this.#context = context;
    this.vocabSize = vocabSize;
    this.maxSeqLen = context.contextSize;
    for (let i = 0; i < context.totalSequences; i++) this.#free.push(context.getSequence());
  }

  /** Loads `path` as policy `version`. */
  static async load(
    llama: Llama,
    path: string,
    version: number,
    options: PolicyLoadOptions,
  ): Promise<LlamaPolicy> {
    const model = await llama.loadModel({ modelPath: path, gpuLayers: options.gpuLayers });
    try {
      const trained = Number(model.fileInsights.trainContextSize ?? 0) || 2048;
      const context = await model.createContext({
        contextSize: trained,
        sequences: options.slots,
        batchSize: Math.min(trained, 512),
        flashAttention: false,
        threads: options.threads,
        experimentalKvCacheKeyType: options.kvCacheType,
        experimentalKvCacheValueType: options.kvCacheType,
      });
      const embedding = model.fileInfo.tensorInfo?.find((t) => t.name === "token_embd.weight");
      // The embedding's rows are the model's vocabulary (ids beyond it are refused).
      const vocab = Number(embedding?.dimensions[1] ?? 0);
      return new LlamaPolicy(version, path, model, context, vocab || Infinity);
    } catch (error) {
      await model.dispose();
      throw error;
    }
  }

  /** Requests generating on this version now. */
  get active(): number {
    return this.#active;
  }

  /** Requests waiting for a free slot. */
  get queued(): number {
    return this.#waiting.length;
  }

  /** Generates one response; the slot (and this version) is held until it ends. */
  async generate(spec: GenerationSpec): Promise<GenerationEnd> {
    if (this.#retired) throw new Error(`policy version ${this.version} was retired`);
    this.#active++;
    const seq = await this.#acquire();
    try {
      await seq.clearHistory();
      const budget = Math.min(spec.maxTokens, this.maxSeqLen - spec.promptIds.length);
      // The generator evaluates what it is given and yields the next-token distribution; its
      // own greedy pick (temperature 0: the logits untouched) is replaced by ours via next().
      const steps = seq.evaluateWithMetadata(
        spec.promptIds as Token[],
        { probabilities: true },
        { temperature: 0, yieldEogToken: true },
      );
      try {
        let step = await steps.next();
        for (let count = 0; count < budget && !step.done; count++) {
          if (spec.signal?.aborted) break;
          const { token, logprob } = sampleToken(
            step.value.probabilities,
            spec.sampling,
            spec.uniform,
          );
          spec.onToken(token, logprob);
          if (spec.stopIds.has(token)) {
            return { finish_reason: "stop", policy_version: this.version };
          }
          if (count + 1 < budget) step = await steps.next(token as Token);
        }
      } finally {
        await steps.return();
      }
      return { finish_reason: "length", policy_version: this.version };
    } finally {
      this.#release(seq);
    }
  }

  #acquire(): Promise<LlamaContextSequence> {
    const seq = this.#free.pop();
    if (seq) return Promise.resolve(seq);
    return new Promise((resolve) => this.#waiting.push(resolve));
  }

  #release(seq: LlamaContextSequence): void {
    this.#active--;
    const next = this.#waiting.shift();
    if (next) next(seq);
    else this.#free.push(seq);
    if (this.#active === 0) this.#idle?.();
  }

  /**
   * Takes no new requests; resolves once the ones in flight finished and the model is freed
   * (the newer version already serves meanwhile).
   */
  retire(): Promise<void> {
    this.#retired = true;
    this.#disposed ??= (async () => {
      if (this.#active > 0) await new Promise<void>((resolve) => (this.#idle = resolve));
      await this.#context.dispose();
      await this.#model.dispose();
    })();
    return this.#disposed;
  }
}
