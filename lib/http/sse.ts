/**
 * Server-sent events, both ways: {@link readSse} parses any `text/event-stream` body with
 * `eventsource-parser` (LF, CRLF and CR line ends, multi-line data, comments), and
 * {@link sseStream} writes one with `hono/streaming`.
 *
 * @module
 */
import type { Context } from "hono";
import { type SSEStreamingApi, streamSSE } from "hono/streaming";
import { createParser, type EventSourceMessage } from "eventsource-parser";

export type { EventSourceMessage };

/** Options of {@link readSse}. */
export interface ReadSseOptions {
  /** Called for every chunk read (e.g. to renew an idle timeout). */
  onChunk?: () => void;
  /** Called for each comment line (`: keep-alive`). */
  onComment?: (comment: string) => void;
  /** Most characters one event may hold (the stream errors above; default 64 MiB). */
  maxEventChars?: number;
}

/**
 * The events of a `text/event-stream` body, in order. Stopping the iteration cancels the body.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readSse } from "./sse.ts";
 * const body = new Response("id: 1\r\nevent: change\r\ndata: {\"a\":1}\r\n\r\ndata: x\n\n").body!;
 * const events = [];
 * for await (const e of readSse(body)) events.push(e);
 * assert.deepEqual(events, [
 *   { id: "1", event: "change", data: '{"a":1}' },
 *   { id: undefined, event: undefined, data: "x" },
 * ]);
 * ```
 */
export async function* readSse(
  body: ReadableStream<Uint8Array>,
  options: ReadSseOptions = {},
): AsyncGenerator<EventSourceMessage> {
  const queue: EventSourceMessage[] = [];
  let failure: Error | null = null;
  const parser = createParser({
    onEvent: (event) => queue.push(event),
    ...(options.onComment ? { onComment: options.onComment } : {}),
    onError: (error) => {
      failure = error;
    },
    maxBufferSize: options.maxEventChars ?? 64 * 1024 * 1024,
  });
  const reader = body.getReader();
  const decoder = new TextDecoder();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) {
        parser.feed(decoder.decode());
        parser.reset({ consume: true });
      } else {
        options.onChunk?.();
        parser.feed(decoder.decode(value, { stream: true }));
      }
      if (failure) throw failure;
      while (queue.length) yield queue.shift()!;
      if (done) return;
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

/**
 * A `text/event-stream` response whose events `run` writes; `run` should return when
 * `stream.aborted` turns true (the client went away) or its own work ends. Errors thrown by
 * `run` are logged and end the stream.
 */
export function sseStream(
  c: Context,
  run: (stream: SSEStreamingApi) => Promise<void>,
): Response {
  const response = streamSSE(c, run, (error) => {
    console.error("sse: stream failed:", error.message);
    return Promise.resolve();
  });
  response.headers.set("x-accel-buffering", "no");
  // Hop-by-hop headers are the server's business.
  response.headers.delete("transfer-encoding");
  response.headers.delete("connection");
  return response;
}
