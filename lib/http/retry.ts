/**
 * One retry policy (exponential backoff with jitter, capped, honouring a server's
 * `Retry-After`) for every client and loop in reins; it waits with `sleep` (`lib/util/time.ts`).
 *
 * @module
 */
import { sleep } from "../util/time.ts";

/** Backoff settings. */
export interface BackoffOptions {
  /** Delay before the first retry, before jitter (ms). */
  baseMs: number;
  /** Cap of every delay (ms). */
  maxMs: number;
  /** Uniform [0, 1) source (injectable for tests; default `Math.random`). */
  random?: () => number;
}

/**
 * The delay before retry number `retry` (1-based): `min(max, base · 2^(retry−1))`, scaled by a
 * uniform jitter in [0.5, 1); a server's `Retry-After` (seconds) raises it, still capped.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { backoffDelay } from "./retry.ts";
 * const half = () => 0; // the smallest jitter
 * assert.equal(backoffDelay(1, { baseMs: 100, maxMs: 5_000, random: half }), 50);
 * assert.equal(backoffDelay(3, { baseMs: 100, maxMs: 5_000, random: half }), 200);
 * assert.equal(backoffDelay(2, { baseMs: 100, maxMs: 5_000, random: half }, 2), 2_000);
 * ```
 */
export function backoffDelay(
  retry: number,
  options: BackoffOptions,
  retryAfterS: number | null = null,
): number {
  const exp = Math.min(options.maxMs, options.baseMs * 2 ** Math.max(0, retry - 1));
  const jittered = exp * (0.5 + (options.random ?? Math.random)() * 0.5);
  return retryAfterS !== null
    ? Math.min(options.maxMs, Math.max(jittered, retryAfterS * 1000))
    : jittered;
}

/** Options of {@link retry}. */
export interface RetryOptions extends BackoffOptions {
  /** Retries after the first try. */
  retries: number;
  /** Whether a failure may be retried (default: every failure). */
  shouldRetry?: (error: unknown, retry: number) => boolean;
  /** Seconds a failure asks to wait (e.g. from `Retry-After`). */
  retryAfterS?: (error: unknown) => number | null;
  /** Stops waiting and retrying; the last failure is thrown. */
  signal?: AbortSignal;
}

/**
 * Runs `fn` (given the 0-based try number) until it succeeds, a failure may not be retried, the
 * retries are spent or `signal` aborts; throws the last failure.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { retry } from "./retry.ts";
 * let tries = 0;
 * const value = await retry(() => {
 *   if (++tries < 3) throw new Error("flaky");
 *   return Promise.resolve("ok");
 * }, { retries: 4, baseMs: 1, maxMs: 2 });
 * assert.equal(value, "ok");
 * assert.equal(tries, 3);
 * ```
 */
export async function retry<T>(
  fn: (attempt: number) => Promise<T>,
  options: RetryOptions,
): Promise<T> {
  for (let attempt = 0;; attempt++) {
    try {
      return await fn(attempt);
    } catch (error) {
      const last = attempt >= options.retries || options.signal?.aborted ||
        !(options.shouldRetry?.(error, attempt + 1) ?? true);
      if (last) throw error;
      const delay = backoffDelay(attempt + 1, options, options.retryAfterS?.(error) ?? null);
      await sleep(delay, options.signal);
      if (options.signal?.aborted) throw error;
    }
  }
}
