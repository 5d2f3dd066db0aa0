/**
 * Flags of the command lines (`bin/`, `scripts/`), read after `node:util` `parseArgs`: one rule
 * for integer flags and one for ports, and each refusal names the flag.
 *
 * @module
 */
import { parseArgs, type ParseArgsOptionsConfig } from "node:util";
import { z } from "zod";

/** A flag's text that is a whole number: digits only (no sign, exponent or fraction). */
export const WholeNumberFlagSchema = z.string().trim().regex(/^\d+$/).transform(Number);

/**
 * A whole-number flag from `min` to `max` (inclusive; no upper bound when `max` is absent), or
 * undefined when the flag is absent. The one integer-flag rule of every reins command line.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { intFlag } from "./flags.ts";
 * assert.equal(intFlag("retries", "3", 0), 3);
 * assert.equal(intFlag("retries", undefined, 0), undefined);
 * assert.throws(() => intFlag("retries", "1.5", 0), /--retries: expected a whole number, got '1.5'/);
 * assert.throws(() => intFlag("steps", "0", 1, 100), /--steps: must be between 1 and 100, got 0/);
 * assert.throws(() => intFlag("steps", "0", 1), /--steps: must be at least 1, got 0/);
 * ```
 */
export function intFlag(
  name: string,
  value: string | undefined,
  min: number,
  max?: number,
): number | undefined {
  if (value === undefined) return undefined;
  const parsed = WholeNumberFlagSchema.safeParse(value);
  if (!parsed.success) throw new Error(`--${name}: expected a whole number, got '${value}'`);
  const n = parsed.data;
  if (max !== undefined && (n < min || n > max)) {
    throw new Error(`--${name}: must be between ${min} and ${max}, got ${n}`);
  }
  if (n < min) throw new Error(`--${name}: must be at least ${min}, got ${n}`);
  return n;
}

/**
 * The `--port` flag: a TCP port, 0 for any free one.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { portFlag } from "./flags.ts";
 * assert.equal(portFlag("8420"), 8420);
 * assert.throws(() => portFlag("70000"), /--port: expected a port number, got '70000'/);
 * ```
 */
export function portFlag(value: string | undefined): number {
  const parsed = WholeNumberFlagSchema.safeParse(value ?? "");
  if (!parsed.success || parsed.data > 65535) {
    throw new Error(`--port: expected a port number, got '${value}'`);
  }
  return parsed.data;
}

/**
 * Parses a command line with `node:util` `parseArgs` (strict: an unknown flag or a missing value
 * is refused naming the flag), adding `--help`: with it, prints `usage` and returns undefined.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseFlags } from "./flags.ts";
 * const options = { port: { type: "string", default: "8420" } } as const;
 * assert.equal(parseFlags(["--port", "1"], options, "usage: demo")?.port, "1");
 * assert.equal(parseFlags(["--help"], options, "usage: demo"), undefined);
 * assert.throws(() => parseFlags(["--bogus"], options, "usage: demo"), /--bogus/);
 * ```
 */
export function parseFlags<O extends ParseArgsOptionsConfig>(
  args: string[],
  options: O,
  usage: string,
): ParsedFlags<O> | undefined {
  const { values } = parseArgs({
    args,
    options: { ...options, help: { type: "boolean", default: false } },
    strict: true,
  });
  if ((values as { help?: boolean }).help) {
    console.log(usage);
    return undefined;
  }
  return values as ParsedFlags<O>;
}

/** The values {@link parseFlags} returns for `options`. */
export type ParsedFlags<O extends ParseArgsOptionsConfig> = ReturnType<
  typeof parseArgs<{ args: string[]; options: O; strict: true }>
>["values"];
