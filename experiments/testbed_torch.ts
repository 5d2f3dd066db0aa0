/**
 * The testbed's torch variant: the same environment (`testbed.ts`) with a tiny transformer
 * policy trained through the real worker (`startLocalWorker`, the TS trainer client) and its
 * PPO loss, on rows whose advantages and loss weights come from `lib/algo`.
 *
 * Tokens: `BOS`, one token per task, one per strategy, a body token per strategy, and `SUMMARY`.
 * A rollout of task t picks strategy a with the policy's own probability π(a | BOS t) (read
 * with `/logprobs`, sampled with the testbed's common random numbers), then splits into the
 * samples the environment draws:
 *
 * | sample | tokens                                   | trained                   |
 * | ------ | ---------------------------------------- | ------------------------- |
 * | first  | `BOS t a body_a…` (L₁ − 1 body tokens)   | `a` and its body tokens   |
 * | j > 1  | `BOS t SUMMARY body_a…` (Lⱼ body tokens) | the body tokens           |
 *
 * so the decision lives in one token of the first sample, as in the pure-TS testbed's
 * `first_token` credit, and the later samples train tokens that do not decide anything — the
 * shape of a compacted agent rollout. Behaviour logprobs come from `/logprobs` before the
 * update (one PPO epoch: the ratio starts at 1). The score is the exact expected success of the
 * policy's π over the tasks.
 *
 * `deno task ablation:mechanism:torch [--seeds 16] [--steps 20]` runs the headline and the
 * grid-matched regimes for the four settings and writes `experiments/results/mechanism_torch/`
 * (with provenance). Not part of `--quick`: each run is a few seconds of worker calls.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { computeAdvantages } from "../lib/algo/advantages.ts";
import { planLossWeights } from "../lib/algo/normalization.ts";
import type { TrainingRow } from "../lib/schema.ts";
import type { TrainerClient } from "../lib/trainer/client.ts";
import { startLocalWorker } from "../lib/trainer/local_worker.ts";
import { ABLATION_SETTINGS, type Setting, settingLabel } from "./grid.ts";
import { GRID_MATCHED, HEADLINE } from "./mechanism.ts";
import { codeFingerprint, type CodeSpecInput, writeProvenance } from "./provenance.ts";
import { recordCanary, TORCH_CANARY } from "./canary.ts";
import { type MeanCi, meanCi } from "../lib/util/stats.ts";
import {
  drawRollout,
  expectedSuccess,
  rolloutSamples,
  successTable,
  type TestbedEnv,
  type TestbedEnvInput,
  TestbedEnvSchema,
  type TestbedRollout,
  uniform,
} from "./testbed.ts";

/** Settings of a torch run. */
export interface TorchRunOptions {
  steps: number;
  groups_per_step: number;
  group_size: number;
  lr: number;
  d_model: number;
}

/** The default torch run: 20 steps × 4 groups × 8 rollouts, a 1-layer d_model 16 model. */
export const TORCH_RUN: TorchRunOptions = {
  steps: 20,
  groups_per_step: 4,
  group_size: 8,
  lr: 0.02,
  d_model: 16,
};

/** Token ids of an environment's vocabulary. */
export function torchVocab(env: TestbedEnv) {
  const K = env.strategies.length;
  const task = (t: number) => 1 + t;
  const strategy = (a: number) => 1 + env.tasks + a;
  const body = (a: number) => 1 + env.tasks + K + a;
  const summary = 1 + env.tasks + 2 * K;
  return { bos: 0, task, strategy, body, summary, size: summary + 1 };
}

/** The rows of a batch (behaviour logprobs to be filled) and their trained-token layout. */
export function torchRows(
  env: TestbedEnv,
  rollouts: readonly TestbedRollout[],
  setting: Setting,
): TrainingRow[] {
  const v = torchVocab(env);
  const samples = rolloutSamples(rollouts);
  const adv = computeAdvantages(samples, { level: setting.advantage });
  const plan = planLossWeights(samples, { mode: setting.normalization });
  const rows: TrainingRow[] = [];
  let j = 0;
  rollouts.forEach((r, i) => {
    r.lengths.forEach((L, k) => {
      const sample = samples[j];
      if (sample.rollout_id !== `r${i}`) throw new Error("torchRows: sample order");
      const tokens = k === 0
        ? [v.bos, v.task(r.task), v.strategy(r.action), ...Array(L - 1).fill(v.body(r.action))]
        : [v.bos, v.task(r.task), v.summary, ...Array(L).fill(v.body(r.action))];
      const context = k === 0 ? 2 : 3;
      const n = tokens.length;
      const mask = tokens.map((_, t) => (t >= context ? 1 : 0) as 0 | 1);
      const a = adv.samples[j].advantage![0];
      const w = plan.sample_weights[j];
      rows.push({
        rollout_id: `r${i}`,
        group_id: `g${r.group}`,
        tokens,
        loss_mask: mask,
        advantages: Array(n).fill(a),
        loss_weights: mask.map((m) => (m ? w : 0)),
        rollout_logprobs: Array(n).fill(0),
      });
      j++;
    });
  });
  return rows;
}

async function policyTable(client: TrainerClient, env: TestbedEnv): Promise<number[][]> {
  const v = torchVocab(env);
  const K = env.strategies.length;
  const sequences: number[][] = [];
  for (let t = 0; t < env.tasks; t++) {
    for (let a = 0; a < K; a++) sequences.push([v.bos, v.task(t), v.strategy(a)]);
  }
  const { logprobs } = await client.logprobs(sequences);
  return Array.from({ length: env.tasks }, (_, t) => {
    const lp = Array.from({ length: K }, (_, a) => logprobs[t * K + a][2]);
    const z = lp.reduce((acc, x) => acc + Math.exp(x), 0);
    // Strategy tokens are K of the vocabulary; the policy is renormalised over them.
    return lp.map((x) => Math.exp(x) / z);
  });
}

function meanSuccess(pi: number[][], table: number[][]): number {
  return pi.reduce((acc, row, t) => acc + expectedSuccess(row, [table[t]]), 0) / pi.length;
}

/**
 * One seed of one setting through the worker: returns the exact expected success before the
 * first step and after each.
 */
export async function runTorchTestbed(
  client: TrainerClient,
  envInput: TestbedEnvInput,
  setting: Setting,
  seed: number,
  options: TorchRunOptions = TORCH_RUN,
): Promise<number[]> {
  const env = TestbedEnvSchema.parse(envInput);
  const table = successTable(env);
  const v = torchVocab(env);
  await client.init({
    model: {
      kind: "builtin",
      seed,
      config: {
        vocab_size: v.size,
        d_model: options.d_model,
        n_layers: 1,
        n_heads: 2,
        n_kv_heads: 1,
        d_ff: 2 * options.d_model,
        max_seq_len: 4 + env.max_samples * Math.ceil(env.sample_tokens[1] * env.fail_length),
      },
    },
    optimizer: { lr: options.lr, grad_clip: 1 },
    device: "cpu",
    dtype: "float32",
  });
  let pi = await policyTable(client, env);
  const success = [meanSuccess(pi, table)];
  for (let step = 0; step < options.steps; step++) {
    const rollouts: TestbedRollout[] = [];
    for (let g = 0; g < options.groups_per_step; g++) {
      const task = Math.floor(uniform(seed, step, g, 0x7a5c) * env.tasks);
      for (let member = 0; member < options.group_size; member++) {
        rollouts.push(drawRollout(env, table, pi[task], { seed, step, group: g, member, task }));
      }
    }
    const rows = torchRows(env, rollouts, setting);
    const behaviour = await client.logprobs(rows.map((r) => r.tokens));
    rows.forEach((r, i) => (r.rollout_logprobs = behaviour.logprobs[i]));
    await client.forwardBackward({ rows, loss: { kind: "ppo" } });
    await client.optimStep();
    pi = await policyTable(client, env);
    success.push(meanSuccess(pi, table));
  }
  return success;
}

/** One setting's torch outcome. */
export interface TorchOutcome {
  setting: string;
  final: MeanCi;
  /** Paired difference to `rollout/rollout_token_mean` (same seeds). */
  diff: MeanCi;
  curve: { mean: number; ci95: number }[];
}

/**
 * Runs the torch variant for `seeds` seeds of each setting on one local worker.
 *
 * @example
 * ```ts ignore
 * const out = await runTorchStudy(GRID_MATCHED.env, ABLATION_SETTINGS, 8);
 * out[0].final.mean;
 * ```
 */
export async function runTorchStudy(
  env: TestbedEnvInput,
  settings: readonly Setting[],
  seeds: number,
  options: TorchRunOptions = TORCH_RUN,
  log?: (line: string) => void,
): Promise<TorchOutcome[]> {
  await using worker = await startLocalWorker({ threads: 1 });
  const traces = settings.map(() => [] as number[][]);
  for (let seed = 0; seed < seeds; seed++) {
    for (const [i, s] of settings.entries()) {
      traces[i].push(await runTorchTestbed(worker.client, env, s, seed, options));
    }
    log?.(`[torch] seed ${seed + 1}/${seeds}`);
  }
  const labels = settings.map(settingLabel);
  const ref = labels.indexOf("rollout/rollout_token_mean");
  return settings.map((_, i) => {
    const finals = traces[i].map((t) => t[t.length - 1]);
    const refFinals = ref >= 0 ? traces[ref].map((t) => t[t.length - 1]) : [];
    return {
      setting: labels[i],
      final: meanCi(finals),
      diff: ref >= 0 ? meanCi(finals.map((f, s) => f - refFinals[s])) : meanCi([]),
      curve: Array.from({ length: options.steps + 1 }, (_, k) => {
        const c = meanCi(traces[i].map((t) => t[k]));
        return { mean: c.mean, ci95: c.ci95 };
      }),
    };
  });
}

/** What produced the torch results (see `provenance.ts`). */
export const TORCH_CODE: CodeSpecInput = {
  entries: ["experiments/testbed_torch.ts"],
  extra: ["lib/trainer/worker/reins_worker/*.py"],
};

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      seeds: { type: "string", default: "16" },
      steps: { type: "string", default: String(TORCH_RUN.steps) },
      results: {
        type: "string",
        default: decodeURIComponent(new URL("./results", import.meta.url).pathname),
      },
    },
  });
  const seeds = Number(values.seeds);
  const steps = Number(values.steps);
  if (!Number.isInteger(seeds) || seeds < 2) throw new Error("--seeds: expected an integer ≥ 2");
  if (!Number.isInteger(steps) || steps < 1) throw new Error("--steps: expected an integer ≥ 1");
  const code = await codeFingerprint(TORCH_CODE);
  const t0 = performance.now();
  const options = { ...TORCH_RUN, steps };
  const regimes = [HEADLINE, GRID_MATCHED];
  const out = [];
  for (const r of regimes) {
    const settings = await runTorchStudy(
      r.env,
      ABLATION_SETTINGS,
      seeds,
      options,
      (l) => console.log(`${r.name} ${l}`),
    );
    out.push({ regime: r.name, env: r.env, settings });
    for (const s of settings) {
      console.log(
        `torch ${r.name} ${s.setting}: success=${s.final.mean.toFixed(3)} ± ${
          s.final.ci95.toFixed(3)
        } (vs reference ${s.diff.mean >= 0 ? "+" : ""}${s.diff.mean.toFixed(3)} ± ${
          (s.diff.ci95 || 0).toFixed(3)
        })`,
      );
    }
  }
  const dir = `${values.results}/mechanism_torch`;
  await Deno.mkdir(dir, { recursive: true });
  const wall_s = (performance.now() - t0) / 1000;
  await Deno.writeTextFile(
    `${dir}/results.json`,
    JSON.stringify({ seeds, run: options, regimes: out, wall_s }) + "\n",
  );
  await writeProvenance(dir, {
    command: `deno task ablation:mechanism:torch --seeds ${seeds} --steps ${steps}`,
    config: { seeds, run: options, regimes: regimes.map((r) => r.env) },
    code,
  });
  await recordCanary(dir, TORCH_CANARY);
  console.log(`torch_seeds: ${seeds}`);
  console.log(`torch_wall_s: ${wall_s.toFixed(1)}`);
}

if (import.meta.main) await main();
