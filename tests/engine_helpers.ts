/**
 * The engine tests' and bench's policy: the demo's model (`toyModel`, char tokenizer, d_model
 * 64, two layers, GQA 4/2, tied embeddings) given a few CE steps on this repository's README so
 * its next-token distributions are peaked like a trained model's, a checkpoint of it, and
 * sequences it sampled itself at temperature 1 (the tokens a k3 KL estimate needs).
 *
 * @module
 */
import { join } from "node:path";
import { loadCharTokenizer } from "../lib/tokens/char.ts";
import { toyModel } from "../lib/loop/toy.ts";
import { type LocalWorker, startLocalWorker } from "../lib/trainer/mod.ts";
import type { TrainingRow } from "../lib/schema.ts";

/** Where the char tokenizer's files are (its tokenizer.json feeds the GGUF vocabulary). */
export const CHAR_TOKENIZER_PATH = decodeURIComponent(
  new URL("../data/tokenizers/char/", import.meta.url).pathname,
);

/** What {@link startDemoPolicy} built. */
export interface DemoPolicy {
  worker: LocalWorker;
  /** The worker's checkpoint (POST /save) of the trained policy. */
  checkpoint: string;
  /** Scratch directory (exports go here); removed by `close`. */
  dir: string;
  /** Sequences the policy sampled: a README prompt then its own continuation. */
  sequences: number[][];
  close(): Promise<void>;
}

/** Options of {@link startDemoPolicy}. */
export interface DemoPolicyOptions {
  sftSteps?: number;
  sequences?: number;
  sequenceLength?: number;
  threads?: number;
  /** The worker's torch device (default cpu; the GPU bench passes cuda). */
  device?: string;
}

/** Starts a worker holding the trained demo-size policy (see the module doc). */
export async function startDemoPolicy(options: DemoPolicyOptions = {}): Promise<DemoPolicy> {
  const { sftSteps = 30, sequences = 8, sequenceLength = 256, threads = 1 } = options;
  const tokenizer = await loadCharTokenizer();
  const text = await Deno.readTextFile(new URL("../README.md", import.meta.url));
  const ids = Array.from(tokenizer.encode(text));
  const dir = await Deno.makeTempDir({ prefix: "reins-engine-" });
  const worker = await startLocalWorker({ threads });
  try {
    await worker.client.init({
      model: toyModel(tokenizer, { d_model: 64, n_layers: 2, max_seq_len: 512 }),
      optimizer: { lr: 1e-2, grad_clip: 1 },
      device: options.device ?? "cpu",
      dtype: "float32",
    });
    const window = 128;
    for (let step = 0; step < sftSteps; step++) {
      const rows: TrainingRow[] = Array.from({ length: 8 }, (_, k) => {
        const start = ((step * 8 + k) * 997) % (ids.length - window);
        const tokens = ids.slice(start, start + window);
        return {
          rollout_id: `sft-${step}-${k}`,
          group_id: "sft",
          tokens,
          loss_mask: tokens.map((_, t) => (t === 0 ? 0 : 1)),
          advantages: tokens.map(() => 0),
          loss_weights: tokens.map((_, t) => (t === 0 ? 0 : 1 / (8 * (window - 1)))),
          rollout_logprobs: tokens.map(() => 0),
        };
      });
      await worker.client.forwardBackward({ rows, loss: { kind: "ce" } });
      await worker.client.optimStep();
    }
    const promptLength = 32;
    // One at a time: the worker batches concurrent requests as they arrive, so their batch
    // layout could depend on the machine's timing (not seen to change a sample: 3 rounds of 8
    // concurrent generations equalled the 8 alone). Sampled alone, it cannot.
    const sampled: number[][] = [];
    for (let k = 0; k < sequences; k++) {
      const start = (k * 7919) % (ids.length - promptLength);
      const prompt = ids.slice(start, start + promptLength);
      const out = await worker.client.generate({
        prompt_ids: prompt,
        max_tokens: sequenceLength - promptLength,
        seed: 1000 + k,
      });
      sampled.push([...prompt, ...out.ids]);
    }
    const checkpoint = join(dir, "policy.pt");
    await worker.client.save(checkpoint);
    return {
      worker,
      checkpoint,
      dir,
      sequences: sampled,
      async close() {
        await worker.close();
        await Deno.remove(dir, { recursive: true });
      },
    };
  } catch (error) {
    await worker.close();
    await Deno.remove(dir, { recursive: true });
    throw error;
  }
}
