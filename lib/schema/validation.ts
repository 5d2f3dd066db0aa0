/**
 * The validation error of every schema boundary and the helpers that produce it: messages name
 * the field at fault (`rollouts[0].config.max_attemps: unknown key …`).
 *
 * @module
 */
import { z } from "zod";
import { HttpError } from "../util/error.ts";

/** A validation failure (an {@link HttpError} 400) whose message names the offending field. */
export class ValidationError extends HttpError {
  /** Dotted path of the first bad field (e.g. `payload.response_logprobs`). */
  declare readonly field: string;
  /** Every issue, each as `path: message`. */
  readonly issues: string[];
  constructor(field: string, issues: string[]) {
    super(400, issues.join("; "), { code: "invalid", field });
    this.name = "ValidationError";
    this.issues = issues;
  }
}

const PLAIN_KEY = /^[^\p{Cc}"\\]+$/u;

/**
 * Formats a zod issue path as `a.b[2].c`. An empty key, or one with quotes, backslashes or
 * control characters, is written JSON-quoted (`a["x\\u0000y"]`), so that a message never carries a
 * raw control character.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { formatPath } from "./validation.ts";
 * assert.equal(formatPath(["events", 1, "payload", "value"]), "events[1].payload.value");
 * assert.equal(formatPath(["labels", "a\u0000b"]), 'labels["a\\u0000b"]');
 * ```
 */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else if (typeof part === "string" && PLAIN_KEY.test(part)) out += out ? `.${part}` : part;
    else out += `[${JSON.stringify(String(part))}]`;
  }
  return out || "(root)";
}

/**
 * Parses `value` with `schema` or throws a {@link ValidationError} naming the field. An unknown
 * key of a strict object is named as a field of its own (`config.max_attemps: unknown key …`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { z } from "zod";
 * import { parseOrThrow, strictObject, ValidationError } from "./validation.ts";
 * const Config = strictObject({ max_attempts: z.number().default(1) });
 * assert.equal(parseOrThrow(Config, {}).max_attempts, 1);
 * assert.throws(
 *   () => parseOrThrow(Config, { max_attemps: 3 }, "config"),
 *   (err: ValidationError) => err.field === "config.max_attemps",
 * );
 * ```
 */
export function parseOrThrow<S extends z.ZodType>(
  schema: S,
  value: unknown,
  prefix?: string,
): z.infer<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const base = prefix ? [prefix] : [];
  const issues: Array<{ path: PropertyKey[]; message: string }> = [];
  for (const issue of result.error.issues) {
    if (issue.code === "unrecognized_keys") {
      for (const key of issue.keys) {
        issues.push({ path: [...base, ...issue.path, key], message: issue.message });
      }
    } else {
      issues.push({ path: [...base, ...issue.path], message: issue.message });
    }
  }
  const field = formatPath(issues[0]?.path ?? base);
  throw new ValidationError(field, issues.map((i) => `${formatPath(i.path)}: ${i.message}`));
}

/**
 * A `z.strictObject` whose unknown keys are reported with the keys it does know, so a typo
 * such as `max_attemps` is refused instead of silently ignored.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { z } from "zod";
 * import { strictObject } from "./validation.ts";
 * const issues = strictObject({ a: z.number() }).safeParse({ a: 1, b: 2 }).error!.issues;
 * assert.equal(issues[0].message, "unknown key (expected one of: a)");
 * ```
 */
export function strictObject<T extends z.core.$ZodLooseShape>(
  shape: T,
): z.ZodObject<T, z.core.$strict> {
  const known = Object.keys(shape).join(", ");
  return z.strictObject(shape, {
    error: (issue) =>
      issue.code === "unrecognized_keys" ? `unknown key (expected one of: ${known})` : undefined,
  });
}
