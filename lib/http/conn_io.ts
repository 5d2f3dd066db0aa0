/**
 * The reading and writing half of `./conn_serve.ts`: the bytes of one connection (one read
 * posted at a time), a request body collected whole or streamed (chunked or of a declared
 * length), and a `Response` written as HTTP/1.1.
 *
 * @module
 */
import { STATUS_CODES } from "node:http";
import { chunkSize, latin1 } from "./http1.ts";
import { clientLeft, plainAnswerText } from "./serve_types.ts";
import { HttpError } from "../util/error.ts";
import { isSecurityHeader, securityHeaderLines } from "./security_headers.ts";

/** A chunked body the client framed wrongly: the handler's read of it fails with a 400. */
const malformedChunk = (what: string) =>
  new HttpError(400, `body: malformed chunked encoding (${what})`, { field: "body" });
/** A chunk-size line (its extensions) or trailers past {@link MAX_CHUNK_LINE}: 413. */
const chunkTooLong = (what: string) =>
  new HttpError(
    413,
    `body: ${what} of the chunked encoding is longer than ${MAX_CHUNK_LINE} bytes`,
    {
      field: "body",
    },
  );

const encoder = new TextEncoder();
/** Longest chunk-size line or trailer line of a chunked body. */
const MAX_CHUNK_LINE = 4_096;
/** Largest piece handed to a streamed body at once. */
const STREAM_PIECE = 64 * 1024;

/**
 * A connection's one deadline: `expire` runs once `at` (ms since the epoch) has passed. The
 * server checks every clock on one interval (as Node's `connectionsCheckingInterval` does): a
 * timer per request cost ~10 µs of CPU, more than the parsing.
 */
export interface Clock {
  at: number;
  expire: () => void;
}

/** The bytes read from one connection and not yet used; at most one read is posted at a time. */
export class Inbound {
  #buf = new Uint8Array(16 * 1024);
  #start = 0;
  #end = 0;
  #reading: Promise<boolean> | null = null;
  ended = false;

  constructor(readonly conn: Deno.Conn) {}

  get size(): number {
    return this.#end - this.#start;
  }

  view(): Uint8Array {
    return this.#buf.subarray(this.#start, this.#end);
  }

  consume(n: number): void {
    this.#start += n;
    if (this.#start === this.#end) this.#start = this.#end = 0;
  }

  /** Moves as many buffered bytes as fit into `target` from `at` on; answers how many. */
  moveInto(target: Uint8Array, at: number): number {
    const n = Math.min(this.size, target.byteLength - at);
    target.set(this.#buf.subarray(this.#start, this.#start + n), at);
    this.consume(n);
    return n;
  }

  /** Takes up to `n` buffered bytes (a copy). */
  take(n: number): Uint8Array {
    const out = this.#buf.slice(this.#start, this.#start + Math.min(n, this.size));
    this.consume(out.byteLength);
    return out;
  }

  /** Reads once more (or joins the read already posted); false at the end of the stream. */
  fill(): Promise<boolean> {
    if (this.#reading) return this.#reading;
    if (this.ended) return Promise.resolve(false);
    if (this.#end === this.#buf.length) {
      if (this.#start > 0) {
        this.#buf.copyWithin(0, this.#start, this.#end);
        this.#end -= this.#start;
        this.#start = 0;
      } else {
        const grown = new Uint8Array(this.#buf.length * 2);
        grown.set(this.#buf);
        this.#buf = grown;
      }
    }
    const target = this.#buf.subarray(this.#end);
    this.#reading = this.conn.read(target).then((n) => {
      this.#reading = null;
      if (n === null) {
        this.ended = true;
        return false;
      }
      this.#end += n;
      return true;
    }, () => {
      this.#reading = null;
      this.ended = true;
      return false;
    });
    return this.#reading;
  }
}

export async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let at = 0;
  while (at < bytes.byteLength) at += await conn.write(bytes.subarray(at));
}

/** {@link plainAnswerText}, as bytes. */
export function plainAnswer(status: number): Uint8Array {
  return encoder.encode(plainAnswerText(status));
}

const NO_BODY_STATUS = new Set([204, 304]);

/**
 * Writes `response` as the answer to a `method` request through `write` (all of the bytes, or a
 * rejection); resolves true when all of it went out.
 * `connectionLine` says in the head whether the connection ends after it (`connection: close`) or
 * how long it stays open idle (`keep-alive: timeout=N`, as `node:http` says: a client that pools
 * connections, undici, then stops reusing one before the server closes it under a request).
 */
export async function writeResponse(
  write: (bytes: Uint8Array) => Promise<void>,
  response: Response,
  method: string,
  connectionLine: string,
  gone: AbortSignal,
): Promise<boolean> {
  const status = response.status;
  let head = `HTTP/1.1 ${status} ${response.statusText || STATUS_CODES[status] || "Unknown"}\r\n`;
  let json = false;
  let length: string | null = null;
  let secured = null as Set<string> | null;
  response.headers.forEach((value, name) => {
    // Framing is ours: the handler's length is used only for a streamed body of that length.
    if (name === "content-length") return void (length = value);
    if (name === "transfer-encoding" || name === "connection" || name === "keep-alive") return;
    if (name === "content-type") json = value.startsWith("application/json");
    else if (isSecurityHeader(name)) (secured ??= new Set()).add(name);
    head += `${name}: ${value}\r\n`;
  });
  head += securityHeaderLines(secured) + connectionLine;
  // 1xx, 204 and 304 answers have no body and no length; a HEAD answer has a length, no body.
  const noBodyStatus = NO_BODY_STATUS.has(status) || status < 200;
  const bodiless = method === "HEAD" || noBodyStatus;
  // A JSON answer is already whole in memory: one write, with its length. Read without the
  // `body` getter, which would first wrap the bytes in a stream (~3.5 µs an answer, in Deno);
  // a null body reads as empty.
  if (json) {
    const bytes = new Uint8Array(await response.arrayBuffer());
    if (gone.aborted) return false;
    if (noBodyStatus) {
      await write(encoder.encode(head + "\r\n"));
      return true;
    }
    head += `content-length: ${bytes.byteLength}\r\n\r\n`;
    if (bodiless) {
      await write(encoder.encode(head));
      return true;
    }
    const whole = new Uint8Array(head.length + bytes.byteLength);
    encoder.encodeInto(head, whole);
    whole.set(bytes, head.length);
    await write(whole);
    return true;
  }
  const body = response.body;
  if (!body || bodiless) {
    if (body) await body.cancel().catch(() => {});
    if (!noBodyStatus && (!body || length !== null)) {
      head += `content-length: ${body ? length : 0}\r\n`;
    }
    await write(encoder.encode(head + "\r\n"));
    return true;
  }
  const chunked = length === null;
  head += chunked ? "transfer-encoding: chunked\r\n\r\n" : `content-length: ${length}\r\n\r\n`;
  await write(encoder.encode(head));
  const reader = body.getReader();
  const stop = () => void reader.cancel(gone.reason).catch(() => {});
  gone.addEventListener("abort", stop, { once: true });
  try {
    let sent = 0;
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (gone.aborted) return false;
      if (value.byteLength === 0) continue;
      sent += value.byteLength;
      if (chunked) {
        const size = encoder.encode(`${value.byteLength.toString(16)}\r\n`);
        const piece = new Uint8Array(size.byteLength + value.byteLength + 2);
        piece.set(size);
        piece.set(value, size.byteLength);
        piece.set([13, 10], size.byteLength + value.byteLength);
        await write(piece);
      } else await write(value);
    }
    if (chunked) await write(encoder.encode("0\r\n\r\n"));
    // A body shorter than the length its head declared cannot end a message: the caller closes.
    return chunked || sent === Number(length);
  } finally {
    gone.removeEventListener("abort", stop);
  }
}

/** The body of a declared `length`, whole; "late" past `deadlineMs`, "gone" if the client left. */
export async function collect(
  inbound: Inbound,
  length: number,
  deadlineMs: number,
  clock: Clock,
): Promise<Uint8Array<ArrayBuffer> | "late" | "gone"> {
  const whole = new Uint8Array(length);
  let at = 0;
  // Most bodies came in with their head: those need no deadline.
  let late: PromiseWithResolvers<"late"> | null = null;
  try {
    for (;;) {
      at += inbound.moveInto(whole, at);
      if (at === length) return whole;
      if (!late) {
        const armed = Promise.withResolvers<"late">();
        clock.at = Date.now() + deadlineMs;
        clock.expire = () => armed.resolve("late");
        late = armed;
      }
      const more = await Promise.race([inbound.fill(), late.promise]);
      if (more === "late") return "late";
      if (!more) return "gone";
    }
  } finally {
    clock.at = Infinity;
  }
}

/** How a streamed body fails: the server's errors by default, a client's own for a response. */
export interface BodyErrors {
  /** The peer closed the connection before the body's end. */
  early: () => Error;
  /** The chunked framing is wrong (`what` says how). */
  malformed: (what: string) => Error;
  /** A chunk-size line or the trailers are longer than 4 KiB (`what` names which). */
  tooLong: (what: string) => Error;
}

const REQUEST_BODY_ERRORS: BodyErrors = {
  early: clientLeft,
  malformed: malformedChunk,
  tooLong: chunkTooLong,
};

/**
 * A body streamed from the connection: `length` bytes, or chunked when null (a request's, or
 * with `options.errors` a response's). `ended` is called once it has been read to its end;
 * `leave` when the peer goes first; `options.cancelled` when the reader cancels the stream.
 */
export function streamBody(
  inbound: Inbound,
  length: number | null,
  ended: () => void,
  leave: () => void,
  options: { errors?: BodyErrors; cancelled?: () => void } = {},
): ReadableStream<Uint8Array> {
  const { early, malformed: malformedChunk, tooLong: chunkTooLong } = options.errors ??
    REQUEST_BODY_ERRORS;
  let remaining = length ?? 0;
  let inChunk = length !== null;
  let finished = false;
  /** A whole line (without CRLF), or null when the client left; throws past MAX_CHUNK_LINE. */
  const line = async (what: string): Promise<string | null> => {
    for (;;) {
      const view = inbound.view();
      const lf = view.indexOf(10);
      if (lf > MAX_CHUNK_LINE) throw chunkTooLong(what);
      if (lf >= 0) {
        if (lf === 0 || view[lf - 1] !== 13) throw malformedChunk("a line ends in LF without CR");
        const text = latin1(view.subarray(0, lf - 1));
        inbound.consume(lf + 1);
        return text;
      }
      if (view.byteLength > MAX_CHUNK_LINE) throw chunkTooLong(what);
      if (!await inbound.fill()) return null;
    }
  };
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      try {
        for (;;) {
          if (finished) return;
          if (inChunk && remaining > 0) {
            if (inbound.size === 0 && !await inbound.fill()) {
              leave();
              return controller.error(early());
            }
            const piece = inbound.take(Math.min(remaining, STREAM_PIECE));
            remaining -= piece.byteLength;
            controller.enqueue(piece);
            return;
          }
          if (length !== null) {
            // A declared length, all read.
            finished = true;
            ended();
            return controller.close();
          }
          if (inChunk) {
            // The CRLF after a chunk's data.
            const after = await line("the line after a chunk");
            if (after === null) throw early();
            if (after !== "") throw malformedChunk("no CRLF after a chunk");
            inChunk = false;
          }
          const sizeLine = await line("a chunk-size line");
          if (sizeLine === null) throw early();
          const size = chunkSize(sizeLine);
          if (size === null) throw malformedChunk("a malformed chunk size");
          if (size > 0) {
            remaining = size;
            inChunk = true;
            continue;
          }
          // The last chunk: trailers (ignored) up to an empty line.
          let trailerBytes = 0;
          for (;;) {
            const trailer = await line("a trailer line");
            if (trailer === null) throw early();
            if (trailer === "") break;
            trailerBytes += trailer.length;
            if (trailerBytes > MAX_CHUNK_LINE) {
              throw chunkTooLong("the trailers");
            }
          }
          finished = true;
          ended();
          return controller.close();
        }
      } catch (error) {
        finished = true;
        if (error instanceof DOMException && error.name === "AbortError") leave();
        controller.error(error);
      }
    },
    cancel() {
      finished = true;
      options.cancelled?.();
    },
  }, { highWaterMark: 0 });
}
