/**
 * `deno task bench:engine`: llama.cpp beside the torch worker, on the demo-size policy (the
 * demo's model after a few CE steps on the README; see tests/engine_helpers.ts), printing
 * `name: value` lines.
 *
 * Parity figures (the worker's fp32 logprobs against llama.cpp's on the worker's GGUF export,
 * teacher-forced on ≥ 2,000 tokens the policy sampled itself, f32 KV cache):
 * - `engine_logprob_max_abs_diff_f32`: max |Δlogprob| of the f32 export (bound: ≤ 1e-3)
 * - `engine_logprob_pearson_f16`: Pearson correlation of token probabilities, f16 export
 * - `engine_k3_kl_q8_0`: mean k3 estimate of KL(llama.cpp ‖ worker), q8_0 export
 *
 * Speed figures (`generate`): `engine_generate_tok_per_s` and `worker_generate_tok_per_s` on
 * the same prompts, their ratio `engine_generate_speedup`, and `engine_weight_sync_ms` (f32
 * GGUF export from the worker's memory + engine reload of the demo's model, what the demo pays
 * each step; `_export_ms` and `_load_ms` its parts; `engine_weight_sync_from_checkpoint_ms`
 * the same through the exporter process from a checkpoint file).
 *
 * Usage: `deno task bench:engine [--only name,...] [--gpu cuda]`. Each measure is one entry of
 * MEASURES; add a figure by adding an entry (it receives the shared context: the running
 * worker, the sampled sequences and memoized exports).
 *
 * @module
 */
import { join } from "node:path";
import { parseFlags } from "../lib/flags.ts";
import {
  exportCheckpoint,
  LlamaCppSync,
  type LlamaGpu,
  llamaParity,
  startEngineServer,
} from "../lib/engine/mod.ts";
import type { AlignmentMetrics } from "../lib/algo/schema.ts";
import { CHAR_TOKENIZER_PATH, type DemoPolicy, startDemoPolicy } from "../tests/engine_helpers.ts";

type GgufType = "f32" | "f16" | "q8_0";

/** What every measure can use; exports and parity runs are computed once and shared. */
export interface EngineBenchContext {
  policy: DemoPolicy;
  gpu: LlamaGpu;
  /** The policy's GGUF export of `type` (exported on first use). */
  gguf(type: GgufType): Promise<string>;
  /** Worker vs llama.cpp on the policy's sequences for the `type` export (run on first use). */
  parity(type: GgufType): Promise<AlignmentMetrics>;
}

/** One figure: its printed name and value. */
export type Figure = [name: string, value: number | string];

/** A group of figures measured together. */
export type Measure = (ctx: EngineBenchContext) => Promise<Figure[]>;

/** The bench's measures, in print order. */
export const MEASURES: Record<string, Measure> = {
  parity: async (ctx) => {
    const f32 = await ctx.parity("f32");
    const f16 = await ctx.parity("f16");
    const q8 = await ctx.parity("q8_0");
    return [
      ["engine_parity_tokens", f32.tokens],
      ["engine_logprob_max_abs_diff_f32", f32.max_abs_dlogprob],
      ["engine_logprob_pearson_f16", f16.pearson_prob ?? "undefined"],
      ["engine_logprob_max_abs_diff_f16", f16.max_abs_dlogprob],
      ["engine_k3_kl_q8_0", q8.k3_kl],
      ["engine_logprob_pearson_q8_0", q8.pearson_prob ?? "undefined"],
      ["engine_logprob_max_abs_diff_q8_0", q8.max_abs_dlogprob],
    ];
  },
};

const GENERATE_PROMPTS = 8;
const GENERATE_TOKENS = 128;

/** Tokens per second of `generate` over the same prompts, all of them in flight at once. */
async function throughput(
  prompts: number[][],
  generate: (prompt: number[], seed: number) => Promise<{ ids: number[] }>,
): Promise<number> {
  await generate(prompts[0], 0); // warm-up (first-call allocations)
  const t0 = performance.now();
  const outs = await Promise.all(prompts.map((p, i) => generate(p, 1000 + i)));
  const tokens = outs.reduce((n, o) => n + o.ids.length, 0);
  return tokens / ((performance.now() - t0) / 1000);
}

/**
 * Generation speed and weight sync of the llama.cpp engine (lib/engine/server.ts) against the
 * worker, on the same prompts (the first 32 tokens of 8 sampled sequences, 128 new tokens each,
 * 8 in flight, temperature 1, one CPU thread each on the CPU build), and the sync the demo pays
 * each step: f32 GGUF export of the worker's checkpoint + the engine's reload.
 */
MEASURES.generate = async (ctx) => {
  const prompts = ctx.policy.sequences.slice(0, GENERATE_PROMPTS).map((s) => s.slice(0, 32));
  const engine = await startEngineServer({
    gguf: await ctx.gguf("f32"),
    slots: GENERATE_PROMPTS,
    ...(ctx.gpu === "cuda" ? { gpu: "cuda" as const, threads: 4 } : { threads: 1 }),
  });
  try {
    const engineTps = await throughput(prompts, async (prompt_ids, seed) => {
      const response = await fetch(`${engine.url}/generate`, {
        method: "POST",
        body: JSON.stringify({ prompt_ids, max_tokens: GENERATE_TOKENS, seed }),
      });
      if (!response.ok) throw new Error(`engine: ${await response.text()}`);
      return await response.json();
    });
    const client = ctx.policy.worker.client;
    const workerTps = await throughput(
      prompts,
      (prompt_ids, seed) => client.generate({ prompt_ids, max_tokens: GENERATE_TOKENS, seed }),
    );
    // What the demo pays each step: export from the worker's memory (POST /export) + reload.
    const version = (await client.state()).policy_version;
    const fromWorker = await new LlamaCppSync({
      endpoint: engine.url,
      dir: join(ctx.policy.dir, "sync"),
      tokenizer: CHAR_TOKENIZER_PATH,
      type: "f32",
      worker: client,
    }).syncWeights(version, "");
    // The same from a checkpoint file, through the exporter process (a remote engine's path).
    const fromFile = await new LlamaCppSync({
      endpoint: engine.url,
      dir: join(ctx.policy.dir, "sync-file"),
      tokenizer: CHAR_TOKENIZER_PATH,
      type: "f32",
    }).syncWeights(version + 1, ctx.policy.checkpoint);
    return [
      ["engine_generate_tok_per_s", engineTps],
      ["worker_generate_tok_per_s", workerTps],
      ["engine_generate_speedup", engineTps / workerTps],
      ["engine_weight_sync_ms", fromWorker.total_ms],
      ["engine_weight_export_ms", fromWorker.export_ms],
      ["engine_weight_load_ms", fromWorker.load_ms],
      ["engine_weight_sync_from_checkpoint_ms", fromFile.total_ms],
    ];
  } finally {
    await engine.close();
  }
};

function memo<K, V>(make: (key: K) => Promise<V>): (key: K) => Promise<V> {
  const cache = new Map<K, Promise<V>>();
  return (key) => {
    let value = cache.get(key);
    if (!value) cache.set(key, value = make(key));
    return value;
  };
}

function format(value: number | string): string {
  return typeof value === "number" && !Number.isInteger(value) ? value.toPrecision(9) : `${value}`;
}

async function main(argv: string[]): Promise<void> {
  const flags = parseFlags(argv, {
    only: { type: "string" },
    gpu: { type: "string" },
    "worker-device": { type: "string", default: "cpu" },
  }, "usage: deno task bench:engine [--only parity,...] [--gpu cuda] [--worker-device cuda]");
  if (!flags) return;
  const only = flags.only?.split(",") ?? Object.keys(MEASURES);
  const unknown = only.filter((name) => !(name in MEASURES));
  if (unknown.length) {
    throw new Error(`--only: unknown measure '${unknown[0]}' (have ${Object.keys(MEASURES)})`);
  }
  if (flags.gpu !== undefined && flags.gpu !== "cuda") {
    throw new Error(`--gpu: expected 'cuda', got '${flags.gpu}'`);
  }
  const gpu: LlamaGpu = flags.gpu === "cuda" ? "cuda" : false;
  const policy = await startDemoPolicy({ device: flags["worker-device"] });
  try {
    const gguf = memo(async (type: GgufType) => {
      const path = join(policy.dir, `policy-${type}.gguf`);
      await exportCheckpoint({
        checkpoint: policy.checkpoint,
        gguf: path,
        type,
        tokenizer: CHAR_TOKENIZER_PATH,
      });
      return path;
    });
    const parity = memo(async (type: GgufType) =>
      (await llamaParity({
        client: policy.worker.client,
        gguf: await gguf(type),
        sequences: policy.sequences,
        gpu,
      })).metrics
    );
    const ctx: EngineBenchContext = { policy, gpu, gguf, parity };
    for (const name of only) {
      for (const [figure, value] of await MEASURES[name](ctx)) {
        console.log(`${figure}: ${format(value)}`);
      }
    }
  } finally {
    await policy.close();
  }
}

if (import.meta.main) {
  try {
    await main(Deno.args);
    Deno.exit(0); // llama.cpp's addon keeps the event loop alive
  } catch (error) {
    console.error(`error: ${error instanceof Error ? error.message : error}`);
    Deno.exit(2);
  }
}
