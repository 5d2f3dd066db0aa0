/**
 * The toy RL task of the CPU demo, the loop tests and the async bench: the arithmetic
 * environment (calculator tool, exact-match reward) run by the built-in harness, on a dataset
 * of one-operator, one-digit questions ("What is 7 * 8?"), with a tiny char-level policy.
 *
 * Why this dataset: every character is a token, so the policy has to copy the expression into
 * the tool call and the tool's result into its answer; with a fixed question layout a 2-layer
 * model learns that copying within a few hundred CPU SFT steps, and RL then has a real but
 * imperfect policy to sharpen.
 *
 * @module
 */
import { calculatorTool } from "../harness/envs/arithmetic.ts";
import type { HarnessSpec, TrainingRow, WorkerModelSpec } from "../schema.ts";
import type { ArithmeticTask } from "../harness/schema.ts";
import type { LoopTask } from "./schema.ts";
import type { ChatTokenizer, ToolDefinition } from "../tokens/types.ts";
import { scriptedArithmetic, scriptedGuess, sftRow, TOY_SYSTEM_PROMPT } from "./sft.ts";

/**
 * Every "a op b" question with one-digit operands and `+`, `-`, `*` (243 tasks).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { toyArithmeticTasks } from "./toy.ts";
 * const tasks = toyArithmeticTasks();
 * assert.equal(tasks.length, 243);
 * assert.equal(tasks[0].question, "What is 1 + 1?");
 * ```
 */
export function toyArithmeticTasks(): ArithmeticTask[] {
  const tasks: ArithmeticTask[] = [];
  for (let a = 1; a <= 9; a++) {
    for (let b = 1; b <= 9; b++) {
      for (const [op, name] of [["+", "add"], ["-", "sub"], ["*", "mul"]] as const) {
        const value = op === "+" ? a + b : op === "-" ? a - b : a * b;
        tasks.push({
          id: `toy-${a}-${name}-${b}`,
          question: `What is ${a} ${op} ${b}?`,
          expression: `${a} ${op} ${b}`,
          answer: String(value),
          steps: 1,
        });
      }
    }
  }
  return tasks;
}

/**
 * Writes `tasks` as the arithmetic environment's dataset under `dataDir` (the reward function
 * and the harness read it from there) and returns the directory.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { toyArithmeticTasks, writeToyDataset } from "./toy.ts";
 * const root = await Deno.makeTempDir(); // e.g. runs/demo/data
 * const dataDir = await writeToyDataset(root, toyArithmeticTasks());
 * assert.ok((await Deno.stat(`${dataDir}/arithmetic/tasks.jsonl`)).isFile);
 * await Deno.remove(root, { recursive: true });
 * ```
 */
export async function writeToyDataset(dataDir: string, tasks: ArithmeticTask[]): Promise<string> {
  await Deno.mkdir(`${dataDir}/arithmetic`, { recursive: true });
  await Deno.writeTextFile(
    `${dataDir}/arithmetic/tasks.jsonl`,
    tasks.map((t) => JSON.stringify(t) + "\n").join(""),
  );
  return await Deno.realPath(dataDir);
}

/** Loop tasks (rollout inputs, as the arithmetic environment builds them). */
export function toyLoopTasks(tasks: ArithmeticTask[]): LoopTask[] {
  return tasks.map((t) => ({
    id: t.id,
    input: { env: "arithmetic", id: t.id, prompt: t.question, extra: {} },
  }));
}

/** The tools the harness sends (as the proxy renders them). */
export function toyTools(): ToolDefinition[] {
  return [{
    type: "function",
    function: {
      name: calculatorTool.name,
      description: calculatorTool.description,
      parameters: calculatorTool.parameters,
    },
  }];
}

/**
 * The built-in harness on the arithmetic environment: a short system prompt, two turns (one
 * tool call, one answer), short generations, run inside the controller's process (`runner:
 * "in_process"`: the calculator runs no agent-written code; a process per rollout would cost a
 * Deno start each). `extra` overrides, e.g. `{ runner: "process" }`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { toyHarness } from "./toy.ts";
 * assert.equal(toyHarness("/tmp/data").name, "builtin-arithmetic");
 * assert.equal(toyHarness("/tmp/data").options?.runner, "in_process");
 * assert.equal(toyHarness("/tmp/data", { runner: "process" }).options?.runner, "process");
 * ```
 */
export function toyHarness(
  dataDir: string,
  extra: Record<string, string | number | boolean> = {},
): HarnessSpec {
  return {
    name: "builtin-arithmetic",
    options: {
      system_prompt: TOY_SYSTEM_PROMPT,
      max_turns: 2,
      max_tokens: 80,
      max_retries: 2,
      env_vars: { REINS_ENV_DATA_DIR: dataDir },
      runner: "in_process",
      ...extra,
    },
  };
}

/** Options of {@link toySftRows}. */
export interface ToySftOptions {
  /**
   * Guessing demonstrations per task ({@link scriptedGuess}: no tool, a wrong number) next to
   * its one correct tool-using trajectory. 0 (default): correct demonstrations only.
   */
  guesses?: number;
}

/**
 * SFT rows: the scripted correct trajectory of each task, plus `guesses` wrong guessing ones.
 *
 * Why mix in wrong demonstrations: on a policy warm-started on correct ones only, RL can only
 * sharpen an already-learned copy, which is slow and noisy at this scale (see docs/loop.md);
 * with guesses mixed in, reward hinges on one early choice, and RL visibly learns to use
 * the calculator, as tool-use RL does on real models.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadCharTokenizer } from "../tokens/char.ts";
 * import { toyArithmeticTasks, toySftRows } from "./toy.ts";
 * const tokenizer = await loadCharTokenizer();
 * const tasks = toyArithmeticTasks().slice(0, 3);
 * const rows = toySftRows(tokenizer, tasks, { guesses: 1 });
 * assert.equal(rows.length, 6); // 2 rows per task
 * ```
 */
export function toySftRows(
  tokenizer: ChatTokenizer,
  tasks: ArithmeticTask[],
  options: ToySftOptions = {},
): TrainingRow[] {
  const tools = toyTools();
  const rows = tasks.map((t) => sftRow(tokenizer, scriptedArithmetic(t), tools, t.id));
  for (let k = 0; k < (options.guesses ?? 0); k++) {
    for (const t of tasks) {
      rows.push(sftRow(tokenizer, scriptedGuess(t), tools, `${t.id}-guess${k}`));
    }
  }
  return rows;
}

/** Size of the toy policy. */
export interface ToyModelSize {
  d_model?: number;
  n_layers?: number;
  max_seq_len?: number;
}

/**
 * The tiny built-in decoder for the char tokenizer (vocabulary = the tokenizer's).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadCharTokenizer } from "../tokens/char.ts";
 * import { toyModel } from "./toy.ts";
 * const tokenizer = await loadCharTokenizer();
 * const model = toyModel(tokenizer);
 * assert.equal(model.kind, "builtin");
 * assert.equal(model.config.d_model, 64);
 * assert.equal(model.config.vocab_size, tokenizer.vocabSize);
 * ```
 */
export function toyModel(
  tokenizer: ChatTokenizer,
  size: ToyModelSize = {},
  seed = 0,
): WorkerModelSpec {
  const d = size.d_model ?? 64;
  return {
    kind: "builtin",
    config: {
      vocab_size: tokenizer.vocabSize,
      d_model: d,
      n_layers: size.n_layers ?? 2,
      n_heads: 4,
      n_kv_heads: 2,
      d_ff: 2 * d,
      max_seq_len: size.max_seq_len ?? 512,
      tie_embeddings: true,
      rope_theta: 10_000,
      qk_norm: true,
      norm_eps: 1e-6,
    },
    seed,
  };
}
