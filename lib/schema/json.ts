/**
 * Bounded input: JSON values checked without recursion (a 100 000-deep array is a 400 naming
 * the field, never a stack overflow), and the text rules of names and keys (no control
 * characters: SQLite reads a string back only up to a NUL, so `"w\u0000x"` would read as
 * `"w"`).
 *
 * @module
 */
import { z } from "zod";

/** Any JSON value (task inputs, custom event data, harness options). */
export type JsonValue =
  | string
  | number
  | boolean
  | null
  | JsonValue[]
  | { [key: string]: JsonValue };

/** A JSON object. */
export type JsonObject = { [key: string]: JsonValue };

/**
 * Deepest nesting of arrays and objects a JSON field may hold (`[[1]]` is 2 deep). Tool
 * schemas and chat requests stay far below it; it bounds every recursive walker downstream
 * (zod, the UI's pretty printer, key sorting).
 */
export const MAX_JSON_DEPTH = 128;

/** What {@link jsonProblem} found: where (relative to the value) and what. */
export interface JsonProblem {
  path: Array<string | number>;
  message: string;
}

interface Frame {
  value: Record<string, unknown> | unknown[];
  keys: string[] | null;
  next: number;
}

function scalarProblem(value: unknown): string | null {
  switch (typeof value) {
    case "string":
    case "boolean":
      return null;
    case "number":
      return Number.isFinite(value) ? null : `must be a finite number, got ${value}`;
    case "object":
      return null;
    default:
      return `must be a JSON value, got ${typeof value}`;
  }
}

function frameOf(value: object): Frame | string {
  if (Array.isArray(value)) return { value, keys: null, next: 0 };
  const proto = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) {
    return `must be a JSON value, got a ${proto?.constructor?.name ?? "non-plain"} object`;
  }
  if (Object.getOwnPropertySymbols(value).length > 0) return "must not have symbol keys";
  const keys = Object.keys(value);
  if (Object.hasOwn(value, "__proto__")) return "must not use the key '__proto__'";
  return { value: value as Record<string, unknown>, keys, next: 0 };
}

function pathOf(stack: Frame[]): Array<string | number> {
  return stack.map((f) => (f.keys ? f.keys[f.next - 1] : f.next - 1));
}

/**
 * The first reason `value` is not a JSON value of at most `maxDepth` nested arrays/objects, or
 * null. Iterative: the work is linear in the size and the stack stays flat at any depth.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { jsonProblem } from "./json.ts";
 * assert.equal(jsonProblem({ a: [1, "x", null, { b: true }] }), null);
 * assert.deepEqual(jsonProblem({ a: [1, Infinity] })?.path, ["a", 1]);
 * let deep: unknown = 1;
 * for (let i = 0; i < 100_000; i++) deep = [deep];
 * assert.match(jsonProblem(deep)!.message, /nested deeper than 128/);
 * ```
 */
export function jsonProblem(value: unknown, maxDepth: number = MAX_JSON_DEPTH): JsonProblem | null {
  const scalar = scalarProblem(value);
  if (scalar !== null) return { path: [], message: scalar };
  if (value === null || typeof value !== "object") return null;
  const root = frameOf(value);
  if (typeof root === "string") return { path: [], message: root };
  const stack: Frame[] = [root];
  while (stack.length > 0) {
    const top = stack[stack.length - 1];
    const n = top.keys ? top.keys.length : (top.value as unknown[]).length;
    if (top.next >= n) {
      stack.pop();
      continue;
    }
    const key = top.keys ? top.keys[top.next] : top.next;
    top.next++;
    const child = (top.value as Record<string | number, unknown>)[key];
    const problem = scalarProblem(child);
    if (problem !== null) return { path: pathOf(stack), message: problem };
    if (child === null || typeof child !== "object") continue;
    if (stack.length >= maxDepth) {
      return { path: [], message: `nested deeper than ${maxDepth} levels of arrays/objects` };
    }
    const frame = frameOf(child);
    if (typeof frame === "string") return { path: pathOf(stack), message: frame };
    stack.push(frame);
  }
  return null;
}

/**
 * True when `value` is a plain JSON object that {@link JsonObjectSchema} accepts as it is
 * (finite numbers; plain objects; at most {@link MAX_JSON_DEPTH} deep), checked iteratively.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isPlainJsonObject } from "./json.ts";
 * assert.equal(isPlainJsonObject({ a: [1, "x", null, { b: true }] }), true);
 * assert.equal(isPlainJsonObject({ a: Infinity }), false);
 * assert.equal(isPlainJsonObject([1]), false);
 * ```
 */
export function isPlainJsonObject(value: unknown): boolean {
  return typeof value === "object" && value !== null && !Array.isArray(value) &&
    jsonProblem(value) === null;
}

function jsonSchema<T extends JsonValue>(objectOnly: boolean): z.ZodType<T> {
  return z.custom<T>().superRefine((value, ctx) => {
    if (value === undefined) {
      ctx.addIssue({ code: "custom", message: "required (a JSON value)" });
      return;
    }
    if (objectOnly && (typeof value !== "object" || value === null || Array.isArray(value))) {
      ctx.addIssue({ code: "custom", message: "must be a JSON object" });
      return;
    }
    const problem = jsonProblem(value);
    if (problem) ctx.addIssue({ code: "custom", path: problem.path, message: problem.message });
  }) as unknown as z.ZodType<T>;
}

/** Schema of {@link JsonValue}: any JSON value at most {@link MAX_JSON_DEPTH} deep. */
export const JsonValueSchema: z.ZodType<JsonValue> = jsonSchema<JsonValue>(false);

/** A JSON object (see {@link JsonValueSchema}). */
export const JsonObjectSchema: z.ZodType<JsonObject> = jsonSchema<JsonObject>(true);

// ---------------------------------------------------------------------------------------------
// Names and keys

const CONTROL = /\p{Cc}/u;

/**
 * True when `text` holds a control character (U+0000–U+001F, U+007F–U+009F).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { hasControlChars } from "./json.ts";
 * assert.equal(hasControlChars("w\u0000x"), true);
 * assert.equal(hasControlChars("ctl-1"), false);
 * ```
 */
export function hasControlChars(text: string): boolean {
  return CONTROL.test(text);
}

/** A short name or key: 1–`max` characters, no control characters. */
export function nameSchema(max = 200): z.ZodString {
  return z.string().min(1).max(max).regex(/^\P{Cc}*$/u, "must not contain control characters");
}

/** Who claims and holds an attempt's lease (controller id, pod name). */
export const WorkerSchema = nameSchema(200);

/** Idempotency key of an event within its rollout (0–200 characters, no control characters). */
export const EventKeySchema = z.string().max(200).regex(
  /^\P{Cc}*$/u,
  "must not contain control characters",
);

/** Most labels one rollout may carry. */
export const MAX_LABELS = 64;

/** Labels: string keys (1–200 characters) to string values (≤ 2 000), no control characters. */
export const LabelsSchema: z.ZodType<Record<string, string>> = z.custom<Record<string, string>>()
  .superRefine((value, ctx) => {
    if (typeof value !== "object" || value === null || Array.isArray(value)) {
      ctx.addIssue({ code: "custom", message: "must be an object of string labels" });
      return;
    }
    const proto = Object.getPrototypeOf(value);
    if (proto !== Object.prototype && proto !== null) {
      ctx.addIssue({ code: "custom", message: "must be a plain object of string labels" });
      return;
    }
    const entries = Object.entries(value);
    if (entries.length > MAX_LABELS) {
      ctx.addIssue({
        code: "custom",
        message: `at most ${MAX_LABELS} labels, got ${entries.length}`,
      });
    }
    for (const [key, label] of entries) {
      if (key.length === 0 || key.length > 200 || hasControlChars(key)) {
        ctx.addIssue({
          code: "custom",
          path: [key],
          message: "label keys are 1–200 characters without control characters",
        });
      } else if (typeof label !== "string") {
        ctx.addIssue({ code: "custom", path: [key], message: "must be a string" });
      } else if (label.length > 2_000 || hasControlChars(label)) {
        ctx.addIssue({
          code: "custom",
          path: [key],
          message: "label values are at most 2 000 characters without control characters",
        });
      }
    }
  }) as unknown as z.ZodType<Record<string, string>>;
