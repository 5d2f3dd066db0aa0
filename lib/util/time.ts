/**
 * One abortable sleep for every client, server and loop in reins.
 *
 * @module
 */

/**
 * Resolves after `ms`, or at once when `signal` aborts. With `rejectOnAbort` an abort rejects
 * with the signal's reason instead (for callers that must stop at once).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { sleep } from "./time.ts";
 * const stop = new AbortController();
 * const slept = sleep(60_000, stop.signal);
 * stop.abort();
 * assert.equal(await slept, undefined); // woke at once
 * ```
 */
export function sleep(
  ms: number,
  signal?: AbortSignal,
  options: { rejectOnAbort?: boolean } = {},
): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal?.aborted) {
      if (options.rejectOnAbort) reject(signal.reason);
      else resolve();
      return;
    }
    const onAbort = () => {
      clearTimeout(timer);
      if (options.rejectOnAbort) reject(signal!.reason);
      else resolve();
    };
    const timer = setTimeout(() => {
      signal?.removeEventListener("abort", onAbort);
      resolve();
    }, Math.max(0, ms));
    signal?.addEventListener("abort", onAbort, { once: true });
  });
}
