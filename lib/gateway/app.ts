/**
 * The gateway's HTTP API (SPEC §3) as a Hono app over a {@link Store} and a {@link PhaseGate}.
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
import { secureHeaders } from "hono/secure-headers";
import { type AuthEnv, requireCredential } from "../http/auth.ts";
import { bodyLimits, readJson } from "../http/body.ts";
import { keyConcurrencyCap } from "../http/concurrency.ts";
import { capabilityToken } from "../http/credentials.ts";
import { HttpError, toHttpError } from "../util/error.ts";
import { sleep } from "../util/time.ts";
import {
  ClaimRequestSchema,
  CreateRolloutsRequestSchema,
  type EventInput,
  type GatewayLimits,
  type GatewayLimitsInput,
  GatewayLimitsSchema,
  isReservedEventKey,
  ListEventsQuerySchema,
  ListRolloutsQuerySchema,
  parseOrThrow,
  PhaseRequestSchema,
  PostEventsRequestSchema,
  RegisterModelRequestSchema,
  RenewLeaseRequestSchema,
  RESERVED_EVENT_KEY_PREFIX,
  type ServerDeadlinesInput,
  ServerDeadlinesSchema,
  TransitionRequestSchema,
} from "../schema.ts";
import { changeFeedResponse } from "./change_feed.ts";
import { LiveAttempts } from "./live_attempts.ts";
import type { PhaseGate } from "./phase.ts";
import type { Store } from "./store.ts";
import { eventToWire } from "./wire.ts";

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
 * Refuses (403, naming the event) what a credential may not post: rewards from a capability
 * token, and reserved event keys from anyone but the admin.
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
  if (kind === "admin") return;
  events.forEach((event, i) => {
    if (kind === "capability" && event.type === "reward") {
      throw new HttpError(
        403,
        `events[${i}].type: a capability token may not post rewards (they come from the ` +
          "verifier, with the admin or reporter key)",
        { field: `events[${i}].type` },
      );
    }
    if (isReservedEventKey(event.event_key)) {
      throw new HttpError(
        403,
        `events[${i}].event_key: keys starting with '${RESERVED_EVENT_KEY_PREFIX}' are ` +
          "reserved for reins itself",
        { field: `events[${i}].event_key` },
      );
    }
  });
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
  const pollMs = options.streamPollMs ?? 1_000;
  const app = new Hono<AuthEnv>();

  app.use("*", secureHeaders({ strictTransportSecurity: false }));
  app.onError((err, c) => toHttpError("gateway", err, c.req.raw).toResponse());
  app.notFound((c) =>
    new HttpError(404, `path: no route ${c.req.method} ${new URL(c.req.url).pathname}`, {
      field: "path",
    }).toResponse()
  );

  const admin = requireCredential(keys, { allow: ["admin"] });
  const reader = requireCredential(keys, { allow: ["admin", "reporter"] });
  const eventWriter = requireCredential(keys, { allow: ["admin", "reporter", "capability"] });
  const eventReader = requireCredential(keys, {
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
  });
  const body = bodyLimits({
    maxBytes: limits.max_body_bytes,
    deadlineMs: deadlines.body_timeout_ms,
  });
  app.use("/v1/*", keyConcurrencyCap(deadlines));

  app.get("/v1/health", async (c) => {
    return c.json({ ok: true, store: store.kind, phase: phase.phase, seq: await store.lastSeq() });
  });

  // ---- rollouts ---------------------------------------------------------------------------

  app.post("/v1/rollouts", admin, body, async (c) => {
    const raw = await readJson(c.req.raw);
    checkBatch(raw, "rollouts", limits);
    const { rollouts } = parseOrThrow(CreateRolloutsRequestSchema, raw);
    const out = await store.createRollouts(rollouts);
    notifier.notify();
    return c.json(out);
  });

  app.get("/v1/rollouts", reader, async (c) => {
    const url = new URL(c.req.url);
    const labels: Record<string, string> = {};
    for (const [k, v] of url.searchParams) if (k.startsWith("label.")) labels[k.slice(6)] = v;
    const raw: Record<string, unknown> = {};
    const status = url.searchParams.get("status");
    if (status !== null) raw.status = status.includes(",") ? status.split(",") : status;
    for (const key of ["mode", "group_id", "order", "after"]) {
      const v = url.searchParams.get(key);
      if (v !== null) raw[key] = v;
    }
    const limit = url.searchParams.get("limit");
    if (limit !== null) raw.limit = Number(limit);
    if (Object.keys(labels).length) raw.labels = labels;
    const query = parseOrThrow(ListRolloutsQuerySchema, raw);
    checkPage(query.limit, limits);
    return c.json(await store.listRollouts(query));
  });

  app.post("/v1/rollouts/claim", admin, body, async (c) => {
    const req = parseOrThrow(ClaimRequestSchema, await readJson(c.req.raw));
    if (req.limit > limits.max_claim) {
      throw new HttpError(400, `limit: at most ${limits.max_claim} per claim`, { field: "limit" });
    }
    const claimed = await store.claimRollouts(req);
    if (claimed.length) notifier.notify();
    return c.json({
      claimed: claimed.map(({ rollout, attempt }) => ({
        rollout,
        attempt,
        token: capabilityToken(keys.secret, rollout.rollout_id, attempt.attempt_id),
      })),
    });
  });

  app.post("/v1/leases/expire", admin, async (c) => {
    const rollouts = await store.expireLeases(Date.now());
    for (const r of rollouts) live.invalidate(r.rollout_id);
    if (rollouts.length) notifier.notify();
    return c.json({ rollouts });
  });

  app.get("/v1/rollouts/:id", reader, async (c) => {
    const id = c.req.param("id");
    const rollout = await store.getRollout(id);
    if (!rollout) notFound("rollout_id", `no rollout '${id}'`);
    return c.json(rollout);
  });

  app.patch("/v1/rollouts/:id", admin, body, async (c) => {
    const req = parseOrThrow(TransitionRequestSchema, await readJson(c.req.raw));
    const id = c.req.param("id");
    const rollout = await store.transition(id, req);
    live.invalidate(id);
    notifier.notify();
    return c.json(rollout);
  });

  app.post("/v1/rollouts/:id/attempts/:aid/lease", admin, body, async (c) => {
    const req = parseOrThrow(RenewLeaseRequestSchema, await readJson(c.req.raw));
    return c.json(
      await store.renewLease(c.req.param("id"), c.req.param("aid"), req.worker, req.lease_ms),
    );
  });

  app.get("/v1/rollouts/:id/attempts/:aid/token", admin, async (c) => {
    const id = c.req.param("id");
    const aid = c.req.param("aid");
    const rollout = await store.getRollout(id);
    if (!rollout) notFound("rollout_id", `no rollout '${id}'`);
    if (!rollout.attempts.some((a) => a.attempt_id === aid)) {
      notFound("attempt_id", `no attempt '${aid}' in rollout '${id}'`);
    }
    return c.json({ token: capabilityToken(keys.secret, id, aid) });
  });

  // ---- events -----------------------------------------------------------------------------

  app.post("/v1/rollouts/:id/attempts/:aid/events", eventWriter, body, async (c) => {
    const id = c.req.param("id");
    const aid = c.req.param("aid");
    const raw = await readJson(c.req.raw);
    checkBatch(raw, "events", limits);
    const { events } = parseOrThrow(PostEventsRequestSchema, raw);
    const credential = c.var.credential.kind;
    checkEventsAllowed(credential, events);
    if (credential === "capability") await live.require(id, aid);
    const stored = await store.appendEvents(id, aid, events, { credential });
    notifier.notify();
    if (/\breturn=minimal\b/.test(c.req.header("prefer") ?? "")) {
      return c.json({
        events: stored.map(({ seq, rollout_id, attempt_id, type, event_key, created_at }) => ({
          seq,
          rollout_id,
          attempt_id,
          type,
          event_key,
          created_at,
        })),
      });
    }
    return c.json({ events: stored.map(eventToWire) });
  });

  app.get("/v1/rollouts/:id/events", eventReader, async (c) => {
    const id = c.req.param("id");
    const url = new URL(c.req.url);
    const raw: Record<string, unknown> = {};
    const type = url.searchParams.get("type");
    if (type !== null) raw.type = type.includes(",") ? type.split(",") : type;
    const attempt = url.searchParams.get("attempt");
    if (attempt !== null) raw.attempt_id = attempt;
    for (const key of ["after_seq", "limit"]) {
      const v = url.searchParams.get(key);
      if (v !== null) raw[key] = Number(v);
    }
    const query = parseOrThrow(ListEventsQuerySchema, raw);
    checkPage(query.limit, limits);
    const events = await store.listEvents(id, { ...query, limit: query.limit + 1 });
    const more = events.length > query.limit;
    const items = more ? events.slice(0, query.limit) : events;
    return c.json({
      items: items.map(eventToWire),
      next_after_seq: more ? items[items.length - 1].seq : null,
    });
  });

  // ---- models -----------------------------------------------------------------------------

  app.post("/v1/models", admin, body, async (c) => {
    const model = parseOrThrow(RegisterModelRequestSchema, await readJson(c.req.raw));
    const stored = await store.upsertModel(model);
    notifier.notify();
    return c.json(stored);
  });

  app.get("/v1/models", admin, async (c) => {
    return c.json({ models: await store.listModels() });
  });

  app.get("/v1/models/:name", admin, async (c) => {
    const name = c.req.param("name");
    const model = await store.getModel(name);
    if (!model) notFound("name", `no model '${name}'`);
    return c.json(model);
  });

  // ---- phase ------------------------------------------------------------------------------

  app.get("/v1/phase", admin, (c) => c.json(phase.snapshot()));

  app.post("/v1/phase", admin, body, async (c) => {
    const req = parseOrThrow(PhaseRequestSchema, await readJson(c.req.raw));
    phase.setPhase(req.phase);
    if (req.drain && req.phase === "update") {
      const timeout = new AbortController();
      const drained = await Promise.race([
        phase.waitForDrain().then(() => true),
        sleep(req.drain_timeout_ms, timeout.signal).then(() => false),
      ]);
      timeout.abort();
      if (!drained) {
        throw new HttpError(
          504,
          `drain_timeout_ms: ${phase.snapshot().in_flight} call(s) still in flight after ` +
            `${req.drain_timeout_ms} ms`,
          { field: "drain_timeout_ms" },
        );
      }
    }
    return c.json(phase.snapshot());
  });

  // ---- change feed ------------------------------------------------------------------------

  app.get("/v1/stream", admin, (c) => {
    return changeFeedResponse(c, {
      store,
      signals: [options.signal],
      comment: "reins gateway change feed",
      wait: async (signal) => {
        const started = Date.now();
        await notifier.wait(pollMs, signal);
        return Date.now() - started;
      },
    });
  });

  for (const mount of options.mounts ?? []) app.route(mount.path, mount.app);
  return app as unknown as Hono;
}

function notFound(field: string, message: string): never {
  throw new HttpError(404, `${field}: ${message}`, { field });
}

/** 413 naming `field` when a body's batch holds more than the limit (before validating it). */
function checkBatch(body: unknown, field: string, limits: GatewayLimits): void {
  const items = (body as Record<string, unknown> | null)?.[field];
  if (Array.isArray(items) && items.length > limits.max_batch) {
    throw new HttpError(
      413,
      `${field}: at most ${limits.max_batch} per request, got ${items.length}`,
      { field },
    );
  }
}

function checkPage(limit: number, limits: GatewayLimits): void {
  if (limit > limits.max_page) {
    throw new HttpError(400, `limit: at most ${limits.max_page}, got ${limit}`, {
      field: "limit",
    });
  }
}
