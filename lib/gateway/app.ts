/**
 * The gateway's HTTP API (SPEC §3) as a Hono app over a {@link Store} and a {@link PhaseGate}.
 *
 * Errors are `{error: {code, message}}` with the matching 4xx/5xx status; messages name the
 * field at fault. The control plane needs the admin key; event posts (and reads of one
 * attempt's events) also accept that attempt's capability token.
 *
 * @module
 */
import { Hono } from "hono";
import type { Context } from "hono";
import {
  ClaimRequestSchema,
  type EventInput,
  type GatewayLimits,
  type GatewayLimitsInput,
  GatewayLimitsSchema,
  ListEventsQuerySchema,
  ListRolloutsQuerySchema,
  parseOrThrow,
  PhaseRequestSchema,
  RegisterModelRequestSchema,
  RenewLeaseRequestSchema,
  type RolloutCreate,
  TransitionRequestSchema,
  ValidationError,
} from "../schema.ts";
import {
  authorize,
  CAPABILITY_PREFIX,
  capabilityToken,
  keyFromHeaders,
  type Principal,
} from "./auth.ts";
import { type PhaseGate, PhaseHoldTimeout } from "./phase.ts";
import { changeFeedResponse, parseAfterSeq } from "./change_feed.ts";
import { type Store, StoreError } from "./store.ts";
import { eventToWire } from "./wire.ts";

/** Options of {@link createGatewayApp}. */
export interface GatewayAppOptions {
  store: Store;
  /** The control-plane key (compared in constant time; never logged). */
  adminKey: string;
  /** HMAC secret of capability tokens. */
  secret: string;
  phase: PhaseGate;
  /** Sub-apps served under a path prefix (the proxy at `/proxy`, the UI at `/ui`). */
  mounts?: Array<{ path: string; app: Hono }>;
  limits?: GatewayLimitsInput;
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
  wait(ms: number, signal?: AbortSignal): Promise<void> {
    return new Promise((resolve) => {
      const done = () => {
        clearTimeout(timer);
        signal?.removeEventListener("abort", done);
        this.#waiters.delete(done);
        resolve();
      };
      const timer = setTimeout(done, ms);
      signal?.addEventListener("abort", done, { once: true });
      this.#waiters.add(done);
    });
  }
}

/**
 * Builds the gateway app. Serve it with `Deno.serve({ port }, app.fetch)` or use
 * `startGateway` from `./server.ts`.
 *
 * @example
 * ```ts
 * import { createGatewayApp } from "./app.ts";
 * import { PhaseGate } from "./phase.ts";
 * import { openSqliteStore } from "./sqlite_store.ts";
 * const app = createGatewayApp({
 *   store: openSqliteStore(":memory:"),
 *   adminKey: "admin-key",
 *   secret: "hmac-secret",
 *   phase: new PhaseGate(),
 * });
 * const res = await app.request("/v1/health");
 * res.status; // 200
 * ```
 */
export function createGatewayApp(options: GatewayAppOptions): Hono {
  const { store, phase } = options;
  const limits: GatewayLimits = parseOrThrow(GatewayLimitsSchema, options.limits ?? {}, "limits");
  const keys = { adminKey: options.adminKey, secret: options.secret };
  const notifier = options.notifier ?? new ChangeNotifier();
  const pollMs = options.streamPollMs ?? 1_000;
  const app = new Hono();

  app.onError((err, c) => {
    if (err instanceof StoreError) return errorResponse(c, err.status, err.code, err.message);
    if (err instanceof ValidationError) return errorResponse(c, 400, "invalid", err.message);
    if (err instanceof PhaseHoldTimeout) return errorResponse(c, 504, "timeout", err.message);
    console.error("gateway: internal error:", err instanceof Error ? err.stack : err);
    return errorResponse(c, 500, "internal", "internal error (see the gateway log)");
  });
  app.notFound((c) =>
    errorResponse(
      c,
      404,
      "not_found",
      `path: no route ${c.req.method} ${new URL(c.req.url).pathname}`,
    )
  );

  const admin = (c: Context) => {
    requirePrincipal(c, keys, undefined, "admin");
  };

  app.get("/v1/health", async (c) => {
    return c.json({ ok: true, store: store.kind, phase: phase.phase, seq: await store.lastSeq() });
  });

  // ---- rollouts ---------------------------------------------------------------------------

  app.post("/v1/rollouts", async (c) => {
    admin(c);
    const body = await readJson(c, limits);
    if (!isObject(body) || !Array.isArray(body.rollouts)) {
      throw new ValidationError("rollouts", ["rollouts: expected an array of rollouts"]);
    }
    if (body.rollouts.length === 0) {
      throw new ValidationError("rollouts", ["rollouts: must hold at least one rollout"]);
    }
    checkBatch("rollouts", body.rollouts.length, limits);
    const out = await store.createRollouts(body.rollouts as RolloutCreate[]);
    notifier.notify();
    return c.json(out);
  });

  app.get("/v1/rollouts", async (c) => {
    admin(c);
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

  app.post("/v1/rollouts/claim", async (c) => {
    admin(c);
    const req = parseOrThrow(ClaimRequestSchema, await readJson(c, limits));
    if (req.limit > limits.max_claim) {
      throw new ValidationError("limit", [`limit: at most ${limits.max_claim} per claim`]);
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

  app.post("/v1/leases/expire", async (c) => {
    admin(c);
    const rollouts = await store.expireLeases(Date.now());
    if (rollouts.length) notifier.notify();
    return c.json({ rollouts });
  });

  app.get("/v1/rollouts/:id", async (c) => {
    admin(c);
    const id = c.req.param("id");
    const rollout = await store.getRollout(id);
    if (!rollout) throw new StoreError("not_found", `rollout_id: no rollout '${id}'`);
    return c.json(rollout);
  });

  app.patch("/v1/rollouts/:id", async (c) => {
    admin(c);
    const req = parseOrThrow(TransitionRequestSchema, await readJson(c, limits));
    const rollout = await store.transition(c.req.param("id"), req);
    notifier.notify();
    return c.json(rollout);
  });

  app.post("/v1/rollouts/:id/attempts/:aid/lease", async (c) => {
    admin(c);
    const req = parseOrThrow(RenewLeaseRequestSchema, await readJson(c, limits));
    return c.json(
      await store.renewLease(c.req.param("id"), c.req.param("aid"), req.worker, req.lease_ms),
    );
  });

  app.get("/v1/rollouts/:id/attempts/:aid/token", async (c) => {
    admin(c);
    const id = c.req.param("id");
    const aid = c.req.param("aid");
    const rollout = await store.getRollout(id);
    if (!rollout) throw new StoreError("not_found", `rollout_id: no rollout '${id}'`);
    if (!rollout.attempts.some((a) => a.attempt_id === aid)) {
      throw new StoreError("not_found", `attempt_id: no attempt '${aid}' in rollout '${id}'`);
    }
    return c.json({ token: capabilityToken(keys.secret, id, aid) });
  });

  // ---- events -----------------------------------------------------------------------------

  app.post("/v1/rollouts/:id/attempts/:aid/events", async (c) => {
    const id = c.req.param("id");
    const aid = c.req.param("aid");
    requirePrincipal(c, keys, { rollout_id: id, attempt_id: aid }, "attempt");
    const body = await readJson(c, limits);
    if (!isObject(body) || !Array.isArray(body.events)) {
      throw new ValidationError("events", ["events: expected an array of events"]);
    }
    if (body.events.length === 0) {
      throw new ValidationError("events", ["events: must hold at least one event"]);
    }
    checkBatch("events", body.events.length, limits);
    const events = await store.appendEvents(id, aid, body.events as EventInput[]);
    notifier.notify();
    if (/\breturn=minimal\b/.test(c.req.header("prefer") ?? "")) {
      return c.json({
        events: events.map(({ seq, rollout_id, attempt_id, type, event_key, created_at }) => ({
          seq,
          rollout_id,
          attempt_id,
          type,
          event_key,
          created_at,
        })),
      });
    }
    return c.json({ events: events.map(eventToWire) });
  });

  app.get("/v1/rollouts/:id/events", async (c) => {
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
    const key = keyFromHeaders(c.req.raw.headers);
    if (key?.startsWith(CAPABILITY_PREFIX) && query.attempt_id === undefined) {
      throw new StoreError(
        "forbidden",
        "attempt: a capability token may only read its own attempt; pass attempt=<attempt_id>",
      );
    }
    requirePrincipal(
      c,
      keys,
      query.attempt_id === undefined ? undefined : { rollout_id: id, attempt_id: query.attempt_id },
      "attempt",
    );
    const events = await store.listEvents(id, { ...query, limit: query.limit + 1 });
    const more = events.length > query.limit;
    const items = more ? events.slice(0, query.limit) : events;
    return c.json({
      items: items.map(eventToWire),
      next_after_seq: more ? items[items.length - 1].seq : null,
    });
  });

  // ---- models -----------------------------------------------------------------------------

  app.post("/v1/models", async (c) => {
    admin(c);
    const model = parseOrThrow(RegisterModelRequestSchema, await readJson(c, limits));
    const stored = await store.upsertModel(model);
    notifier.notify();
    return c.json(stored);
  });

  app.get("/v1/models", async (c) => {
    admin(c);
    return c.json({ models: await store.listModels() });
  });

  app.get("/v1/models/:name", async (c) => {
    admin(c);
    const name = c.req.param("name");
    const model = await store.getModel(name);
    if (!model) throw new StoreError("not_found", `name: no model '${name}'`);
    return c.json(model);
  });

  // ---- phase ------------------------------------------------------------------------------

  app.get("/v1/phase", (c) => {
    admin(c);
    return c.json(phase.snapshot());
  });

  app.post("/v1/phase", async (c) => {
    admin(c);
    const req = parseOrThrow(PhaseRequestSchema, await readJson(c, limits));
    phase.setPhase(req.phase);
    if (req.drain && req.phase === "update") {
      let timer: ReturnType<typeof setTimeout> | undefined;
      const timedOut = await Promise.race([
        phase.waitForDrain().then(() => false),
        new Promise<boolean>((resolve) => {
          timer = setTimeout(() => resolve(true), req.drain_timeout_ms);
        }),
      ]);
      clearTimeout(timer);
      if (timedOut) {
        throw new StoreError(
          "timeout",
          `drain_timeout_ms: ${phase.snapshot().in_flight} call(s) still in flight after ` +
            `${req.drain_timeout_ms} ms`,
        );
      }
    }
    return c.json(phase.snapshot());
  });

  // ---- change feed ------------------------------------------------------------------------

  app.get("/v1/stream", (c) => {
    admin(c);
    const url = new URL(c.req.url);
    const fromQuery = url.searchParams.get("after") ?? c.req.header("last-event-id") ?? "0";
    return changeFeedResponse({
      store,
      after: parseAfterSeq(fromQuery),
      signals: [c.req.raw.signal, options.signal],
      preamble: ": reins gateway change feed\n\n",
      wait: async (signal) => {
        const started = Date.now();
        await notifier.wait(pollMs, signal);
        return Date.now() - started;
      },
    });
  });

  for (const mount of options.mounts ?? []) app.route(mount.path, mount.app);
  return app;
}

function errorResponse(c: Context, status: number, code: string, message: string): Response {
  return c.json({ error: { code, message } }, status as 400);
}

function isObject(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function checkBatch(field: string, n: number, limits: GatewayLimits): void {
  if (n > limits.max_batch) {
    throw new StoreError(
      "too_large",
      `${field}: at most ${limits.max_batch} per request, got ${n}`,
    );
  }
}

function checkPage(limit: number, limits: GatewayLimits): void {
  if (limit > limits.max_page) {
    throw new ValidationError("limit", [`limit: at most ${limits.max_page}, got ${limit}`]);
  }
}

/**
 * Checks the request's key. `need: "admin"` accepts only the admin key; `need: "attempt"`
 * accepts the admin key or the capability token of `scope`.
 */
function requirePrincipal(
  c: Context,
  keys: { adminKey: string; secret: string },
  scope: { rollout_id: string; attempt_id: string } | undefined,
  need: "admin" | "attempt",
): Principal {
  const key = keyFromHeaders(c.req.raw.headers);
  if (!key) {
    throw new StoreError(
      "unauthorized",
      "authorization: missing API key (send Authorization: Bearer <key> or x-api-key)",
    );
  }
  const principal = authorize(keys, key, need === "attempt" ? scope : undefined);
  if (principal) return principal;
  if (key.startsWith(CAPABILITY_PREFIX)) {
    throw new StoreError(
      "forbidden",
      need === "admin"
        ? "authorization: a capability token cannot use the control plane"
        : "authorization: this capability token does not belong to this rollout/attempt",
    );
  }
  throw new StoreError("unauthorized", "authorization: invalid API key");
}

/** Reads a JSON body under the size limit; 413 above it, 400 naming `body` when malformed. */
async function readJson(c: Context, limits: GatewayLimits): Promise<unknown> {
  const max = limits.max_body_bytes;
  const declared = Number(c.req.header("content-length") ?? NaN);
  if (declared > max) {
    await c.req.raw.body?.cancel();
    throw new StoreError("too_large", `body: ${declared} bytes exceeds the limit of ${max} bytes`);
  }
  const chunks: Uint8Array[] = [];
  let size = 0;
  const reader = c.req.raw.body?.getReader();
  while (reader) {
    const { value, done } = await reader.read();
    if (done) break;
    size += value.length;
    if (size > max) {
      await reader.cancel();
      throw new StoreError("too_large", `body: more than the limit of ${max} bytes`);
    }
    chunks.push(value);
  }
  const bytes = new Uint8Array(size);
  let offset = 0;
  for (const chunk of chunks) {
    bytes.set(chunk, offset);
    offset += chunk.length;
  }
  const text = new TextDecoder().decode(bytes);
  if (!text.trim()) throw new ValidationError("body", ["body: empty, expected a JSON object"]);
  try {
    return JSON.parse(text);
  } catch (err) {
    throw new ValidationError("body", [
      `body: malformed JSON (${err instanceof Error ? err.message : String(err)})`,
    ]);
  }
}
