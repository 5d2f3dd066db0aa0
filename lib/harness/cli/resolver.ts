/**
 * Harness resolvers for the controller's local backend: a rollout whose `config.harness.name`
 * is `opencode`, `claude_code`, `codex` or `qwen_code` runs `run.ts` with that CLI.
 *
 * @module
 */
import type { HarnessResolver } from "../../controller/mod.ts";
import { type CliHarnessOptions, CliHarnessOptionsSchema, type CliName } from "./schema.ts";
import { type JsonObject, parseOrThrow, type Rollout } from "../../schema.ts";
import type { LocalHarnessInput } from "../../controller/schema.ts";
import { defaultCacheDir } from "./install.ts";
import { CLI_ADAPTERS } from "./registry.ts";

/** Absolute path of the runner script (the command every CLI harness runs). */
export const RUNNER_PATH: string = decodeURIComponent(
  new URL("./run.ts", import.meta.url).pathname,
);

/**
 * Builds the local harness (command, env, workspace, reward, sandbox) of one CLI rollout.
 * Throws an error naming the field for bad options or a missing task.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cliLocalHarness } from "./resolver.ts";
 * const harness = cliLocalHarness("codex", { model: "reins-policy" }, { task: "fix it" });
 * assert.equal(harness.command.includes("--cli"), true);
 * ```
 */
export function cliLocalHarness(
  cli: CliName,
  rawOptions: unknown,
  input: unknown,
): LocalHarnessInput {
  const options: CliHarnessOptions = parseOrThrow(CliHarnessOptionsSchema, rawOptions ?? {});
  const task = input && typeof input === "object" && !Array.isArray(input)
    ? (input as Record<string, unknown>)[options.task_field]
    : undefined;
  if (typeof task !== "string" || !task.trim()) {
    throw new Error(`input.${options.task_field}: must be a non-empty string (the task prompt)`);
  }
  const adapter = CLI_ADAPTERS[cli];
  const command = [
    Deno.execPath(),
    "run",
    "--allow-all",
    "--no-config",
    "--no-lock",
    RUNNER_PATH,
    "--cli",
    adapter.name,
    "--task-field",
    options.task_field,
    "--model",
    options.model ?? adapter.defaultModel,
    // Resolved here, not in the attempt: a sandboxed attempt has another HOME.
    "--cache-dir",
    options.cache_dir ?? defaultCacheDir(),
    ...(options.install ? [] : ["--no-install"]),
    ...(Object.keys(options.env).length ? ["--env-json", JSON.stringify(options.env)] : []),
    ...(options.extra_args.length ? ["--", ...options.extra_args] : []),
  ];
  return {
    command,
    ...(options.workspace ? { workspace: options.workspace } : {}),
    ...(options.reward ? { reward: options.reward } : {}),
    ...(options.sandbox ? { sandbox: options.sandbox } : {}),
  };
}

function resolver(cli: CliName): HarnessResolver {
  return (options: JsonObject, rollout: Rollout) => cliLocalHarness(cli, options, rollout.input);
}

/**
 * Resolvers for the four real harness CLIs, to pass as `LocalBackend`'s `harnesses`.
 *
 * @example
 * ```ts
 * import { LocalBackend } from "../../controller/mod.ts";
 * import { CLI_HARNESSES } from "./resolver.ts";
 * const backend = new LocalBackend({ root: "runs/controller", harnesses: CLI_HARNESSES });
 * // a rollout with config.harness = { name: "codex", options: { workspace: "repo/" } }
 * ```
 */
export const CLI_HARNESSES: Record<CliName, HarnessResolver> = {
  opencode: resolver("opencode"),
  claude_code: resolver("claude_code"),
  codex: resolver("codex"),
  qwen_code: resolver("qwen_code"),
};
