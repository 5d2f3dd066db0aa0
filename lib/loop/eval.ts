/**
 * Evaluation of the current policy: one `val` rollout per task through the same harness, proxy
 * and controller (val rollouts never feed training), and their mean reward.
 *
 * @module
 */
import type { GatewayClient } from "../gateway/client.ts";
import { TERMINAL_ROLLOUT_STATUSES } from "../schema.ts";
import type { LoopConfig, LoopTask } from "../schema/loop.ts";
import { pause } from "./context.ts";

/** What {@link evaluatePolicy} measured. */
export interface EvalResult {
  label: string;
  rollouts: number;
  reward_mean: number;
  pass_rate: number;
  /** Policy versions the eval's calls were served by. */
  versions: number[];
  wall_ms: number;
}

/**
 * Runs one val rollout per task (ids `<name>-eval-<label>-<i>`, idempotent) and waits for all.
 *
 * @example
 * ```ts ignore
 * const before = await evaluatePolicy(gateway, config, "before", evalTasks);
 * before.reward_mean; // e.g. 0.31
 * ```
 */
export async function evaluatePolicy(
  gateway: GatewayClient,
  config: LoopConfig,
  label: string,
  tasks: LoopTask[],
  options: {
    signal?: AbortSignal;
    onStatus?: (text: string) => void;
    /** Training steps done when the eval runs: the eval rollouts' `step` label (overview x). */
    step?: number;
  } = {},
): Promise<EvalResult> {
  const t0 = performance.now();
  const group = `${config.name}-eval-${label}`;
  await gateway.createRollouts(tasks.map((task, i) => ({
    rollout_id: `${group}-${i}`,
    group_id: group,
    input: task.input,
    mode: "val" as const,
    config: {
      timeout_s: config.rollout_timeout_s,
      max_attempts: config.max_attempts,
      harness: config.harness,
    },
    labels: {
      run: config.name,
      role: "eval",
      eval: label,
      task: task.id,
      ...(options.step !== undefined ? { step: String(options.step) } : {}),
    },
  })));
  while (true) {
    const { items } = await gateway.listRollouts({ group_id: group, limit: 1000 });
    const done = items.filter((r) => TERMINAL_ROLLOUT_STATUSES.includes(r.status));
    options.onStatus?.(`eval ${label}: ${done.length}/${tasks.length} rollouts final`);
    if (done.length === tasks.length) {
      const rewards = items.map((r) => r.reward ?? 0);
      const versions = new Set<number>();
      for (const r of items) {
        if (r.policy_version_min !== null) versions.add(r.policy_version_min);
        if (r.policy_version_max !== null) versions.add(r.policy_version_max);
      }
      return {
        label,
        rollouts: items.length,
        reward_mean: rewards.reduce((a, b) => a + b, 0) / Math.max(1, rewards.length),
        pass_rate: rewards.filter((r) => r > config.pass_threshold).length /
          Math.max(1, rewards.length),
        versions: [...versions].sort((a, b) => a - b),
        wall_ms: performance.now() - t0,
      };
    }
    await pause(config.schedule.poll_ms, options.signal);
  }
}
