/**
 * Reading a loop config with errors a person can act on: every bad field on its own line,
 * named by its path, instead of zod's JSON dump of issues.
 *
 * @module
 */
import { parseOrThrow, ValidationError } from "../schema.ts";
import { type LoopConfig, type LoopConfigInput, LoopConfigSchema } from "./schema.ts";

/** A loop config that does not parse: `issues` holds one `path: message` per bad field. */
export class LoopConfigError extends ValidationError {
  constructor(field: string, issues: string[]) {
    super(field, issues);
    this.name = "LoopConfigError";
    this.message = `${issues.length} invalid field${issues.length === 1 ? "" : "s"} in the loop ` +
      `config:\n${issues.map((i) => `  ${i}`).join("\n")}`;
  }
}

/**
 * Parses a loop config (defaults filled in) or throws a {@link LoopConfigError} listing every
 * bad field, one per line (`runLoop` parses its config with it).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { LoopConfigError, parseLoopConfig } from "./config.ts";
 * assert.throws(
 *   () => parseLoopConfig({ name: "has space", tasks: [], harness: { name: "builtin" } }),
 *   (e: unknown) =>
 *     e instanceof LoopConfigError && e.field === "config.name" &&
 *     e.message.split("\n").length === 3 && /^  config\.tasks: /m.test(e.message),
 * );
 * const ok = parseLoopConfig({ name: "x", tasks: [{ id: "t", input: 1 }], harness: { name: "builtin" } });
 * assert.equal(ok.group_size > 0, true);
 * ```
 */
export function parseLoopConfig(input: LoopConfigInput | unknown): LoopConfig {
  try {
    return parseOrThrow(LoopConfigSchema, input, "config");
  } catch (error) {
    if (error instanceof ValidationError) throw new LoopConfigError(error.field, error.issues);
    throw error;
  }
}
