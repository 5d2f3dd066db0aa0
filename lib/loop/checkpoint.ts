/**
 * Checkpoints of a run: the worker saves weights + AdamW state + policy version + its random
 * generators (torch, Python, numpy) to a file, and the loop writes `state.json` (atomically,
 * after the worker's file exists) with what it needs to continue: the next step, the groups
 * already created and consumed (the loop's own generator, `taskIndexOf(seed, group)`, is a pure
 * function of the group index, so `next_group` is its whole state), the base version, and the
 * files on disk: the last `keepLast` and the best by held-out evaluation.
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
  state: Omit<LoopState, "worker_checkpoint" | "saved_at" | "checkpoints" | "best">,
  options: SaveCheckpointOptions = {},
): Promise<LoopState> {
  const keepLast = options.keepLast ?? 1;
  const score = options.score ?? null;
  const dir = `${outDir}/checkpoints`;
  await Deno.mkdir(dir, { recursive: true });
  const abs = await Deno.realPath(dir);
  const workerFile = `${abs}/step-${String(state.next_step).padStart(5, "0")}.pt`;
  const previous = await loadState(outDir);
  await client.save(workerFile);
  const onDisk = previous?.checkpoints.length
    ? previous.checkpoints
    : previous
    ? [{ next_step: previous.next_step, path: previous.worker_checkpoint, score: null }]
    : [];
  const earlier = onDisk.filter((c) => c.path !== workerFile && c.next_step < state.next_step);
  const all = [...earlier, { next_step: state.next_step, path: workerFile, score }];
  let best = previous?.best ?? null;
  // A resumed run may repeat steps: a best from a step it is redoing no longer describes a
  // file of this history.
  if (best && best.next_step >= state.next_step) best = null;
  if (score !== null && (best === null || score > best.score)) {
    best = { next_step: state.next_step, path: workerFile, score };
  }
  const kept = all.slice(-keepLast);
  const full = parseOrThrow(LoopStateSchema, {
    ...state,
    worker_checkpoint: workerFile,
    saved_at: Date.now(),
    checkpoints: kept,
    best,
  }, "state");
  const tmp = `${statePath(outDir)}.tmp`;
  await Deno.writeTextFile(tmp, JSON.stringify(full, null, 2));
  await Deno.rename(tmp, statePath(outDir));
  // Only after state.json names the new set: a crash in between leaves extra files, never a
  // state naming a missing one.
  const keep = new Set([...kept.map((c) => c.path), ...(best ? [best.path] : [])]);
  const known = [...onDisk, ...all].map((c) => c.path);
  if (previous?.best) known.push(previous.best.path);
  for (const path of new Set(known)) {
    if (!keep.has(path)) await Deno.remove(path).catch(() => undefined);
  }
  return full;
}

/** Options of {@link saveCheckpoint}. */
export interface SaveCheckpointOptions {
  /** Checkpoints kept besides the best (default 1: only the newest). */
  keepLast?: number;
  /** Held-out evaluation score of this step (higher is better); null: not evaluated. */
  score?: number | null;
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
 * await restoreWorker(client, state, config.optimizer, config.device);
 * ```
 */
export async function restoreWorker(
  client: TrainerClient,
  state: LoopState,
  optimizer: OptimizerConfig,
  device?: string,
): Promise<number> {
  await client.init({
    model: { kind: "checkpoint", path: state.worker_checkpoint },
    optimizer,
    ...(device ? { device } : {}),
  });
  const loaded = await client.load(state.worker_checkpoint);
  if (loaded.policy_version !== state.policy_version) {
    throw new Error(
      `checkpoint ${state.worker_checkpoint}: policy version ${loaded.policy_version}, ` +
        `state.json says ${state.policy_version}`,
    );
  }
  return loaded.policy_version;
}
