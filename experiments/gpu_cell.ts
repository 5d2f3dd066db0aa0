/**
 * The GPU version of an ablation cell: the same loop config with a Hugging Face checkpoint
 * (Qwen3 tokenizer and chat template), a real-sized schedule, and a worker on a GPU host —
 * connected to by URL (`REINS_GPU_WORKER_URL`) or started by a command
 * (`REINS_GPU_LAUNCH_CMD`, e.g. an `ssh` line) through the trainer client's `connect` /
 * `launch`. Gateway, proxy and controller run here; only the worker runs on the GPU.
 *
 * @module
 */
import { codingEnv } from "../lib/harness/envs/coding.ts";
import type { LoopConfigInput } from "../lib/loop/schema.ts";
import type { ChatTokenizer } from "../lib/tokens/types.ts";
import { launch } from "../lib/trainer/mod.ts";
import { type EmbeddedStack, startEmbedded } from "../lib/loop/mod.ts";
import type { Cell } from "./grid.ts";

/** Where the GPU worker comes from (read from the environment by {@link gpuTargetFromEnv}). */
export interface GpuTarget {
  /** URL of a worker already running on the GPU host (e.g. through an ssh port forward). */
  url?: string;
  /** Command that starts one (`sh -c`), e.g. `ssh gpu 'cd reins && python3 …/server.py'`. */
  command?: string;
  /** HF checkpoint directory or hub id the worker loads. */
  checkpoint: string;
}

/**
 * The GPU target configured in the environment, or null (with the reason) when none is.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { gpuTargetFromEnv } from "./gpu_cell.ts";
 * assert.equal(gpuTargetFromEnv({}).target, null);
 * const { target } = gpuTargetFromEnv({ REINS_GPU_WORKER_URL: "http://gpu:8300" });
 * assert.equal(target?.checkpoint, "Qwen/Qwen3-0.6B");
 * ```
 */
export function gpuTargetFromEnv(
  env: Record<string, string | undefined> = Deno.env.toObject(),
): { target: GpuTarget | null; reason: string } {
  const url = env.REINS_GPU_WORKER_URL?.trim() || undefined;
  const command = env.REINS_GPU_LAUNCH_CMD?.trim() || undefined;
  const checkpoint = env.REINS_HF_CHECKPOINT?.trim() || "Qwen/Qwen3-0.6B";
  if (!url && !command) {
    return {
      target: null,
      reason: "no GPU host configured: set REINS_GPU_WORKER_URL (a running worker) or " +
        "REINS_GPU_LAUNCH_CMD (a command that starts one), and optionally REINS_HF_CHECKPOINT",
    };
  }
  if (url && !/^https?:\/\//.test(url)) {
    throw new Error(`REINS_GPU_WORKER_URL: expected an http(s) URL, got "${url}"`);
  }
  return {
    target: { ...(url ? { url } : {}), ...(command ? { command } : {}), checkpoint },
    reason: url ? `worker at ${url}` : `worker started by: ${command}`,
  };
}

/**
 * The loop config a real GPU run of an ablation cell uses: the coding environment on the
 * built-in harness with compaction and sub-agents (rollouts split), an HF checkpoint, 8
 * rollouts per group, collocated async.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { gpuCellConfig } from "./gpu_cell.ts";
 * const config = gpuCellConfig({
 *   id: "rollout-rollout_token_mean-prefix_merge-coding-s0", setting: "rollout/rollout_token_mean",
 *   advantage: "rollout", normalization: "rollout_token_mean", merge: "prefix_merge",
 *   env: "coding", seed: 0,
 * }, "Qwen/Qwen3-0.6B");
 * assert.deepEqual(config.model, { kind: "hf", path: "Qwen/Qwen3-0.6B" });
 * ```
 */
export function gpuCellConfig(cell: Cell, checkpoint: string): LoopConfigInput {
  const env = codingEnv();
  return {
    name: `gpu-${cell.id}`,
    out_dir: `runs/gpu-${cell.id}`,
    tasks: env.loadTasks().map((t) => ({ id: t.id, input: env.taskInput(t) })),
    harness: {
      name: `builtin-${cell.env}`,
      options: {
        max_turns: 24,
        max_tokens: 2048,
        temperature: 1,
        compaction: { max_chars: 24_000, mode: "inline", summary_max_tokens: 512 },
        subagents: true,
      },
    },
    model: { kind: "hf", path: checkpoint },
    group_size: 8,
    groups_per_step: 16,
    steps: 200,
    merge_strategy: cell.merge,
    advantage: { level: cell.advantage },
    normalization: { mode: cell.normalization },
    loss: { kind: "ppo", clip_low: 0.2, clip_high: 0.28 },
    optimizer: { lr: 1e-6, grad_clip: 1 },
    micro_token_budget: 32_768,
    rollout_timeout_s: 1800,
    schedule: { mode: "collocated_async", max_staleness: 1, stale_policy: "tis" },
    checkpoint_every: 10,
    seed: cell.seed,
  };
}

/** A local gateway + proxy + controller whose policy is a remote (GPU) worker. */
export type RemoteStack = EmbeddedStack;

/**
 * Connects to (or launches) the GPU worker and starts the local services around it.
 *
 * @example
 * ```ts ignore
 * const { target } = gpuTargetFromEnv();
 * if (target) {
 *   await using stack = await startRemoteStack(target, await loadQwen3Tokenizer(), "runs/gpu");
 *   await runLoop(gpuCellConfig(cell, target.checkpoint), stack.services);
 * }
 * ```
 */
export function startRemoteStack(
  target: GpuTarget,
  tokenizer: ChatTokenizer,
  outDir: string,
): Promise<RemoteStack> {
  return startEmbedded({
    outDir,
    tokenizer,
    worker: () =>
      launch({
        ...(target.url ? { url: target.url } : {}),
        ...(target.command ? { command: target.command } : {}),
      }),
    concurrency: 32,
    controllerId: "gpu-controller",
    // GPU steps are long: a held call may wait for a whole update.
    proxy: { max_hold_ms: 1_800_000 },
  });
}
