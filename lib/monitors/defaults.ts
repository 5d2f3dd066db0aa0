/**
 * The built-in monitors with their default options.
 *
 * @module
 */
import { gitNetworkMonitor } from "./git_network.ts";
import { testEditMonitor } from "./test_edit.ts";
import { repetitionMonitor } from "./repetition.ts";
import { truncationMonitor } from "./truncation.ts";
import { emptyAnswerMonitor } from "./empty_answer.ts";
import { logprobMonitor } from "./logprob.ts";
import { mismatchMonitor } from "./mismatch.ts";
import type { Monitor } from "./types.ts";

/**
 * Every built-in monitor with default options.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { defaultMonitors } from "./defaults.ts";
 * assert.deepEqual(defaultMonitors().map((m) => m.name), [
 *   "git_network",
 *   "test_edit",
 *   "repetition",
 *   "truncation",
 *   "empty_answer",
 *   "logprob",
 *   "mismatch",
 * ]);
 * ```
 */
export function defaultMonitors(): Monitor[] {
  return [
    gitNetworkMonitor(),
    testEditMonitor(),
    repetitionMonitor(),
    truncationMonitor(),
    emptyAnswerMonitor(),
    logprobMonitor(),
    mismatchMonitor(),
  ];
}
