/**
 * Caps on what the UI pretty-prints. Pretty-printing JSON indents every level, so a small but
 * deeply nested payload (a 32 KB tool call nested 8 000 levels deep) would become a page of
 * tens of megabytes; JSON deeper than `maxDepth` is shown as its raw text instead, and any
 * shown text is cut at `maxChars` with a note of how much was left out.
 *
 * @module
 */
import { jsonDepth } from "../http/body.ts";

/** Limits of a pretty-printed payload. */
export interface PayloadLimits {
  /** Deepest nesting that is pretty-printed (deeper JSON is shown raw). */
  maxDepth: number;
  /** Most characters shown per payload. */
  maxChars: number;
}

/** The UI's limits: 32 levels, 64 KiB characters per payload. */
export const PAYLOAD_LIMITS: PayloadLimits = { maxDepth: 32, maxChars: 64 * 1024 };

/**
 * `text` cut at `maxChars`, with a note of what was left out.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { capText } from "./payload.ts";
 * assert.equal(capText("abcdef", 3), "abc… (3 more characters not shown)");
 * assert.equal(capText("abc", 3), "abc");
 * ```
 */
export function capText(text: string, maxChars = PAYLOAD_LIMITS.maxChars): string {
  if (text.length <= maxChars) return text;
  return `${text.slice(0, maxChars)}… (${text.length - maxChars} more characters not shown)`;
}

/**
 * A JSON text pretty-printed when it parses and is shallow enough, else as given; capped.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { prettyJsonText } from "./payload.ts";
 * assert.equal(prettyJsonText('{"a":1}'), '{\n  "a": 1\n}');
 * const deep = "[".repeat(5_000) + "]".repeat(5_000);
 * assert.ok(prettyJsonText(deep).length < 64 * 1024 + 100);
 * ```
 */
export function prettyJsonText(text: string, limits: PayloadLimits = PAYLOAD_LIMITS): string {
  if (jsonDepth(text, limits.maxDepth) > limits.maxDepth) return capText(text, limits.maxChars);
  try {
    return capText(JSON.stringify(JSON.parse(text), null, 2), limits.maxChars);
  } catch {
    return capText(text, limits.maxChars);
  }
}

/** A JSON value pretty-printed under the same caps as {@link prettyJsonText}. */
export function prettyJsonValue(value: unknown, limits: PayloadLimits = PAYLOAD_LIMITS): string {
  const compact = JSON.stringify(value) ?? "null";
  if (jsonDepth(compact, limits.maxDepth) > limits.maxDepth) {
    return capText(compact, limits.maxChars);
  }
  return capText(JSON.stringify(value, null, 2) ?? "null", limits.maxChars);
}
