/**
 * Typed HTTP client of the gateway, used by the controller, the training loop and notebooks.
 *
 * Network errors and 502/503/504 answers are retried with exponential backoff. That is safe
 * because every endpoint is idempotent, and the client makes the non-obvious cases so: it
 * fills in a `rollout_id` for each created rollout, a `claim_key` for each claim and an
 * `event_key` for each posted event when the caller gave none.
 *
 * @module
 */
import type {
  Attempt,
  Change,
  ClaimedWire,
  ClaimRequest,
  CreateRolloutsResponse,
  EventAck,
  EventInput,
  Health,
  ListEventsQuery,
  ListRolloutsQuery,
  Model,
  Phase,
  PhaseSnapshot,
  RegisterModelRequest,
  RenewLeaseRequest,
  Rollout,
  RolloutCreate,
  RolloutEvent,
  TransitionRequest,
} from "../schema.ts";
import type { GatewayErrorCode, Page } from "./store.ts";
import { eventFromWire, type WireEvent } from "./wire.ts";

/** Options of {@link GatewayClient}. */
export interface GatewayClientOptions {
  /** Admin key or a capability token; sent as `Authorization: Bearer …`. */
  apiKey?: string;
  /** Retries after the first try on network errors and 502/503/504 (default 4). */
  retries?: number;
  /** First backoff delay in ms (doubles each retry, default 100). */
  backoffMs?: number;
  /** Per-request timeout in ms (default 60 000; streams are exempt). */
  timeoutMs?: number;
}

/** An error answer of the gateway (`{error: {code, message}}`) or a transport failure. */
export class GatewayError extends Error {
  /** HTTP status (0 for a transport failure after all retries). */
  readonly status: number;
  readonly code: GatewayErrorCode | "network";
  constructor(status: number, code: GatewayErrorCode | "network", message: string) {
    super(message);
    this.name = "GatewayError";
    this.status = status;
    this.code = code;
  }
}

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
 *   await gw.postEvents(rollout.rollout_id, attempt.attempt_id, [
 *     { type: "reward", payload: { value: 1 } },
 *   ], { token });
 *   await gw.transition(rollout.rollout_id, { to: "succeeded", expected_version: rollout.version });
 * }
 * await server.close();
 * ```
 */
export class GatewayClient {
  readonly baseUrl: string;
  readonly #apiKey: string | undefined;
  readonly #retries: number;
  readonly #backoffMs: number;
  readonly #timeoutMs: number;

  constructor(baseUrl: string, options: GatewayClientOptions = {}) {
    this.baseUrl = baseUrl.replace(/\/+$/, "");
    this.#apiKey = options.apiKey;
    this.#retries = options.retries ?? 4;
    this.#backoffMs = options.backoffMs ?? 100;
    this.#timeoutMs = options.timeoutMs ?? 60_000;
  }

  /** `GET /v1/health` (no key needed). */
  health(options?: CallOptions): Promise<Health> {
    return this.#json("GET", "/v1/health", undefined, options);
  }

  /** `POST /v1/rollouts`; missing `rollout_id`s are generated here so retries stay idempotent. */
  createRollouts(creates: RolloutCreate[], options?: CallOptions): Promise<CreateRolloutsResponse> {
    const rollouts = creates.map((c) => c.rollout_id ? c : { ...c, rollout_id: newId("r-") });
    return this.#json("POST", "/v1/rollouts", { rollouts }, options);
  }

  /** `GET /v1/rollouts/:id`. */
  getRollout(id: string, options?: CallOptions): Promise<Rollout> {
    return this.#json("GET", `/v1/rollouts/${enc(id)}`, undefined, options);
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
    return this.#json("GET", `/v1/rollouts?${params}`, undefined, options);
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
    const out = await this.#json<{ claimed: ClaimedWire[] }>(
      "POST",
      "/v1/rollouts/claim",
      body,
      options,
    );
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
      "POST",
      `/v1/rollouts/${enc(rolloutId)}/attempts/${enc(attemptId)}/lease`,
      request,
      options,
    );
  }

  /** `PATCH /v1/rollouts/:id`: a guarded status transition (409 → {@link GatewayError}). */
  transition(
    rolloutId: string,
    request: TransitionRequest,
    options?: CallOptions,
  ): Promise<Rollout> {
    return this.#json("PATCH", `/v1/rollouts/${enc(rolloutId)}`, request, options);
  }

  /** `POST /v1/leases/expire`: sweeps expired leases now; returns the rollouts it changed. */
  async expireLeases(options?: CallOptions): Promise<Rollout[]> {
    const out = await this.#json<{ rollouts: Rollout[] }>(
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
    const keyed = events.map((e) => e.event_key ? e : { ...e, event_key: newId("e-") });
    const out = await this.#json<{ events: WireEvent[] }>(
      "POST",
      `/v1/rollouts/${enc(rolloutId)}/attempts/${enc(attemptId)}/events`,
      { events: keyed },
      options,
    );
    return out.events.map(eventFromWire);
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
    const keyed = events.map((e) => e.event_key ? e : { ...e, event_key: newId("e-") });
    const out = await this.#json<{ events: EventAck[] }>(
      "POST",
      `/v1/rollouts/${enc(rolloutId)}/attempts/${enc(attemptId)}/events`,
      { events: keyed },
      options,
      { prefer: "return=minimal" },
    );
    return out.events;
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
      const page = await this.#json<{ items: WireEvent[]; next_after_seq: number | null }>(
        "GET",
        `/v1/rollouts/${enc(rolloutId)}/events?${params}`,
        undefined,
        options,
      );
      for (const e of page.items) out.push(eventFromWire(e));
      if (query.limit !== undefined || page.next_after_seq === null) return out;
      afterSeq = page.next_after_seq;
    }
  }

  /** `POST /v1/models`: registers or updates a model and its policy version. */
  registerModel(model: RegisterModelRequest, options?: CallOptions): Promise<Model> {
    return this.#json("POST", "/v1/models", model, options);
  }

  /** `GET /v1/models`. */
  async listModels(options?: CallOptions): Promise<Model[]> {
    const out = await this.#json<{ models: Model[] }>("GET", "/v1/models", undefined, options);
    return out.models;
  }

  /** `GET /v1/models/:name`. */
  getModel(name: string, options?: CallOptions): Promise<Model> {
    return this.#json("GET", `/v1/models/${enc(name)}`, undefined, options);
  }

  /** `GET /v1/phase`. */
  getPhase(options?: CallOptions): Promise<PhaseSnapshot> {
    return this.#json("GET", "/v1/phase", undefined, options);
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
    return this.#json("POST", "/v1/phase", { phase, ...request }, options);
  }

  /** `GET /v1/rollouts/:id/attempts/:aid/token` (admin only): the attempt's capability token. */
  async attemptToken(rolloutId: string, attemptId: string, options?: CallOptions): Promise<string> {
    const out = await this.#json<{ token: string }>(
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
   * const [{ attempt, token }] = await gw.claim({ worker: "me", limit: 1 });
   * await gw.postEvents("r1", attempt.attempt_id, [{ type: "reward", payload: { value: 1 } }], {
   *   token,
   * });
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
    while (!options.signal?.aborted) {
      let res: Response;
      try {
        res = await fetch(`${this.baseUrl}/v1/stream?after=${after}`, {
          headers: this.#headers(options.token, false),
          signal: options.signal,
        });
      } catch (err) {
        if (options.signal?.aborted) return;
        if (++failures > this.#retries) throw networkError(err);
        await sleep(this.#backoff(failures), options.signal);
        continue;
      }
      if (!res.ok) throw await errorFrom(res);
      failures = 0;
      try {
        for await (const change of parseSse(res.body!)) {
          after = change.seq;
          yield change;
        }
      } catch (err) {
        if (options.signal?.aborted) return;
        if (++failures > this.#retries) throw networkError(err);
        await sleep(this.#backoff(failures), options.signal);
      }
    }
  }

  #headers(token: string | undefined, json: boolean): Headers {
    const headers = new Headers();
    const key = token ?? this.#apiKey;
    if (key) headers.set("authorization", `Bearer ${key}`);
    if (json) headers.set("content-type", "application/json");
    return headers;
  }

  #backoff(attempt: number): number {
    const base = this.#backoffMs * 2 ** (attempt - 1);
    return Math.min(5_000, base) * (0.5 + Math.random() / 2);
  }

  async #json<T>(
    method: string,
    path: string,
    body: unknown,
    options?: CallOptions,
    extraHeaders: Record<string, string> = {},
  ): Promise<T> {
    const payload = body === undefined ? undefined : JSON.stringify(body);
    const headers = this.#headers(options?.token, payload !== undefined);
    for (const [k, v] of Object.entries(extraHeaders)) headers.set(k, v);
    for (let attempt = 0;; attempt++) {
      const signals = [AbortSignal.timeout(this.#timeoutMs)];
      if (options?.signal) signals.push(options.signal);
      let res: Response;
      try {
        res = await fetch(this.baseUrl + path, {
          method,
          headers,
          body: payload,
          signal: AbortSignal.any(signals),
        });
      } catch (err) {
        if (options?.signal?.aborted || attempt >= this.#retries) throw networkError(err);
        await sleep(this.#backoff(attempt + 1), options?.signal);
        continue;
      }
      if (res.ok) return await res.json() as T;
      if (RETRY_STATUSES.has(res.status) && attempt < this.#retries) {
        await res.body?.cancel();
        await sleep(this.#backoff(attempt + 1), options?.signal);
        continue;
      }
      throw await errorFrom(res);
    }
  }
}

async function errorFrom(res: Response): Promise<GatewayError> {
  const text = await res.text();
  try {
    const parsed = JSON.parse(text) as { error?: { code?: GatewayErrorCode; message?: string } };
    if (parsed.error?.message) {
      return new GatewayError(res.status, parsed.error.code ?? "internal", parsed.error.message);
    }
  } catch {
    // Not our error body (a proxy in between); fall through with the raw text.
  }
  return new GatewayError(res.status, "internal", `HTTP ${res.status}: ${text.slice(0, 500)}`);
}

function networkError(err: unknown): GatewayError {
  const message = err instanceof Error ? err.message : String(err);
  return new GatewayError(0, "network", `gateway unreachable: ${message}`);
}

/** Parses a `text/event-stream` body into changes (only `data:` lines matter here). */
async function* parseSse(body: ReadableStream<Uint8Array>): AsyncGenerator<Change> {
  const reader = body.getReader();
  const decoder = new TextDecoder();
  let buffer = "";
  try {
    while (true) {
      const { value, done } = await reader.read();
      if (done) return;
      buffer += decoder.decode(value, { stream: true });
      let end: number;
      while ((end = buffer.indexOf("\n\n")) >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split("\n").filter((l) => l.startsWith("data:"))
          .map((l) => l.slice(5).trimStart()).join("\n");
        if (data) yield JSON.parse(data) as Change;
      }
    }
  } finally {
    await reader.cancel().catch(() => {});
  }
}

function sleep(ms: number, signal?: AbortSignal): Promise<void> {
  return new Promise((resolve) => {
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      signal?.removeEventListener("abort", done);
      resolve();
    }
    signal?.addEventListener("abort", done, { once: true });
  });
}

function enc(id: string): string {
  return encodeURIComponent(id);
}

function newId(prefix: string): string {
  return prefix + crypto.randomUUID();
}
