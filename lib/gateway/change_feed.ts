/**
 * The server-sent change feed both the gateway (`GET /v1/stream`) and the Live UI
 * (`GET /api/stream`) serve: every {@link Change} after a seq, as `id:`/`event: change` events
 * written with `hono/streaming`, with a keep-alive comment after 15 s without changes.
 *
 * @module
 */
import type { Context } from "hono";
import { HttpError } from "../util/error.ts";
import { sseStream } from "../http/sse.ts";
import type { Store } from "./store.ts";

/** Options of {@link changeFeedResponse}. */
export interface ChangeFeedOptions {
  /** Where the changes come from. */
  store: Pick<Store, "changesSince">;
  /** The feed also ends when one of these aborts (e.g. the server closing). */
  signals: Array<AbortSignal | undefined>;
  /** Comment lines sent first. */
  comment: string;
  /** Reconnection delay to tell browsers (`retry:`), if any. */
  retryMs?: number;
  /**
   * Waits for new changes (until `signal` aborts at the latest) and resolves with the
   * milliseconds to count as idle.
   */
  wait: (signal: AbortSignal) => Promise<number>;
}

/** The keep-alive period of an idle feed. */
const KEEP_ALIVE_MS = 15_000;
/** Changes read per poll. */
const BATCH = 500;

/**
 * Reads the `after` seq of a feed request (a query value or `Last-Event-ID`); 400 naming
 * `after` unless it is a non-negative integer.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseAfterSeq } from "./change_feed.ts";
 * assert.equal(parseAfterSeq("42"), 42);
 * assert.throws(() => parseAfterSeq("-1"), { status: 400 });
 * ```
 */
export function parseAfterSeq(raw: string): number {
  const after = Number(raw);
  if (!Number.isInteger(after) || after < 0) {
    throw new HttpError(400, "after: expected a non-negative integer seq", { field: "after" });
  }
  return after;
}

/**
 * The streaming `text/event-stream` response of a change feed, from the seq after the
 * request's `after` query or `Last-Event-ID` header (0 when neither; see {@link parseAfterSeq}).
 */
export function changeFeedResponse(c: Context, options: ChangeFeedOptions): Response {
  const { store, wait } = options;
  let after = parseAfterSeq(c.req.query("after") ?? c.req.header("last-event-id") ?? "0");
  const stop = new AbortController();
  const signals = [c.req.raw.signal, ...options.signals].filter((s): s is AbortSignal => !!s);
  const onAbort = () => stop.abort();
  for (const signal of signals) {
    if (signal.aborted) stop.abort();
    signal.addEventListener("abort", onAbort, { once: true });
  }
  return sseStream(c, async (stream) => {
    stream.onAbort(onAbort);
    try {
      const retry = options.retryMs === undefined ? "" : `retry: ${options.retryMs}\n`;
      await stream.write(`${retry}: ${options.comment}\n\n`);
      let idleMs = 0;
      while (!stop.signal.aborted && !stream.aborted) {
        const changes = await store.changesSince(after, BATCH);
        if (changes.length) {
          for (const change of changes) {
            await stream.writeSSE({
              id: String(change.seq),
              event: "change",
              data: JSON.stringify(change),
            });
          }
          after = changes[changes.length - 1].seq;
          idleMs = 0;
          continue;
        }
        idleMs += await wait(stop.signal);
        if (idleMs >= KEEP_ALIVE_MS) {
          idleMs = 0;
          await stream.write(": keep-alive\n\n");
        }
      }
    } finally {
      for (const signal of signals) signal.removeEventListener("abort", onAbort);
    }
  });
}
