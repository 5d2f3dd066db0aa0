/**
 * The connection deadlines and caps both engines of `serveGuarded` take (`./serve.ts`).
 *
 * @module
 */

/** Deadlines of `serveGuarded` (see `ServerDeadlinesSchema`). */
export interface ConnectionDeadlines {
  headers_timeout_ms: number;
  body_timeout_ms: number;
  idle_timeout_ms: number;
  max_header_bytes: number;
  /** Connections open at once from one client address (default 256). */
  max_connections_per_client?: number;
  /** Connections open at once in total (default 4 096; lowered to fit `RLIMIT_NOFILE`). */
  max_connections?: number;
}

/** What a server has counted since it started (read through {@link GuardedServer}). */
export interface ServerCounts {
  /** Requests closed by a header or request deadline. */
  timedOut: number;
  /** Connections refused by the per-client cap (answered 503). */
  refused: number;
  /** Connections closed at accept by the total cap (no answer: nothing to spare). */
  dropped: number;
  /** Accept errors (EMFILE and the like): counted, never fatal. */
  acceptErrors: number;
  /** Times the listening socket was replaced after a flood (the `node:http` engine only). */
  rearmed: number;
  /** Binds of a replacement listening socket that failed and were retried. */
  relistenFailures: number;
}

/** A running guarded server. */
export interface GuardedServer extends Readonly<ServerCounts> {
  addr: Deno.NetAddr;
  /** Connections open now (for tests and benches). */
  readonly connections: number;
  /** The total connection cap in force (after fitting it to the descriptor limit). */
  readonly maxConnections: number;
  /** Stops accepting, lets requests in flight finish (1 s at most), then closes every connection. */
  shutdown(): Promise<void>;
}

/** Zeroed counts, for an engine to add to. */
export function newCounts(): ServerCounts {
  return { timedOut: 0, refused: 0, dropped: 0, acceptErrors: 0, rearmed: 0, relistenFailures: 0 };
}

/**
 * The {@link GuardedServer} of an engine: its `counts` and `connections()` read live.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { guardedServer, newCounts } from "./serve_types.ts";
 * const counts = newCounts();
 * const server = guardedServer({
 *   addr: { transport: "tcp", hostname: "127.0.0.1", port: 1 },
 *   counts,
 *   connections: () => 3,
 *   maxConnections: 10,
 *   shutdown: () => Promise.resolve(),
 * });
 * counts.refused++;
 * assert.deepEqual([server.refused, server.connections], [1, 3]);
 * ```
 */
export function guardedServer(parts: {
  addr: Deno.NetAddr;
  counts: ServerCounts;
  connections: () => number;
  maxConnections: number;
  shutdown: () => Promise<void>;
}): GuardedServer {
  const { counts } = parts;
  return {
    addr: parts.addr,
    maxConnections: parts.maxConnections,
    shutdown: parts.shutdown,
    get connections() {
      return parts.connections();
    },
    get timedOut() {
      return counts.timedOut;
    },
    get refused() {
      return counts.refused;
    },
    get dropped() {
      return counts.dropped;
    },
    get acceptErrors() {
      return counts.acceptErrors;
    },
    get rearmed() {
      return counts.rearmed;
    },
    get relistenFailures() {
      return counts.relistenFailures;
    },
  };
}

/** The handler's answer to `request`; a handler that throws is logged and answered 500. */
export async function answerOf(
  handler: (request: Request) => Response | Promise<Response>,
  request: Request,
): Promise<Response> {
  try {
    return await handler(request);
  } catch (error) {
    console.error("serve: handler failed:", error instanceof Error ? error.message : error);
    return new Response(null, { status: 500 });
  }
}

/** What `serveGuarded` hands an engine once it has fitted the caps. */
export interface EngineSettings {
  hostname: string;
  port: number;
  deadlines: ConnectionDeadlines;
  bodyGraceMs: number;
  maxConnections: number;
  perClient: number;
  service: string;
}

/** Bodies up to this size (declared by `Content-Length`) are collected before the handler runs. */
export const SMALL_BODY_BYTES = 64 * 1024;

/** The abort reason when the client closes its connection first. */
export const clientLeft = (): DOMException =>
  new DOMException("the client closed the connection", "AbortError");
