/**
 * From a rollout's harness spec to what the local backend runs: the `command` harness as given,
 * other names through a registered resolver, validated as a `LocalHarness`, with the runner
 * (`process` or `in_process`) checked against the sandbox and the registered runners.
 *
 * @module
 */
import { type JsonObject, parseOrThrow, type Rollout, ValidationError } from "../schema.ts";
import { type LocalHarness, LocalHarnessSchema } from "./schema.ts";
import { SpecError } from "./backend.ts";

/** Turns a harness spec with another name than `command` into a runnable local harness. */
export type HarnessResolver = (options: JsonObject, rollout: Rollout) => unknown;

/**
 * Resolves a rollout's harness spec into a runnable local harness or throws a {@link SpecError}
 * naming the field.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { resolveLocalHarness } from "./local_harness.ts";
 * const rollout = { config: { harness: { name: "command", options: { command: ["true"] } } } };
 * // deno-lint-ignore no-explicit-any
 * const harness = resolveLocalHarness(rollout as any, {});
 * assert.deepEqual(harness.command, ["true"]);
 * assert.equal(harness.runner, "process");
 * ```
 */
export function resolveLocalHarness(
  rollout: Rollout,
  harnesses: Record<string, HarnessResolver>,
): LocalHarness {
  const spec = rollout.config.harness;
  if (!spec) throw new SpecError("config.harness", "is required by the local backend");
  let raw: unknown = spec.options;
  if (spec.name !== "command") {
    const resolver = harnesses[spec.name];
    if (!resolver) {
      const known = ["command", ...Object.keys(harnesses)].join(", ");
      throw new SpecError(
        "config.harness.name",
        `unknown harness "${spec.name}" (known: ${known})`,
      );
    }
    try {
      raw = resolver(spec.options ?? {}, rollout);
    } catch (error) {
      if (error instanceof SpecError) throw error;
      throw new SpecError(
        "config.harness.options",
        error instanceof Error ? error.message : String(error),
      );
    }
  }
  try {
    return parseOrThrow(LocalHarnessSchema, raw, "config.harness.options");
  } catch (error) {
    if (error instanceof ValidationError) throw new SpecError(error.field, error.message);
    throw error;
  }
}

/**
 * Checks that an `in_process` harness can run here: never with the sandbox (in-process code
 * shares the controller's process, its memory and credentials: nothing confines it), and only
 * through a runner the backend has. Returns the runner's name, or null for a process harness.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "../schema.ts";
 * import { LocalHarnessSchema } from "./schema.ts";
 * import { checkRunner } from "./local_harness.ts";
 * const harness = parseOrThrow(LocalHarnessSchema, {
 *   command: ["true"], runner: "in_process", in_process: { name: "builtin" },
 *   sandbox: { enabled: true },
 * });
 * assert.throws(() => checkRunner(harness, ["builtin"]), /options\.runner: .*not sandboxed/);
 * ```
 */
export function checkRunner(harness: LocalHarness, runners: string[]): string | null {
  if (harness.runner !== "in_process") return null;
  if (harness.sandbox.enabled) {
    throw new SpecError(
      "config.harness.options.runner",
      '"in_process" runs the harness inside the controller, where it is not sandboxed; it ' +
        'cannot be combined with sandbox.enabled (use runner "process" for a sandboxed harness)',
    );
  }
  const name = harness.in_process!.name;
  if (!runners.includes(name)) {
    throw new SpecError(
      "config.harness.options.in_process.name",
      `no in-process runner "${name}" is registered with this backend ` +
        `(registered: ${runners.join(", ") || "none"}; use runner "process")`,
    );
  }
  return name;
}
