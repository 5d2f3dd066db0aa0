/**
 * The one JSONL reader of reins: text with one JSON value per line, each line checked against a
 * zod schema. Pure (callers read the file and decide what a missing file means); blank lines are
 * skipped; line numbers are the file's own (1-based, blank lines counted).
 *
 * @module
 */
import type { z } from "zod";
import { parseOrThrow, ValidationError } from "./validation.ts";

/** One line of a lenient read: its value, or why it was refused. */
export type JsonlLine<T> = { line: number; value: T } | { line: number; error: ValidationError };

/**
 * Every non-blank line parsed and checked, refusals kept beside the values (for a live file,
 * where one bad line must not hide the others). `where(line)` prefixes each error's field.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { z } from "zod";
 * import { parseJsonlLines } from "./jsonl.ts";
 * const lines = parseJsonlLines('{"n":1}\n\nnot json\n{"n":"x"}\n', z.object({ n: z.number() }));
 * assert.deepEqual(lines.map((l) => ("value" in l ? l.value.n : l.line)), [1, 3, 4]);
 * ```
 */
export function parseJsonlLines<S extends z.ZodType>(
  text: string,
  schema: S,
  where: (line: number) => string = (line) => `line ${line}`,
): JsonlLine<z.infer<S>>[] {
  const out: JsonlLine<z.infer<S>>[] = [];
  text.split("\n").forEach((raw, i) => {
    if (raw.trim() === "") return;
    const line = i + 1;
    let json: unknown;
    try {
      json = JSON.parse(raw);
    } catch (error) {
      const field = where(line);
      const message = `${field}: not JSON (${(error as Error).message})`;
      out.push({ line, error: new ValidationError(field, [message]) });
      return;
    }
    try {
      out.push({ line, value: parseOrThrow(schema, json, where(line)) });
    } catch (error) {
      if (!(error instanceof ValidationError)) throw error;
      out.push({ line, error });
    }
  });
  return out;
}

/**
 * Every non-blank line parsed and checked; the first bad line throws a `ValidationError` whose
 * field names it (`where(line)`, e.g. `data/tasks.jsonl:7`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { z } from "zod";
 * import { parseJsonl } from "./jsonl.ts";
 * const schema = z.object({ n: z.number() });
 * assert.deepEqual(parseJsonl('{"n":1}\n{"n":2}\n', schema), [{ n: 1 }, { n: 2 }]);
 * assert.throws(() => parseJsonl('{"n":1}\n{"n":"x"}', schema, (l) => `t.jsonl:${l}`), {
 *   field: "t.jsonl:2.n",
 * });
 * ```
 */
export function parseJsonl<S extends z.ZodType>(
  text: string,
  schema: S,
  where: (line: number) => string = (line) => `line ${line}`,
): z.infer<S>[] {
  return parseJsonlLines(text, schema, where).map((line) => {
    if ("error" in line) throw line.error;
    return line.value;
  });
}
