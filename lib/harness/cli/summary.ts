/**
 * One line per harness run for logs and failure reports: wall time, calls, conversations, the
 * range of prompt lengths, reward — also for a run that made no call at all (a CLI that crashed
 * at start-up), where a bare `Math.min(...[])` would print `Infinity–-Infinity`.
 *
 * @module
 */

/** What {@link runSummary} describes. */
export interface RunSummaryInput {
  wallMs: number;
  /** Prompt length (tokens) of each captured call. */
  promptTokens: number[];
  /** Conversation tag of each captured call (undefined: untagged). */
  conversations: (string | undefined)[];
  reward: number | null;
  /** Status of the rollout, when it did not succeed. */
  status?: string;
  sandboxed?: boolean;
}

/**
 * `lo–hi` of `values`, `n` when all equal, `none` when empty.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { rangeText } from "./summary.ts";
 * assert.equal(rangeText([310, 512, 498]), "310–512");
 * assert.equal(rangeText([7]), "7");
 * assert.equal(rangeText([]), "none");
 * ```
 */
export function rangeText(values: number[]): string {
  if (values.length === 0) return "none";
  let lo = values[0];
  let hi = values[0];
  for (const v of values) {
    if (v < lo) lo = v;
    if (v > hi) hi = v;
  }
  return lo === hi ? String(lo) : `${lo}–${hi}`;
}

/**
 * The summary line of one run.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runSummary } from "./summary.ts";
 * assert.equal(
 *   runSummary({ wallMs: 2100, promptTokens: [], conversations: [], reward: null, status: "failed" }),
 *   "2.1 s, 0 calls (none captured), prompt tokens none, reward none, status failed",
 * );
 * ```
 */
export function runSummary(run: RunSummaryInput): string {
  const calls = run.promptTokens.length;
  const conversations = new Set(run.conversations).size;
  return `${(run.wallMs / 1000).toFixed(1)} s, ${calls} calls` +
    (calls === 0 ? " (none captured)" : `, ${conversations} conversations`) +
    `, prompt tokens ${rangeText(run.promptTokens)}, reward ${run.reward ?? "none"}` +
    (run.status && run.status !== "succeeded" ? `, status ${run.status}` : "") +
    (run.sandboxed ? ", sandboxed" : "");
}
