/**
 * {@link defineEnv}: what every built-in environment does the same way (find a task by id,
 * validate the rollout input before scoring, fail a rollout at start for an unknown task, run
 * the built-in harness through {@link builtinResolver}), written once. An environment supplies
 * only what differs: its dataset, what the agent sees of a task, its tools, its score and its
 * per-task run settings. {@link defineAnswerEnv} does the same once more for the question
 * environments (a question in, an answer file out, scored by exact match).
 *
 * @module
 */
import type { RewardContext } from "../../controller/reward_hooks.ts";
import type { JsonObject, Rollout } from "../../schema.ts";
import type { BuiltinEnvSpecOptions, EnvName } from "../schema.ts";
import type { SandboxOptions } from "../../controller/schema.ts";
import { builtinResolver, type EnvRunSpec } from "../builtin/resolver.ts";
import type { AgentTool, ToolContext } from "../builtin/tool.ts";
import type { z } from "zod";
import {
  findTask,
  type HarnessEnv,
  hiddenDataPaths,
  parseEnvInput,
  readAnswerFile,
  readJsonl,
} from "./common.ts";

/** The parts of a {@link HarnessEnv} that differ between environments. */
export interface EnvDefinition<Task extends { id: string }> {
  name: EnvName;
  description: string;
  systemPrompt: string;
  dataDir: string;
  /** Every task, with its answer. */
  load(): Task[];
  /** What the agent may see of a task (its rollout input adds the env name and the task id). */
  show(task: Task): { prompt: string; extra: JsonObject };
  tools(ctx: ToolContext): AgentTool[];
  /** The outcome reward of the attempt in `ctx` on `task`. */
  score(task: Task, ctx: RewardContext): number | Promise<number>;
  /** Sandbox stages and masked paths the environment asks for (see {@link builtinResolver}). */
  sandbox: Partial<SandboxOptions>;
  /** Per-task run settings (none by default). */
  prepare?(task: Task, options: BuiltinEnvSpecOptions, rollout: Rollout): EnvRunSpec;
}

/**
 * Makes an environment from its definition. The reward function and the resolver look the task
 * up from the rollout input (errors name `input.id`), so a rollout of an unknown task fails at
 * start rather than at reward time.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { defineEnv } from "./define.ts";
 * const env = defineEnv({
 *   name: "arithmetic",
 *   description: "one fixed task",
 *   systemPrompt: "answer",
 *   dataDir: "/nowhere",
 *   load: () => [{ id: "t1", answer: "6" }],
 *   show: () => ({ prompt: "What is 2 * 3?", extra: {} }),
 *   tools: () => [],
 *   score: (task, ctx) => (ctx.exit_code === 0 && task.answer === "6" ? 1 : 0),
 *   sandbox: {},
 * });
 * const input = env.taskInput(env.task("t1"));
 * assert.deepEqual(input, { env: "arithmetic", id: "t1", prompt: "What is 2 * 3?", extra: {} });
 * const rollout = { input } as unknown as Parameters<typeof env.reward>[0]["rollout"];
 * const ctx = { rollout, attempt_id: "a", dir: ".", exit_code: 0, edited: [] };
 * assert.equal(await env.reward(ctx), 1);
 * assert.throws(() => env.task("t2"), /input\.id: no arithmetic task "t2"/);
 * ```
 */
export function defineEnv<Task extends { id: string }>(
  def: EnvDefinition<Task>,
): HarnessEnv<Task> {
  const task = (id: string) => findTask(def.load(), id, def.name);
  return {
    name: def.name,
    description: def.description,
    systemPrompt: def.systemPrompt,
    dataDir: def.dataDir,
    loadTasks: () => def.load(),
    task,
    taskInput: (t) => ({ env: def.name, id: t.id, ...def.show(t) }),
    tools: (ctx) => def.tools(ctx),
    reward: (ctx) => def.score(task(parseEnvInput(ctx.rollout.input, def.name).id), ctx),
    resolver: builtinResolver({
      env: def.name,
      sandbox: def.sandbox,
      prepare: (input, options, rollout) => {
        const found = task(input.id);
        return def.prepare?.(found, options, rollout) ?? {};
      },
    }),
  };
}

/** The parts of a question environment ({@link defineAnswerEnv}) that differ. */
export interface AnswerEnvDefinition<Task extends { id: string; question: string }>
  extends Pick<EnvDefinition<Task>, "name" | "description" | "systemPrompt" | "dataDir" | "tools"> {
  /** The schema of a line of `dataDir/<name>/tasks.jsonl`. */
  taskSchema: z.ZodType<Task>;
  /** True when `answer` (the harness's answer file, trimmed) is right for `task`. */
  match(answer: string, task: Task): boolean;
  /** Per-task run settings (none by default). */
  prepare?: EnvDefinition<Task>["prepare"];
}

/**
 * Makes a question environment: the tasks are `dataDir/<name>/tasks.jsonl`, the agent sees the
 * task's `question`, the reward is 1 when the answer file matches and 0 otherwise (a missing
 * file included), and the sandbox masks the tasks file (it holds the answers).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { z } from "zod";
 * import { defineAnswerEnv } from "./define.ts";
 * const dataDir = Deno.makeTempDirSync();
 * Deno.mkdirSync(`${dataDir}/arithmetic`);
 * Deno.writeTextFileSync(
 *   `${dataDir}/arithmetic/tasks.jsonl`,
 *   JSON.stringify({ id: "t1", question: "What is 2 * 3?", answer: "6" }) + "\n",
 * );
 * const env = defineAnswerEnv({
 *   name: "arithmetic",
 *   description: "one task",
 *   systemPrompt: "answer",
 *   dataDir,
 *   taskSchema: z.object({ id: z.string(), question: z.string(), answer: z.string() }),
 *   tools: () => [],
 *   match: (answer, task) => answer === task.answer,
 * });
 * const input = env.taskInput(env.task("t1"));
 * assert.deepEqual(input, { env: "arithmetic", id: "t1", prompt: "What is 2 * 3?", extra: {} });
 * const rollout = { input } as unknown as Parameters<typeof env.reward>[0]["rollout"];
 * const dir = Deno.makeTempDirSync();
 * const ctx = { rollout, attempt_id: "a", dir, exit_code: 0, edited: [] };
 * assert.equal(await env.reward(ctx), 0); // no answer file
 * Deno.writeTextFileSync(`${dir}/answer.txt`, "6\n");
 * assert.equal(await env.reward(ctx), 1);
 * ```
 */
export function defineAnswerEnv<Task extends { id: string; question: string }>(
  def: AnswerEnvDefinition<Task>,
): HarnessEnv<Task> {
  const { taskSchema, match, ...common } = def;
  return defineEnv({
    ...common,
    load: () => readJsonl(`${def.dataDir}/${def.name}/tasks.jsonl`, taskSchema),
    show: (task) => ({ prompt: task.question, extra: {} }),
    score: (task, ctx) => {
      const answer = readAnswerFile(ctx.dir);
      return answer !== null && match(answer, task) ? 1 : 0;
    },
    // When the sandbox is on, the answers (tasks.jsonl) are masked.
    sandbox: { hide: hiddenDataPaths(def.dataDir) },
  });
}
