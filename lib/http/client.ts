/**
 * The HTTP/1.1 client of the proxy's upstreams on plain `http:` (vLLM, SGLang, llama.cpp's
 * server, the reins worker) and of a keep-alive `GatewayClient`: one write of the request, the
 * answer read from the connection, and the connection kept for the next call. Every other URL
 * (`https:`, credentials in the URL) goes to `fetch`, which brings TLS and the environment's proxy
 * settings.
 *
 * Why not `fetch` for all: one small JSON call to a local server cost `fetch` ~200 µs of CPU
 * here (its `Request`/`Headers` objects, the body streams and the hyper client, all on the
 * calling thread) against ~50 µs written and read directly (2026-12-03, this 2-core machine,
 * round trips to a `Deno.serve` answer: 247 against 97 µs; `undici`'s pool measured as `fetch`);
 * every proxied call makes one. No npm client is cheaper under Deno. The answer is a standard
 * `Response`, so the callers read it as they read `fetch`'s.
 *
 * - Framing: `Content-Length` (read whole up to 1 MiB, streamed above), chunked (streamed, through
 *   the engine's own decoder, `streamBody`), or to the end of the connection; 1xx heads skipped.
 * - Failures are `TypeError`s, as `fetch`'s network errors are (the proxy retries those); an
 *   abort rejects with the signal's reason and closes the connection.
 * - Reuse (`keepAlive`): a connection goes back to its origin's idle list once its answer was
 *   read to the end and did not say `connection: close`. An idle connection keeps one read
 *   posted, so a server that closes it is noticed before it is used again; one used again that
 *   answers nothing at all (closed under the request) is retried once on a new connection. Idle
 *   connections close after `idleTimeoutMs` (4 s: under uvicorn's 5 s keep-alive).
 *
 * @module
 */
import { headEnd, HeadError, isToken, parseResponseHead, type ResponseHead } from "./http1.ts";
import { type BodyErrors, Inbound, streamBody, writeAll } from "./conn_io.ts";

const encoder = new TextEncoder();
/** Longest response head read. */
const MAX_HEAD_BYTES = 64 * 1024;
/** Bodies of a declared length up to this are read whole before the `Response` is returned. */
const WHOLE_BODY_BYTES = 1024 * 1024;
const NO_BODY_STATUS = new Set([204, 304]);

/** What {@link HttpClient.fetch} takes (the subset of `RequestInit` the proxy uses). */
export interface ClientRequest {
  method: string;
  headers?: Record<string, string>;
  body?: string;
  signal?: AbortSignal;
}

/** Options of {@link HttpClient}. */
export interface HttpClientOptions {
  /** Keep connections between calls, until {@link HttpClient.close} (default false: one each). */
  keepAlive?: boolean;
  /** Idle connections kept per origin (default 32). */
  maxIdlePerOrigin?: number;
  /** An idle connection is closed after this long (default 4 000 ms). */
  idleTimeoutMs?: number;
  /** What the server is called in error messages (default `"upstream"`). */
  label?: string;
}

/** A connection closed under a request before any answer: safe to send again. */
class NothingBack extends Error {}

class Connection {
  readonly inbound: Inbound;
  closed = false;
  idle = false;
  idleSince = 0;

  /** The server as error messages name it (`upstream 127.0.0.1:8000`). */
  readonly name: string;

  constructor(readonly conn: Deno.TcpConn, readonly origin: string, label: string) {
    this.inbound = new Inbound(conn);
    this.name = `${label} ${origin}`;
  }

  close(): void {
    if (this.closed) return;
    this.closed = true;
    try {
      this.conn.close();
    } catch { /* closed */ }
  }
}

function requestBytes(
  label: string,
  method: string,
  url: URL,
  headers: Record<string, string>,
  body: string,
) {
  let head = `${method} ${url.pathname}${url.search} HTTP/1.1\r\nhost: ${url.host}\r\n`;
  for (const [name, value] of Object.entries(headers)) {
    // Printable ASCII only: nothing a caller passes can start another header or request, and
    // the head's length in bytes is its length in characters.
    if (!isToken(name) || !/^[\t\x20-\x7e]*$/.test(value)) {
      throw new TypeError(`${label} request: invalid header '${name.slice(0, 40)}'`);
    }
    if (name.toLowerCase() === "host" || name.toLowerCase() === "content-length") continue;
    head += `${name}: ${value}\r\n`;
  }
  const payload = encoder.encode(body);
  head += `content-length: ${payload.byteLength}\r\n\r\n`;
  const whole = new Uint8Array(head.length + payload.byteLength);
  encoder.encodeInto(head, whole);
  whole.set(payload, head.length);
  return whole;
}

/**
 * A keep-alive HTTP/1.1 client for `http:` upstreams, `fetch` for the rest.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { HttpClient } from "./client.ts";
 * const server = Deno.serve({ port: 0, onListen() {} }, async (req) =>
 *   Response.json({ got: await req.json() }));
 * const client = new HttpClient({ keepAlive: true });
 * const url = `http://127.0.0.1:${server.addr.port}/v1/x`;
 * for (const n of [1, 2]) {
 *   const res = await client.fetch(url, { method: "POST", body: JSON.stringify({ n }) });
 *   assert.deepEqual(await res.json(), { got: { n } });
 * }
 * assert.equal(client.opened, 1); // the second call reused the connection
 * await client.close();
 * await server.shutdown();
 * ```
 */
export class HttpClient {
  readonly #keepAlive: boolean;
  readonly #maxIdle: number;
  readonly #idleTimeoutMs: number;
  readonly #label: string;
  readonly #idle = new Map<string, Connection[]>();
  readonly #watches = new Set<Promise<unknown>>();
  #sweep: ReturnType<typeof setInterval> | null = null;
  #closed = false;
  /** Connections opened so far (for tests and figures). */
  opened = 0;

  /** Connections kept idle now, over every origin. */
  get idle(): number {
    let n = 0;
    for (const list of this.#idle.values()) n += list.length;
    return n;
  }

  constructor(options: HttpClientOptions = {}) {
    this.#keepAlive = options.keepAlive ?? false;
    this.#maxIdle = options.maxIdlePerOrigin ?? 32;
    this.#idleTimeoutMs = options.idleTimeoutMs ?? 4_000;
    this.#label = options.label ?? "upstream";
  }

  /** `fetch(url, init)` for the proxy's calls; see the module doc for what is ours. */
  async fetch(url: string, init: ClientRequest): Promise<Response> {
    const target = new URL(url);
    if (target.protocol !== "http:" || target.username || target.password || this.#closed) {
      return await fetch(url, init);
    }
    const signal = init.signal;
    signal?.throwIfAborted();
    const bytes = requestBytes(
      this.#label,
      init.method,
      target,
      init.headers ?? {},
      init.body ?? "",
    );
    for (let attempt = 0;; attempt++) {
      const reused = this.#take(target.host);
      const connection = reused ?? await this.#connect(target);
      try {
        return await this.#exchange(connection, bytes, init.method, signal);
      } catch (error) {
        connection.close();
        if (signal?.aborted) throw signal.reason;
        if (error instanceof NothingBack) {
          if (reused && attempt === 0) continue;
          throw new TypeError(`${this.#label} ${target.host}: ${error.message}`);
        }
        throw error;
      }
    }
  }

  /** Closes every idle connection now, and each busy one once its answer is read. */
  async close(): Promise<void> {
    this.#closed = true;
    if (this.#sweep !== null) clearInterval(this.#sweep);
    this.#sweep = null;
    for (const list of this.#idle.values()) for (const c of list) c.close();
    this.#idle.clear();
    await Promise.allSettled([...this.#watches]);
  }

  async #connect(url: URL): Promise<Connection> {
    let conn: Deno.TcpConn;
    try {
      conn = await Deno.connect({
        hostname: url.hostname.replace(/^\[|\]$/g, ""),
        port: Number(url.port || 80),
      });
    } catch (error) {
      const message = `${this.#label} ${url.host}: cannot connect (${(error as Error).message})`;
      throw new TypeError(message, { cause: error });
    }
    conn.setNoDelay(true);
    this.opened++;
    return new Connection(conn, url.host, this.#label);
  }

  /** An idle connection to `origin` still open and not idle too long, if any. */
  #take(origin: string): Connection | null {
    const list = this.#idle.get(origin);
    while (list?.length) {
      const c = list.pop()!;
      c.idle = false;
      if (c.closed || c.inbound.ended || Date.now() - c.idleSince > this.#idleTimeoutMs) {
        c.close();
        continue;
      }
      c.conn.ref();
      return c;
    }
    return null;
  }

  /** Puts `c` back for the next call, or closes it. */
  #release(c: Connection, close: boolean): void {
    const list = this.#idle.get(c.origin) ?? [];
    if (close || c.closed || !this.#keepAlive || this.#closed || list.length >= this.#maxIdle) {
      return c.close();
    }
    c.idle = true;
    c.idleSince = Date.now();
    list.push(c);
    this.#idle.set(c.origin, list);
    // While idle, a posted read notices the server closing (or sending what nobody asked for).
    c.conn.unref();
    const watch = c.inbound.fill().then(() => {
      if (!c.idle) return;
      c.idle = false;
      const at = list.indexOf(c);
      if (at >= 0) list.splice(at, 1);
      c.close();
    });
    this.#watches.add(watch);
    watch.finally(() => this.#watches.delete(watch));
    this.#sweep ??= this.#startSweep();
  }

  #startSweep(): ReturnType<typeof setInterval> {
    const sweep = setInterval(() => {
      const now = Date.now();
      for (const list of this.#idle.values()) {
        for (const c of [...list]) {
          if (now - c.idleSince > this.#idleTimeoutMs) {
            list.splice(list.indexOf(c), 1);
            c.idle = false;
            c.close();
          }
        }
      }
    }, Math.max(250, this.#idleTimeoutMs / 2));
    Deno.unrefTimer(sweep);
    return sweep;
  }

  async #exchange(
    c: Connection,
    request: Uint8Array,
    method: string,
    signal: AbortSignal | undefined,
  ): Promise<Response> {
    const onAbort = () => c.close();
    signal?.addEventListener("abort", onAbort, { once: true });
    let streaming = false;
    try {
      try {
        await writeAll(c.conn, request);
      } catch (error) {
        throw new NothingBack(`the connection failed (${(error as Error).message})`);
      }
      let head: ResponseHead;
      for (;;) {
        const end = await this.#headEnd(c);
        try {
          head = parseResponseHead(c.inbound.view().subarray(0, end));
        } catch (error) {
          if (!(error instanceof HeadError)) throw error;
          throw new TypeError(`${c.name}: ${error.message}`);
        }
        c.inbound.consume(end);
        // 100 Continue and other interim answers come before the real one.
        if (head.status >= 200 || head.status === 101) break;
      }
      if (head.status < 200 || head.status > 599) {
        throw new TypeError(`${c.name}: answered status ${head.status}`);
      }
      const init = { status: head.status, statusText: head.statusText, headers: head.headers };
      if (method === "HEAD" || NO_BODY_STATUS.has(head.status)) {
        this.#release(c, head.close);
        return new Response(null, init);
      }
      if (head.length !== null && head.length <= WHOLE_BODY_BYTES) {
        const body = new Uint8Array(head.length);
        let at = 0;
        for (;;) {
          at += c.inbound.moveInto(body, at);
          if (at === head.length) break;
          if (!await c.inbound.fill()) {
            throw new TypeError(`${c.name}: the connection closed inside the body`);
          }
        }
        this.#release(c, head.close);
        return new Response(body, init);
      }
      const done = () => signal?.removeEventListener("abort", onAbort);
      // A body that fails leaves its connection unusable: it closes as the error is made.
      const failed = <E>(error: E): E => {
        done();
        c.close();
        return error;
      };
      const errors: BodyErrors = {
        early: () =>
          failed(
            signal?.aborted
              ? signal.reason
              : new TypeError(`${c.name}: the connection closed inside the body`),
          ),
        malformed: (what) => failed(new TypeError(`${c.name}: malformed chunked body (${what})`)),
        tooLong: (what) => failed(new TypeError(`${c.name}: ${what} is longer than 4 KiB`)),
      };
      const body = head.length === null && !head.chunked
        ? untilClosed(c, done)
        : streamBody(c.inbound, head.chunked ? null : head.length, () => {
          done();
          this.#release(c, head.close);
        }, () => {
          done();
          c.close();
        }, {
          errors,
          cancelled: () => {
            done();
            c.close();
          },
        });
      streaming = true;
      return new Response(body, init);
    } finally {
      if (!streaming) signal?.removeEventListener("abort", onAbort);
    }
  }

  /** Reads until a whole head is buffered; its length. */
  async #headEnd(c: Connection): Promise<number> {
    let searched = 0;
    for (;;) {
      const end = headEnd(c.inbound.view(), Math.max(0, searched - 3));
      searched = end >= 0 ? end : c.inbound.size;
      if (searched > MAX_HEAD_BYTES) {
        throw new TypeError(`${c.name}: response head larger than 64 KiB`);
      }
      if (end >= 0) return end;
      if (!await c.inbound.fill()) {
        if (searched === 0) throw new NothingBack("the connection closed before any answer");
        throw new TypeError(`${c.name}: the connection closed inside the head`);
      }
    }
  }
}

/** A body that ends when the server closes the connection (no length, not chunked). */
function untilClosed(c: Connection, done: () => void): ReadableStream<Uint8Array> {
  return new ReadableStream<Uint8Array>({
    async pull(controller) {
      if (c.inbound.size === 0 && !await c.inbound.fill()) {
        done();
        c.close();
        return controller.close();
      }
      controller.enqueue(c.inbound.take(c.inbound.size));
    },
    cancel() {
      done();
      c.close();
    },
  }, { highWaterMark: 0 });
}
