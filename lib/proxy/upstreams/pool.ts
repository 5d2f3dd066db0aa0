/**
 * Several upstream endpoints behind one call: sticky routing by rollout id (so a rollout keeps
 * hitting the same prefix cache), a per-try timeout that streaming chunks renew, retries with
 * exponential backoff and jitter on timeouts, connection errors, 429 and 5xx, and an abort
 * that reaches the upstream when the harness goes away.
 *
 * @module
 */
import { type ClientRequest, HttpClient } from "../../http/client.ts";
import { HttpError } from "../../util/error.ts";
import { backoffDelay } from "../../http/retry.ts";
import { sleep } from "../../util/time.ts";

/**
 * Why an upstream call failed: an {@link HttpError} whose `status` is what the proxy answers
 * (502 upstream error, 504 timeout, 4xx passed through), with what the retry policy needs.
 */
export class UpstreamError extends HttpError {
  /** Status the upstream answered, when it answered. */
  readonly upstreamStatus: number | null;
  readonly retryable: boolean;
  /** Seconds the upstream asked to wait (Retry-After), when it did. */
  readonly retryAfterS: number | null;
  constructor(
    message: string,
    options: {
      status: number;
      upstreamStatus?: number | null;
      retryable: boolean;
      retryAfterS?: number | null;
    },
  ) {
    super(options.status, message);
    this.name = "UpstreamError";
    this.upstreamStatus = options.upstreamStatus ?? null;
    this.retryable = options.retryable;
    this.retryAfterS = options.retryAfterS ?? null;
  }
}

/** Builds the error for a non-2xx upstream answer (retryable on 429 and 5xx). */
export async function upstreamHttpError(
  response: Response,
  endpoint: string,
): Promise<UpstreamError> {
  let detail = "";
  try {
    detail = (await response.text()).slice(0, 500);
  } catch {
    // the body is only a hint
  }
  const retryAfter = Number(response.headers.get("retry-after"));
  const status = response.status;
  const retryable = status === 429 || status >= 500;
  return new UpstreamError(`upstream ${endpoint} answered ${status}: ${detail}`, {
    status: retryable ? (status === 429 ? 429 : 502) : status,
    upstreamStatus: status,
    retryable,
    retryAfterS: Number.isFinite(retryAfter) && retryAfter >= 0 ? retryAfter : null,
  });
}

/** What one try gets to work with. */
export interface TryContext {
  endpoint: string;
  /** Aborts on timeout, on the caller's abort, or when the proxy gives up. */
  signal: AbortSignal;
  /** Zero-based try number. */
  attempt: number;
  /** Call on each upstream chunk: renews the idle timeout. */
  touch(): void;
  /** Call once bytes reached the harness: from then on a failure is not retried. */
  commit(): void;
  /** `fetch` for the upstream: the pool's client (kept connections to `http:` upstreams). */
  fetch(url: string, init: ClientRequest): Promise<Response>;
}

/** Result of {@link UpstreamPool.run}. */
export interface PoolResult<T> {
  value: T;
  endpoint: string;
  /** Tries after the first. */
  retries: number;
}

/** A failure after the pool gave up, with what it tried (status: the failure's). */
export class PoolFailure extends HttpError {
  readonly failure: UpstreamError;
  readonly endpoint: string;
  readonly retries: number;
  constructor(failure: UpstreamError, endpoint: string, retries: number) {
    super(failure.status, failure.message, { cause: failure });
    this.name = "PoolFailure";
    this.failure = failure;
    this.endpoint = endpoint;
    this.retries = retries;
  }
}

/** Settings of {@link UpstreamPool}. */
export interface PoolOptions {
  endpoints: string[];
  timeout_ms: number;
  max_retries: number;
  backoff_base_ms: number;
  backoff_max_ms: number;
  /** Injectable for tests: uniform [0, 1). */
  random?: () => number;
  /** The client the tries call through (default: one that opens a connection per call). */
  http?: HttpClient;
}

/** FNV-1a, enough to spread rollout ids over endpoints. */
function hash(text: string): number {
  let h = 0x811c9dc5;
  for (let i = 0; i < text.length; i++) {
    h ^= text.charCodeAt(i);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/**
 * Routes, times out and retries upstream calls.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { UpstreamPool } from "./pool.ts";
 * const pool = new UpstreamPool({
 *   endpoints: ["http://a", "http://b"],
 *   timeout_ms: 1000, max_retries: 2, backoff_base_ms: 10, backoff_max_ms: 100,
 * });
 * assert.equal(pool.endpointFor("rollout-1"), pool.endpointFor("rollout-1")); // sticky
 * ```
 */
export class UpstreamPool {
  readonly options: PoolOptions;
  #random: () => number;
  readonly #fetch: TryContext["fetch"];

  constructor(options: PoolOptions) {
    if (options.endpoints.length === 0) throw new Error("endpoints: at least one is required");
    this.options = options;
    this.#random = options.random ?? Math.random;
    const http = options.http ?? new HttpClient();
    this.#fetch = (url, init) => http.fetch(url, init);
  }

  /** The endpoint a rollout sticks to; later tries move to the next one. */
  endpointFor(rolloutId: string, attempt = 0): string {
    const { endpoints } = this.options;
    const base = endpoints.map((e) => e.replace(/\/+$/, ""));
    return base[(hash(rolloutId) + attempt) % base.length];
  }

  /** Delay before try `attempt` (1-based retry index): exponential, capped, with jitter. */
  backoffMs(retry: number, retryAfterS: number | null = null): number {
    return backoffDelay(retry, {
      baseMs: this.options.backoff_base_ms,
      maxMs: this.options.backoff_max_ms,
      random: this.#random,
    }, retryAfterS);
  }

  /** Runs `fn` against the rollout's endpoint, retrying transient failures. */
  async run<T>(
    rolloutId: string,
    signal: AbortSignal,
    fn: (ctx: TryContext) => Promise<T>,
  ): Promise<PoolResult<T>> {
    let attempt = 0;
    for (;;) {
      const endpoint = this.endpointFor(rolloutId, attempt);
      const controller = new AbortController();
      let committed = false;
      let timedOut = false;
      let timer: ReturnType<typeof setTimeout> | undefined;
      const arm = () => {
        clearTimeout(timer);
        timer = setTimeout(() => {
          timedOut = true;
          controller.abort(new DOMException("upstream timed out", "TimeoutError"));
        }, this.options.timeout_ms);
      };
      const onAbort = () => controller.abort(signal.reason);
      if (signal.aborted) throw signal.reason;
      signal.addEventListener("abort", onAbort, { once: true });
      arm();
      try {
        const value = await fn({
          endpoint,
          signal: controller.signal,
          attempt,
          touch: arm,
          commit: () => (committed = true),
          fetch: this.#fetch,
        });
        return { value, endpoint, retries: attempt };
      } catch (err) {
        if (signal.aborted) throw signal.reason ?? err;
        const failure = timedOut
          ? new UpstreamError(
            `upstream ${endpoint} timed out after ${this.options.timeout_ms} ms`,
            {
              status: 504,
              retryable: true,
            },
          )
          : err instanceof UpstreamError
          ? err
          : new UpstreamError(`upstream ${endpoint} failed: ${(err as Error)?.message ?? err}`, {
            status: 502,
            retryable: err instanceof TypeError, // fetch's connection errors
          });
        if (!failure.retryable || committed || attempt >= this.options.max_retries) {
          throw new PoolFailure(failure, endpoint, attempt);
        }
        attempt++;
        await sleep(this.backoffMs(attempt, failure.retryAfterS), signal, { rejectOnAbort: true });
      } finally {
        clearTimeout(timer);
        signal.removeEventListener("abort", onAbort);
      }
    }
  }
}
