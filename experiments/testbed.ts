/**
 * A policy-gradient testbed where the paper's mechanism has consequences (issue #18, part 2):
 * a softmax policy over a few strategies whose rollouts split into several samples, trained
 * with the project's own advantage and weight code (`lib/algo`: `computeAdvantages`,
 * `planLossWeights`).
 *
 * The environment. A step samples `groups_per_step` tasks; each group runs `group_size`
 * rollouts of its task. A rollout picks strategy a ~ π = softmax(θ), succeeds (reward 1) with
 * probability p(task, a) = σ(logit p_a + d_task) (d_task: the task's fixed difficulty offset),
 * and splits into k = 1 + X samples, X ~ Poisson(λ_r) capped at `max_samples − 1`, with
 *
 * | quantity                   | value                                                          |
 * | -------------------------- | -------------------------------------------------------------- |
 * | extra samples of a success | λ₁ = split_rate · (1 + split_reward_corr)                      |
 * | extra samples of a failure | λ₀ = split_rate · (1 − split_reward_corr)                      |
 * | tokens of each sample      | uniform in `sample_tokens`, × `fail_length` for a failure      |
 *
 * so `split_rate` is the mean number of extra samples per rollout at a 50% success rate, and
 * `split_reward_corr` < 0 makes failing rollouts split more (long failing rollouts compact, as
 * on coding runs), > 0 successful ones, 0 neither.
 *
 * The update. Each rollout becomes its k samples (`Sample`s with that many trained tokens);
 * `computeAdvantages` (the setting's level, GRPO defaults) gives each sample its advantage and
 * `planLossWeights` (the setting's mode) its per-token weight, over the whole step's batch.
 * Where the strategy lives in the tokens is a modelling choice, `credit`:
 *
 * - `all_tokens`: every trained token of a rollout carries ∇log π(a) (the strategy shows in the
 *   whole response), so rollout i's gradient is sᵢ·Aᵢ·∇log π(aᵢ) with sᵢ its share of the total
 *   weight (Σ of its tokens' weights);
 * - `first_token`: only the rollout's first response token (the decision) carries it, so the
 *   gradient is w_first·Aᵢ·∇log π(aᵢ) with w_first the weight of that one token, scaled by the
 *   environment's nominal tokens per rollout so that both credits take steps of similar size.
 *
 * θ ← θ + lr · g (SGD, or Adam). The score is the policy's **exact** expected success
 * Σ_task Σ_a π_a·p(task, a) / tasks — no evaluation noise. Every random draw is a hash of
 * (seed, step, group, rollout, stream), so two settings run with the same seed see the same
 * tasks and the same uniforms (common random numbers): their difference is paired.
 *
 * @module
 */
import { z } from "zod";
import { computeAdvantages } from "../lib/algo/advantages.ts";
import { planLossWeights } from "../lib/algo/normalization.ts";
import { parseOrThrow, type Sample } from "../lib/schema.ts";
import type { Setting } from "./grid.ts";

/** One strategy of the policy: its base success probability. */
export const StrategySchema = z.object({
  name: z.string().min(1),
  p: z.number().gt(0).lt(1),
});

/** The testbed's environment. */
export const TestbedEnvSchema = z.object({
  strategies: z.array(StrategySchema).min(2),
  /** Tasks, each with a fixed difficulty offset d ~ N(0, task_spread) on the logit scale. */
  tasks: z.number().int().min(1).default(16),
  task_spread: z.number().min(0).default(1),
  /** Mean extra samples per rollout at a 50% success rate. */
  split_rate: z.number().min(0).default(1.4),
  /** In [−1, 1]: < 0 failing rollouts split more, > 0 successful ones. */
  split_reward_corr: z.number().min(-1).max(1).default(-0.8),
  /** Trained tokens of a sample: uniform integer in [min, max]. */
  sample_tokens: z.tuple([z.number().int().min(1), z.number().int().min(1)]).default([8, 40]),
  /** A failing rollout's samples are this many times longer. */
  fail_length: z.number().positive().default(1.5),
  max_samples: z.number().int().min(1).default(8),
});
/** The testbed's environment (parsed). */
export type TestbedEnv = z.infer<typeof TestbedEnvSchema>;
/** The testbed's environment as a caller writes it. */
export type TestbedEnvInput = z.input<typeof TestbedEnvSchema>;

/** How a run trains. */
export const TestbedRunSchema = z.object({
  steps: z.number().int().min(1).default(30),
  groups_per_step: z.number().int().min(1).default(4),
  group_size: z.number().int().min(2).default(8),
  lr: z.number().positive().default(1),
  credit: z.enum(["all_tokens", "first_token"]).default("all_tokens"),
  optimizer: z.enum(["sgd", "adam"]).default("sgd"),
});
/** How a run trains (parsed). */
export type TestbedRun = z.infer<typeof TestbedRunSchema>;
/** How a run trains, as a caller writes it. */
export type TestbedRunInput = z.input<typeof TestbedRunSchema>;

/**
 * The default strategies: a careful one that usually succeeds, two middling ones and a guess.
 */
export const DEFAULT_STRATEGIES: z.input<typeof StrategySchema>[] = [
  { name: "careful", p: 0.6 },
  { name: "standard", p: 0.45 },
  { name: "hasty", p: 0.3 },
  { name: "guess", p: 0.1 },
];

/** A counter-based uniform in [0, 1): a hash of the integers (splitmix32-style). */
export function uniform(...keys: number[]): number {
  let h = 0x9e3779b9;
  for (const k of keys) {
    h = Math.imul(h ^ (k >>> 0), 0x85ebca6b);
    h ^= h >>> 13;
    h = Math.imul(h, 0xc2b2ae35);
    h ^= h >>> 16;
  }
  h = Math.imul(h ^ (h >>> 15), 0x2c1b3c6d);
  h = Math.imul(h ^ (h >>> 12), 0x297a2d39);
  h ^= h >>> 15;
  return (h >>> 0) / 4294967296;
}

function normal(u1: number, u2: number): number {
  return Math.sqrt(-2 * Math.log(Math.max(u1, 1e-300))) * Math.cos(2 * Math.PI * u2);
}

function poisson(lambda: number, u: number, cap: number): number {
  if (lambda <= 0) return 0;
  let k = 0;
  let p = Math.exp(-lambda);
  let cdf = p;
  while (u > cdf && k < cap) {
    k += 1;
    p *= lambda / k;
    cdf += p;
  }
  return k;
}

const logit = (p: number) => Math.log(p / (1 - p));
const sigmoid = (x: number) => 1 / (1 + Math.exp(-x));

/** The success probability table p(task, a) of an environment (fixed: seed 0 of the env). */
export function successTable(env: TestbedEnv): number[][] {
  return Array.from({ length: env.tasks }, (_, t) => {
    const d = env.task_spread * normal(uniform(7, t, 1), uniform(7, t, 2));
    return env.strategies.map((s) => sigmoid(logit(s.p) + d));
  });
}

/**
 * The softmax of logits.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { softmax } from "./testbed.ts";
 * assert.deepEqual(softmax([0, 0]), [0.5, 0.5]);
 * ```
 */
export function softmax(theta: readonly number[]): number[] {
  const m = Math.max(...theta);
  const e = theta.map((x) => Math.exp(x - m));
  const z = e.reduce((a, b) => a + b, 0);
  return e.map((x) => x / z);
}

/** Exact expected success of π over the tasks. */
export function expectedSuccess(pi: readonly number[], table: readonly number[][]): number {
  let sum = 0;
  for (const row of table) for (let a = 0; a < pi.length; a++) sum += pi[a] * row[a];
  return sum / table.length;
}

/** One simulated rollout. */
export interface TestbedRollout {
  group: number;
  task: number;
  action: number;
  reward: number;
  /** Trained tokens of each of its samples. */
  lengths: number[];
}

/** Draws one rollout (pure function of its keys and π). */
export function drawRollout(
  env: TestbedEnv,
  table: readonly number[][],
  pi: readonly number[],
  keys: { seed: number; step: number; group: number; member: number; task: number },
): TestbedRollout {
  const { seed, step, group, member } = keys;
  const u = (stream: number) => uniform(seed, step, group, member, stream);
  let action = pi.length - 1;
  let acc = 0;
  const ua = u(1);
  for (let a = 0; a < pi.length; a++) {
    acc += pi[a];
    if (ua < acc) {
      action = a;
      break;
    }
  }
  const reward = u(2) < table[keys.task][action] ? 1 : 0;
  const lambda = env.split_rate * (reward ? 1 + env.split_reward_corr : 1 - env.split_reward_corr);
  const k = 1 + poisson(lambda, u(3), env.max_samples - 1);
  const [lo, hi] = env.sample_tokens;
  const scale = reward ? 1 : env.fail_length;
  const lengths = Array.from({ length: k }, (_, j) => {
    const base = lo + Math.floor(uniform(seed, step, group, member, 10 + j) * (hi - lo + 1));
    return Math.max(1, Math.round(base * scale));
  });
  return { group, task: keys.task, action, reward, lengths };
}

// lib/algo never writes into a sample's arrays (it returns copies), so samples of one length
// share theirs: allocating typed arrays was most of a step's time.
const arrays = new Map<number, { tokens: Uint32Array; mask: Uint8Array; logprobs: Float32Array }>();
function arraysOf(L: number) {
  let a = arrays.get(L);
  if (!a) {
    a = {
      tokens: new Uint32Array(L),
      mask: new Uint8Array(L).fill(1),
      logprobs: new Float32Array(L),
    };
    arrays.set(L, a);
  }
  return a;
}

/**
 * A sample of `length` trained tokens, as `lib/algo` reads it: only its ids, reward and length
 * matter (token ids, logprobs and provenance are placeholders; the arrays are shared).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { trainedSample } from "./testbed.ts";
 * const s = trainedSample("r0", "g0", 1, 3);
 * assert.deepEqual([s.tokens.length, Array.from(s.loss_mask)], [3, [1, 1, 1]]);
 * ```
 */
export function trainedSample(
  rollout_id: string,
  group_id: string,
  reward: number,
  length: number,
): Sample {
  const a = arraysOf(length);
  return {
    rollout_id,
    group_id,
    reward,
    tokens: a.tokens,
    loss_mask: a.mask,
    rollout_logprobs: a.logprobs,
    policy_version: 0,
    provenance: {
      request_seqs: [],
      split_reason: null,
      strategy: "prefix_merge",
      off_policy: false,
      response_starts: [],
    },
  };
}

/** The samples of a step's rollouts, as `lib/algo` reads them (trained tokens only). */
export function rolloutSamples(rollouts: readonly TestbedRollout[]): Sample[] {
  return rollouts.flatMap((r, i) =>
    r.lengths.map((L) => trainedSample(`r${i}`, `g${r.group}`, r.reward, L))
  );
}

/** Per-rollout update coefficients of a batch: cᵢ such that g = Σ cᵢ·∇log π(aᵢ). */
export interface UpdateWeights {
  /** cᵢ per rollout, in input order. */
  coef: number[];
  /** Advantage of each rollout. */
  advantage: number[];
  /** Share of the total gradient weight of each rollout (Σ = 1 for the four settings). */
  share: number[];
}

/**
 * The per-rollout coefficients of a batch under a setting, from `computeAdvantages` and
 * `planLossWeights` (see the module doc for `credit`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { updateWeights } from "./testbed.ts";
 * // Figure 5's rollouts: A = {50, 100}, B = {30, 30, 30}, C = {40}.
 * const r = (reward: number, lengths: number[]) => ({ group: 0, task: 0, action: 0, reward, lengths });
 * const batch = [r(1, [50, 100]), r(0, [30, 30, 30]), r(1, [40])];
 * const w = updateWeights(batch, { advantage: "rollout", normalization: "seq_mean_token_mean" });
 * assert.deepEqual(w.share.map((s) => Math.round(s * 6)), [2, 3, 1]);
 * ```
 */
export function updateWeights(
  rollouts: readonly TestbedRollout[],
  setting: Setting,
  credit: TestbedRun["credit"] = "all_tokens",
  nominalTokens = 1,
): UpdateWeights {
  const samples = rolloutSamples(rollouts);
  const adv = computeAdvantages(samples, { level: setting.advantage });
  const plan = planLossWeights(samples, { mode: setting.normalization });
  const advantage = new Array<number>(rollouts.length).fill(0);
  const share = new Array<number>(rollouts.length).fill(0);
  const first = new Array<number>(rollouts.length).fill(Number.NaN);
  samples.forEach((s, j) => {
    const i = Number(s.rollout_id.slice(1));
    advantage[i] = adv.samples[j].advantage![0];
    share[i] += plan.sample_weights[j] * plan.sample_tokens[j];
    if (Number.isNaN(first[i])) first[i] = plan.sample_weights[j];
  });
  const coef = rollouts.map((_, i) =>
    credit === "all_tokens" ? share[i] * advantage[i] : first[i] * nominalTokens * advantage[i]
  );
  return { coef, advantage, share };
}

/** What one run recorded. */
export interface TestbedTrace {
  /** Exact expected success before step 0 and after every step (steps + 1 values). */
  success: number[];
  /** Mean samples per rollout over the run. */
  samples_per_rollout: number;
  /** Share of rollouts that split (k > 1), over the run. */
  split_share: number;
  /** Share of the total gradient weight that went to rollouts that split, over the run. */
  split_weight_share: number;
  /** π at the end. */
  final_pi: number[];
}

/** The environment's nominal trained tokens per rollout (for `first_token` credit). */
export function nominalTokens(env: TestbedEnv): number {
  const [lo, hi] = env.sample_tokens;
  const meanLen = ((lo + hi) / 2) * (1 + env.fail_length) / 2;
  return meanLen * (1 + env.split_rate);
}

/**
 * Runs one seed of one setting.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runTestbed } from "./testbed.ts";
 * const setting = { advantage: "rollout", normalization: "rollout_token_mean" } as const;
 * const trace = runTestbed({ strategies: [{ name: "a", p: 0.8 }, { name: "b", p: 0.2 }] },
 *   { steps: 20 }, setting, 1);
 * assert.ok(trace.success[20] > trace.success[0]);
 * ```
 */
export function runTestbed(
  envInput: TestbedEnvInput,
  runInput: TestbedRunInput,
  setting: Setting,
  seed: number,
): TestbedTrace {
  const env = parseOrThrow(TestbedEnvSchema, envInput, "env");
  const run = parseOrThrow(TestbedRunSchema, runInput, "run");
  const table = successTable(env);
  const K = env.strategies.length;
  const theta = new Array<number>(K).fill(0);
  const m = new Array<number>(K).fill(0);
  const v = new Array<number>(K).fill(0);
  const nominal = nominalTokens(env);
  const success = [expectedSuccess(softmax(theta), table)];
  let rolloutsSeen = 0;
  let samplesSeen = 0;
  let splitRollouts = 0;
  let splitWeight = 0;
  let totalWeight = 0;
  for (let step = 0; step < run.steps; step++) {
    const pi = softmax(theta);
    const rollouts: TestbedRollout[] = [];
    for (let g = 0; g < run.groups_per_step; g++) {
      const task = Math.floor(uniform(seed, step, g, 0x7a5c) * env.tasks);
      for (let member = 0; member < run.group_size; member++) {
        rollouts.push(drawRollout(env, table, pi, { seed, step, group: g, member, task }));
      }
    }
    const w = updateWeights(rollouts, setting, run.credit, nominal);
    const grad = new Array<number>(K).fill(0);
    rollouts.forEach((r, i) => {
      for (let a = 0; a < K; a++) grad[a] += w.coef[i] * ((a === r.action ? 1 : 0) - pi[a]);
      rolloutsSeen += 1;
      samplesSeen += r.lengths.length;
      const weight = Math.abs(w.share[i]);
      totalWeight += weight;
      if (r.lengths.length > 1) {
        splitRollouts += 1;
        splitWeight += weight;
      }
    });
    if (run.optimizer === "sgd") {
      for (let a = 0; a < K; a++) theta[a] += run.lr * grad[a];
    } else {
      const t = step + 1;
      for (let a = 0; a < K; a++) {
        m[a] = 0.9 * m[a] + 0.1 * grad[a];
        v[a] = 0.999 * v[a] + 0.001 * grad[a] * grad[a];
        const mh = m[a] / (1 - 0.9 ** t);
        const vh = v[a] / (1 - 0.999 ** t);
        theta[a] += run.lr * mh / (Math.sqrt(vh) + 1e-8);
      }
    }
    success.push(expectedSuccess(softmax(theta), table));
  }
  return {
    success,
    samples_per_rollout: samplesSeen / rolloutsSeen,
    split_share: splitRollouts / rolloutsSeen,
    split_weight_share: totalWeight > 0 ? splitWeight / totalWeight : 0,
    final_pi: softmax(theta),
  };
}
