/**
 * A curated set as the training loop's task source: the set's tasks are written as a coding
 * dataset (so that the harness and the verifier find them by id), and its train (or
 * validation) split becomes the run's `LoopTask`s.
 *
 * @module
 */
import type { TaskSource } from "../loop/task_source.ts";
import type { CuratedTask, HarnessSpec, JsonObject } from "../schema.ts";
import type { LoopTask } from "../loop/schema.ts";
import { readCuratedSet } from "./io.ts";
import { writeProbeDataset } from "./probe.ts";

/** Options of {@link curatedTaskSource}. */
export interface CuratedSourceOptions {
  /** The curated set (`curated.jsonl` or `curated.parquet` of a curation run). */
  path: string;
  /** Which split feeds the run (default `train`). */
  split?: "train" | "validation";
  /** The environment's repositories. */
  reposDir: string;
  /** Where the coding dataset is written (give the same directory to `startEmbedded`). */
  dataDir: string;
}

/** A curated task source, with the dataset directory and harness it needs. */
export interface CuratedTaskSource extends TaskSource {
  /** The coding dataset written for the set (the registry's `dataDir`). */
  dataDir: string;
  /** Every task of the set (both splits). */
  all: CuratedTask[];
  /** The built-in harness on the coding environment over this dataset. */
  harness(options?: JsonObject): HarnessSpec;
}

/**
 * Loads a curated set as a task source.
 *
 * @example
 * ```ts ignore
 * const source = await curatedTaskSource({
 *   path: "runs/curate/full/curated.parquet", reposDir: "data/envs/coding/repos",
 *   dataDir: "runs/rl/data",
 * });
 * await using stack = await startEmbedded({ outDir, tokenizer, registry: { dataDir: source.dataDir } });
 * await runLoop(await withTaskSource({ ...config, harness: source.harness() }, source), stack.services);
 * ```
 */
export async function curatedTaskSource(options: CuratedSourceOptions): Promise<CuratedTaskSource> {
  const all = readCuratedSet(options.path);
  const split = options.split ?? "train";
  const chosen = all.filter((t) => t.split === split);
  if (chosen.length === 0) {
    throw new Error(`${options.path}: the curated set has no ${split} task`);
  }
  const dataDir = await writeProbeDataset(options.dataDir, all, options.reposDir);
  const tasks: LoopTask[] = chosen.map((t) => ({
    id: t.instance_id,
    input: {
      env: "coding",
      id: t.instance_id,
      prompt: t.problem_statement,
      extra: { repo: t.repo },
    },
  }));
  return {
    describe: `curated set ${options.path} (${split}: ${tasks.length} of ${all.length} tasks)`,
    load: () => Promise.resolve(tasks),
    dataDir,
    all,
    harness: (harnessOptions = {}) => ({
      name: "builtin-coding",
      options: {
        ...harnessOptions,
        env_vars: {
          ...(harnessOptions.env_vars as Record<string, string> | undefined),
          REINS_ENV_DATA_DIR: dataDir,
        },
      },
    }),
  };
}
