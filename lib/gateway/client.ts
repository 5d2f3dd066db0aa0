/**
 * Typed HTTP client of the gateway, used by the controller, the training loop and notebooks.
 * Every answer is validated with the `lib/schema` response schemas before it is returned;
 * error answers and transport failures throw an {@link HttpError} (status 0: unreachable).
 *
 * Network errors and 502/503/504 answers are retried with jittered exponential backoff
 * (`lib/http/retry.ts`), for at least `retries` tries and for as long as the outage has lasted
 * less than `outageWindowMs` (default 60 s), so a restarting gateway or a worker restarting
 * behind the proxy is ridden out instead of failing a run. That is safe
 * because every endpoint is idempotent, and the client makes the non-obvious cases so: it
 * fills in a `rollout_id` for each created rollout, a `claim_key` for each claim and an
 * `event_key` for each posted event when the caller gave none.
 *
 * @module
 */
import type { z } from "zod";
import { CAPABILITY_PREFIX } from "../http/credentials.ts";
import { HttpError, httpErrorFrom } from "../util/error.ts";
import { backoffDelay } from "../http/retry.ts";
import { sleep } from "../util/time.ts";
import { readSse } from "../http/sse.ts";
import { HttpClient } from "../http/client.ts";
import {
  AGENT_EVENT_KEY_PREFIX,
  type Attempt,
  AttemptSchema,
  AttemptTokenResponseSchema,
  type Change,
  ChangeSchema,
  type ClaimedWire,
  type ClaimRequest,
  ClaimResponseSchema,
  type CreateRolloutsResponse,
  CreateRolloutsResponseSchema,
  type EventAck,
  type EventInput,
  EventPageSchema,
  ExpireLeasesResponseSchema,
  type Health,
  HealthSchema,
  type ListEventsQuery,
  type ListRolloutsQuery,
  type Model,
  ModelListSchema,
  ModelSchema,
  parseOrThrow,
  type Phase,
  type PhaseSnapshot,
  PhaseSnapshotSchema,
  PostEventsMinimalResponseSchema,
  PostEventsResponseSchema,
  type RegisterModelRequest,
  type RenewLeaseRequest,
  type Rollout,
  type RolloutCreate,
  type RolloutEvent,
  RolloutPageSchema,
  RolloutSchema,
  type TransitionRequest,
} from "../schema.ts";
import type { Page } from "./store.ts";
import { eventFromWire, type WireEvent } from "./wire.ts";

/** Options of {@link GatewayClient}. */
export interface GatewayClientOptions {
  /** Admin key or a capability token; sent as `Authorization: Bearer …`. */
  apiKey?: string;
  /** Retries after the first try on network errors and 502/503/504 (default 4). */
  retries?: number;
  /**
   * How long an outage is ridden out (ms from the first failed try of a call): failed tries are
   * retried, with jittered backoff capped at 5 s, until it has passed (and `retries` are used).
   * Default 60 000, or 0 when `retries` is given (a caller that bounds its retries means it).
   */
  outageWindowMs?: number;
  /** First backoff delay in ms (doubles each retry, default 100). */
  backoffMs?: number;
  /** Per-request timeout in ms (default 60 000; streams are exempt). */
  timeoutMs?: number;
  /**
   * Keep connections to a plain-`http:` gateway between calls, written and read by reins' own
   * HTTP/1.1 client (`lib/http/client.ts`) instead of `fetch`: ~150 µs less CPU per call on the
   * caller's thread, which counts when a reporter posts event after event on the gateway's
   * machine. {@link GatewayClient.close} ends them. Default false (`fetch`, nothing to close);
   * `https:` URLs always go to `fetch`.
   */
  keepAlive?: boolean;
}

/**
 * The gateway client's error: {@link HttpError} itself (kept as a name for existing code).
 *
 * @deprecated Use `HttpError` from `lib/util/error.ts`.
 */
export const GatewayError = HttpError;
/** The gateway client's error (see {@link HttpError}). */
export type GatewayError = HttpError;

/** Per-call options: a capability token instead of the client's key, and an abort signal. */
export interface CallOptions {
  token?: string;
  signal?: AbortSignal;
}

const RETRY_STATUSES = new Set([502, 503, 504]);

/**
 * Typed client of every gateway endpoint.
 *
 * @example
 * ```ts
 * import { GatewayClient } from "./client.ts";
 * import { startGateway } from "./server.ts";
 * // An in-process gateway; usually `new GatewayClient("http://127.0.0.1:8420", { apiKey })`.
 * const server = await startGateway();
 * const gw = new GatewayClient(server.url, { apiKey: server.adminKey });
 * await gw.createRollouts([{ input: { question: "2+2" }, group_id: "g1" }]);
 * for (const { rollout, attempt, token } of await gw.claim({ worker: "me", limit: 2 })) {
 *   // The harness reports with its token; the reward comes from the verifier (admin key).
 *   await gw.postEvents(rollout.rollout_id, attempt.attempt_id, [
 *     { type: "custom", payload: { name: "progress", data: { step: 1 } } },
 *   ], { token });
 *   await gw.postEvents(rollout.rollout_id, attempt.attempt_id, [
 *     { type: "reward", payload: { value: 1 } },
 *   ]);
 *   await gw.transition(rollout.rollout_id, { to: "succeeded", expected_version: rollout.version });
 * }
 * await server.close();
 * ```
 *
 * A reporter that posts many events keeps its connections (`keepAlive`) and closes them:
 *
 * ```ts
 * import assert from "node:assert/strict";
 * import { GatewayClient } from "./client.ts";
 * import { startGateway } from "./server.ts";
 * const server = await startGateway();
 * const gw = new GatewayClient(server.url, { apiKey: server.adminKey, keepAlive: true });
 * const [{ rollout_id }] = (await gw.createRollouts([{ input: 1 }])).rollouts;
 * const [{ attempt }] = await gw.claim({ worker: "me", limit: 1 });
 * for (let step = 0; step < 3; step++) {
 *   await gw.postEvents(rollout_id, attempt.attempt_id, [
 *     { type: "log", payload: { stream: "stdout", text: `step ${step}` } },
 *   ]);
 * }
 * assert.equal(gw.connectionsOpened, 1); // five calls, one connection
 * await gw.close();
 * await server.close();
 * ```
 */
export class GatewayClient {
  readonly baseUrl: string;
  readonly #apiKey: string | undefined;
  /** True when the key is a capability token (the agent's). */
  readonly #agent: boolean;
  readonly #retries: number;
  readonly #backoffMs: number;
  readonly #timeoutMs: number;
  readonly #outageWindowMs: number;
  readonly #http: HttpClient | null;

  constructor(baseUrl: string, options: GatewayClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.#apiKey = options.apiKey;
    this.#agent = options.apiKey?.startsWith(CAPABILITY_PREFIX) ?? false;
    this.#retries = options.retries ?? 4;
    this.#backoffMs = options.backoffMs ?? 100;
    this.#timeoutMs = options.timeoutMs ?? 60_000;
    this.#outageWindowMs = options.outageWindowMs ??
      (options.retries === undefined ? 60_000 : 0);
    // As many idle connections as a reporter's concurrent posts (64 writers in the bench).
    this.#http = options.keepAlive
      ? new HttpClient({ keepAlive: true, maxIdlePerOrigin: 256, label: "gateway" })
      : null;
  }

  /** Connections a keep-alive client has opened so far (0 without `keepAlive`). */
  get connectionsOpened(): number {
    return this.#http?.opened ?? 0;
  }

  /** Closes a keep-alive client's connections (nothing to do without `keepAlive`). */
  async close(): Promise<void> {
    await this.#http?.close();
  }

  /** `GET /v1/health` (no key needed). */
  health(options?: CallOptions): Promise<Health> {
    return this.#json(HealthSchema, "GET", "/v1/health", undefined, options);
  }

  /** `POST /v1/rollouts`; missing `rollout_id`s are generated here so retries stay idempotent. */
  createRollouts(creates: RolloutCreate[], options?: CallOptions): Promise<CreateRolloutsResponse> {
    const rollouts = creates.map((c) => c.rollout_id ? c : { ...c, rollout_id: newId("r-") });
    return this.#json(CreateRolloutsResponseSchema, "POST", "/v1/rollouts", { rollouts }, options);
  }

  /** `GET /v1/rollouts/:id`. */
  getRollout(id: string, options?: CallOptions): Promise<Rollout> {
    return this.#json(RolloutSchema, "GET", `/v1/rollouts/${enc(id)}`, undefined, options);
  }

  /** `GET /v1/rollouts`: one page; pass `next_cursor` back as `after` for the next one. */
  listRollouts(query: ListRolloutsQuery = {}, options?: CallOptions): Promise<Page<Rollout>> {
    const params = new URLSearchParams();
    if (query.status) {
      params.set("status", Array.isArray(query.status) ? query.status.join(",") : query.status);
    }
    if (query.mode) params.set("mode", query.mode);
    if (query.group_id) params.set("group_id", query.group_id);
    for (const [k, v] of Object.entries(query.labels ?? {})) params.append(`label.${k}`, v);
    if (query.order) params.set("order", query.order);
    if (query.after) params.set("after", query.after);
    if (query.limit !== undefined) params.set("limit", String(query.limit));
    return this.#json(RolloutPageSchema, "GET", `/v1/rollouts?${params}`, undefined, options);
  }

  /**
   * Every rollout matching `query`, page after page, in `query.order` (oldest first unless
   * `order: "desc"`).
   *
   * @example
   * ```ts ignore
   * import { GatewayClient } from "./client.ts";
   * const gw = new GatewayClient("http://127.0.0.1:8420", { apiKey: "admin-key" });
   * for await (const r of gw.iterateRollouts({ order: "desc", labels: { sandbox: "gpu" } })) {
   *   console.log(r.rollout_id, r.status); // newest first
   * }
   * ```
   */
  async *iterateRollouts(
    query: ListRolloutsQuery = {},
    options?: CallOptions,
  ): AsyncGenerator<Rollout> {
    let after = query.after;
    while (true) {
      const page = await this.listRollouts({ ...query, after }, options);
      yield* page.items;
      if (!page.next_cursor) return;
      after = page.next_cursor;
    }
  }

  /**
   * `POST /v1/rollouts/claim`: up to `limit` rollouts with new attempts and their tokens,
   * oldest first; with `labels`, only rollouts holding every given label.
   *
   * @example
   * ```ts ignore
   * import { GatewayClient } from "./client.ts";
   * const gw = new GatewayClient("http://127.0.0.1:8420", { apiKey: "admin-key" });
   * const claimed = await gw.claim({ worker: "gpu-ctl", limit: 2, labels: { sandbox: "gpu" } });
   * ```
   */
  async claim(request: ClaimRequest, options?: CallOptions): Promise<ClaimedWire[]> {
    const body = { ...request, claim_key: request.claim_key ?? newId("c-") };
    const out = await this.#json(ClaimResponseSchema, "POST", "/v1/rollouts/claim", body, options);
    return out.claimed;
  }

  /** `POST /v1/rollouts/:id/attempts/:aid/lease`: extends the attempt's lease. */
  renewLease(
    rolloutId: string,
    attemptId: string,
    request: RenewLeaseRequest,
    options?: CallOptions,
  ): Promise<Attempt> {
    return this.#json(
      AttemptSchema,
      "POST",
      `/v1/rollouts/${enc(rolloutId)}/attempts/${enc(attemptId)}/lease`,
      request,
      options,
    );
  }

  /** `PATCH /v1/rollouts/:id`: a guarded status transition (409 → {@link HttpError}). */
  transition(
    rolloutId: string,
    request: TransitionRequest,
    options?: CallOptions,
  ): Promise<Rollout> {
    return this.#json(RolloutSchema, "PATCH", `/v1/rollouts/${enc(rolloutId)}`, request, options);
  }

  /** `POST /v1/leases/expire`: sweeps expired leases now; returns the rollouts it changed. */
  async expireLeases(options?: CallOptions): Promise<Rollout[]> {
    const out = await this.#json(
      ExpireLeasesResponseSchema,
      "POST",
      "/v1/leases/expire",
      {},
      options,
    );
    return out.rollouts;
  }

  /**
   * `POST /v1/rollouts/:id/attempts/:aid/events`. Events without `event_key` get one here so a
   * retried post never duplicates them. Returns the stored events (typed arrays).
   */
  async postEvents(
    rolloutId: string,
    attemptId: string,
    events: EventInput[],
    options?: CallOptions,
  ): Promise<RolloutEvent[]> {
    const path = eventsPath(rolloutId, attemptId);
    const out = await this.#postEvents(PostEventsResponseSchema, path, events, options);
    return out.events.map((e) => eventFromWire(e as WireEvent));
  }

  /**
   * Like {@link postEvents} but answered with `Prefer: return=minimal`: one {@link EventAck}
   * (seq, type, event_key, …) per event instead of the stored events, so a model call's token
   * arrays are not sent back. The fast path for high-volume writers.
   */
  async appendEvents(
    rolloutId: string,
    attemptId: string,
    events: EventInput[],
    options?: CallOptions,
  ): Promise<EventAck[]> {
    const out = await this.#postEvents(
      PostEventsMinimalResponseSchema,
      eventsPath(rolloutId, attemptId),
      events,
      options,
      { prefer: "return=minimal" },
    );
    return out.events;
  }

  /** Posts events, giving each one without `event_key` a fresh key (so a retry is idempotent). */
  #postEvents<S extends z.ZodType>(
    schema: S,
    path: string,
    events: EventInput[],
    options?: CallOptions,
    headers?: Record<string, string>,
  ): Promise<z.infer<S>> {
    // A capability token's keys live in the agent's namespace (the store refuses others): the
    // client's own key, or a token passed for this one call.
    const prefix = this.#agent || options?.token?.startsWith(CAPABILITY_PREFIX)
      ? AGENT_EVENT_KEY_PREFIX
      : "";
    const keyed = events.map((e) => e.event_key ? e : { ...e, event_key: newId(`${prefix}e-`) });
    return this.#json(schema, "POST", path, { events: keyed }, options, headers);
  }

  /**
   * `GET /v1/rollouts/:id/events`, in `seq` order, with token fields as typed arrays. Without a
   * `limit` it follows the pages to the end; with one it returns that single page.
   */
  async listEvents(
    rolloutId: string,
    query: ListEventsQuery = {},
    options?: CallOptions,
  ): Promise<RolloutEvent[]> {
    const out: RolloutEvent[] = [];
    let afterSeq = query.after_seq;
    while (true) {
      const params = new URLSearchParams();
      if (query.type) {
        params.set("type", Array.isArray(query.type) ? query.type.join(",") : query.type);
      }
      if (query.attempt_id) params.set("attempt", query.attempt_id);
      if (afterSeq !== undefined) params.set("after_seq", String(afterSeq));
      if (query.limit !== undefined) params.set("limit", String(query.limit));
      const page = await this.#json(
        EventPageSchema,
        "GET",
        `/v1/rollouts/${enc(rolloutId)}/events?${params}`,
        undefined,
        options,
      );
      for (const e of page.items) out.push(eventFromWire(e as WireEvent));
      if (query.limit !== undefined || page.next_after_seq === null) return out;
      afterSeq = page.next_after_seq;
    }
  }

  /** `POST /v1/models`: registers or updates a model and its policy version. */
  registerModel(model: RegisterModelRequest, options?: CallOptions): Promise<Model> {
    return this.#json(ModelSchema, "POST", "/v1/models", model, options);
  }

  /** `GET /v1/models`. */
  async listModels(options?: CallOptions): Promise<Model[]> {
    const out = await this.#json(ModelListSchema, "GET", "/v1/models", undefined, options);
    return out.models;
  }

  /** `GET /v1/models/:name`. */
  getModel(name: string, options?: CallOptions): Promise<Model> {
    return this.#json(ModelSchema, "GET", `/v1/models/${enc(name)}`, undefined, options);
  }

  /** `GET /v1/phase`. */
  getPhase(options?: CallOptions): Promise<PhaseSnapshot> {
    return this.#json(PhaseSnapshotSchema, "GET", "/v1/phase", undefined, options);
  }

  /**
   * `POST /v1/phase`. With `drain: true` it answers once no LLM call is in flight (use it when
   * entering `update` before training).
   */
  setPhase(
    phase: Phase,
    request: { drain?: boolean; drain_timeout_ms?: number } = {},
    options?: CallOptions,
  ): Promise<PhaseSnapshot> {
    return this.#json(PhaseSnapshotSchema, "POST", "/v1/phase", { phase, ...request }, options);
  }

  /** `GET /v1/rollouts/:id/attempts/:aid/token` (admin only): the attempt's capability token. */
  async attemptToken(rolloutId: string, attemptId: string, options?: CallOptions): Promise<string> {
    const out = await this.#json(
      AttemptTokenResponseSchema,
      "GET",
      `/v1/rollouts/${enc(rolloutId)}/attempts/${enc(attemptId)}/token`,
      undefined,
      options,
    );
    return out.token;
  }

  /**
   * `GET /v1/stream`: the change feed after `after` (default: from the start), live. It
   * reconnects after network errors from the last seen `seq`; it ends when `signal` aborts.
   *
   * @example
   * ```ts
   * import { GatewayClient } from "./client.ts";
   * import { startGateway } from "./server.ts";
   * const server = await startGateway();
   * const gw = new GatewayClient(server.url, { apiKey: server.adminKey });
   * await gw.createRollouts([{ rollout_id: "r1", input: {} }]);
   * const [{ attempt }] = await gw.claim({ worker: "me", limit: 1 });
   * // The verifier (admin key here) posts the reward; the attempt's token could not.
   * await gw.postEvents("r1", attempt.attempt_id, [{ type: "reward", payload: { value: 1 } }]);
   * const stop = new AbortController();
   * for await (const change of gw.stream({ signal: stop.signal })) {
   *   if (change.kind === "event" && change.type === "reward") stop.abort();
   * }
   * await server.close();
   * ```
   */
  async *stream(
    options: { after?: number; signal?: AbortSignal; token?: string } = {},
  ): AsyncGenerator<Change> {
    let after = options.after ?? 0;
    let failures = 0;
    let firstFailure = 0;
    const giveUp = () => {
      if (failures++ === 0) firstFailure = performance.now();
      return failures > this.#retries && performance.now() - firstFailure >= this.#outageWindowMs;
    };
    while (!options.signal?.aborted) {
      let res: Response;
      try {
        res = await fetch(`${this.baseUrl}/v1/stream?after=${after}`, {
          headers: this.#headers(options.token, false),
          signal: options.signal,
        });
      } catch (err) {
        if (options.signal?.aborted) return;
        if (giveUp()) throw networkError(err);
        await sleep(this.#backoff(failures), options.signal);
        continue;
      }
      if (!res.ok) throw await httpErrorFrom(res, "GET /v1/stream");
      failures = 0;
      try {
        for await (const message of readSse(res.body!)) {
          if (message.event !== "change") continue;
          const change = parseOrThrow(ChangeSchema, JSON.parse(message.data), "change");
          after = change.seq;
          yield change;
        }
      } catch (err) {
        if (options.signal?.aborted) return;
        if (err instanceof HttpError) throw err;
        if (giveUp()) throw networkError(err);
        await sleep(this.#backoff(failures), options.signal);
      }
    }
  }

  #headers(token: string | undefined, json: boolean): Record<string, string> {
    const headers: Record<string, string> = {};
    const key = token ?? this.#apiKey;
    if (key) headers.authorization = `Bearer ${key}`;
    if (json) headers["content-type"] = "application/json";
    return headers;
  }

  #backoff(retry: number): number {
    return backoffDelay(retry, { baseMs: this.#backoffMs, maxMs: 5_000 });
  }

  async #json<S extends z.ZodType>(
    schema: S,
    method: string,
    path: string,
    body: unknown,
    options?: CallOptions,
    extraHeaders: Record<string, string> = {},
  ): Promise<z.infer<S>> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers = { ...this.#headers(options?.token, payload !== undefined), ...extraHeaders };
    let firstFailure: number | null = null;
    const giveUp = (attempt: number) => {
      firstFailure ??= performance.now();
      return attempt >= this.#retries &&
        performance.now() - firstFailure >= this.#outageWindowMs;
    };
    for (let attempt = 0;; attempt++) {
      const signals = [AbortSignal.timeout(this.#timeoutMs)];
      if (options?.signal) signals.push(options.signal);
      let res: Response;
      try {
        const init = { method, headers, body: payload, signal: AbortSignal.any(signals) };
        res = this.#http
          ? await this.#http.fetch(this.baseUrl + path, init)
          : await fetch(this.baseUrl + path, init);
      } catch (err) {
        if (options?.signal?.aborted || giveUp(attempt)) throw networkError(err);
        await sleep(this.#backoff(attempt + 1), options?.signal);
        continue;
      }
      if (res.ok) return parseOrThrow(schema, await res.json(), "response");
      if (RETRY_STATUSES.has(res.status) && !giveUp(attempt)) {
        await res.body?.cancel();
        await sleep(this.#backoff(attempt + 1), options?.signal);
        continue;
      }
      throw await httpErrorFrom(res, `${method} ${path.split("?")[0]}`);
    }
  }
}

function networkError(err: unknown): HttpError {
  const message = err instanceof Error ? err.message : String(err);
  return new HttpError(0, `gateway unreachable: ${message}`, { code: "network", cause: err });
}

function enc(id: string): string {
  return encodeURIComponent(id);
}

function eventsPath(rolloutId: string, attemptId: string): string {
  return `/v1/rollouts/${enc(rolloutId)}/attempts/${enc(attemptId)}/events`;
}

function newId(prefix: string): string {
  return prefix + crypto.randomUUID();
}
