/**
 * The gateway's HTTP API (docs/architecture.md#gateway) as a Hono app over a {@link Store} and a
 * {@link PhaseGate}.
 *
 * Every route names the credentials it accepts (middleware answers 401/403 before the
 * handler), bodies are capped in bytes while they stream in, request bodies and queries are
 * parsed with the `lib/schema` request schemas, and errors are `{error: {code, message,
 * field?}}` with the matching status (see `docs/security.md` for what each credential may do):
 *
 * - the admin key: everything;
 * - the reporter key: post events (rewards included) to any attempt, read rollouts and events;
 * - a capability token: post non-reward events outside the reserved key namespace to its own
 *   attempt while that attempt is live (409 otherwise), read its own attempt's events.
 *
 * @module
 */
import { Hono } from "hono";
import { type AuthEnv, requireCredential } from "../http/auth.ts";
import { bodyLimits } from "../http/body.ts";
import { keyConcurrencyCap } from "../http/concurrency.ts";
import { securityHeaders } from "../http/security_headers.ts";
import { HttpError, toHttpError } from "../util/error.ts";
import { sleep } from "../util/time.ts";
import {
  type EventInput,
  type GatewayLimits,
  type GatewayLimitsInput,
  GatewayLimitsSchema,
  parseOrThrow,
  type ServerDeadlinesInput,
  ServerDeadlinesSchema,
} from "../schema.ts";
import { AttemptBudgets } from "./attempt_budget.ts";
import { LiveAttempts } from "./live_attempts.ts";
import type { PhaseGate } from "./phase.ts";
import type { Store } from "./store.ts";
import { checkCredential } from "./store_rules.ts";
import type { GatewayContext } from "./routes/context.ts";
import { eventsApp } from "./routes/events.ts";
import { modelsApp } from "./routes/models.ts";
import { phaseApp } from "./routes/phase.ts";
import { rolloutsApp } from "./routes/rollouts.ts";
import { streamApp } from "./routes/stream.ts";

/** Options of {@link createGatewayApp}. */
export interface GatewayAppOptions {
  store: Store;
  /** The control-plane key (compared in constant time; never logged). */
  adminKey: string;
  /** HMAC secret of capability tokens. */
  secret: string;
  /** The reporter key (rewards from a verifier outside the sandbox); none by default. */
  reporterKey?: string;
  phase: PhaseGate;
  /** Sub-apps served under a path prefix (the proxy at `/proxy`, the UI at `/ui`). */
  mounts?: Array<{ path: string; app: Hono }>;
  limits?: GatewayLimitsInput;
  /** Body deadline and per-key concurrency caps (the connection deadlines are the server's). */
  deadlines?: ServerDeadlinesInput;
  /** Which attempts are live (shared with the proxy; default: a fresh cache over `store`). */
  live?: LiveAttempts;
  /** Wakes `GET /v1/stream` readers after writes (default: a fresh one). */
  notifier?: ChangeNotifier;
  /** How often stream readers re-poll the store for other processes' writes (default 1 000). */
  streamPollMs?: number;
  /** Ends open `GET /v1/stream` responses when aborted (the server aborts it on close). */
  signal?: AbortSignal;
  /** Process figures for `GET /v1/stats` (admin): event-loop lag, memory, connections. */
  stats?: () => Record<string, number>;
}

/**
 * Wakes waiting change-feed readers when this process writes.
 *
 * @example
 * ```ts
 * import { ChangeNotifier } from "./app.ts";
 * const n = new ChangeNotifier();
 * const woke = n.wait(10_000);
 * n.notify();
 * await woke;
 * ```
 */
export class ChangeNotifier {
  #waiters = new Set<() => void>();

  /** Wakes every current waiter. */
  notify(): void {
    const waiters = [...this.#waiters];
    this.#waiters.clear();
    for (const wake of waiters) wake();
  }

  /** Resolves on the next notify, after `ms`, or when `signal` aborts, whichever is first. */
  async wait(ms: number, signal?: AbortSignal): Promise<void> {
    const woken = new AbortController();
    const wake = () => woken.abort();
    this.#waiters.add(wake);
    try {
      await sleep(ms, signal ? AbortSignal.any([signal, woken.signal]) : woken.signal);
    } finally {
      this.#waiters.delete(wake);
    }
  }
}

/**
 * Refuses (403, naming the event) what a credential may not post: the store's own rule
 * ({@link checkCredential}), checked before the attempt's liveness so a refused post costs
 * nothing.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkEventsAllowed } from "./app.ts";
 * assert.throws(
 *   () => checkEventsAllowed("capability", [{ type: "reward", payload: { value: 1 } }]),
 *   { status: 403, field: "events[0].type" },
 * );
 * assert.doesNotThrow(() =>
 *   checkEventsAllowed("admin", [{ type: "reward", payload: { value: 1 } }])
 * );
 * ```
 */
export function checkEventsAllowed(
  kind: "admin" | "reporter" | "capability",
  events: readonly EventInput[],
): void {
  checkCredential(events, kind);
}

/**
 * Builds the gateway app. Serve it with `startGateway` from `./server.ts` (which adds the
 * connection deadlines) or `app.request()` in tests.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { createGatewayApp } from "./app.ts";
 * import { PhaseGate } from "./phase.ts";
 * import { openSqliteStore } from "./sqlite_store.ts";
 * const store = openSqliteStore(":memory:");
 * const app = createGatewayApp({
 *   store,
 *   adminKey: "admin-key",
 *   secret: "hmac-secret",
 *   phase: new PhaseGate(),
 * });
 * const res = await app.request("/v1/health");
 * assert.equal(res.status, 200);
 * await store.close();
 * ```
 */
export function createGatewayApp(options: GatewayAppOptions): Hono {
  const { store, phase } = options;
  const limits: GatewayLimits = parseOrThrow(GatewayLimitsSchema, options.limits ?? {}, "limits");
  const deadlines = parseOrThrow(ServerDeadlinesSchema, options.deadlines ?? {}, "deadlines");
  const keys = {
    adminKey: options.adminKey,
    secret: options.secret,
    reporterKey: options.reporterKey,
  };
  const notifier = options.notifier ?? new ChangeNotifier();
  const live = options.live ?? new LiveAttempts(store);
  const budgets = new AttemptBudgets(store, limits);
  const pollMs = options.streamPollMs ?? 1_000;
  const app = new Hono<AuthEnv>();

  app.use("*", securityHeaders());
  app.onError((err, c) => toHttpError("gateway", err, c.req.raw).toResponse());
  app.notFound((c) =>
    new HttpError(404, `path: no route ${c.req.method} ${new URL(c.req.url).pathname}`, {
      field: "path",
    }).toResponse()
  );

  const ctx: GatewayContext = {
    store,
    phase,
    secret: keys.secret,
    limits,
    deadlines,
    notifier,
    live,
    budgets,
    pollMs,
    signal: options.signal,
    guards: {
      admin: requireCredential(keys, { allow: ["admin"] }),
      reader: requireCredential(keys, { allow: ["admin", "reporter"] }),
      eventWriter: requireCredential(keys, { allow: ["admin", "reporter", "capability"] }),
      eventReader: requireCredential(keys, {
        allow: ["admin", "reporter", "capability"],
        scope: (c) => {
          const attempt_id = c.req.query("attempt");
          return attempt_id ? { rollout_id: c.req.param("id")!, attempt_id } : undefined;
        },
        scopeMissing: {
          field: "attempt",
          message: "attempt: a capability token may only read its own attempt; " +
            "pass attempt=<attempt_id>",
        },
      }),
    },
    body: bodyLimits({ maxBytes: limits.max_body_bytes, deadlineMs: deadlines.body_timeout_ms }),
  };
  app.use("/v1/*", keyConcurrencyCap(deadlines));

  app.get("/v1/health", async (c) => {
    return c.json({ ok: true, store: store.kind, phase: phase.phase, seq: await store.lastSeq() });
  });
  // The longest event-loop stall since the last read, the RSS and the open connections.
  app.get("/v1/stats", ctx.guards.admin, (c) => c.json(options.stats?.() ?? {}));

  // One sub-app per resource, each validating its bodies with `jsonBody`.
  for (const sub of [rolloutsApp, eventsApp, modelsApp, phaseApp, streamApp]) {
    app.route("/v1", sub(ctx));
  }

  for (const mount of options.mounts ?? []) app.route(mount.path, mount.app);
  return app as unknown as Hono;
}
