/**
 * The harness registry: every harness name a rollout's `config.harness.name` may use, with the
 * reward functions they name, ready for `new LocalBackend({ harnesses, rewardFunctions })`.
 *
 * Names: `builtin` (the built-in harness on a plain question, no reward), `builtin-<env>` for
 * each environment (`arithmetic`, `search`, `files`, `coding`), and the real-CLI adapters of
 * `lib/harness/cli/` (`CLI_HARNESSES`). `command` is the local backend's own.
 *
 * @module
 */
import type { InProcessRunner } from "../controller/in_process.ts";
import type { HarnessResolver } from "../controller/local_harness.ts";
import type { RewardFunction } from "../controller/reward_hooks.ts";
import { type JsonObject, parseOrThrow } from "../schema.ts";
import { BuiltinEnvSpecOptionsSchema } from "./schema.ts";
import { runBuiltinInProcess } from "./builtin/in_process.ts";
import { builtinCommand, runnerFields } from "./builtin/resolver.ts";
import { DEFAULT_DATA_DIR, defaultEnvs, envList, type EnvSet } from "./envs/mod.ts";
import { CLI_HARNESSES } from "./cli/mod.ts";

/** What {@link harnessRegistry} returns. */
export interface HarnessRegistry {
  /** Resolvers by harness name (the local backend's `harnesses`). */
  harnesses: Record<string, HarnessResolver>;
  /** Reward functions by name (the local backend's `rewardFunctions`). */
  rewardFunctions: Record<string, RewardFunction>;
  /**
   * In-process runners by name (the local backend's `inProcess`): `builtin`, for harness specs
   * with `runner: "in_process"` (see `lib/harness/builtin/in_process.ts`).
   */
  inProcess: Record<string, InProcessRunner>;
  /** The environments behind the `builtin-<env>` names. */
  envs: EnvSet;
}

/** Options of {@link harnessRegistry}. */
export interface HarnessRegistryOptions {
  /** Dataset directory of the environments (default: the shipped `data/envs`). */
  dataDir?: string;
  /** Extra harnesses (e.g. your own adapters); they win over built-in names. */
  extra?: Record<string, HarnessResolver>;
  /** Extra reward functions. */
  extraRewards?: Record<string, RewardFunction>;
}

/** The generic built-in harness: any input with a prompt, no tools, no reward. */
const plainBuiltin: HarnessResolver = (raw: JsonObject) => {
  const options = parseOrThrow(BuiltinEnvSpecOptionsSchema, raw, "config.harness.options");
  const { sandbox, env_vars, reward_timeout_s: _t, repos_dir: _r, runner, ...harness } = options;
  const harnessOptions = { ...harness, env: "none" as const };
  return {
    command: builtinCommand(harnessOptions),
    ...runnerFields(runner, harnessOptions),
    env: { NO_COLOR: "1", ...env_vars },
    sandbox: { enabled: false, ...sandbox },
  };
};

/**
 * Builds the registry.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { harnessRegistry } from "./registry.ts";
 * const { harnesses, rewardFunctions } = harnessRegistry();
 * assert.equal(Object.keys(harnesses).includes("builtin-arithmetic"), true);
 * assert.equal(typeof rewardFunctions.coding, "function");
 * ```
 */
export function harnessRegistry(options: HarnessRegistryOptions = {}): HarnessRegistry {
  const envs = defaultEnvs(options.dataDir ?? DEFAULT_DATA_DIR);
  const harnesses: Record<string, HarnessResolver> = { ...CLI_HARNESSES, builtin: plainBuiltin };
  const rewardFunctions: Record<string, RewardFunction> = {};
  for (const env of envList(envs)) {
    harnesses[`builtin-${env.name}`] = env.resolver;
    rewardFunctions[env.name] = env.reward;
  }
  Object.assign(harnesses, options.extra ?? {});
  Object.assign(rewardFunctions, options.extraRewards ?? {});
  return { harnesses, rewardFunctions, inProcess: { builtin: runBuiltinInProcess }, envs };
}

/** Raised for a harness or reward name the registry does not hold; lists what exists. */
export class UnknownHarnessError extends Error {
  /** The field that named it. */
  readonly field: string;
  /** Every name that exists. */
  readonly known: string[];
  /** Creates the error. */
  constructor(field: string, kind: string, name: string, known: string[]) {
    super(`${field}: unknown ${kind} "${name}" (known: ${known.join(", ") || "none"})`);
    this.name = "UnknownHarnessError";
    this.field = field;
    this.known = known;
  }
}

/**
 * The resolver registered as `name`, or an {@link UnknownHarnessError} listing every name
 * (including the local backend's own `command`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { harnessRegistry, lookupHarness } from "./registry.ts";
 * const registry = harnessRegistry();
 * assert.equal(typeof lookupHarness(registry, "builtin-search"), "function");
 * ```
 */
export function lookupHarness(registry: HarnessRegistry, name: string): HarnessResolver {
  const resolver = registry.harnesses[name];
  if (!resolver) {
    throw new UnknownHarnessError("config.harness.name", "harness", name, [
      "command",
      ...Object.keys(registry.harnesses).sort(),
    ]);
  }
  return resolver;
}

/** The reward function registered as `name`, or an {@link UnknownHarnessError} listing them. */
export function lookupReward(registry: HarnessRegistry, name: string): RewardFunction {
  const fn = registry.rewardFunctions[name];
  if (!fn) {
    throw new UnknownHarnessError(
      "reward.function",
      "reward function",
      name,
      Object.keys(registry.rewardFunctions).sort(),
    );
  }
  return fn;
}
