/**
 * What `serveGuarded` knows of a request that the middleware after it can use instead of
 * wrapping a stream around each body (issue #29: every stream layer cost tens of µs per call):
 *
 * - a body the server collected whole, of a declared length it checked, needs no byte
 *   counting again (`bodyLimits` skips its counting stream; the server's own request deadline
 *   still bounds the time), and `readJson` decodes its bytes as they are instead of reading
 *   them back through the `Request`'s body stream (~14 µs a request, in Deno);
 * - the end of a response is seen by the server once its last byte is written (or the client
 *   left), so a per-key concurrency slot can be released then instead of by wrapping the
 *   response body in a stream that notices its end.
 *
 * Requests served any other way (Hono's `app.request`, `Deno.serve`), and a request rebuilt
 * around a new body, are unknown here: the middleware falls back to its streams.
 *
 * @module
 */

interface Served {
  /** A body collected whole before the handler ran; null when it streams. */
  collected: Uint8Array | null;
  /** Its size (kept once the bytes were taken). */
  collectedBytes: number | null;
  /** Called once, when the response has been written or abandoned. */
  done: Array<() => void>;
  finished: boolean;
}

const SERVED = new WeakMap<Request, Served>();

/**
 * Marks `request` as served by a server that calls the returned `finish` once its response has
 * been written or abandoned. `collected`: a body already collected whole, the same bytes the
 * request was built with.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import {
 *   collectedBodyBytes,
 *   markServed,
 *   takeCollectedBody,
 *   whenResponded,
 * } from "./served_request.ts";
 * const bytes = new TextEncoder().encode("{}");
 * const request = new Request("http://x/", { method: "POST", body: bytes });
 * const finish = markServed(request, bytes);
 * assert.equal(collectedBodyBytes(request), 2);
 * assert.equal(takeCollectedBody(request), bytes);
 * assert.equal(takeCollectedBody(request), null); // taken once
 * assert.equal(collectedBodyBytes(request), 2);
 * let released = 0;
 * assert.equal(whenResponded(request, () => released++), true);
 * finish();
 * finish();
 * assert.equal(released, 1);
 * // Too late: a hook added after the end runs at once.
 * assert.equal(whenResponded(request, () => released++), true);
 * assert.equal(released, 2);
 * ```
 */
export function markServed(request: Request, collected: Uint8Array | null): () => void {
  const served: Served = {
    collected,
    collectedBytes: collected?.byteLength ?? null,
    done: [],
    finished: false,
  };
  SERVED.set(request, served);
  return () => {
    if (served.finished) return;
    served.finished = true;
    for (const fn of served.done.splice(0)) {
      try {
        fn();
      } catch (error) {
        console.error("serve: a response hook failed:", error);
      }
    }
  };
}

/**
 * Runs `fn` once the response to `request` has been written or abandoned; false (and nothing
 * registered) when no server that reports this serves `request`.
 */
export function whenResponded(request: Request, fn: () => void): boolean {
  const served = SERVED.get(request);
  if (!served) return false;
  if (served.finished) fn();
  else served.done.push(fn);
  return true;
}

/**
 * Whether `request` is served by an engine of `serveGuarded`, which writes the answer's head
 * itself (the security headers among it: `./security_headers.ts`).
 */
export function isServed(request: Request): boolean {
  return SERVED.has(request);
}

/** The size of a body the server already collected whole, or null (unknown or streamed). */
export function collectedBodyBytes(request: Request): number | null {
  return SERVED.get(request)?.collectedBytes ?? null;
}

/**
 * The body the server collected whole, once: the bytes are handed over (a read of the body is
 * its only use) and a second call answers null, as does a request that was not so served or
 * whose body was already read through the `Request`.
 */
export function takeCollectedBody(request: Request): Uint8Array | null {
  const served = SERVED.get(request);
  const bytes = served?.collected ?? null;
  if (!bytes || request.bodyUsed) return null;
  served!.collected = null;
  return bytes;
}
