/**
 * A cap on the requests one credential may have in flight (a response counts until its body
 * has been sent or cancelled), so that one agent's token cannot take every worker of a
 * server. Above the cap the answer is 429 with `Retry-After`.
 *
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";
import type { ServerDeadlines } from "../schema/gateway_api.ts";
import { HttpError } from "../util/error.ts";
import { CAPABILITY_PREFIX, keyFromHeaders } from "./credentials.ts";
import { whenResponded } from "./served_request.ts";

/** Options of {@link concurrencyCap}. */
export interface ConcurrencyCapOptions {
  /** The key requests are counted under (e.g. the API key); null: not counted. */
  keyOf: (c: Context) => string | null;
  /** The cap of a key. */
  max: (key: string) => number;
}

/**
 * Calls `done` once `response`'s body has been fully read or cancelled (at once without a
 * body), and returns the response to send instead.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { onBodyDone } from "./concurrency.ts";
 * let done = false;
 * const res = onBodyDone(new Response("hello"), () => (done = true));
 * assert.equal(await res.text(), "hello");
 * assert.equal(done, true);
 * ```
 */
export function onBodyDone(response: Response, done: () => void): Response {
  const body = response.body;
  if (!body) {
    done();
    return response;
  }
  let called = false;
  const finish = () => {
    if (!called) {
      called = true;
      done();
    }
  };
  const reader = body.getReader();
  const wrapped = new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        const { value, done: end } = await reader.read();
        if (end) {
          finish();
          controller.close();
        } else {
          controller.enqueue(value);
        }
      } catch (error) {
        finish();
        controller.error(error);
      }
    },
    cancel(reason) {
      finish();
      return reader.cancel(reason);
    },
  });
  return new Response(wrapped, {
    status: response.status,
    statusText: response.statusText,
    headers: response.headers,
  });
}

/**
 * Middleware capping the requests in flight per key.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { Hono } from "hono";
 * import { concurrencyCap } from "./concurrency.ts";
 * import { HttpError } from "../util/error.ts";
 * const app = new Hono();
 * app.onError((err) => (err as HttpError).toResponse());
 * let release = () => {};
 * app.use(concurrencyCap({ keyOf: (c) => c.req.header("x-key") ?? null, max: () => 1 }));
 * app.get("/", () => new Promise<Response>((r) => (release = () => r(new Response("ok")))));
 * const first = app.request("/", { headers: { "x-key": "k" } });
 * const second = await app.request("/", { headers: { "x-key": "k" } });
 * assert.equal(second.status, 429);
 * release();
 * assert.equal(await (await first).text(), "ok");
 * ```
 */
export function concurrencyCap(options: ConcurrencyCapOptions): MiddlewareHandler {
  const inFlight = new Map<string, number>();
  const release = (key: string) => {
    const n = (inFlight.get(key) ?? 1) - 1;
    if (n <= 0) inFlight.delete(key);
    else inFlight.set(key, n);
  };
  return async (c, next) => {
    const key = options.keyOf(c);
    if (key === null) return await next();
    const n = inFlight.get(key) ?? 0;
    const max = options.max(key);
    if (n >= max) {
      throw new HttpError(
        429,
        `authorization: this key already has ${n} requests in flight (at most ${max})`,
        { headers: { "retry-after": "1" }, field: "authorization" },
      );
    }
    inFlight.set(key, n + 1);
    // Served by `serveGuarded`: released once the response is written or abandoned (its hooks
    // run once), with no stream wrapped around its body.
    if (whenResponded(c.req.raw, () => release(key))) return await next();
    let handedOff = false;
    try {
      await next();
      c.res = onBodyDone(c.res, () => release(key));
      handedOff = true;
    } finally {
      if (!handedOff) release(key);
    }
  };
}

/** Middleware capping requests in flight per API key (capability tokens get the lower cap). */
export function keyConcurrencyCap(deadlines: ServerDeadlines) {
  return concurrencyCap({
    keyOf: (c) => keyFromHeaders(c.req.raw.headers),
    max: (key) =>
      key.startsWith(CAPABILITY_PREFIX)
        ? deadlines.max_concurrent_per_token
        : deadlines.max_concurrent_per_key,
  });
}
