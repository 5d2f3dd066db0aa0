/**
 * The built-in environments: toy arithmetic (calculator tool), search over a local corpus,
 * instruction-following file tasks, and coding on small Python repositories. Each exports its
 * dataset loader, the tools it gives the built-in harness, its reward function and its harness
 * resolver (see {@link HarnessEnv}).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { defaultEnvs } from "./mod.ts";
 * const envs = defaultEnvs();
 * const task = envs.arithmetic.loadTasks()[0];
 * assert.equal(envs.arithmetic.taskInput(task).prompt, "What is 4 / 4 * 6?");
 * ```
 *
 * @module
 */
import type { EnvName } from "../schema.ts";
import type { AgentTool, ToolContext } from "../builtin/tool.ts";
import { arithmeticEnv } from "./arithmetic.ts";
import { codingEnv } from "./coding.ts";
import { DEFAULT_DATA_DIR, type HarnessEnv } from "./common.ts";
import { filesEnv } from "./files.ts";
import { searchEnv } from "./search.ts";

export { arithmeticEnv, arithmeticMatch, calculatorTool } from "./arithmetic.ts";
export { type Bm25Hit, Bm25Index, tokenize } from "./bm25.ts";
export {
  codingEnv,
  type CodingEnvOptions,
  pythonBinary,
  runRepoTests,
  type RunTestsOptions,
  SWE_TASKS_FILE,
  type TestOutcome,
  type TestRun,
} from "./coding.ts";
export {
  addedLines,
  applyPatchToDir,
  applyPatchToFiles,
  defaultCodingWorkspaceRoot,
  invertPatch,
  makePatch,
  materializeCodingWorkspace,
  PatchError,
  patchFiles,
  readTree,
  sweToCodingTask,
  treeHash,
} from "./coding_tasks.ts";
export * from "./common.ts";
export { filesEnv, type FilesEnvOptions, materializeWorkspace, verifyFileTask } from "./files.ts";
export { searchCorpus, searchEnv, searchMatch, searchTool } from "./search.ts";
export {
  arithmeticExpert,
  type ArithmeticExpertOptions,
  type ScriptedPolicy,
  searchExpert,
  toolResponses,
} from "./experts.ts";
export { bashTool, fileTools, workspacePath } from "./workspace_tools.ts";

/** The four environments, keyed by name. */
export interface EnvSet {
  /** Toy arithmetic. */
  arithmetic: ReturnType<typeof arithmeticEnv>;
  /** Search over the local corpus. */
  search: ReturnType<typeof searchEnv>;
  /** File tasks. */
  files: ReturnType<typeof filesEnv>;
  /** Python bug fixing. */
  coding: ReturnType<typeof codingEnv>;
}

/** The four environments over one dataset directory (default: the shipped `data/envs`). */
export function defaultEnvs(dataDir = DEFAULT_DATA_DIR): EnvSet {
  return {
    arithmetic: arithmeticEnv(dataDir),
    search: searchEnv(dataDir),
    files: filesEnv({ dataDir }),
    coding: codingEnv({ dataDir }),
  };
}

/** Every environment of a set as a list. */
export function envList(envs: EnvSet): HarnessEnv<unknown>[] {
  return [envs.arithmetic, envs.search, envs.files, envs.coding] as HarnessEnv<unknown>[];
}

/** The tools and system prompt the built-in harness uses for `env` (`none`: no tools). */
export function envSetup(
  env: EnvName,
  ctx: ToolContext,
  dataDir = DEFAULT_DATA_DIR,
): { tools: AgentTool[]; systemPrompt: string } {
  if (env === "none") {
    return {
      tools: [],
      systemPrompt: "You are a helpful assistant. Reply with the final answer inside " +
        "<answer></answer>.",
    };
  }
  const chosen = defaultEnvs(dataDir)[env];
  return { tools: chosen.tools(ctx), systemPrompt: chosen.systemPrompt };
}
