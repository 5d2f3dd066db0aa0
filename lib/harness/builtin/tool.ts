/**
 * The tool contract of the built-in harness: what an environment hands the agent loop.
 *
 * @module
 */
import type { JsonObject } from "../../schema.ts";

/** Where a tool runs: the attempt's working directory and the task input. */
export interface ToolContext {
  /** The agent's working directory (its tree; `$REINS_WORKDIR` under the controller). */
  workdir: string;
  /** The rollout input as the harness read it. */
  input: JsonObject;
}

/**
 * A function tool: its OpenAI definition and how it runs. `run` returns the text the model
 * sees; a thrown error is reported to the model as `error: <message>` (the loop goes on).
 *
 * @example
 * ```ts
 * import type { AgentTool } from "./tool.ts";
 * const echo: AgentTool = {
 *   name: "echo",
 *   description: "Repeats its input.",
 *   parameters: { type: "object", properties: { text: { type: "string" } }, required: ["text"] },
 *   run: (args) => String(args.text),
 * };
 * ```
 */
export interface AgentTool {
  /** Function name the model calls. */
  name: string;
  /** What the tool does, for the model. */
  description: string;
  /** JSON Schema of the arguments object. */
  parameters: JsonObject;
  /** Runs the tool; the returned text goes to the model. */
  run(args: JsonObject): string | Promise<string>;
}

/** Raised by a tool for bad arguments; the message names the argument. */
export class ToolArgumentError extends Error {
  /** Creates the error. */
  constructor(message: string) {
    super(message);
    this.name = "ToolArgumentError";
  }
}

/**
 * Reads a required string argument or throws a {@link ToolArgumentError} naming it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { stringArg } from "./tool.ts";
 * assert.equal(stringArg({ path: "a.txt" }, "path"), "a.txt");
 * ```
 */
export function stringArg(args: JsonObject, name: string): string {
  const value = args[name];
  if (typeof value !== "string") {
    throw new ToolArgumentError(`argument "${name}" must be a string`);
  }
  return value;
}
