/**
 * Evaluation with common random numbers: every evaluation of a grid runs the same prompts
 * with the same sampling seeds, so two policies are compared on the same draws and a before /
 * after difference is paired prompt by prompt.
 *
 * Evaluation rollout i gets the built-in harness's `seed` option `seed_base + 1000·i` (its
 * n-th model call samples with seed `seed_base + 1000·i + n`, through the proxy's token-level
 * upstream to the worker's seeded sampler). The same policy weights therefore produce the same
 * tokens (up to the float rounding of batched generation), and every cell of a grid, which
 * starts from one SFT checkpoint, has one shared evaluation before RL.
 *
 * @module
 */
import type { GatewayClient } from "../lib/gateway/client.ts";
import { runEvalRollouts } from "../lib/loop/eval.ts";
import type { LoopConfig, LoopTask } from "../lib/loop/schema.ts";

/** What one evaluation measured, rollout by rollout (index i = prompt i, seed i). */
export interface CrnEvaluation {
  label: string;
  /** Task id of each evaluation rollout. */
  tasks: string[];
  /** Sampling seed base of each rollout. */
  seeds: number[];
  /** Reward of each rollout (0 for one that ended without a reward: see `unrewarded`). */
  rewards: number[];
  /** Rollouts that ended without a reward (failed harness, timeout): counted, scored 0. */
  unrewarded: number;
  reward_mean: number;
  wall_s: number;
}

/**
 * The seed of evaluation rollout i.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { evalSeed } from "./crn_eval.ts";
 * assert.equal(evalSeed(10_000, 3), 13_000);
 * ```
 */
export function evalSeed(seedBase: number, i: number): number {
  return seedBase + 1000 * i;
}

/**
 * Runs one `val` rollout per task, rollout i seeded with {@link evalSeed}, and waits for all.
 * Ids are `<run>-crn-<label>-<i>` (idempotent: a retry reuses finished rollouts).
 *
 * @example
 * ```ts ignore
 * const before = await crnEvaluate(gateway, config, "start", tasks, 10_000);
 * before.rewards.length === tasks.length; // true
 * ```
 */
export async function crnEvaluate(
  gateway: GatewayClient,
  config: LoopConfig,
  label: string,
  tasks: readonly LoopTask[],
  seedBase: number,
  options: { poll_ms?: number; signal?: AbortSignal } = {},
): Promise<CrnEvaluation> {
  const t0 = performance.now();
  const group = `${config.name}-crn-${label}`;
  const seeds = tasks.map((_, i) => evalSeed(seedBase, i));
  const rollouts = await runEvalRollouts(gateway, config, group, tasks, {
    seedOption: "seed",
    seeds,
    labels: { eval: label },
    pollMs: options.poll_ms ?? config.schedule.poll_ms,
    ...(options.signal ? { signal: options.signal } : {}),
  });
  const raw = rollouts.map((r) => r.reward);
  const rewards = raw.map((r) => r ?? 0);
  return {
    label,
    tasks: tasks.map((t) => t.id),
    seeds,
    rewards,
    unrewarded: raw.filter((r) => r === null).length,
    reward_mean: rewards.reduce((a, b) => a + b, 0) / Math.max(1, rewards.length),
    wall_s: (performance.now() - t0) / 1000,
  };
}
