/**
 * Number flags of the command lines (`deno task gateway`, `deno task ui`), read after
 * `node:util` `parseArgs`: each refusal names the flag.
 *
 * @module
 */

/**
 * A whole-number flag of at least `min`, or undefined when absent.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { intFlag } from "./flags.ts";
 * assert.equal(intFlag("retries", "3", 0), 3);
 * assert.equal(intFlag("retries", undefined, 0), undefined);
 * assert.throws(() => intFlag("retries", "1.5", 0), /--retries: expected a whole number >= 0/);
 * ```
 */
export function intFlag(name: string, value: string | undefined, min: number): number | undefined {
  if (value === undefined) return undefined;
  const n = Number(value);
  if (!Number.isInteger(n) || n < min) {
    throw new Error(`--${name}: expected a whole number >= ${min}, got '${value}'`);
  }
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
  const port = Number(value);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`--port: expected a port number, got '${value}'`);
  }
  return port;
}
