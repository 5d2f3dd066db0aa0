/**
 * Training–inference mismatch, measured (issue #34, item 1): one small policy at several
 * training steps, sampled by llama.cpp on its f32, f16, q8_0 and q4_0 GGUF exports (and by the
 * torch worker as the control), each sampled token scored again by the fp32 trainer (the
 * worker's `POST /logprobs`, temperature 1), and the gap measured as the field measures it.
 *
 * The policy: the demo-size built-in decoder (`toyModel`: d_model 64, 2 layers, char
 * tokenizer) given token-mean CE steps on the toy arithmetic task's scripted demonstrations
 * (`toySftRows`, `runSft`), checkpointed at each of `sft_steps` so the policy sharpens between
 * them. The prompts: the toy task's chat prompts (system prompt, tools, question, generation
 * prompt). The samples: the engine's own sampler at temperature 1, top-k 0, top-p 1
 * (`lib/engine/server.ts` `POST /generate`, seeded per prompt, the same seeds for every
 * precision), `max_tokens` tokens without a stop id, so every response reaches the same length
 * and the length buckets hold the same calls.
 *
 * Per cell (training step × engine), over every response token, with the engine as the rollout
 * side and the trainer as the learner (`lib/algo/alignment.ts` `alignmentMetrics`): Pearson of
 * probabilities, mean |Δp| (verl's `rollout_probs_diff_mean`), k1 and k3 KL, max |Δlogprob|,
 * the ESS of the importance weights; the same per call (one response) and per bucket of response
 * position; the sequence-level log-ratio at growing prefix lengths; and what each correction of
 * item 2 would do to these tokens (TIS clipping at 2, IcePop's [0.5, 2] token band, masked
 * sequence-level IS with the geometric mean in [0.99, 1.01]).
 *
 * `deno task mismatch` writes `results.json`, `provenance.json` and `canary.json` under
 * `experiments/results/mismatch/` (`--no-write` prints only; `--quick` runs a small config).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { join } from "node:path";
import { alignmentMetrics } from "../lib/algo/alignment.ts";
import { exportCheckpoint, startEngineServer } from "../lib/engine/mod.ts";
import { runSft } from "../lib/loop/sft.ts";
import { toyArithmeticTasks, toyModel, toySftRows, toyTools } from "../lib/loop/toy.ts";
import { TOY_SYSTEM_PROMPT } from "../lib/loop/sft.ts";
import { loadCharTokenizer } from "../lib/tokens/char.ts";
import { startLocalWorker } from "../lib/trainer/local_worker.ts";
import type { TrainerClient } from "../lib/trainer/client.ts";
import { DEFAULT_RESULTS_DIR } from "./results.ts";
import { codeFingerprint, type CodeSpecInput, writeProvenance } from "./provenance.ts";

/** The engines compared: the torch worker (control) and llama.cpp on each GGUF precision. */
export const ENGINES = ["torch", "f32", "f16", "q8_0", "q4_0"] as const;
/** One engine of {@link ENGINES}. */
export type EngineName = typeof ENGINES[number];

/** What the study runs. */
export interface MismatchConfig {
  /** Cumulative SFT steps at which the policy is measured (ascending; 0 = initial weights). */
  sft_steps: number[];
  sft_batch: number;
  sft_lr: number;
  /** Toy tasks used as prompts (evenly spread over the 243). */
  prompts: number;
  /** Response tokens per call (no stop id). */
  max_tokens: number;
  engines: EngineName[];
  /** Response-position bucket edges: [0, e1), [e1, e2), … */
  length_buckets: number[];
  /** Sequences llama.cpp generates at once (1 makes its batches, hence its bits, reproducible). */
  slots: number;
  threads: number;
  /** Where the tokens were sampled and scored (stated in the results). */
  sampler: string;
}

/** The committed study's configuration. */
export const MISMATCH_CONFIG: MismatchConfig = {
  sft_steps: [0, 30, 100, 300],
  sft_batch: 8,
  sft_lr: 3e-3,
  prompts: 16,
  max_tokens: 128,
  engines: [...ENGINES],
  length_buckets: [0, 8, 16, 32, 64, 128],
  slots: 1,
  threads: 1,
  sampler: "each engine samples (llama.cpp: lib/engine/server.ts POST /generate, its own " +
    "seeded sampler on llama.cpp's next-token distribution; torch: the worker's /generate); " +
    "the fp32 worker rescores every sampled token (POST /logprobs, temperature 1)",
};

/** The code behind the results (`provenance.ts`). */
export const MISMATCH_CODE: CodeSpecInput = {
  entries: ["experiments/mismatch.ts"],
  extra: ["lib/trainer/worker/reins_worker/*.py"],
  data: ["data/tokenizers/char/*.json"],
};

/** One sampled call: its response tokens with the engine's and the trainer's logprobs. */
export interface SampledCall {
  prompt_index: number;
  ids: number[];
  behaviour: number[];
  trainer: number[];
}

/** The metrics the study reports (from {@link AlignmentMetrics}, under the field's names). */
export interface MismatchMetrics {
  tokens: number;
  pearson: number | null;
  probs_diff_mean: number;
  probs_diff_max: number;
  k1_kl: number;
  k3_kl: number;
  max_abs_dlogprob: number;
  mean_abs_dlogprob: number;
  ess: number;
}

/** What `alignmentMetrics` returns (its schema moves with the architecture work; the type follows it). */
type AlignmentMetrics = ReturnType<typeof alignmentMetrics>;

/** Renames {@link AlignmentMetrics} to the study's field names. */
export function mismatchMetrics(m: AlignmentMetrics): MismatchMetrics {
  return {
    tokens: m.tokens,
    pearson: m.pearson_prob,
    probs_diff_mean: m.mean_abs_dp,
    probs_diff_max: m.max_abs_dp,
    k1_kl: m.k1_kl,
    k3_kl: m.k3_kl,
    max_abs_dlogprob: m.max_abs_dlogprob,
    mean_abs_dlogprob: m.mean_abs_dlogprob,
    ess: m.ess,
  };
}

/** Per-call metrics, summarised over the calls of a cell. */
export interface PerCallSummary {
  calls: number;
  pearson_mean: number | null;
  pearson_min: number | null;
  /** Calls whose Pearson is below LEGO-RL's 0.99. */
  pearson_below_099: number;
  probs_diff_mean_mean: number;
  probs_diff_mean_max: number;
  k3_kl_mean: number;
  k3_kl_max: number;
  max_abs_dlogprob_max: number;
  ess_min: number;
}

/** The sequence-level importance ratio at one prefix length. */
export interface SequenceRatio {
  prefix: number;
  /** Mean over calls of |Σ (trainer − behaviour)| over the first `prefix` tokens. */
  mean_abs_log_ratio: number;
  max_abs_log_ratio: number;
  /** Calls whose geometric-mean ratio exp(mean Δ) lies in [0.99, 1.01] (masked seq-IS keeps them). */
  geo_mean_in_band: number;
}

/** What the corrections of item 2 would do to the cell's tokens. */
export interface CorrectionCosts {
  /** Tokens whose weight π_trainer/π_engine exceeds TIS's cap 2 (share of tokens). */
  tis_clipped_share: number;
  /** Tokens IcePop masks: ratio outside [0.5, 2] (share of tokens). */
  icepop_masked_share: number;
  /** Calls masked sequence-level IS drops: geometric-mean ratio outside [0.99, 1.01]. */
  seq_is_masked_share: number;
}

/** One training step × engine. */
export interface MismatchCell {
  step: number;
  engine: EngineName;
  pooled: MismatchMetrics;
  per_call: PerCallSummary;
  by_length: ({ from: number; to: number } & MismatchMetrics)[];
  sequence: SequenceRatio[];
  corrections: CorrectionCosts;
  /** Wall time of sampling + scoring, seconds. */
  seconds: number;
}

const TIS_CAP = 2;
const ICEPOP_BAND = [0.5, 2] as const;
const SEQ_IS_BAND = [0.99, 1.01] as const;

function metricsOf(calls: readonly SampledCall[], from = 0, to = Infinity): MismatchMetrics {
  return mismatchMetrics(alignmentMetrics(calls.map((c) => {
    const end = Math.min(to, c.ids.length);
    const start = Math.min(from, end);
    return {
      rollout_logprobs: c.behaviour.slice(start, end),
      trainer_logprobs: c.trainer.slice(start, end),
    };
  })));
}

/**
 * Everything {@link MismatchCell} holds but the step, engine and time, from the calls.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { summarizeCalls } from "./mismatch.ts";
 * const call = { prompt_index: 0, ids: [1, 2, 3], behaviour: [-0.1, -1, -2], trainer: [-0.1, -1, -2] };
 * const s = summarizeCalls([call, { ...call, prompt_index: 1 }], [0, 2, 4]);
 * assert.equal(s.pooled.k3_kl, 0);
 * assert.equal(s.corrections.seq_is_masked_share, 0);
 * assert.deepEqual(s.by_length.map((b) => b.tokens), [4, 2]);
 * ```
 */
export function summarizeCalls(
  calls: readonly SampledCall[],
  buckets: readonly number[],
): Omit<MismatchCell, "step" | "engine" | "seconds"> {
  const perCall = calls.map((c) => metricsOf([c]));
  const pearsons = perCall.map((m) => m.pearson).filter((p): p is number => p !== null);
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / (xs.length || 1);
  const by_length = buckets.slice(0, -1).map((from, i) => ({
    from,
    to: buckets[i + 1],
    ...metricsOf(calls, from, buckets[i + 1]),
  }));
  const prefixes = buckets.slice(1);
  const sequence = prefixes.map((prefix) => {
    const logRatios = calls.map((c) => {
      let sum = 0;
      const n = Math.min(prefix, c.ids.length);
      for (let t = 0; t < n; t++) sum += c.trainer[t] - c.behaviour[t];
      return { sum, n };
    });
    const inBand = logRatios.filter(({ sum, n }) => {
      const g = Math.exp(sum / (n || 1));
      return g >= SEQ_IS_BAND[0] && g <= SEQ_IS_BAND[1];
    }).length;
    return {
      prefix,
      mean_abs_log_ratio: mean(logRatios.map((r) => Math.abs(r.sum))),
      max_abs_log_ratio: Math.max(0, ...logRatios.map((r) => Math.abs(r.sum))),
      geo_mean_in_band: inBand / (calls.length || 1),
    };
  });
  let tokens = 0;
  let clipped = 0;
  let masked = 0;
  for (const c of calls) {
    for (let t = 0; t < c.ids.length; t++) {
      const w = Math.exp(c.trainer[t] - c.behaviour[t]);
      tokens++;
      if (w > TIS_CAP) clipped++;
      if (w < ICEPOP_BAND[0] || w > ICEPOP_BAND[1]) masked++;
    }
  }
  const whole = sequence[sequence.length - 1];
  return {
    pooled: metricsOf(calls),
    per_call: {
      calls: calls.length,
      pearson_mean: pearsons.length ? mean(pearsons) : null,
      pearson_min: pearsons.length ? Math.min(...pearsons) : null,
      pearson_below_099: pearsons.filter((p) => p < 0.99).length,
      probs_diff_mean_mean: mean(perCall.map((m) => m.probs_diff_mean)),
      probs_diff_mean_max: Math.max(0, ...perCall.map((m) => m.probs_diff_mean)),
      k3_kl_mean: mean(perCall.map((m) => m.k3_kl)),
      k3_kl_max: Math.max(0, ...perCall.map((m) => m.k3_kl)),
      max_abs_dlogprob_max: Math.max(0, ...perCall.map((m) => m.max_abs_dlogprob)),
      ess_min: Math.min(1, ...perCall.map((m) => m.ess)),
    },
    by_length,
    sequence,
    corrections: {
      tis_clipped_share: clipped / (tokens || 1),
      icepop_masked_share: masked / (tokens || 1),
      seq_is_masked_share: whole ? 1 - whole.geo_mean_in_band : 0,
    },
  };
}

/** The toy task's prompts: `count` tasks evenly spread over the 243, rendered for generation. */
export async function toyPrompts(count: number): Promise<number[][]> {
  const tokenizer = await loadCharTokenizer();
  const tasks = toyArithmeticTasks();
  const stride = Math.max(1, Math.floor(tasks.length / count));
  return Array.from({ length: count }, (_, i) => {
    const task = tasks[(i * stride) % tasks.length];
    const text = tokenizer.render([
      { role: "system", content: TOY_SYSTEM_PROMPT },
      { role: "user", content: task.question },
    ], { tools: toyTools(), addGenerationPrompt: true });
    return Array.from(tokenizer.encode(text));
  });
}

const TOKENIZER_DIR = decodeURIComponent(
  new URL("../data/tokenizers/char/", import.meta.url).pathname,
);

/** Samples every prompt with `engine` and rescores the tokens with the worker's current weights. */
export async function sampleCell(
  client: TrainerClient,
  engine: EngineName,
  gguf: string | null,
  prompts: readonly number[][],
  config: Pick<MismatchConfig, "max_tokens" | "slots" | "threads">,
): Promise<SampledCall[]> {
  type Generated = { ids: number[]; logprobs: number[] };
  let generate: (prompt: number[], seed: number) => Promise<Generated>;
  let close = () => Promise.resolve();
  if (engine === "torch") {
    generate = (prompt_ids, seed) =>
      client.generate({ prompt_ids, max_tokens: config.max_tokens, seed });
  } else {
    if (!gguf) throw new Error(`engine ${engine}: no GGUF`);
    const server = await startEngineServer({ gguf, slots: config.slots, threads: config.threads });
    close = () => server.close();
    generate = async (prompt_ids, seed) => {
      const response = await fetch(`${server.url}/generate`, {
        method: "POST",
        body: JSON.stringify({ prompt_ids, max_tokens: config.max_tokens, seed }),
      });
      if (!response.ok) throw new Error(`engine ${engine}: ${await response.text()}`);
      return await response.json() as Generated;
    };
  }
  const generated: Generated[] = [];
  try {
    // In waves of `slots`: the engine's batches (and so its bits) depend on what runs together.
    for (let i = 0; i < prompts.length; i += config.slots) {
      const wave = prompts.slice(i, i + config.slots);
      generated.push(...await Promise.all(wave.map((p, k) => generate(p, 1000 + i + k))));
    }
  } finally {
    await close();
  }
  const sequences = prompts.map((p, i) => [...p, ...generated[i].ids]);
  const { logprobs } = await client.logprobs(sequences, { temperature: 1 });
  return generated.map((g, i) => ({
    prompt_index: i,
    ids: g.ids,
    behaviour: g.logprobs,
    trainer: logprobs[i].slice(prompts[i].length),
  }));
}

/** What {@link runMismatch} measured. */
export interface MismatchStudy {
  config: MismatchConfig;
  cells: MismatchCell[];
  /** Per engine, pooled over every step's tokens. */
  by_engine: Record<string, MismatchMetrics>;
  /** SFT loss at each measured step (how far the policy sharpened). */
  sft_loss: { step: number; loss: number | null }[];
  wall_s: number;
}

/** Options of {@link runMismatch}. */
export interface RunOptions {
  log?: (line: string) => void;
  /** Keeps every cell's calls (the canary compares them). */
  onCalls?: (step: number, engine: EngineName, calls: SampledCall[]) => void;
}

/** Trains the policy step by step and measures every engine at each of `config.sft_steps`. */
export async function runMismatch(
  config: MismatchConfig,
  options: RunOptions = {},
): Promise<MismatchStudy> {
  const log = options.log ?? (() => {});
  const t0 = performance.now();
  const tokenizer = await loadCharTokenizer();
  const prompts = await toyPrompts(config.prompts);
  const rows = toySftRows(tokenizer, toyArithmeticTasks());
  const dir = await Deno.makeTempDir({ prefix: "reins-mismatch-" });
  await using worker = await startLocalWorker({ threads: config.threads });
  const client = worker.client;
  const cells: MismatchCell[] = [];
  const sftLoss: MismatchStudy["sft_loss"] = [];
  const pooled = new Map<EngineName, SampledCall[]>();
  try {
    await client.init({
      model: toyModel(tokenizer),
      optimizer: { lr: config.sft_lr, grad_clip: 1 },
      dtype: "float32",
    });
    let trained = 0;
    for (const step of config.sft_steps) {
      let loss: number | null = null;
      if (step > trained) {
        loss = await runSft(client, rows, {
          steps: step - trained,
          batchSize: config.sft_batch,
          seed: trained,
        });
        trained = step;
      }
      sftLoss.push({ step, loss });
      const checkpoint = join(dir, `step${step}.pt`);
      await client.save(checkpoint);
      for (const engine of config.engines) {
        const started = performance.now();
        let gguf: string | null = null;
        if (engine !== "torch") {
          gguf = join(dir, `step${step}-${engine}.gguf`);
          await exportCheckpoint({ checkpoint, gguf, type: engine, tokenizer: TOKENIZER_DIR });
        }
        const calls = await sampleCell(client, engine, gguf, prompts, config);
        options.onCalls?.(step, engine, calls);
        pooled.set(engine, [...(pooled.get(engine) ?? []), ...calls]);
        const cell: MismatchCell = {
          step,
          engine,
          ...summarizeCalls(calls, config.length_buckets),
          seconds: (performance.now() - started) / 1000,
        };
        cells.push(cell);
        const p = cell.pooled;
        log(
          `step ${step} ${engine}: pearson ${p.pearson?.toFixed(6)} probs_diff_mean ` +
            `${p.probs_diff_mean.toExponential(3)} k3_kl ${p.k3_kl.toExponential(3)} ` +
            `max_abs_dlogprob ${p.max_abs_dlogprob.toExponential(3)} ess ${p.ess.toFixed(6)} ` +
            `(${cell.seconds.toFixed(1)} s)`,
        );
      }
    }
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => undefined);
  }
  const by_engine = Object.fromEntries(
    [...pooled].map(([engine, calls]) => [engine, metricsOf(calls)]),
  );
  return {
    config,
    cells,
    by_engine,
    sft_loss: sftLoss,
    wall_s: (performance.now() - t0) / 1000,
  };
}

/** The results folder of the study. */
export function mismatchDir(results: string = DEFAULT_RESULTS_DIR): string {
  return `${results}/mismatch`;
}

/** Reads a study's `results.json`. */
export async function readMismatch(dir: string = mismatchDir()): Promise<MismatchStudy> {
  return JSON.parse(await Deno.readTextFile(`${dir}/results.json`)) as MismatchStudy;
}

/** A small configuration (a minute): two steps, f32 and q8_0 against the control. */
export const QUICK_CONFIG: MismatchConfig = {
  ...MISMATCH_CONFIG,
  sft_steps: [0, 30],
  prompts: 8,
  max_tokens: 64,
  engines: ["torch", "f32", "q8_0"],
  length_buckets: [0, 16, 32, 64],
};

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      quick: { type: "boolean", default: false },
      results: { type: "string", default: DEFAULT_RESULTS_DIR },
      "no-write": { type: "boolean", default: false },
    },
  });
  const config = values.quick ? QUICK_CONFIG : MISMATCH_CONFIG;
  const code = await codeFingerprint(MISMATCH_CODE);
  const study = await runMismatch(config, { log: (l) => console.log(l) });
  if (!values["no-write"] && !values.quick) {
    const dir = mismatchDir(values.results);
    await Deno.mkdir(dir, { recursive: true });
    await Deno.writeTextFile(`${dir}/results.json`, JSON.stringify(study, null, 1) + "\n");
    await writeProvenance(dir, { command: "deno task mismatch", config, code });
    const { MISMATCH_CANARY, recordCanary } = await import("./canary.ts");
    await recordCanary(dir, MISMATCH_CANARY);
    console.log(`[mismatch] results, provenance and canary in ${dir}`);
  }
  for (const [engine, m] of Object.entries(study.by_engine)) {
    console.log(`mismatch_pearson_${engine}: ${m.pearson}`);
    console.log(`mismatch_probs_diff_mean_${engine}: ${m.probs_diff_mean}`);
    console.log(`mismatch_k3_kl_${engine}: ${m.k3_kl}`);
    console.log(`mismatch_max_abs_dlogprob_${engine}: ${m.max_abs_dlogprob}`);
    console.log(`mismatch_ess_${engine}: ${m.ess}`);
  }
  console.log(`mismatch_wall_s: ${study.wall_s.toFixed(1)}`);
}

if (import.meta.main) {
  try {
    await main();
    Deno.exit(0); // llama.cpp's addon keeps the event loop alive
  } catch (error) {
    console.error(`error: ${error instanceof Error ? error.message : error}`);
    Deno.exit(2);
  }
}
