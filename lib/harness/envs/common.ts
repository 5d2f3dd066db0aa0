/**
 * What every environment shares: the environment contract, JSONL dataset loading with errors
 * naming the line and field, answer normalisation, and reading the harness's answer file.
 *
 * @module
 */
import type { z } from "zod";
import type { HarnessResolver } from "../../controller/local_harness.ts";
import type { RewardFunction } from "../../controller/reward_hooks.ts";
import { parseOrThrow, ValidationError } from "../../schema.ts";
import { type EnvName, type EnvTaskInput, EnvTaskInputSchema } from "../schema.ts";
import type { AgentTool, ToolContext } from "../builtin/tool.ts";

/** The shipped datasets (`data/envs/`). */
export const DEFAULT_DATA_DIR: string = new URL("../../../data/envs", import.meta.url).pathname;

/** The root of the reins project (the directory holding `deno.json`). */
export const PROJECT_ROOT: string = new URL("../../..", import.meta.url).pathname.replace(
  /\/$/,
  "",
);

/**
 * What a sandboxed agent must not read, for the environments over `dataDir`: every dataset file
 * that holds answers, checks or hidden tests (`arithmetic/tasks.jsonl`, `search/tasks.jsonl` —
 * but not the corpus, which the harness's search tool reads —, `files/tasks.jsonl`, the whole
 * `coding/` directory), plus, in the project, the dataset generator (it holds the hidden tests
 * and regenerates every answer from its seed), `tests/` (it holds the fixes) and `.git`. The
 * environments' resolvers pass these as the sandbox's `hide` list; the reward functions run
 * outside the sandbox and still read them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DEFAULT_DATA_DIR, hiddenDataPaths } from "./common.ts";
 * assert.equal(hiddenDataPaths(DEFAULT_DATA_DIR).some((p) => p.endsWith("/coding")), true);
 * ```
 */
export function hiddenDataPaths(dataDir: string): string[] {
  const paths = [
    `${dataDir}/arithmetic/tasks.jsonl`,
    `${dataDir}/search/tasks.jsonl`,
    `${dataDir}/files/tasks.jsonl`,
    `${dataDir}/coding`,
  ];
  for (const path of ["scripts/make_env_data.ts", "tests", ".git"]) {
    paths.push(`${PROJECT_ROOT}/${path}`);
  }
  return paths;
}

/**
 * An environment: its dataset, the tools it gives the built-in harness, its reward function
 * and the harness resolver that runs the built-in harness on its tasks.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { arithmeticEnv } from "./arithmetic.ts";
 * const env = arithmeticEnv();
 * const [task] = env.loadTasks();
 * assert.deepEqual(env.taskInput(task), {
 *   env: "arithmetic",
 *   id: "arith-0000",
 *   prompt: "What is 4 / 4 * 6?",
 *   extra: {},
 * });
 * ```
 */
export interface HarnessEnv<Task> {
  /** Registry suffix and reward function name. */
  readonly name: EnvName;
  /** One line for listings. */
  readonly description: string;
  /** The system prompt the built-in harness uses for this environment. */
  readonly systemPrompt: string;
  /** The dataset directory this instance reads. */
  readonly dataDir: string;
  /** Every task, with its answer (never hand these to an agent: use {@link taskInput}). */
  loadTasks(): Task[];
  /** The task by id, or an error naming `input.id`. */
  task(id: string): Task;
  /** The rollout input for a task: what the agent may see. */
  taskInput(task: Task): EnvTaskInput;
  /** The tools the built-in harness offers (they act inside `ctx.workdir`). */
  tools(ctx: ToolContext): AgentTool[];
  /** The outcome reward, computed by the controller after the harness exits. */
  reward: RewardFunction;
  /** Runs the built-in harness on this environment's tasks (`builtin-<name>`). */
  resolver: HarnessResolver;
}

const cache = new Map<string, unknown[]>();

/**
 * Reads a JSONL file and validates every line; errors name the file, line and field.
 * Results are cached per path and schema.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ArithmeticTaskSchema } from "../schema.ts";
 * import { DEFAULT_DATA_DIR, readJsonl } from "./common.ts";
 * const tasks = readJsonl(`${DEFAULT_DATA_DIR}/arithmetic/tasks.jsonl`, ArithmeticTaskSchema);
 * assert.equal(tasks[0].answer, "6");
 * ```
 */
export function readJsonl<S extends z.ZodType>(path: string, schema: S): z.infer<S>[] {
  const cached = cache.get(path);
  if (cached) return cached as z.infer<S>[];
  let text: string;
  try {
    text = Deno.readTextFileSync(path);
  } catch (error) {
    throw new Error(`cannot read dataset ${path}: ${(error as Error).message}`);
  }
  const rows: z.infer<S>[] = [];
  for (const [i, line] of text.split("\n").entries()) {
    if (line.trim() === "") continue;
    let value: unknown;
    try {
      value = JSON.parse(line);
    } catch (error) {
      throw new ValidationError(`${path}:${i + 1}`, [
        `${path}:${i + 1}: not JSON (${(error as Error).message})`,
      ]);
    }
    rows.push(parseOrThrow(schema, value, `${path}:${i + 1}`));
  }
  cache.set(path, rows);
  return rows;
}

/** Finds a task by id or throws an error naming `input.id`. */
export function findTask<T extends { id: string }>(tasks: T[], id: string, env: string): T {
  const task = tasks.find((t) => t.id === id);
  if (!task) throw new Error(`input.id: no ${env} task "${id}"`);
  return task;
}

/**
 * Validates a rollout input for environment `env` (errors name the field).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseEnvInput } from "./common.ts";
 * assert.equal(parseEnvInput({ env: "search", id: "s1", prompt: "Who?" }, "search").id, "s1");
 * ```
 */
export function parseEnvInput(input: unknown, env: EnvName): EnvTaskInput {
  const parsed = parseOrThrow(EnvTaskInputSchema, input, "input");
  if (parsed.env !== env) {
    throw new ValidationError("input.env", [
      `input.env: expected "${env}", got "${parsed.env}"`,
    ]);
  }
  return parsed;
}

/**
 * Normalises an answer for exact match: lower case, punctuation and articles removed,
 * whitespace collapsed (the SQuAD / Search-R1 convention).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { normalizeAnswer } from "./common.ts";
 * assert.equal(normalizeAnswer("  The  Pelfen. "), "pelfen");
 * ```
 */
export function normalizeAnswer(text: string): string {
  return text.toLowerCase()
    .replace(/[^\p{L}\p{N}\s.-]/gu, " ")
    .replace(/(?<!\d)[.](?!\d)|-(?!\d)/g, " ")
    .replace(/\b(a|an|the)\b/g, " ")
    .replace(/\s+/g, " ")
    .trim();
}

/** Reads the harness's answer file in `dir` (null when missing). */
export function readAnswerFile(dir: string, file = "answer.txt"): string | null {
  try {
    return Deno.readTextFileSync(`${dir}/${file}`).trim();
  } catch {
    return null;
  }
}
