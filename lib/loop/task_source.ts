/**
 * Task sources: where a run's tasks come from when they are not written into the config
 * (e.g. a curated set, `lib/curation`'s `curatedTaskSource`).
 *
 * @module
 */
import type { LoopConfigInput, LoopTask } from "./schema.ts";

/** Something that yields a run's tasks. */
export interface TaskSource {
  /** One line for logs and the run's config. */
  describe: string;
  load(): Promise<LoopTask[]>;
}

/**
 * The config with its `tasks` taken from `source` (a config's own `tasks` must be absent:
 * one run, one source).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { withTaskSource } from "./task_source.ts";
 * const source = {
 *   describe: "two tasks",
 *   load: () => Promise.resolve([{ id: "a", input: { prompt: "1+1?" } }, { id: "b", input: { prompt: "2+2?" } }]),
 * };
 * const config = await withTaskSource({ name: "run", harness: { name: "builtin" } }, source);
 * assert.deepEqual(config.tasks.map((t) => t.id), ["a", "b"]);
 * ```
 */
export async function withTaskSource(
  config: Omit<LoopConfigInput, "tasks"> & { tasks?: undefined },
  source: TaskSource,
): Promise<LoopConfigInput & { tasks: LoopTask[] }> {
  if ((config as { tasks?: unknown }).tasks !== undefined) {
    throw new Error("config.tasks: give either tasks or a task source, not both");
  }
  const tasks = await source.load();
  if (tasks.length === 0) {
    throw new Error(`config.tasks: the task source (${source.describe}) is empty`);
  }
  return { ...config, tasks };
}
