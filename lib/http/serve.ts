/**
 * `Deno.serve` with connection deadlines. `Deno.serve` has no header-read, body-read or idle
 * timeout: a client that sends half a request holds its connection (and the memory behind
 * it) forever. {@link serveGuarded} puts a small relay in front of it: every connection is
 * accepted here, its request framing (head, `Content-Length` or chunked body) is followed
 * byte by byte, and it is closed when a head takes longer than `headers_timeout_ms`, a body
 * longer than `body_timeout_ms` (plus a grace period, so the app's own 408 goes out first),
 * or when it sits idle with no request in flight for `idle_timeout_ms`. A head larger than
 * `max_header_bytes` is answered 431. The server itself listens on a private Unix socket.
 *
 * @module
 */
import { onBodyDone } from "./concurrency.ts";
import { sleep } from "../util/time.ts";

/** Deadlines of {@link serveGuarded} (see `ServerDeadlinesSchema`). */
export interface ConnectionDeadlines {
  headers_timeout_ms: number;
  body_timeout_ms: number;
  idle_timeout_ms: number;
  max_header_bytes: number;
}

/** Options of {@link serveGuarded}. */
export interface GuardedServeOptions {
  hostname: string;
  port: number;
  deadlines: ConnectionDeadlines;
  /** Extra time past `body_timeout_ms` before the relay cuts a connection (default 2 000). */
  bodyGraceMs?: number;
}

/** A running guarded server. */
export interface GuardedServer {
  addr: Deno.NetAddr;
  /** Connections open now (for tests and benches). */
  readonly connections: number;
  /** Connections closed by a deadline so far. */
  readonly timedOut: number;
  /** Stops accepting, lets requests in flight finish, then closes every connection. */
  shutdown(): Promise<void>;
}

/** The header the relay adds so the server knows which connection a request came on. */
const CONN_HEADER = "x-reins-conn";
const CONN_HEADER_BYTES = new TextEncoder().encode(CONN_HEADER);
const READ_BUFFER = 16 * 1024;

const latin1 = new TextDecoder("latin1");
const ascii = new TextEncoder();

function simpleResponse(status: string): Uint8Array {
  return ascii.encode(`HTTP/1.1 ${status}\r\nconnection: close\r\ncontent-length: 0\r\n\r\n`);
}

/** Index just past the blank line ending a head, or -1. */
function headEnd(buf: Uint8Array, length: number): { at: number; terminator: number } | null {
  for (let i = 0; i < length; i++) {
    if (buf[i] !== 10) continue;
    if (i >= 1 && buf[i - 1] === 10) return { at: i + 1, terminator: 2 };
    if (i >= 3 && buf[i - 1] === 13 && buf[i - 2] === 10 && buf[i - 3] === 13) {
      return { at: i + 1, terminator: 4 };
    }
  }
  return null;
}

type Framing =
  | { kind: "none" }
  | { kind: "length"; remaining: number }
  | { kind: "chunked" }
  | { kind: "opaque" };

function framingOf(head: string): Framing | "bad" {
  const lines = head.split(/\r?\n/);
  let length: number | null = null;
  let chunked = false;
  let upgrade = false;
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    if (colon <= 0) continue;
    const name = line.slice(0, colon).trim().toLowerCase();
    const value = line.slice(colon + 1).trim();
    if (name === CONN_HEADER) return "bad";
    if (name === "content-length") {
      const n = Number(value);
      if (!/^\d+$/.test(value) || (length !== null && length !== n)) return "bad";
      length = n;
    } else if (name === "transfer-encoding") {
      chunked = /(^|,)\s*chunked\s*$/i.test(value);
      if (!chunked) return "bad";
    } else if (name === "upgrade") {
      upgrade = true;
    }
  }
  if (upgrade || /^CONNECT /i.test(lines[0])) return { kind: "opaque" };
  if (chunked) return { kind: "chunked" };
  if (length !== null && length > 0) return { kind: "length", remaining: length };
  return { kind: "none" };
}

/** Follows a chunked body; `feed` returns how many bytes of `buf` belong to it. */
class ChunkedBody {
  #state: "size" | "data" | "data_end" | "trailer" = "size";
  #line = "";
  #remaining = 0;
  done = false;
  bad = false;

  feed(buf: Uint8Array, from: number, to: number): number {
    let i = from;
    while (i < to && !this.done && !this.bad) {
      if (this.#state === "data") {
        const take = Math.min(this.#remaining, to - i);
        i += take;
        this.#remaining -= take;
        if (this.#remaining === 0) this.#state = "data_end";
        continue;
      }
      const byte = buf[i++];
      if (byte !== 10) {
        if (this.#state !== "data_end") this.#line += String.fromCharCode(byte);
        if (this.#line.length > 4096) this.bad = true;
        continue;
      }
      const line = this.#line.replace(/\r$/, "");
      this.#line = "";
      if (this.#state === "data_end") {
        this.#state = "size";
      } else if (this.#state === "size") {
        const size = parseInt(line.split(";")[0].trim(), 16);
        if (!Number.isFinite(size) || size < 0) {
          this.bad = true;
        } else if (size === 0) {
          this.#state = "trailer";
        } else {
          this.#remaining = size;
          this.#state = "data";
        }
      } else if (line === "") {
        this.done = true;
      }
    }
    return i - from;
  }
}

/**
 * Serves `handler` behind connection deadlines.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { serveGuarded } from "./serve.ts";
 * const server = await serveGuarded(() => new Response("ok"), {
 *   hostname: "127.0.0.1",
 *   port: 0,
 *   deadlines: {
 *     headers_timeout_ms: 1_000, body_timeout_ms: 1_000, idle_timeout_ms: 1_000,
 *     max_header_bytes: 8_192,
 *   },
 * });
 * const res = await fetch(`http://127.0.0.1:${server.addr.port}/`);
 * assert.equal(await res.text(), "ok");
 * await server.shutdown();
 * ```
 */
export async function serveGuarded(
  handler: (request: Request) => Response | Promise<Response>,
  options: GuardedServeOptions,
): Promise<GuardedServer> {
  const { deadlines } = options;
  const bodyGraceMs = options.bodyGraceMs ?? 2_000;
  const dir = await Deno.makeTempDir({ prefix: "reins-serve-" });
  await Deno.chmod(dir, 0o700);
  const path = `${dir}/http.sock`;
  const relays = new Map<number, Relay>();
  const running = new Set<Promise<void>>();
  let nextId = 1;
  let timedOut = 0;

  const inner = Deno.serve({ path, onListen: () => {} }, async (served) => {
    const relay = relays.get(Number(served.headers.get(CONN_HEADER)));
    // `Deno.serve` notices a client that leaves only when it writes to it: a handler waiting
    // on an upstream would run on for nothing. The relay sees the client leave, so its signal
    // joins the request's.
    const request = relay
      ? new Request(served, { signal: AbortSignal.any([served.signal, relay.clientGone]) })
      : served;
    try {
      const response = await handler(request);
      // A refused body (413, 408): the rest is not read, the connection ends with the answer.
      if (relay && response.headers.get("connection") === "close") relay.closeAfterResponse();
      return relay ? onBodyDone(response, () => relay.responseDone()) : response;
    } catch (error) {
      relay?.responseDone();
      throw error;
    }
  });

  const listener = Deno.listen({ hostname: options.hostname, port: options.port });
  const accepting = (async () => {
    for (;;) {
      let conn: Deno.TcpConn;
      try {
        conn = await listener.accept();
      } catch {
        return; // listener closed
      }
      // Small frames (SSE tokens) go out at once: Nagle plus delayed ACKs would hold them ~40 ms.
      conn.setNoDelay(true);
      const id = nextId++;
      const relay = new Relay(id, conn, path, deadlines, bodyGraceMs, () => timedOut++);
      relays.set(id, relay);
      const run = relay.run().finally(() => {
        relays.delete(id);
        running.delete(run);
      });
      running.add(run);
    }
  })();

  return {
    addr: listener.addr as Deno.NetAddr,
    get connections() {
      return relays.size;
    },
    get timedOut() {
      return timedOut;
    },
    async shutdown() {
      listener.close();
      await accepting;
      await inner.shutdown();
      // The server has closed its side: let the relays deliver what it wrote, then cut.
      const grace = new AbortController();
      await Promise.race([Promise.all(running), sleep(1_000, grace.signal)]);
      grace.abort();
      for (const relay of relays.values()) relay.close();
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    },
  };
}

/** One client connection and its relay to the server. */
class Relay {
  readonly #id: number;
  readonly #client: Deno.TcpConn;
  readonly #path: string;
  readonly #deadlines: ConnectionDeadlines;
  readonly #bodyGraceMs: number;
  readonly #onTimeout: () => void;
  #upstream: Deno.UnixConn | null = null;
  readonly #gone = new AbortController();
  #closed = false;
  #closing = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  /** Requests forwarded whose responses have not finished. */
  #pending = 0;
  #phase: "head" | "body" | "opaque" = "head";
  #head: Uint8Array = new Uint8Array(0);
  #framing: Framing = { kind: "none" };
  #chunked: ChunkedBody | null = null;

  constructor(
    id: number,
    client: Deno.TcpConn,
    path: string,
    deadlines: ConnectionDeadlines,
    bodyGraceMs: number,
    onTimeout: () => void,
  ) {
    this.#id = id;
    this.#client = client;
    this.#path = path;
    this.#deadlines = deadlines;
    this.#bodyGraceMs = bodyGraceMs;
    this.#onTimeout = onTimeout;
  }

  async run(): Promise<void> {
    // A fresh connection must start its first head within the header deadline.
    this.#arm(this.#deadlines.headers_timeout_ms, "408 Request Timeout");
    try {
      this.#upstream = await Deno.connect({ transport: "unix", path: this.#path });
    } catch {
      this.close();
      return;
    }
    const toClient = this.#pumpToClient(this.#upstream);
    await this.#pumpFromClient(this.#upstream);
    await toClient;
    this.close();
  }

  /** Aborted once the client has closed its side or the connection ended. */
  get clientGone(): AbortSignal {
    return this.#gone.signal;
  }

  #leave(): void {
    this.#gone.abort(new DOMException("the client closed the connection", "AbortError"));
  }

  /** Called by the server when one response's body has been sent. */
  responseDone(): void {
    this.#pending = Math.max(0, this.#pending - 1);
    // Give the relay a moment to pass the answer on before the connection ends.
    if (this.#closing) setTimeout(() => this.close(), 200);
    else this.#maybeIdle();
  }

  /** Drops what the client still sends and ends the connection once the answer is out. */
  closeAfterResponse(): void {
    this.#closing = true;
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    clearTimeout(this.#timer);
    this.#leave();
    try {
      this.#client.close();
    } catch { /* already closed */ }
    try {
      this.#upstream?.close();
    } catch { /* already closed */ }
  }

  #arm(ms: number, answer: string | null): void {
    clearTimeout(this.#timer);
    this.#timer = setTimeout(async () => {
      if (this.#closed) return;
      this.#onTimeout();
      if (answer && this.#pending === 0) {
        await this.#client.write(simpleResponse(answer)).catch(() => {});
      }
      this.close();
    }, ms);
  }

  #maybeIdle(): void {
    if (this.#closed) return;
    if (this.#phase === "head" && this.#head.length === 0 && this.#pending === 0) {
      this.#arm(this.#deadlines.idle_timeout_ms, null);
    } else if (this.#phase === "head" && this.#head.length === 0) {
      clearTimeout(this.#timer);
    }
  }

  async #pumpToClient(upstream: Deno.UnixConn): Promise<void> {
    const buf = new Uint8Array(READ_BUFFER);
    try {
      for (;;) {
        const n = await upstream.read(buf);
        if (n === null) break;
        await writeAll(this.#client, buf.subarray(0, n));
      }
    } catch { /* either side went away */ }
    this.close();
  }

  async #pumpFromClient(upstream: Deno.UnixConn): Promise<void> {
    const buf = new Uint8Array(READ_BUFFER);
    try {
      for (;;) {
        const n = await this.#client.read(buf);
        if (n === null) {
          // HTTP/1.1 clients do not half-close and wait: EOF means the client left.
          this.#leave();
          await upstream.closeWrite().catch(() => {});
          return;
        }
        if (!await this.#forward(upstream, buf.subarray(0, n))) return;
      }
    } catch {
      this.close();
    }
  }

  /** Forwards client bytes, following the framing; false once the connection must end. */
  async #forward(upstream: Deno.UnixConn, bytes: Uint8Array): Promise<boolean> {
    if (this.#closing) return true;
    let at = 0;
    while (at < bytes.length) {
      if (this.#phase === "opaque") {
        await writeAll(upstream, bytes.subarray(at));
        return true;
      }
      if (this.#phase === "body") {
        at += this.#consumeBody(bytes, at);
        await writeAll(upstream, bytes.subarray(at - this.#lastBodyBytes, at));
        if (this.#chunked?.bad) {
          this.close();
          return false;
        }
        continue;
      }
      // A head: collect it (the first byte starts the header deadline).
      if (this.#head.length === 0) {
        this.#arm(this.#deadlines.headers_timeout_ms, "408 Request Timeout");
      }
      const merged = concat(this.#head, bytes.subarray(at));
      const end = headEnd(merged, Math.min(merged.length, this.#deadlines.max_header_bytes));
      if (!end) {
        if (merged.length >= this.#deadlines.max_header_bytes) {
          await this.#client.write(simpleResponse("431 Request Header Fields Too Large"))
            .catch(() => {});
          this.close();
          return false;
        }
        this.#head = merged;
        return true;
      }
      const used = end.at - this.#head.length;
      const headText = latin1.decode(merged.subarray(0, end.at));
      const framing = framingOf(headText);
      if (framing === "bad") {
        await this.#client.write(simpleResponse("400 Bad Request")).catch(() => {});
        this.close();
        return false;
      }
      this.#head = new Uint8Array(0);
      this.#pending++;
      await writeAll(
        upstream,
        withConnHeader(merged.subarray(0, end.at), end.terminator, this.#id),
      );
      at += used;
      this.#framing = framing;
      if (framing.kind === "opaque") {
        this.#phase = "opaque";
        clearTimeout(this.#timer);
      } else if (framing.kind === "none") {
        this.#phase = "head";
        this.#maybeIdle();
      } else {
        this.#phase = "body";
        this.#chunked = framing.kind === "chunked" ? new ChunkedBody() : null;
        this.#arm(this.#deadlines.body_timeout_ms + this.#bodyGraceMs, null);
      }
    }
    return true;
  }

  #lastBodyBytes = 0;

  #consumeBody(bytes: Uint8Array, at: number): number {
    let used: number;
    let done: boolean;
    if (this.#framing.kind === "length") {
      used = Math.min(this.#framing.remaining, bytes.length - at);
      this.#framing.remaining -= used;
      done = this.#framing.remaining === 0;
    } else {
      used = this.#chunked!.feed(bytes, at, bytes.length);
      done = this.#chunked!.done;
    }
    this.#lastBodyBytes = used;
    if (done) {
      this.#phase = "head";
      this.#chunked = null;
      clearTimeout(this.#timer);
      this.#maybeIdle();
    }
    return used;
  }
}

function concat(a: Uint8Array, b: Uint8Array): Uint8Array {
  if (a.length === 0) return b;
  const out = new Uint8Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
}

/** The head with `x-reins-conn: <id>` added before its blank line. */
function withConnHeader(head: Uint8Array, terminator: number, id: number): Uint8Array {
  const eol = terminator === 4 ? "\r\n" : "\n";
  const extra = ascii.encode(`${eol}${latin1.decode(CONN_HEADER_BYTES)}: ${id}`);
  const cut = head.length - terminator;
  const out = new Uint8Array(head.length + extra.length);
  out.set(head.subarray(0, cut));
  out.set(extra, cut);
  out.set(head.subarray(cut), cut + extra.length);
  return out;
}

async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  let written = 0;
  while (written < bytes.length) written += await conn.write(bytes.subarray(written));
}
