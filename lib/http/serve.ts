/**
 * A fetch handler served with connection deadlines and connection caps, one descriptor per
 * connection and no second HTTP hop.
 *
 * `Deno.serve` has no header-read, body-read or idle timeout, and no hook before a request
 * arrives, so it can neither close a half-sent request nor cap connections per client.
 * {@link serveGuarded} serves through one of two engines with the same deadlines and caps:
 *
 * - `conn` (the default): our own HTTP/1.1 engine on `Deno.listen` (`./conn_serve.ts`, a strict
 *   parser in `./http1.ts`), every deadline and cap on our side of the socket;
 * - `node`: Deno's `node:http` server (Node's own parser and timers), the engine before it, kept
 *   as a fallback (`engine: "node"` or `REINS_HTTP_ENGINE=node`). Its deadlines map onto Node's:
 *   `headers_timeout_ms` → `headersTimeout`, `body_timeout_ms` → `requestTimeout` (headers +
 *   body + a grace period, so the app's own 408 from `lib/http/body.ts` goes out first),
 *   `idle_timeout_ms` → `keepAliveTimeout`, `max_header_bytes` → `maxHeaderSize` (431).
 *
 * Connections are capped per client address (`max_connections_per_client`, an over-cap
 * connection gets a 503 and is closed) and in total (`max_connections`, lowered to what the
 * process's descriptor limit allows: half of `RLIMIT_NOFILE` less a reserve, since a proxied
 * call holds a second socket upstream). Deno itself panics when a descriptor cannot be had,
 * so the cap is what keeps the process alive under a connection flood. Accept errors do not
 * stop the server: they are counted, and accepting goes on after a pause.
 *
 * The bridge between `node:http` and a fetch handler (`Request` in, `Response` out) is written
 * in `./node_bridge.ts` rather than taken from `@hono/node-server`: that package replaces the
 * global `Request`/`Response` by default and logs to the console on client aborts, and the
 * bridge must abort the request's signal with a clear reason when the client leaves.
 *
 * @module
 */
import http from "node:http";
import type { Socket } from "node:net";
import { respond } from "./node_bridge.ts";
import { serveConnections } from "./conn_serve.ts";
import {
  ClientConnections,
  guardedServer,
  InFlight,
  newCounts,
  plainAnswerText,
} from "./serve_types.ts";
import type { ConnectionDeadlines, GuardedServer } from "./serve_types.ts";

export type { ConnectionDeadlines, GuardedServer } from "./serve_types.ts";

/** The engines {@link serveGuarded} serves with. */
export type ServeEngine = "conn" | "node";

/** Options of {@link serveGuarded}. */
export interface GuardedServeOptions {
  hostname: string;
  port: number;
  deadlines: ConnectionDeadlines;
  /** Extra time past `body_timeout_ms` before the server cuts a request (default 2 000). */
  bodyGraceMs?: number;
  /** The process's descriptor limit (default: read from `/proc/self/limits`, else 1 024). */
  descriptorLimit?: number;
  /**
   * Names the service in the warning logged for a client that leaves before its body has
   * arrived (`<service>: 499 POST /path: …`; default `serve`).
   */
  service?: string;
  /**
   * `conn` (default): our own HTTP/1.1 engine on `Deno.listen` (`./conn_serve.ts`); `node`:
   * `node:http`, the engine before it (more CPU per request: `bench:serve`), kept as a fallback.
   * The default can be set with `REINS_HTTP_ENGINE`.
   */
  engine?: ServeEngine;
}

/** Descriptors kept free for everything but client sockets (store, upstream pool, files). */
const RESERVED_DESCRIPTORS = 64;
const DEFAULT_MAX_CONNECTIONS = 4_096;
const DEFAULT_MAX_PER_CLIENT = 256;

/**
 * The soft `RLIMIT_NOFILE` of this process (`ulimit -n`), or null where it cannot be read.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { descriptorLimit } from "./serve.ts";
 * const limit = descriptorLimit();
 * assert.ok(limit === null || limit > 0);
 * ```
 */
export function descriptorLimit(): number | null {
  try {
    const text = Deno.readTextFileSync("/proc/self/limits");
    const match = /^Max open files\s+(\d+|unlimited)/m.exec(text);
    if (!match) return null;
    return match[1] === "unlimited" ? Number.MAX_SAFE_INTEGER : Number(match[1]);
  } catch {
    return null;
  }
}

/**
 * The total connection cap that fits `limit` descriptors: each connection may hold a second
 * socket (the proxy's upstream call), and {@link RESERVED_DESCRIPTORS} stay free.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { connectionCapFor } from "./serve.ts";
 * assert.equal(connectionCapFor(4_096, 1_024), 480);
 * assert.equal(connectionCapFor(4_096, 1_000_000), 4_096);
 * ```
 */
export function connectionCapFor(wanted: number, limit: number): number {
  return Math.max(1, Math.min(wanted, Math.floor((limit - RESERVED_DESCRIPTORS) / 2)));
}

/** The engine `REINS_HTTP_ENGINE` names (`conn` when unset or unreadable). */
function defaultEngine(): ServeEngine {
  let named: string | undefined;
  try {
    named = Deno.env.get("REINS_HTTP_ENGINE");
  } catch {
    // No permission to read the environment: the default.
  }
  if (named === undefined || named === "") return "conn";
  if (named !== "conn" && named !== "node") {
    throw new Error(`REINS_HTTP_ENGINE: must be 'conn' or 'node', not '${named}'`);
  }
  return named;
}

/**
 * Serves `handler` behind connection deadlines and caps.
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
  const limit = options.descriptorLimit ?? descriptorLimit() ?? 1_024;
  const maxConnections = connectionCapFor(
    deadlines.max_connections ?? DEFAULT_MAX_CONNECTIONS,
    limit,
  );
  const perClient = deadlines.max_connections_per_client ?? DEFAULT_MAX_PER_CLIENT;
  const engine = options.engine ?? defaultEngine();
  if (engine === "conn") {
    return serveConnections(handler, {
      hostname: options.hostname,
      port: options.port,
      deadlines,
      bodyGraceMs,
      maxConnections,
      perClient,
      service: options.service ?? "serve",
    });
  }
  const shortest = Math.min(deadlines.headers_timeout_ms, deadlines.body_timeout_ms);
  const server = http.createServer({
    headersTimeout: deadlines.headers_timeout_ms,
    requestTimeout: deadlines.headers_timeout_ms + deadlines.body_timeout_ms + bodyGraceMs,
    keepAliveTimeout: deadlines.idle_timeout_ms,
    // How often Node checks the header and request deadlines: their precision.
    connectionsCheckingInterval: Math.max(25, Math.min(1_000, Math.floor(shortest / 4))),
    maxHeaderSize: deadlines.max_header_bytes,
    noDelay: true,
  });
  // The total cap is ours, not `server.maxConnections`: with it, Deno 2.9.6's accept loop
  // sometimes stopped for good during a flood (the listen queue full, the process idle;
  // tests/security_connections_test.ts). Closing over-cap sockets here keeps it accepting.
  const counts = newCounts();
  const sockets = new Set<Socket>();
  const clientConnections = new ClientConnections(perClient);
  const requests = new InFlight();

  server.on("connection", (socket: Socket) => {
    if (sockets.size >= maxConnections) {
      counts.dropped++;
      socket.destroy();
      rearmAfterFlood();
      return;
    }
    const address = socket.remoteAddress ?? "";
    if (!clientConnections.admit(address)) {
      counts.refused++;
      socket.end(plainAnswerText(503));
      socket.destroySoon?.();
      return;
    }
    sockets.add(socket);
    socket.once("close", () => {
      sockets.delete(socket);
      clientConnections.release(address);
    });
  });
  // Node's own answers to a bad or late request, counted (a listener replaces the default).
  server.on("clientError", (error: Error & { code?: string }, socket: Socket) => {
    const code = error.code ?? "";
    if (code === "ERR_HTTP_REQUEST_TIMEOUT") counts.timedOut++;
    const status = code === "ERR_HTTP_REQUEST_TIMEOUT"
      ? 408
      : code === "HPE_HEADER_OVERFLOW"
      ? 431
      : code === "HPE_CHUNK_EXTENSIONS_OVERFLOW"
      ? 413
      : 400;
    const answered = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })
      ._httpMessage?.headersSent;
    if (code !== "ECONNRESET" && socket.writable && !answered) {
      socket.end(plainAnswerText(status));
    }
    socket.destroySoon?.();
    setTimeout(() => socket.destroy(), 1_000).unref?.();
  });
  // An accept error (EMFILE, ECONNABORTED) must not take the process down; Node retries.
  server.on("error", () => counts.acceptErrors++);
  // Deno 2.9.6's accept loop stops for good, silently, when an accept fails with EMFILE: a
  // flood accepted faster than this thread closes the sockets over the cap reaches the
  // descriptor limit in one batch. Once a flood's burst of drops is over, the listening socket
  // is replaced by a fresh one on the same port (connections already open are untouched; those
  // still queued on the old one are reset and retried by their clients).
  let rearm: ReturnType<typeof setTimeout> | undefined;
  let shuttingDown = false;
  const rearmAfterFlood = () => {
    clearTimeout(rearm);
    rearm = setTimeout(() => {
      const handle = (server as unknown as { _handle?: { close(): void } | null })._handle;
      if (!handle || !server.listening) return;
      const { port } = server.address() as { port: number };
      handle.close();
      (server as unknown as { _handle: null })._handle = null;
      counts.rearmed++;
      // The descriptors may still be exhausted (EMFILE) or the port taken: a failed bind is
      // retried with backoff until it holds, never left unbound.
      listenWithRetry(server, port, options.hostname, {
        stopped: () => shuttingDown,
        onFailure: () => counts.relistenFailures++,
      });
    }, 100);
  };

  server.on("request", (incoming: http.IncomingMessage, outgoing: http.ServerResponse) => {
    requests.begin();
    outgoing.once("close", () => requests.end());
    respond(handler, incoming, outgoing, options.hostname, options.service ?? "serve");
  });

  await new Promise<void>((resolve, reject) => {
    server.once("error", reject);
    server.listen(options.port, options.hostname, () => {
      server.off("error", reject);
      resolve();
    });
  });
  const address = server.address() as { address: string; port: number };

  return guardedServer({
    addr: { transport: "tcp", hostname: address.address, port: address.port },
    counts,
    connections: () => sockets.size,
    maxConnections,
    async shutdown() {
      shuttingDown = true;
      clearTimeout(rearm);
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      server.closeIdleConnections();
      await requests.settled(1_000);
      server.closeAllConnections();
      for (const socket of sockets) socket.destroy();
      await closed;
    },
  });
}

/** What {@link listenWithRetry} needs of a server (a `node:http` server has it). */
export interface ListenableServer {
  readonly listening: boolean;
  once(event: "error", listener: (error: unknown) => void): unknown;
  off(event: "error", listener: (error: unknown) => void): unknown;
  listen(port: number, hostname: string, onListening: () => void): unknown;
}

/** What {@link listenWithRetry} is told. */
export interface ListenRetryOptions {
  /** True once the server is shutting down: no further attempt. */
  stopped?: () => boolean;
  /** Called with each failed attempt's error. */
  onFailure?: (error: unknown) => void;
  /** First delay between attempts, doubled each time up to `maxDelayMs` (default 50 / 2 000). */
  firstDelayMs?: number;
  maxDelayMs?: number;
}

/**
 * Listens on `port` again, retrying a failed bind (EMFILE while a flood's descriptors are still
 * open, EADDRINUSE) with exponential backoff until it holds or `stopped()` says to give up.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { EventEmitter } from "node:events";
 * import { listenWithRetry } from "./serve.ts";
 * // A server whose first two binds fail.
 * class FlakyServer extends EventEmitter {
 *   listening = false;
 *   calls = 0;
 *   listen(_port: number, _host: string, onListening: () => void) {
 *     this.calls++;
 *     queueMicrotask(() => {
 *       if (this.calls < 3) this.emit("error", new Error("EMFILE"));
 *       else {
 *         this.listening = true;
 *         onListening();
 *       }
 *     });
 *   }
 * }
 * const server = new FlakyServer();
 * const failures: unknown[] = [];
 * await new Promise<void>((resolve) => {
 *   listenWithRetry(server, 8000, "127.0.0.1", {
 *     firstDelayMs: 1,
 *     onFailure: (e) => failures.push(e),
 *     onListening: resolve,
 *   });
 * });
 * const calls = server.calls;
 * assert.deepEqual([calls, failures.length, server.listening], [3, 2, true]);
 * ```
 */
export function listenWithRetry(
  server: ListenableServer,
  port: number,
  hostname: string,
  options: ListenRetryOptions & { onListening?: () => void } = {},
  attempt = 0,
): void {
  if (server.listening || options.stopped?.()) return;
  const first = options.firstDelayMs ?? 50;
  const failed = (error: unknown) => {
    options.onFailure?.(error);
    const delay = Math.min(options.maxDelayMs ?? 2_000, first * 2 ** attempt);
    setTimeout(() => listenWithRetry(server, port, hostname, options, attempt + 1), delay);
  };
  server.once("error", failed);
  server.listen(port, hostname, () => {
    server.off("error", failed);
    options.onListening?.();
  });
}
