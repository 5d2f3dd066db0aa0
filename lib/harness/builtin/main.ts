/**
 * The built-in harness as a command: `deno run -A lib/harness/builtin/main.ts '<options JSON>'`.
 *
 * Reads the task from `$REINS_INPUT_FILE` (or `$REINS_INPUT`, JSON text, as the Kubernetes
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
import {
  BuiltinHarnessOptionsSchema,
  type JsonObject,
  parseOrThrow,
  ValidationError,
} from "../../schema.ts";
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

async function main(): Promise<number> {
  const env = (name: string) => Deno.env.get(name);
  let options;
  let input: unknown;
  try {
    const rawOptions = Deno.args[0] ?? env("REINS_HARNESS_OPTIONS") ?? "{}";
    options = parseOrThrow(BuiltinHarnessOptionsSchema, JSON.parse(rawOptions), "options");
    const inputFile = env("REINS_INPUT_FILE");
    const inline = env("REINS_INPUT");
    if (inputFile) input = JSON.parse(await Deno.readTextFile(inputFile));
    else if (inline) input = JSON.parse(inline);
    else {
      throw new ValidationError("REINS_INPUT_FILE", [
        "REINS_INPUT_FILE: not set (nor REINS_INPUT, the Kubernetes backend's inline input)",
      ]);
    }
    taskText(input);
  } catch (error) {
    console.error(`builtin harness: ${(error as Error).message}`);
    return 2;
  }
  const workdir = env("REINS_WORKDIR") ?? Deno.cwd();
  const dataDir = env("REINS_ENV_DATA_DIR") ?? DEFAULT_DATA_DIR;
  const setup = envSetup(options.env, {
    workdir,
    input: (input && typeof input === "object" ? input : {}) as JsonObject,
  }, dataDir);
  const client = new OpenAI({
    baseURL: env("OPENAI_BASE_URL"),
    apiKey: env("OPENAI_API_KEY") ?? "none",
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
      model: options.model ?? env("OPENAI_MODEL") ?? "reins-policy",
      log: (line) => console.error(line),
    });
  } catch (error) {
    console.error(`builtin harness: model call failed: ${(error as Error).message}`);
    return 1;
  }
  if (result.answer !== null) {
    await Deno.writeTextFile(`${workdir}/${options.answer_file}`, `${result.answer}\n`);
  }
  const summary = { answer: result.answer, stop: result.stop, stats: result.stats };
  console.log(JSON.stringify(summary));
  const gateway = env("REINS_GATEWAY_URL");
  const rollout = env("REINS_ROLLOUT_ID");
  const attempt = env("REINS_ATTEMPT_ID");
  if (gateway && rollout && attempt) {
    try {
      const client = new GatewayClient(gateway, { apiKey: env("OPENAI_API_KEY") });
      await client.postEvents(rollout, attempt, [{
        type: "custom",
        event_key: "builtin_harness_result",
        payload: { name: "builtin_harness", data: summary as unknown as JsonObject },
      }]);
    } catch (error) {
      console.error(
        `builtin harness: could not post the result event: ${(error as Error).message}`,
      );
    }
  }
  return 0;
}

if (import.meta.main) Deno.exit(await main());
