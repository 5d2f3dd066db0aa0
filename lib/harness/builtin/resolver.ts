/**
 * Turns a `builtin-<env>` harness spec into what the local backend runs: the built-in harness
 * as a `deno run` command, its options, the environment's workspace, reward hook and sandbox.
 *
 * @module
 */
import { SpecError } from "../../controller/backend.ts";
import type { HarnessResolver } from "../../controller/local_harness.ts";
import { type JsonObject, parseOrThrow, type Rollout } from "../../schema.ts";
import {
  type BuiltinEnvSpecOptions,
  BuiltinEnvSpecOptionsSchema,
  type BuiltinHarnessOptionsInput,
  type EnvName,
  type EnvTaskInput,
} from "../schema.ts";
import type { SandboxOptions } from "../../controller/schema.ts";
import { parseEnvInput } from "../envs/common.ts";

/** Absolute path of the built-in harness's entry point. */
export const BUILTIN_MAIN: string = new URL("./main.ts", import.meta.url).pathname;
const DENO_JSON = new URL("../../../deno.json", import.meta.url).pathname;

/**
 * Environments whose built-in harness may run in-process (`runner: "in_process"`): their tools
 * run no agent-written code and touch no agent-chosen path (`arithmetic`: a parser; `search`: a
 * read-only index; `none`: no tools). `coding` runs bash and `files` writes files: a process
 * (and the sandbox) is the least they need.
 */
export const IN_PROCESS_ENVS: readonly EnvName[] = ["arithmetic", "search", "none"];

/**
 * What the resolved harness adds for its runner: nothing for a process, the built-in runner
 * and its options for `in_process` (refused, naming the field, for other environments).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runnerFields } from "./resolver.ts";
 * assert.deepEqual(runnerFields("process", { env: "arithmetic" }), {});
 * assert.equal(runnerFields("in_process", { env: "arithmetic" }).runner, "in_process");
 * assert.throws(() => runnerFields("in_process", { env: "coding" }), /options\.runner: /);
 * ```
 */
export function runnerFields(
  runner: "process" | "in_process",
  options: BuiltinHarnessOptionsInput & { env: EnvName },
): { runner?: "in_process"; in_process?: { name: string; options: JsonObject } } {
  if (runner === "process") return {};
  if (!IN_PROCESS_ENVS.includes(options.env)) {
    throw new SpecError(
      "config.harness.options.runner",
      `"in_process" is refused for the ${options.env} environment: its tools run agent-written ` +
        `code or write agent-chosen files, which needs a process and the sandbox ` +
        `(in-process: ${IN_PROCESS_ENVS.join(", ")})`,
    );
  }
  return {
    runner: "in_process",
    in_process: { name: "builtin", options: options as unknown as JsonObject },
  };
}

/** What an environment adds to the command. */
export interface EnvRunSpec {
  /** A directory copied into the attempt's workdir (its pristine copy for verification). */
  workspace?: string;
  /** Paths restored from the pristine copy before the reward runs. */
  restore?: string[];
  /** The reward when the agent edited a restored path. */
  edited_restore_reward?: number | null;
  /** Extra environment variables for the harness. */
  env?: Record<string, string>;
  /** More paths the sandbox masks for this task (added to the environment's and the spec's). */
  hide?: string[];
}

/** Options of {@link builtinResolver}. */
export interface BuiltinResolverOptions {
  /** The environment whose tools the harness gets. */
  env: EnvName;
  /** Reward function name registered with the backend (default: the env name). */
  rewardFunction?: string;
  /**
   * Sandbox stages this environment asks for unless the spec says otherwise; its `hide` paths
   * (the dataset's answers) are always kept, a spec's `hide` adds to them.
   */
  sandbox?: Partial<SandboxOptions>;
  /** Per-task workspace/restore settings. */
  prepare?: (input: EnvTaskInput, options: BuiltinEnvSpecOptions, rollout: Rollout) => EnvRunSpec;
}

function denoDir(): string | undefined {
  try {
    const explicit = Deno.env.get("DENO_DIR");
    if (explicit) return explicit;
    const home = Deno.env.get("HOME");
    if (home && Deno.statSync(`${home}/.cache/deno`).isDirectory) return `${home}/.cache/deno`;
  } catch { /* no env access or no cache: deno picks its default */ }
  return undefined;
}

/**
 * The command line that runs the built-in harness with `options` (also usable by hand).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { builtinCommand } from "./resolver.ts";
 * const argv = builtinCommand({ env: "arithmetic" });
 * assert.equal(argv.at(-1), '{"env":"arithmetic"}');
 * ```
 */
export function builtinCommand(options: BuiltinHarnessOptionsInput): string[] {
  return [
    Deno.execPath(),
    "run",
    "--allow-all",
    // The project's lockfile, read only: the versions `deno install` put in node_modules.
    // (`--no-lock` resolves the newest versions instead; once the registry has newer ones,
    // deno rewrites node_modules at every start, which a sandbox's read-only root refuses.)
    "--frozen",
    // Never write node_modules at start: deno may still add a peer link (`@types/node`) that
    // `deno install` left out, and under a sandbox's read-only root that fails the attempt.
    "--node-modules-dir=manual",
    "--quiet",
    `--config=${DENO_JSON}`,
    BUILTIN_MAIN,
    JSON.stringify(options),
  ];
}

/**
 * Makes the harness resolver of one environment: it validates the rollout input and the
 * spec's options (errors name the field) and returns a `LocalHarness`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "../../gateway/sqlite_store.ts";
 * import { parseOrThrow } from "../../schema.ts";
 * import { LocalHarnessSchema } from "../../controller/schema.ts";
 * import { arithmeticEnv } from "../envs/arithmetic.ts";
 * import { builtinResolver } from "./resolver.ts";
 * const env = arithmeticEnv();
 * const store = openSqliteStore(":memory:");
 * const { rollouts: [rollout] } = await store.createRollouts([
 *   { input: env.taskInput(env.loadTasks()[0]) },
 * ]);
 * const resolve = builtinResolver({ env: "arithmetic" });
 * // What the local backend runs (it validates the resolver's result the same way):
 * const harness = parseOrThrow(LocalHarnessSchema, resolve({ max_turns: 4 }, rollout));
 * const options = JSON.parse(harness.command.at(-1)!);
 * assert.equal(options.max_turns, 4);
 * assert.equal(options.env, "arithmetic");
 * await store.close();
 * ```
 */
export function builtinResolver(spec: BuiltinResolverOptions): HarnessResolver {
  return (raw: JsonObject, rollout: Rollout) => {
    const options = parseOrThrow(BuiltinEnvSpecOptionsSchema, raw, "config.harness.options");
    const { sandbox, reward_timeout_s, env_vars, repos_dir: _repos, runner, ...harness } = options;
    const harnessOptions = { ...harness, env: spec.env };
    const runs = runnerFields(runner, harnessOptions);
    const input = parseEnvInput(rollout.input, spec.env);
    const run = spec.prepare?.(input, options, rollout) ?? {};
    const deno = denoDir();
    return {
      command: builtinCommand(harnessOptions),
      ...runs,
      env: {
        NO_COLOR: "1",
        ...(deno ? { DENO_DIR: deno } : {}),
        ...run.env,
        ...env_vars,
      },
      ...(run.workspace ? { workspace: run.workspace } : {}),
      reward: {
        function: spec.rewardFunction ?? spec.env,
        timeout_s: reward_timeout_s,
        restore: run.restore ?? [],
        edited_restore_reward: run.edited_restore_reward ?? null,
      },
      sandbox: {
        enabled: false,
        ...spec.sandbox,
        ...sandbox,
        hide: [
          ...new Set([...spec.sandbox?.hide ?? [], ...sandbox?.hide ?? [], ...run.hide ?? []]),
        ],
      },
    };
  };
}
