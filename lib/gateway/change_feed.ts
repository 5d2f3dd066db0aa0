/**
 * The server-sent change feed both the gateway (`GET /v1/stream`) and the Live UI
 * (`GET /api/stream`) serve: every {@link Change} after a seq, as `id:`/`event: change` frames,
 * with a keep-alive comment after 15 s without changes.
 *
 * @module
 */
import { ValidationError } from "../schema.ts";
import type { Store } from "./store.ts";

/** Options of {@link changeFeedResponse}. */
export interface ChangeFeedOptions {
  /** Where the changes come from. */
  store: Pick<Store, "changesSince">;
  /** The seq after which to start (see {@link parseAfterSeq}). */
  after: number;
  /** The feed ends when any of these aborts (the request's signal, the server's closing). */
  signals: Array<AbortSignal | undefined>;
  /** The first frame (comments, a `retry:` field). */
  preamble: string;
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
 */
export function parseAfterSeq(raw: string): number {
  const after = Number(raw);
  if (!Number.isInteger(after) || after < 0) {
    throw new ValidationError("after", ["after: expected a non-negative integer seq"]);
  }
  return after;
}

/** The streaming `text/event-stream` response of a change feed. */
export function changeFeedResponse(options: ChangeFeedOptions): Response {
  const { store, preamble, wait } = options;
  const signals = options.signals.filter((s): s is AbortSignal => s !== undefined);
  let after = options.after;
  const abort = new AbortController();
  const stop = () => abort.abort();
  for (const signal of signals) signal.addEventListener("abort", stop, { once: true });
  abort.signal.addEventListener("abort", () => {
    for (const signal of signals) signal.removeEventListener("abort", stop);
  }, { once: true });
  const encoder = new TextEncoder();
  let idleMs = 0;
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      controller.enqueue(encoder.encode(preamble));
    },
    async pull(controller) {
      while (!abort.signal.aborted) {
        const changes = await store.changesSince(after, BATCH);
        if (changes.length) {
          const text = changes.map((ch) =>
            `id: ${ch.seq}\nevent: change\ndata: ${JSON.stringify(ch)}\n\n`
          ).join("");
          after = changes[changes.length - 1].seq;
          controller.enqueue(encoder.encode(text));
          idleMs = 0;
          return;
        }
        idleMs += await wait(abort.signal);
        if (idleMs >= KEEP_ALIVE_MS) {
          idleMs = 0;
          controller.enqueue(encoder.encode(": keep-alive\n\n"));
          return;
        }
      }
      controller.close();
    },
    cancel() {
      abort.abort();
    },
  });
  return new Response(body, {
    headers: {
      "content-type": "text/event-stream",
      "cache-control": "no-cache",
      "x-accel-buffering": "no",
    },
  });
}
