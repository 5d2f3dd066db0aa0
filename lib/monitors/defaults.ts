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
  const monitors = [
    gitNetworkMonitor(),
    testEditMonitor(),
    repetitionMonitor(),
    truncationMonitor(),
    emptyAnswerMonitor(),
    logprobMonitor(),
    mismatchMonitor(),
  ];
  for (const monitor of monitors) BUILT_IN.add(monitor);
  return monitors;
}

/** Monitors made by {@link defaultMonitors}: another thread can build the same by name. */
const BUILT_IN = new WeakSet<Monitor>();

/** Whether `monitor` was made by {@link defaultMonitors} (so it can run on the checking thread). */
export function isBuiltIn(monitor: Monitor): boolean {
  return BUILT_IN.has(monitor);
}
