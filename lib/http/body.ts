/**
 * Request bodies, one rule for every reins server: bytes are counted while they stream in
 * (never buffered first), a declared `Content-Length` over the limit is refused before a byte
 * is read, the whole body must arrive within a deadline, and a client that goes away mid-body
 * is a 499, not a server error. JSON bodies are also refused when nested deeper than a limit,
 * checked iteratively before `JSON.parse` (whose recursion a hostile body could exhaust).
 *
 * @module
 */
import type { MiddlewareHandler } from "hono";
import { HttpError } from "../util/error.ts";
import { collectedBodyBytes, takeCollectedBody } from "./served_request.ts";

/** Limits of a request body. */
export interface BodyLimits {
  /** Most bytes (413 above, counted as they arrive). */
  maxBytes: number;
  /** The whole body must arrive within this many ms of the handler's start (408 after). */
  deadlineMs?: number;
}

/** The rest of a refused body is not read: the connection ends with the answer. */
const CLOSE = { connection: "close" };

/** Default time a client gets to send a whole body. */
export const DEFAULT_BODY_DEADLINE_MS = 60_000;

/** Default deepest JSON nesting a body may have. */
export const DEFAULT_MAX_JSON_DEPTH = 128;

/**
 * `stream`, cut with a 413 once more than `maxBytes` went through it, with a 408 when it has
 * not ended `deadlineMs` after the first read, and with a 499 when the client's side fails (an
 * {@link HttpError} the source fails with, the server's verdict on the body, passes through).
 * The source is cancelled in each case, so a never-ending body stops being read at the limit.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { limitStream } from "./body.ts";
 * const endless = new ReadableStream<Uint8Array>({
 *   pull: (c) => c.enqueue(new Uint8Array(1024)),
 * });
 * const limited = limitStream(endless, { maxBytes: 10_000 });
 * await assert.rejects(new Response(limited).arrayBuffer(), { status: 413 });
 * ```
 */
export function limitStream(
  stream: ReadableStream<Uint8Array>,
  limits: BodyLimits,
): ReadableStream<Uint8Array> {
  const reader = stream.getReader();
  const deadlineMs = limits.deadlineMs ?? DEFAULT_BODY_DEADLINE_MS;
  let size = 0;
  let timer: ReturnType<typeof setTimeout> | undefined;
  let timedOut = false;
  const fail = (controller: ReadableStreamDefaultController<Uint8Array>, error: HttpError) => {
    clearTimeout(timer);
    controller.error(error);
    reader.cancel(error).catch(() => {});
  };
  return new ReadableStream<Uint8Array>({
    start(controller) {
      timer = setTimeout(() => {
        timedOut = true;
        fail(
          controller,
          new HttpError(408, `body: not received within ${deadlineMs} ms`, {
            field: "body",
            headers: CLOSE,
          }),
        );
      }, deadlineMs);
    },
    async pull(controller) {
      let chunk: ReadableStreamReadResult<Uint8Array>;
      try {
        chunk = await reader.read();
      } catch (error) {
        if (timedOut) return;
        // The server's own verdict on the body (a malformed chunked encoding) stands.
        if (error instanceof HttpError) return fail(controller, error);
        return fail(
          controller,
          new HttpError(499, "body: the client closed the connection mid-body", {
            field: "body",
            cause: error,
          }),
        );
      }
      if (timedOut) return;
      if (chunk.done) {
        clearTimeout(timer);
        return controller.close();
      }
      size += chunk.value.byteLength;
      if (size > limits.maxBytes) {
        return fail(
          controller,
          new HttpError(413, `body: more than the limit of ${limits.maxBytes} bytes`, {
            field: "body",
            headers: CLOSE,
          }),
        );
      }
      controller.enqueue(chunk.value);
    },
    cancel(reason) {
      clearTimeout(timer);
      return reader.cancel(reason);
    },
  });
}

/**
 * Hono middleware applying {@link limitStream} to the request body, after refusing a declared
 * `Content-Length` over the limit at once. Handlers then read the body as usual (`c.req.json()`,
 * `c.req.text()`, `c.req.raw.body`) and meet the limit as a thrown {@link HttpError}.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { Hono } from "hono";
 * import { bodyLimits, readJson } from "./body.ts";
 * import { HttpError } from "../util/error.ts";
 * const app = new Hono();
 * app.onError((err) => err instanceof HttpError ? err.toResponse() : new Response(null, { status: 500 }));
 * app.post("/", bodyLimits({ maxBytes: 16 }), async (c) => c.json(await readJson(c.req.raw)));
 * const ok = await app.request("/", { method: "POST", body: '{"a":1}' });
 * assert.deepEqual(await ok.json(), { a: 1 });
 * const big = await app.request("/", { method: "POST", body: JSON.stringify({ a: "x".repeat(64) }) });
 * assert.equal(big.status, 413);
 * ```
 */
export function bodyLimits(limits: BodyLimits | (() => BodyLimits)): MiddlewareHandler {
  return async (c, next) => {
    const resolved = typeof limits === "function" ? limits() : limits;
    const raw = c.req.raw;
    // A body the server already collected whole, at a declared length within the limit, is not
    // counted a second time (the server's request deadline bounds its arrival). Checked before
    // `raw.body`: reading that getter wraps the bytes in a stream (~7 µs a request, in Deno).
    const collected = collectedBodyBytes(raw);
    if (collected !== null && collected <= resolved.maxBytes) return await next();
    if (raw.body) {
      const declared = collected ?? Number(raw.headers.get("content-length") ?? NaN);
      if (declared > resolved.maxBytes) {
        await raw.body.cancel().catch(() => {});
        throw new HttpError(
          413,
          `body: larger than ${resolved.maxBytes} bytes (Content-Length ${declared} exceeds ` +
            `the limit of ${resolved.maxBytes} bytes)`,
          { field: "body", headers: CLOSE },
        );
      }
      c.req.raw = new Request(raw, {
        body: limitStream(raw.body, resolved),
        // deno-lint-ignore no-explicit-any
        duplex: "half" as any,
      } as RequestInit);
    }
    await next();
  };
}

/**
 * The deepest nesting of `[`/`{` in a JSON text, counted without recursion (string contents
 * are skipped), stopping early once past `stopAbove`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { jsonDepth } from "./body.ts";
 * assert.equal(jsonDepth('{"a": [1, {"b": "[[["}]}'), 3);
 * assert.equal(jsonDepth('["\\\\", ["x\\"[{"]]'), 2); // escaped quotes, escaped backslashes
 * ```
 */
export function jsonDepth(text: string, stopAbove = Infinity): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  // Outside strings, a long run of plain characters (the digits and commas of a token-id array)
  // is skipped by a native search once 32 of them were scanned by hand: a 92 KB model call's
  // body took 384 µs by hand, 27 µs so, while a short or structure-dense text stays by hand.
  let plainRun = 0;
  // Inside a string, far from escapes, jump to its end with native searches (a 1.5 MB prompt is
  // one string: ~5.5 ms by hand, ~0.12 ms so); near an escape, scan the next 8 characters by
  // hand, so that an escape-dense string costs about what it did. (A window of 64 kept a real
  // conversation, an escape every ~40 characters, by hand throughout: its 63 KB and 236 KB bodies
  // scanned in 265 and 1,046 µs, with 8 in 109 and 402-693 µs; a string of escapes alone,
  // 825-1,322 against 1,204-1,422 µs for 400 KB.) The next quote and backslash positions are
  // cached until passed: every character is searched at most once, the scan stays linear.
  let byHand = 0;
  let nextQuote = -1;
  let nextSlash = -1;
  for (let i = 0; i < text.length; i++) {
    if (inString && byHand === 0) {
      if (nextQuote < i) {
        nextQuote = text.indexOf('"', i);
        if (nextQuote < 0) return deepest; // never closed: JSON.parse reports it
      }
      if (nextSlash < i) {
        const slash = text.indexOf("\\", i);
        nextSlash = slash < 0 ? Infinity : slash;
      }
      if (nextQuote < nextSlash) {
        i = nextQuote;
        inString = false;
      } else {
        i = nextSlash + 1; // the escaped character
        byHand = 8;
      }
      continue;
    }
    const ch = text.charCodeAt(i);
    if (inString) {
      byHand--;
      if (ch === 92 /* \ */) {
        i++;
        byHand = 8;
      } else if (ch === 34 /* " */) {
        inString = false;
        byHand = 0;
      }
    } else if (ch === 34) {
      inString = true;
      plainRun = 0;
    } else if (ch === 91 /* [ */ || ch === 123 /* { */) {
      plainRun = 0;
      if (++depth > deepest) {
        deepest = depth;
        if (deepest > stopAbove) return deepest;
      }
    } else if (ch === 93 /* ] */ || ch === 125 /* } */) {
      plainRun = 0;
      depth--;
    } else if (++plainRun === 32) {
      STRUCTURE.lastIndex = i + 1;
      if (!STRUCTURE.test(text)) return deepest;
      i = STRUCTURE.lastIndex - 2; // the loop goes on at the quote or bracket found
      plainRun = 0;
    }
  }
  return deepest;
}

/**
 * The next quote or bracket from `lastIndex` on. (A sticky negated class, `[^"[\]{}]*`, runs
 * ten times slower in V8's irregexp: this class is searched for, that one matched char by char.)
 */
const STRUCTURE = /["[\]{}]/g;

const utf8 = new TextDecoder();

/**
 * Parses a JSON body: 400 naming `body` when empty, malformed (the message says `malformed`,
 * default "malformed JSON") or nested deeper than `maxDepth`; the body's own limit errors
 * (413/408/499) pass through.
 */
export async function readJson(
  request: Request,
  options: { maxDepth?: number; malformed?: string } = {},
): Promise<unknown> {
  // A body our server collected whole is decoded from its bytes as `text()` would (UTF-8,
  // a leading BOM dropped, malformed bytes replaced), without a stream around them.
  const collected = takeCollectedBody(request);
  const text = collected ? utf8.decode(collected) : await request.text();
  if (!text.trim()) {
    throw new HttpError(400, "body: empty, expected a JSON object", { field: "body" });
  }
  const maxDepth = options.maxDepth ?? DEFAULT_MAX_JSON_DEPTH;
  const depth = jsonDepth(text, maxDepth);
  if (depth > maxDepth) {
    throw new HttpError(400, `body: JSON nested deeper than ${maxDepth} levels`, {
      field: "body",
    });
  }
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new HttpError(
      400,
      `body: ${options.malformed ?? "malformed JSON"} (${
        err instanceof Error ? err.message : String(err)
      })`,
      { field: "body" },
    );
  }
}
