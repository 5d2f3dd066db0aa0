/**
 * Evaluation of the current policy: one `val` rollout per (task, seed) through the same
 * harness, proxy and controller (val rollouts never feed training), reported as mean reward
 * ± a 95% confidence interval, and a paired before/after comparison.
 *
 * Fixed evaluation seeds: rollout `i` of every evaluation gets the same task and, for the
 * built-in harness, the same sampling seed (`seed` option: call `j` samples with `seed + j`),
 * so a before/after pair differs only by the policy. The pair's difference then has a much
 * tighter interval than the two separate means (common random numbers).
 *
 * @module
 */
import type { GatewayClient } from "../gateway/client.ts";
import { type Rollout, TERMINAL_ROLLOUT_STATUSES } from "../schema.ts";
import type { LoopConfig, LoopTask } from "./schema.ts";
import { sleep } from "../util/time.ts";
import type { ProgressCount } from "./progress.ts";
import { type MeanCi, meanCi, welchDiff } from "../util/stats.ts";

/**
 * `0.412 ± 0.081` (or `0.412` when the interval is unknown).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { formatCi } from "./eval.ts";
 * assert.equal(formatCi({ n: 64, mean: 0.4121, std: 0.5, ci95: 0.0813 }), "0.412 ± 0.081");
 * ```
 */
export function formatCi(r: MeanCi, digits = 3): string {
  return Number.isFinite(r.ci95)
    ? `${r.mean.toFixed(digits)} ± ${r.ci95.toFixed(digits)}`
    : r.mean.toFixed(digits);
}

/** What {@link evaluatePolicy} measured. */
export interface EvalResult {
  label: string;
  rollouts: number;
  reward_mean: number;
  /** Half-width of the 95% interval of `reward_mean` (see {@link meanCi}). */
  reward_ci95: number;
  reward_std: number;
  pass_rate: number;
  /** Reward of each evaluation rollout, in order (a failed rollout counts 0). */
  rewards: number[];
  /** Task id and sampling seed of each rollout (null: the harness takes no seed). */
  tasks: string[];
  seeds: (number | null)[];
  /** Rollouts that did not succeed (they count reward 0). */
  failed: number;
  /** Policy versions the eval's calls were served by. */
  versions: number[];
  wall_ms: number;
}

/** Options of {@link evaluatePolicy}. */
export interface EvalOptions {
  signal?: AbortSignal;
  /** Progress as text, with the phase's count (a `ProgressSink.status`). */
  onStatus?: (text: string, count: ProgressCount) => void;
  /**
   * The harness option that carries the sampling seed (default `seed` for the built-in
   * harnesses, `builtin-*`; none otherwise): rollout `i` gets `seeds[i]`.
   */
  seedOption?: string | null;
  /** Sampling seed of each rollout (default {@link evalSeeds} of `config.seed`). */
  seeds?: number[];
  /** Training steps done when the eval runs: the eval rollouts' `step` label (overview x). */
  step?: number;
}

/**
 * The fixed evaluation seeds: `n` seeds derived from the run's seed, far apart so that a
 * rollout's calls (seed + call index) never share a seed with another rollout's.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { evalSeeds } from "./eval.ts";
 * assert.deepEqual(evalSeeds(3, 0), [1_000_000, 1_001_000, 1_002_000]);
 * ```
 */
export function evalSeeds(n: number, runSeed: number): number[] {
  return Array.from({ length: n }, (_, i) => 1_000_000 + runSeed * 100_000_000 + i * 1000);
}

/**
 * Runs one val rollout per task (ids `<name>-eval-<label>-<i>`, idempotent), each with its fixed
 * sampling seed, waits for all and reports the mean reward with its 95% interval.
 *
 * @example
 * ```ts ignore
 * const before = await evaluatePolicy(gateway, config, "before", evalTasks);
 * formatCi(meanCi(before.rewards)); // e.g. "0.312 ± 0.115"
 * ```
 */
export async function evaluatePolicy(
  gateway: GatewayClient,
  config: LoopConfig,
  label: string,
  tasks: LoopTask[],
  options: EvalOptions = {},
): Promise<EvalResult> {
  const t0 = performance.now();
  const group = `${config.name}-eval-${label}`;
  const seedOption = options.seedOption !== undefined
    ? options.seedOption
    : config.harness.name.startsWith("builtin-")
    ? "seed"
    : null;
  const seeds = seedOption ? (options.seeds ?? evalSeeds(tasks.length, config.seed)) : null;
  if (seeds && seeds.length < tasks.length) {
    throw new Error(`seeds: ${seeds.length} seeds for ${tasks.length} evaluation rollouts`);
  }
  const ordered = await runEvalRollouts(gateway, config, group, tasks, {
    seedOption,
    seeds,
    labels: {
      role: "eval",
      eval: label,
      ...(options.step !== undefined ? { step: String(options.step) } : {}),
    },
    pollMs: config.schedule.poll_ms,
    phase: `eval ${label}`,
    ...(options.signal ? { signal: options.signal } : {}),
    ...(options.onStatus ? { onStatus: options.onStatus } : {}),
  });
  const rewards = ordered.map((r) => (r.status === "succeeded" ? r.reward ?? 0 : 0));
  const versions = new Set<number>();
  for (const r of ordered) {
    if (r.policy_version_min !== null) versions.add(r.policy_version_min);
    if (r.policy_version_max !== null) versions.add(r.policy_version_max);
  }
  const stats = meanCi(rewards);
  return {
    label,
    rollouts: ordered.length,
    reward_mean: stats.mean,
    reward_ci95: stats.ci95,
    reward_std: stats.std,
    pass_rate: rewards.filter((r) => r > config.pass_threshold).length /
      Math.max(1, rewards.length),
    rewards,
    tasks: tasks.map((t) => t.id),
    seeds: seeds ? seeds.slice(0, tasks.length) : tasks.map(() => null),
    failed: ordered.filter((r) => r.status !== "succeeded").length,
    versions: [...versions].sort((a, b) => a - b),
    wall_ms: performance.now() - t0,
  };
}

/** Options of {@link runEvalRollouts}. */
export interface EvalRolloutsOptions {
  /** The harness option that carries the sampling seed (null: the harness takes none). */
  seedOption: string | null;
  /** Sampling seed of each rollout, by task index (null: none). */
  seeds: readonly number[] | null;
  /** Labels beside `run` and `task` (the eval's name, role, step). */
  labels: Record<string, string>;
  pollMs: number;
  /** Name of the phase in progress lines. */
  phase?: string;
  signal?: AbortSignal;
  onStatus?: (text: string, count: ProgressCount) => void;
}

/**
 * Creates one `val` rollout per task in group `group` (ids `<group>-<i>`, so a retry reuses
 * finished rollouts), rollout `i` with `seeds[i]` in its harness's `seedOption`, waits until
 * every one is final and returns them in task order. The evaluations ({@link evaluatePolicy},
 * the experiments' common-random-numbers evaluation) differ only in how they score them.
 *
 * @example
 * ```ts ignore
 * const rollouts = await runEvalRollouts(gateway, config, "run-eval-a", tasks, {
 *   seedOption: "seed", seeds: [1000, 2000], labels: { eval: "a" }, pollMs: 100,
 * });
 * rollouts.map((r) => r.reward); // in task order
 * ```
 */
export async function runEvalRollouts(
  gateway: GatewayClient,
  config: LoopConfig,
  group: string,
  tasks: readonly LoopTask[],
  options: EvalRolloutsOptions,
): Promise<Rollout[]> {
  const { seedOption, seeds } = options;
  await gateway.createRollouts(tasks.map((task, i) => ({
    rollout_id: `${group}-${i}`,
    group_id: group,
    input: task.input,
    mode: "val" as const,
    config: {
      timeout_s: config.rollout_timeout_s,
      max_attempts: config.max_attempts,
      harness: seedOption && seeds
        ? { ...config.harness, options: { ...config.harness.options, [seedOption]: seeds[i] } }
        : config.harness,
    },
    labels: { run: config.name, ...options.labels, task: task.id },
  })));
  const phase = options.phase ?? group;
  while (true) {
    options.signal?.throwIfAborted();
    const { items } = await gateway.listRollouts({ group_id: group, limit: 1000 });
    const done = items.filter((r) => TERMINAL_ROLLOUT_STATUSES.includes(r.status));
    options.onStatus?.(`${phase}: ${done.length}/${tasks.length} rollouts final`, {
      phase,
      done: done.length,
      total: tasks.length,
    });
    if (done.length === tasks.length) {
      const byId = new Map(items.map((r) => [r.rollout_id, r]));
      return tasks.map((_, i) => byId.get(`${group}-${i}`)!);
    }
    await sleep(options.pollMs, options.signal, { rejectOnAbort: true });
  }
}

/** A before/after comparison of two evaluations. */
export interface EvalComparison {
  /** after − before, with its 95% interval. */
  diff: MeanCi;
  /** Whether the rollouts were paired (same tasks and seeds, in order). */
  paired: boolean;
  /** Whether the interval of the difference excludes 0. */
  separated: boolean;
}

/**
 * after − before: paired (mean and t interval of the per-rollout differences) when both ran the
 * same tasks with the same seeds, else Welch's t interval of two independent means.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { compareEvals } from "./eval.ts";
 * const run = (rewards: number[]) => ({
 *   rewards, tasks: rewards.map((_, i) => `t${i % 2}`), seeds: rewards.map((_, i) => i),
 * });
 * const c = compareEvals(run([0, 0, 0, 0, 1, 0, 0, 0]), run([1, 1, 1, 1, 1, 1, 0, 1]));
 * assert.equal(c.paired, true);
 * assert.equal(c.diff.mean.toFixed(3), "0.750");
 * assert.equal(c.separated, true);
 * ```
 */
export function compareEvals(
  before: Pick<EvalResult, "rewards" | "tasks" | "seeds">,
  after: Pick<EvalResult, "rewards" | "tasks" | "seeds">,
): EvalComparison {
  const paired = before.rewards.length === after.rewards.length &&
    before.tasks.every((t, i) => t === after.tasks[i]) &&
    before.seeds.every((s, i) => s !== null && s === after.seeds[i]);
  let diff: MeanCi;
  if (paired) {
    diff = meanCi(after.rewards.map((r, i) => r - before.rewards[i]));
  } else {
    const welch = welchDiff(after.rewards, before.rewards);
    const n = Math.min(before.rewards.length, after.rewards.length);
    diff = { n, mean: welch.mean, std: Number.NaN, ci95: welch.ci95 };
  }
  const separated = Number.isFinite(diff.ci95) &&
    (diff.mean - diff.ci95 > 0 || diff.mean + diff.ci95 < 0);
  return { diff, paired, separated };
}
