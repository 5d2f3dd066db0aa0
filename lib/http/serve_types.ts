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

/** What an engine reports (the counters of `GuardedServer`). */
export interface EngineServer {
  addr: Deno.NetAddr;
  readonly connections: number;
  readonly timedOut: number;
  readonly refused: number;
  readonly dropped: number;
  readonly rearmed: number;
  readonly relistenFailures: number;
  readonly acceptErrors: number;
  readonly maxConnections: number;
  shutdown(): Promise<void>;
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
