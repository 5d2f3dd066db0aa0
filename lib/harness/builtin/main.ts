/**
 * The built-in harness. {@link runBuiltin} runs it on an explicit environment (the local
 * backend's in-process runner passes one, see `in_process.ts`); this file is also its command,
 * `deno run -A lib/harness/builtin/main.ts '<options JSON>'`, which takes that environment from
 * the process's own:
 *
 * it reads the task from `$REINS_INPUT_FILE` (or `$REINS_INPUT`, JSON text, as the Kubernetes
 * backend passes it: an environment task input `{env, id, prompt}`, or any object with a
 * `prompt`, `question`, `task` or `instruction` string), its options from the
 * first argument or `$REINS_HARNESS_OPTIONS` (schema `BuiltinHarnessOptionsSchema`), talks to
 * `$OPENAI_BASE_URL` with `$OPENAI_API_KEY` (the controller sets both to the attempt's proxy),
 * works in `$REINS_WORKDIR` (default: the current directory), writes the final answer to
 * `answer.txt` there and prints one JSON line `{answer, stop, stats}` on stdout. When
 * `$REINS_GATEWAY_URL` is set it also posts that line as a `builtin_harness` custom event.
 *
 * Exit status: 0 when the loop ended (with or without an answer), 1 when a model call failed
 * after the client's retries, 2 for bad options or input.
 *
 * @module
 */
import OpenAI from "openai";
import { GatewayClient } from "../../gateway/client.ts";
import { type JsonObject, parseOrThrow, ValidationError } from "../../schema.ts";
import { BuiltinHarnessOptionsSchema } from "../schema.ts";
import { DEFAULT_DATA_DIR, envSetup } from "../envs/mod.ts";
import { runAgent } from "./agent.ts";

/** The task text of a rollout input, or an error naming the field. */
export function taskText(input: unknown): string {
  if (typeof input === "string" && input.trim() !== "") return input;
  if (input && typeof input === "object" && !Array.isArray(input)) {
    for (const key of ["prompt", "question", "task", "instruction"]) {
      const value = (input as Record<string, unknown>)[key];
      if (typeof value === "string" && value.trim() !== "") return value;
    }
  }
  throw new ValidationError("input", [
    "input: must be a string or hold a prompt, question, task or instruction string",
  ]);
}

/** Everything one run of the built-in harness reads (a process reads it from its environment). */
export interface BuiltinEnvironment {
  /** Harness options as given (validated here: bad options end with status 2). */
  options: unknown;
  /** The rollout input (its task text is the first user message). */
  input: unknown;
  /** The OpenAI-compatible base URL (the attempt's proxy). */
  baseUrl?: string;
  /** The API key: the attempt's capability token. */
  apiKey?: string;
  /** Model name when the options name none (default `reins-policy`). */
  model?: string;
  /** Where the agent works and `answer.txt` goes. */
  workdir: string;
  /** Dataset directory of the environments (default: the shipped `data/envs`). */
  dataDir?: string;
  /** Gateway to post the result event to (with the rollout and attempt ids). */
  gatewayUrl?: string;
  rolloutId?: string;
  attemptId?: string;
  /** Aborts model calls (the attempt was killed or timed out). */
  signal?: AbortSignal;
  /** Output sinks (a process's stdout and stderr); each call is one whole line with `\n`. */
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}

/**
 * Runs the built-in harness once; resolves to its exit status (0 ended, 1 a model call
 * failed, 2 bad options or input).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runBuiltin } from "./main.ts";
 * const err: string[] = [];
 * const code = await runBuiltin({
 *   options: { max_turns: 0 }, input: "hi", workdir: ".",
 *   stdout: () => {}, stderr: (t) => err.push(t),
 * });
 * assert.equal(code, 2);
 * assert.match(err.join(""), /options\.max_turns/);
 * ```
 */
export async function runBuiltin(env: BuiltinEnvironment): Promise<number> {
  const say = (text: string) => env.stderr(`${text}\n`);
  let options;
  try {
    options = parseOrThrow(BuiltinHarnessOptionsSchema, env.options, "options");
    taskText(env.input);
  } catch (error) {
    say(`builtin harness: ${(error as Error).message}`);
    return 2;
  }
  const input = env.input;
  const workdir = env.workdir;
  const setup = envSetup(options.env, {
    workdir,
    input: (input && typeof input === "object" ? input : {}) as JsonObject,
  }, env.dataDir ?? DEFAULT_DATA_DIR);
  const client = new OpenAI({
    baseURL: env.baseUrl,
    apiKey: env.apiKey ?? "none",
    maxRetries: options.max_retries,
    timeout: options.timeout_ms,
  });
  let result;
  try {
    result = await runAgent({
      client,
      options,
      task: taskText(input),
      systemPrompt: options.system_prompt ?? setup.systemPrompt,
      tools: setup.tools,
      model: options.model ?? env.model ?? "reins-policy",
      log: say,
      ...(env.signal ? { signal: env.signal } : {}),
    });
  } catch (error) {
    say(`builtin harness: model call failed: ${(error as Error).message}`);
    return 1;
  }
  if (result.answer !== null) {
    await Deno.writeTextFile(`${workdir}/${options.answer_file}`, `${result.answer}\n`);
  }
  const summary = { answer: result.answer, stop: result.stop, stats: result.stats };
  env.stdout(`${JSON.stringify(summary)}\n`);
  if (env.gatewayUrl && env.rolloutId && env.attemptId && !env.signal?.aborted) {
    try {
      const gateway = new GatewayClient(env.gatewayUrl, { apiKey: env.apiKey });
      await gateway.postEvents(env.rolloutId, env.attemptId, [{
        type: "custom",
        event_key: "builtin_harness_result",
        payload: { name: "builtin_harness", data: summary as unknown as JsonObject },
      }]);
    } catch (error) {
      say(`builtin harness: could not post the result event: ${(error as Error).message}`);
    }
  }
  return 0;
}

function writeAll(file: { writeSync(p: Uint8Array): number }, text: string): void {
  const bytes = new TextEncoder().encode(text);
  let written = 0;
  while (written < bytes.length) written += file.writeSync(bytes.subarray(written));
}

/** The command: the environment comes from `Deno.env`, the options from the first argument. */
async function main(): Promise<number> {
  const env = (name: string) => Deno.env.get(name);
  const stdout = (text: string) => writeAll(Deno.stdout, text);
  const stderr = (text: string) => writeAll(Deno.stderr, text);
  let options: unknown;
  let input: unknown;
  try {
    options = JSON.parse(Deno.args[0] ?? env("REINS_HARNESS_OPTIONS") ?? "{}");
    const inputFile = env("REINS_INPUT_FILE");
    const inline = env("REINS_INPUT");
    if (inputFile) input = JSON.parse(await Deno.readTextFile(inputFile));
    else if (inline) input = JSON.parse(inline);
    else {
      throw new ValidationError("REINS_INPUT_FILE", [
        "REINS_INPUT_FILE: not set (nor REINS_INPUT, the Kubernetes backend's inline input)",
      ]);
    }
  } catch (error) {
    stderr(`builtin harness: ${(error as Error).message}\n`);
    return 2;
  }
  return await runBuiltin({
    options,
    input,
    baseUrl: env("OPENAI_BASE_URL"),
    apiKey: env("OPENAI_API_KEY"),
    model: env("OPENAI_MODEL"),
    workdir: env("REINS_WORKDIR") ?? Deno.cwd(),
    dataDir: env("REINS_ENV_DATA_DIR"),
    gatewayUrl: env("REINS_GATEWAY_URL"),
    rolloutId: env("REINS_ROLLOUT_ID"),
    attemptId: env("REINS_ATTEMPT_ID"),
    stdout,
    stderr,
  });
}

if (import.meta.main) Deno.exit(await main());
