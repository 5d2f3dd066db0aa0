/**
 * Toy environment 1: multi-step arithmetic with a calculator tool; exact-match reward.
 *
 * @module
 */
import { type ArithmeticTask, ArithmeticTaskSchema } from "../schema.ts";
import { CalculatorError, evaluateExpression, formatNumber } from "../calculator.ts";
import { type AgentTool, stringArg } from "../builtin/tool.ts";
import { DEFAULT_DATA_DIR, type HarnessEnv } from "./common.ts";
import { defineAnswerEnv } from "./define.ts";

/** The calculator tool. */
export const calculatorTool: AgentTool = {
  name: "calculator",
  description: "Evaluates an arithmetic expression with + - * / and parentheses.",
  parameters: {
    type: "object",
    properties: { expression: { type: "string", description: "e.g. (17 + 25) * 3" } },
    required: ["expression"],
  },
  run: (args) => {
    try {
      return formatNumber(evaluateExpression(stringArg(args, "expression")));
    } catch (error) {
      if (error instanceof CalculatorError) return `error: ${error.message}`;
      throw error;
    }
  },
};

/**
 * True when `answer` states the number `expected` (commas, spaces and a trailing period
 * ignored; numerically equal within 1e-6).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { arithmeticMatch } from "./arithmetic.ts";
 * assert.equal(arithmeticMatch("1,234.", "1234"), true);
 * assert.equal(arithmeticMatch("1235", "1234"), false);
 * ```
 */
export function arithmeticMatch(answer: string, expected: string): boolean {
  const clean = answer.trim().replace(/[,\s]/g, "").replace(/\.$/, "");
  if (!/^-?\d+(\.\d+)?$/.test(clean)) return false;
  return Math.abs(Number(clean) - Number(expected)) < 1e-6;
}

const SYSTEM = "You solve arithmetic problems. Use the calculator tool for every operation, " +
  "one step at a time. When you know the result, reply with the final answer inside " +
  "<answer></answer>, digits only.";

/**
 * The arithmetic environment over `dataDir/arithmetic/tasks.jsonl`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { arithmeticEnv } from "./arithmetic.ts";
 * const env = arithmeticEnv();
 * assert.equal(env.taskInput(env.loadTasks()[0]).env, "arithmetic");
 * ```
 */
export function arithmeticEnv(dataDir = DEFAULT_DATA_DIR): HarnessEnv<ArithmeticTask> {
  return defineAnswerEnv({
    name: "arithmetic",
    description: "multi-step arithmetic with a calculator tool; exact-match reward",
    systemPrompt: SYSTEM,
    dataDir,
    taskSchema: ArithmeticTaskSchema,
    tools: () => [calculatorTool],
    match: (answer, task) => arithmeticMatch(answer, task.answer),
  });
}
