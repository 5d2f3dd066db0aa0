/**
 * Starts a gateway: opens the store, builds the app, serves it on `Deno.serve` behind the
 * connection deadlines of `lib/http/serve.ts`, and sweeps expired leases in the background.
 *
 * @module
 */
import type { Hono } from "hono";
import { CAPABILITY_PREFIX, randomKey } from "../http/credentials.ts";
import { EventLoopLag } from "../http/lag.ts";
import { type GuardedServer, serveGuarded } from "../http/serve.ts";
import {
  type GatewayLimitsInput,
  parseOrThrow,
  type ServerDeadlinesInput,
  ServerDeadlinesSchema,
} from "../schema.ts";
import { ChangeNotifier, createGatewayApp } from "./app.ts";
import { LiveAttempts } from "./live_attempts.ts";
import { sleep } from "../util/time.ts";
import { PhaseGate } from "./phase.ts";
import { openPostgresStore, type PostgresStoreOptions } from "./postgres_store.ts";
import { openSqliteStore, type SqliteStoreOptions } from "./sqlite_store.ts";
import type { Store } from "./store.ts";

/** What a mount factory gets: the gateway's own store, phase gate and keys. */
export interface MountContext {
  store: Store;
  phase: PhaseGate;
  adminKey: string;
  secret: string;
  /** Aborts when the gateway closes, so mounted apps can end their live streams. */
  signal: AbortSignal;
  /** Which attempts are live (the proxy serves only those). */
  live: LiveAttempts;
  /** Body deadline and per-key concurrency caps the mounted apps apply too. */
  deadlines: ServerDeadlinesInput;
}

/** A sub-app served under `path`: given directly, or built from the gateway's context. */
export type Mount =
  | { path: string; app: Hono }
  | { path: string; create: (context: MountContext) => Hono };

/** Options of {@link startGateway}. */
export interface StartGatewayOptions {
  /** SQLite file (default `":memory:"`). Ignored when `postgres` or `store` is given. */
  db?: string;
  /** PostgreSQL URL; several gateways may share the database. */
  postgres?: string;
  /** A store to serve instead of opening one (not closed by `close()`). */
  store?: Store;
  /** Port (0 or absent = a random free port). */
  port?: number;
  hostname?: string;
  /** Admin key (default: `$REINS_ADMIN_KEY`, else a fresh random key). */
  adminKey?: string;
  /**
   * Reporter key: may post events (rewards included) to any attempt and read rollouts, nothing
   * else; for a verifier outside the agent's sandbox (default: `$REINS_REPORTER_KEY`, else
   * none). Never give it to an agent.
   */
  reporterKey?: string;
  /** Header, body and idle deadlines and concurrency caps (see `ServerDeadlinesSchema`). */
  deadlines?: ServerDeadlinesInput;
  /**
   * HMAC secret of capability tokens (default: kept in the store, created on first start, so
   * tokens stay valid across restarts).
   */
  secret?: string;
  mounts?: Mount[];
  limits?: GatewayLimitsInput;
  phase?: PhaseGate;
  /** How often expired leases are swept (default 1 000 ms; 0 disables the sweep). */
  leaseSweepMs?: number;
  sqlite?: SqliteStoreOptions;
  postgresOptions?: PostgresStoreOptions;
}

/** A running gateway. */
export interface RunningGateway {
  /** Base URL, e.g. `http://127.0.0.1:43121`. */
  url: string;
  adminKey: string;
  /** The reporter key, when one was given. */
  reporterKey: string | undefined;
  secret: string;
  store: Store;
  phase: PhaseGate;
  app: Hono;
  /** Connections open now. */
  readonly connections: number;
  /** Stops serving (open streams end), stops the sweep and closes the store it opened. */
  close(): Promise<void>;
}

/**
 * Starts a gateway on loopback (or `hostname`).
 *
 * @example
 * ```ts
 * import { startGateway } from "./server.ts";
 * import { GatewayClient } from "./client.ts";
 * const dir = await Deno.makeTempDir();
 * const gw = await startGateway({ db: `${dir}/demo.db` });
 * const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
 * await client.createRollouts([{ input: { question: "2+2" } }]);
 * await gw.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function startGateway(options: StartGatewayOptions = {}): Promise<RunningGateway> {
  const ownStore = !options.store;
  const store = options.store ??
    (options.postgres
      ? await openPostgresStore(options.postgres, options.postgresOptions)
      : openSqliteStore(options.db ?? ":memory:", options.sqlite));
  let lag: EventLoopLag | undefined;
  try {
    const adminKey = options.adminKey ?? Deno.env.get("REINS_ADMIN_KEY") ?? randomKey("ra_");
    if (adminKey.startsWith(CAPABILITY_PREFIX)) {
      throw new Error(
        `adminKey: must not start with '${CAPABILITY_PREFIX}' (capability tokens do)`,
      );
    }
    if (adminKey.length < 8) throw new Error("adminKey: must be at least 8 characters");
    const reporterKey = options.reporterKey ?? Deno.env.get("REINS_REPORTER_KEY") ?? undefined;
    if (reporterKey !== undefined) {
      if (reporterKey.startsWith(CAPABILITY_PREFIX) || reporterKey.length < 8) {
        throw new Error(
          `reporterKey: must be at least 8 characters and not start with '${CAPABILITY_PREFIX}'`,
        );
      }
      if (reporterKey === adminKey) throw new Error("reporterKey: must differ from the admin key");
    }
    const deadlines = parseOrThrow(ServerDeadlinesSchema, options.deadlines ?? {}, "deadlines");
    const secret = options.secret ?? await store.ensureMeta("capability_secret", randomKey());
    const phase = options.phase ?? new PhaseGate();
    const closing = new AbortController();
    const live = new LiveAttempts(store);
    const context: MountContext = {
      store,
      phase,
      adminKey,
      secret,
      signal: closing.signal,
      live,
      deadlines,
    };
    lag = new EventLoopLag();
    // The server starts after the app it serves; the stats read it once it exists.
    const serverRef: { current?: GuardedServer } = {};
    const app = createGatewayApp({
      stats: () => {
        const taken = lag?.take();
        return {
          event_loop_max_lag_ms: Math.round((taken?.maxLagMs ?? 0) * 10) / 10,
          // The CPU this thread spent in that stall (Linux): ours when close to the lag.
          ...(taken?.cpuMsInMaxLag != null
            ? { event_loop_max_lag_cpu_ms: taken.cpuMsInMaxLag }
            : {}),
          // The most CPU it spent between two ticks: our own longest hold of the loop.
          ...(taken?.maxBusyMs != null ? { event_loop_max_busy_ms: taken.maxBusyMs } : {}),
          rss_bytes: Deno.memoryUsage().rss,
          connections: serverRef.current?.connections ?? 0,
          connections_dropped: serverRef.current?.dropped ?? 0,
          accept_errors: serverRef.current?.acceptErrors ?? 0,
          listen_rearmed: serverRef.current?.rearmed ?? 0,
          relisten_failures: serverRef.current?.relistenFailures ?? 0,
        };
      },
      store,
      phase,
      adminKey,
      secret,
      ...(reporterKey ? { reporterKey } : {}),
      limits: options.limits,
      deadlines,
      live,
      notifier: new ChangeNotifier(),
      signal: closing.signal,
      mounts: (options.mounts ?? []).map((m) =>
        "app" in m ? m : { path: m.path, app: m.create(context) }
      ),
    });
    const server = await serveGuarded(app.fetch, {
      port: options.port ?? 0,
      hostname: options.hostname ?? "127.0.0.1",
      deadlines,
      service: "gateway",
    });
    serverRef.current = server;
    const sweepMs = options.leaseSweepMs ?? 1_000;
    let sweeping = false;
    const sweep = sweepMs > 0
      ? setInterval(async () => {
        if (sweeping) return;
        sweeping = true;
        try {
          await store.expireLeases(Date.now());
        } catch (err) {
          console.error("gateway: lease sweep failed:", err instanceof Error ? err.message : err);
        } finally {
          sweeping = false;
        }
      }, sweepMs)
      : undefined;
    const addr = server.addr;
    const host = addr.hostname.includes(":") ? `[${addr.hostname}]` : addr.hostname;
    let closed = false;
    return {
      url: `http://${host}:${addr.port}`,
      adminKey,
      reporterKey,
      secret,
      store,
      phase,
      app,
      get connections() {
        return server.connections;
      },
      async close() {
        if (closed) return;
        closed = true;
        clearInterval(sweep);
        lag?.stop();
        closing.abort();
        await server.shutdown();
        while (sweeping) await sleep(5);
        if (ownStore) await store.close();
      },
    };
  } catch (err) {
    lag?.stop();
    if (ownStore) await store.close();
    throw err;
  }
}
