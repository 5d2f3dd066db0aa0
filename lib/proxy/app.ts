/**
 * The proxy's Hono app, mounted by the gateway at `/proxy`: a harness's base URL is
 * `{gateway}/proxy/{rollout_id}/{attempt_id}/v1` (OpenAI flavors) or
 * `{gateway}/proxy/{rollout_id}/{attempt_id}` (Anthropic). Every call is admitted by the
 * attempt's capability token (or the admin key) while the attempt is live (`access.ts`), read
 * under a byte limit and decoded and tokenized (`prepare.ts`), held during the `update` phase
 * (`call.ts`), served by the policy through the upstream pool, recorded as a `model_request`
 * event through the store before its final byte (`capture.ts`), and answered in the caller's
 * own wire format (`respond_json.ts`, `respond_stream.ts`).
 *
 * @module
 */
import { Hono } from "hono";
import type { Context } from "hono";
import { bodyLimits, readJson } from "../http/body.ts";
import { HttpClient } from "../http/client.ts";
import { HttpError, toHttpError } from "../util/error.ts";
import { LiveAttempts, type LiveAttemptsStore } from "../gateway/live_attempts.ts";
import { keyConcurrencyCap } from "../http/concurrency.ts";
import { securityHeaders } from "../http/security_headers.ts";
import {
  parseOrThrow,
  type ProxyOptions,
  type ProxyOptionsInput,
  ProxyOptionsSchema,
  type ServerDeadlinesInput,
  ServerDeadlinesSchema,
  type UpstreamConfigInput,
  UpstreamConfigSchema,
} from "../schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { proxyAccess, type ProxyEnv } from "./access.ts";
import { type ProxyContext, type ProxyPhaseGate, startCall } from "./call.ts";
import { CallRecorder, type CaptureStore } from "./capture.ts";
import { anthropicMessagesCodec } from "./codecs/anthropic_messages.ts";
import { openaiChatCodec } from "./codecs/openai_chat.ts";
import { openaiCompletionsCodec } from "./codecs/openai_completions.ts";
import { openaiResponsesCodec } from "./codecs/openai_responses.ts";
import type { Codec } from "./codecs/types.ts";
import type { UpstreamBinding } from "./generation.ts";
import {
  checkPromptBytes,
  decodeRequest,
  encodeOffThread,
  prepareCall,
  renderOptions,
  tokenizerOffload,
} from "./prepare.ts";
import { respondJson } from "./respond_json.ts";
import { respondStream } from "./respond_stream.ts";
import { SessionTracker } from "./sessions.ts";
import { OpenAICompatibleUpstream } from "./upstreams/openai_compatible.ts";
import { UpstreamPool } from "./upstreams/pool.ts";
import { ReinsGenerateUpstream, SglangUpstream } from "./upstreams/token_level.ts";

export type { ProxyPhaseGate } from "./call.ts";

/** The store operations the proxy uses (the gateway's `Store` satisfies it). */
export interface ProxyStore extends CaptureStore, LiveAttemptsStore {}

/** What {@link createProxyApp} needs. */
export interface ProxyDeps {
  store: ProxyStore;
  /** Tokenizer + chat template of the policy (renders prompts; token-level upstreams). */
  tokenizer: ChatTokenizer;
  upstream: UpstreamConfigInput;
  /** Capability-token secret and admin key (as the gateway has them). */
  secret: string;
  adminKey: string;
  /** Phase gate; without one calls are never held. */
  phase?: ProxyPhaseGate;
  options?: ProxyOptionsInput;
  /** Which attempts are live (the gateway shares its own; default: a fresh cache). */
  live?: LiveAttempts;
  /** Body deadline and per-token concurrency cap (default: `ServerDeadlinesSchema`'s). */
  deadlines?: ServerDeadlinesInput;
  /**
   * Whether this app guarantees the security response headers itself (default true; see
   * `lib/http/security_headers.ts`). The gateway's mount turns it off: the gateway's own
   * middleware already covers every route.
   */
  secureHeaders?: boolean;
  /**
   * The app's lifetime (the gateway passes its own): while it runs, connections to `http:`
   * upstreams are kept between calls, and closed when it aborts. Without one, each call opens
   * and closes its own.
   */
  signal?: AbortSignal;
}

const CODECS: Record<string, Codec> = {
  "chat/completions": openaiChatCodec,
  "completions": openaiCompletionsCodec,
  "responses": openaiResponsesCodec,
  "messages": anthropicMessagesCodec,
};

function codecOfPath(path: string): Codec {
  return path.includes("/v1/messages") ? anthropicMessagesCodec : openaiChatCodec;
}

/** An error in the caller's own wire format. */
function errorResponse(codec: Codec, err: HttpError): Response {
  if (err.status === 499) return new Response(null, { status: 499 });
  return new Response(JSON.stringify(codec.errorBody(err.status, err.message, err.field)), {
    status: err.status,
    headers: { "content-type": "application/json", ...err.headers },
  });
}

function bindingOf(
  config: ReturnType<typeof UpstreamConfigSchema.parse>,
  tokenizer: ChatTokenizer,
  http: HttpClient,
): UpstreamBinding {
  const pool = new UpstreamPool({ ...config, http });
  if (config.kind === "openai_compatible") {
    return {
      kind: "passthrough",
      pool,
      client: new OpenAICompatibleUpstream(),
      ...(config.model ? { model: config.model } : {}),
      ...(config.api_key ? { apiKey: config.api_key } : {}),
    };
  }
  return {
    kind: "token",
    pool,
    tokenizer,
    client: config.kind === "sglang"
      ? new SglangUpstream({ incremental: config.sglang_incremental })
      : new ReinsGenerateUpstream(),
  };
}

/**
 * Builds the proxy app (mount it at `/proxy`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { Hono } from "hono";
 * import { capabilityToken } from "../http/credentials.ts";
 * import { openSqliteStore } from "../gateway/sqlite_store.ts";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * import { createProxyApp } from "./app.ts";
 * import { startScriptedUpstream } from "./scripted_upstream.ts";
 * const tokenizer = await loadQwen3Tokenizer();
 * const policy = await startScriptedUpstream({ tokenizer, turns: [{ content: "4" }] });
 * const store = openSqliteStore(":memory:");
 * const [secret, adminKey] = ["hmac-secret", "admin-key"];
 * const app = new Hono();
 * app.route("/proxy", createProxyApp({
 *   store, tokenizer, secret, adminKey,
 *   upstream: { kind: "token_level", endpoints: [policy.url] },
 * }));
 * // A harness of attempt a of rollout r calls its OpenAI base URL /proxy/r/a/v1 with its token.
 * await store.createRollouts([{ rollout_id: "r1", input: {} }]);
 * const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
 * const res = await app.request(`/proxy/r1/${attempt.attempt_id}/v1/chat/completions`, {
 *   method: "POST",
 *   headers: { authorization: `Bearer ${capabilityToken(secret, "r1", attempt.attempt_id)}` },
 *   body: JSON.stringify({ model: "policy", messages: [{ role: "user", content: "2+2?" }] }),
 * });
 * assert.equal((await res.json()).choices[0].message.content, "4");
 * // The call is recorded, token-exact.
 * assert.equal((await store.listEvents("r1", { type: "model_request" })).length, 1);
 * await policy.close();
 * await store.close();
 * ```
 */
export function createProxyApp(deps: ProxyDeps): Hono {
  const options: ProxyOptions = parseOrThrow(ProxyOptionsSchema, deps.options ?? {}, "options");
  const upstreamConfig = parseOrThrow(UpstreamConfigSchema, deps.upstream, "upstream");
  const deadlines = parseOrThrow(ServerDeadlinesSchema, deps.deadlines ?? {}, "deadlines");
  const { tokenizer, store } = deps;
  const http = new HttpClient({ keepAlive: deps.signal !== undefined });
  deps.signal?.addEventListener("abort", () => void http.close(), { once: true });
  const binding = bindingOf(upstreamConfig, tokenizer, http);
  const ctx: ProxyContext = {
    options,
    binding,
    tokenizer,
    // Every binding: a passthrough proxy still tokenizes `count_tokens` texts.
    offload: tokenizerOffload(tokenizer),
    sessions: new SessionTracker({ maxAttempts: options.max_sessions }),
    recorder: new CallRecorder(store, options.registry_cache_ms),
    phase: deps.phase,
    decodeOptions: {
      defaultMaxTokens: options.default_max_tokens,
      maxTokensLimit: options.max_tokens_limit,
    },
  };
  // The tokenizer thread starts now, not at the first long prompt: starting a thread holds
  // this one 40–100 ms (measured), which no request an agent can send may cause. Its
  // tokenizer still loads at the first long text, so an idle thread costs no vocabulary.
  ctx.offload?.warm();
  const access = proxyAccess(
    { adminKey: deps.adminKey, secret: deps.secret },
    deps.live ?? new LiveAttempts(store),
  );
  const body = bodyLimits({
    maxBytes: options.max_body_bytes,
    deadlineMs: deadlines.body_timeout_ms,
  });

  const handle = async (c: Context<ProxyEnv>, codec: Codec): Promise<Response> => {
    const startedAt = performance.now();
    const decoded = await decodeRequest(ctx, codec, c.req.raw);
    const call = await prepareCall(ctx, {
      callId: crypto.randomUUID().replaceAll("-", ""),
      rolloutId: c.req.param("rollout_id")!,
      attemptId: c.req.param("attempt_id")!,
      codec,
      body: decoded.body,
      request: decoded.request,
      startedAt,
    });
    const running = await startCall(ctx, c, call);
    return call.request.stream
      ? respondStream(ctx, c, call, running)
      : await respondJson(ctx, c, call, running);
  };

  const listModels = async (c: Context): Promise<Response> => {
    const models = await store.listModels();
    const names = models.length
      ? models
      : [{ name: options.default_model, version: 0, updated_at: 0 }];
    const data = names.map((m) => ({
      id: m.name,
      object: "model",
      type: "model",
      created: Math.floor((m.updated_at ?? 0) / 1000),
      created_at: new Date(m.updated_at ?? 0).toISOString(),
      display_name: m.name,
      owned_by: "reins",
      policy_version: m.version,
    }));
    return c.json({
      object: "list",
      data,
      has_more: false,
      first_id: data[0]?.id ?? null,
      last_id: data[data.length - 1]?.id ?? null,
    });
  };

  const countTokens = async (c: Context): Promise<Response> => {
    const body = await readJson(c.req.raw, { malformed: "invalid JSON" });
    const request = anthropicMessagesCodec.decode(
      { ...(body as Record<string, unknown>), max_tokens: 1 },
      ctx.decodeOptions,
    );
    // The same byte budget as a call: an oversized count request is refused before tokenizing.
    checkPromptBytes(ctx, request);
    const text = tokenizer.render(request.messages!, renderOptions(ctx, request));
    const ids = await encodeOffThread(ctx, text);
    return c.json({ input_tokens: ids.length });
  };

  const app = new Hono<ProxyEnv>();
  if (deps.secureHeaders !== false) {
    app.use("*", securityHeaders());
  }
  app.onError((err, c) =>
    errorResponse(codecOfPath(c.req.path), toHttpError("proxy", err, c.req.raw))
  );
  // Claude Code probes the base URL with HEAD before its first call.
  app.on(["HEAD", "GET"], "/:rollout_id/:attempt_id", (c) => c.body(null, 200));
  app.on(["HEAD", "GET"], "/:rollout_id/:attempt_id/", (c) => c.body(null, 200));
  app.use("/:rollout_id/:attempt_id/v1/*", keyConcurrencyCap(deadlines), access);
  app.get("/:rollout_id/:attempt_id/v1/models", listModels);
  app.post("/:rollout_id/:attempt_id/v1/messages/count_tokens", body, countTokens);
  for (const [path, codec] of Object.entries(CODECS)) {
    app.post(`/:rollout_id/:attempt_id/v1/${path}`, body, (c) => handle(c, codec));
  }
  app.all("*", (c) => {
    throw new HttpError(404, `path: no proxy route ${c.req.method} ${c.req.path}`);
  });
  return app as unknown as Hono;
}

/** Proxy settings for {@link proxyMount} (the gateway supplies store, phase and keys). */
export type ProxyMountOptions = Omit<
  ProxyDeps,
  "store" | "phase" | "secret" | "adminKey" | "live" | "deadlines" | "secureHeaders"
>;

/**
 * A gateway mount serving the proxy at `/proxy` with the gateway's own store, phase gate and
 * keys.
 *
 * @example
 * ```ts
 * import { startGateway } from "../gateway/server.ts";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * import { proxyMount } from "./app.ts";
 * const tokenizer = await loadQwen3Tokenizer();
 * const gw = await startGateway({
 *   mounts: [proxyMount({ tokenizer, upstream: { endpoints: ["http://127.0.0.1:8300"] } })],
 * });
 * // harness base URL: `${gw.url}/proxy/${rolloutId}/${attemptId}/v1`
 * await gw.close();
 * ```
 */
export function proxyMount(options: ProxyMountOptions): {
  path: string;
  create: (context: {
    store: ProxyStore;
    phase: ProxyPhaseGate;
    adminKey: string;
    secret: string;
    live?: LiveAttempts;
    deadlines?: ServerDeadlinesInput;
    signal?: AbortSignal;
  }) => Hono;
} {
  return {
    path: "/proxy",
    create: (context) =>
      createProxyApp({
        ...options,
        store: context.store,
        phase: context.phase,
        adminKey: context.adminKey,
        secret: context.secret,
        ...(context.live ? { live: context.live } : {}),
        ...(context.deadlines ? { deadlines: context.deadlines } : {}),
        ...(context.signal ? { signal: context.signal } : {}),
        secureHeaders: false,
      }),
  };
}
