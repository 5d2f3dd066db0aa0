/**
 * Checkpoints of a run: the worker saves weights + AdamW state + policy version to a file, and
 * the loop writes `state.json` (atomically, after the worker's file exists) with what it needs
 * to continue: the next step, the groups already created and consumed, the base version.
 *
 * @module
 */
import { type LoopState, LoopStateSchema } from "./schema.ts";
import { parseOrThrow } from "../schema.ts";
import type { TrainerClient } from "../trainer/client.ts";
import type { OptimizerConfig } from "../schema.ts";

/** `<outDir>/checkpoints/state.json`. */
export function statePath(outDir: string): string {
  return `${outDir}/checkpoints/state.json`;
}

/**
 * Saves the worker's state and then the loop state (state.json only ever names a complete
 * worker file; the previous worker file is removed afterwards).
 *
 * @example
 * ```ts ignore
 * await saveCheckpoint(client, "runs/toy", state);
 * ```
 */
export async function saveCheckpoint(
  client: TrainerClient,
  outDir: string,
  state: Omit<LoopState, "worker_checkpoint" | "saved_at">,
): Promise<LoopState> {
  const dir = `${outDir}/checkpoints`;
  await Deno.mkdir(dir, { recursive: true });
  const abs = await Deno.realPath(dir);
  const workerFile = `${abs}/step-${String(state.next_step).padStart(5, "0")}.pt`;
  const previous = await loadState(outDir);
  await client.save(workerFile);
  const full = parseOrThrow(LoopStateSchema, {
    ...state,
    worker_checkpoint: workerFile,
    saved_at: Date.now(),
  }, "state");
  const tmp = `${statePath(outDir)}.tmp`;
  await Deno.writeTextFile(tmp, JSON.stringify(full, null, 2));
  await Deno.rename(tmp, statePath(outDir));
  if (previous && previous.worker_checkpoint !== workerFile) {
    await Deno.remove(previous.worker_checkpoint).catch(() => undefined);
  }
  return full;
}

/**
 * The last saved loop state, or null when the run has none.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadState } from "./checkpoint.ts";
 * const outDir = await Deno.makeTempDir();
 * assert.equal(await loadState(outDir), null); // a fresh run
 * await Deno.remove(outDir);
 * ```
 */
export async function loadState(outDir: string): Promise<LoopState | null> {
  let text: string;
  try {
    text = await Deno.readTextFile(statePath(outDir));
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return null;
    throw error;
  }
  return parseOrThrow(LoopStateSchema, JSON.parse(text), statePath(outDir));
}

/**
 * Restores the worker from a checkpoint: initialise from its weights (with the run's
 * optimizer settings), then load the AdamW state and policy version.
 *
 * @example
 * ```ts ignore
 * await restoreWorker(client, state, config.optimizer);
 * ```
 */
export async function restoreWorker(
  client: TrainerClient,
  state: LoopState,
  optimizer: OptimizerConfig,
): Promise<number> {
  await client.init({ model: { kind: "checkpoint", path: state.worker_checkpoint }, optimizer });
  const loaded = await client.load(state.worker_checkpoint);
  if (loaded.policy_version !== state.policy_version) {
    throw new Error(
      `checkpoint ${state.worker_checkpoint}: policy version ${loaded.policy_version}, ` +
        `state.json says ${state.policy_version}`,
    );
  }
  return loaded.policy_version;
}
