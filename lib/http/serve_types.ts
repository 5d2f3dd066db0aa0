/**
 * What both engines of `serveGuarded` (`./serve.ts`) share: the deadlines and caps they take,
 * their counts, the per-client cap, the requests in flight a shutdown waits for, the handler
 * call and the plain answers they write themselves.
 *
 * @module
 */
import { STATUS_CODES } from "node:http";

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

/**
 * A bodyless answer a server writes itself (503 over the per-client cap, 408, 431, 400 …); the
 * connection closes after it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { plainAnswerText } from "./serve_types.ts";
 * assert.equal(
 *   plainAnswerText(431),
 *   "HTTP/1.1 431 Request Header Fields Too Large\r\nconnection: close\r\ncontent-length: 0\r\n\r\n",
 * );
 * ```
 */
export function plainAnswerText(status: number): string {
  return `HTTP/1.1 ${status} ${STATUS_CODES[status] ?? "Unknown"}\r\n` +
    "connection: close\r\ncontent-length: 0\r\n\r\n";
}

/**
 * Connections open per client address, against `cap`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ClientConnections } from "./serve_types.ts";
 * const open = new ClientConnections(2);
 * assert.deepEqual([open.admit("a"), open.admit("a"), open.admit("a")], [true, true, false]);
 * open.release("a");
 * assert.equal(open.admit("a"), true);
 * ```
 */
export class ClientConnections {
  readonly #open = new Map<string, number>();

  constructor(readonly cap: number) {}

  /** Counts one more connection from `address`; false (and nothing counted) at the cap. */
  admit(address: string): boolean {
    const open = this.#open.get(address) ?? 0;
    if (open >= this.cap) return false;
    this.#open.set(address, open + 1);
    return true;
  }

  /** One admitted connection from `address` has closed. */
  release(address: string): void {
    const left = (this.#open.get(address) ?? 1) - 1;
    if (left > 0) this.#open.set(address, left);
    else this.#open.delete(address);
  }
}

/**
 * The requests a server has in flight, and a wait for them to end (what a shutdown grants them).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { InFlight } from "./serve_types.ts";
 * const requests = new InFlight();
 * requests.begin();
 * const settled = requests.settled(10_000);
 * requests.end();
 * await settled;
 * assert.equal(requests.count, 0);
 * ```
 */
export class InFlight {
  #count = 0;
  readonly #waiting = new Set<() => void>();

  get count(): number {
    return this.#count;
  }

  begin(): void {
    this.#count++;
  }

  end(): void {
    this.#count--;
    if (this.#count === 0) { for (const wake of [...this.#waiting]) wake(); }
  }

  /** Resolves once none is in flight, or after `ms` at most. */
  async settled(ms: number): Promise<void> {
    if (this.#count === 0) return;
    await atMost(new Promise<void>((resolve) => this.#waiting.add(resolve)), ms);
    this.#waiting.clear();
  }
}

/** Waits for `promise`, or `ms` at most. */
export async function atMost(promise: Promise<unknown>, ms: number): Promise<void> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  await Promise.race([promise, new Promise((resolve) => (timer = setTimeout(resolve, ms)))]);
  clearTimeout(timer);
}
