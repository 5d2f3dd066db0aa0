/**
 * The proxy's Hono app, mounted by the gateway at `/proxy`: a harness's base URL is
 * `{gateway}/proxy/{rollout_id}/{attempt_id}/v1` (OpenAI flavors) or
 * `{gateway}/proxy/{rollout_id}/{attempt_id}` (Anthropic). Every call is authenticated by the
 * attempt's capability token (or the admin key), held during the `update` phase, served by the
 * policy through the upstream pool, captured as a `model_request` event through the store
 * before its final byte, and answered in the caller's own wire format.
 *
 * @module
 */
import { Hono } from "hono";
import type { Context } from "hono";
import {
  type EventInput,
  type Model,
  parseOrThrow,
  type PromptMode,
  type ProxyOptions,
  type ProxyOptionsInput,
  ProxyOptionsSchema,
  type Rollout,
  type Segment,
  type UpstreamConfigInput,
  UpstreamConfigSchema,
} from "../schema.ts";
import { authorize, keyFromHeaders } from "../gateway/auth.ts";
import { IncrementalChatEncoder } from "../tokens/incremental.ts";
import type { ChatTokenizer, RenderOptions } from "../tokens/types.ts";
import { anthropicMessagesCodec } from "./codecs/anthropic_messages.ts";
import { openaiChatCodec } from "./codecs/openai_chat.ts";
import { openaiCompletionsCodec } from "./codecs/openai_completions.ts";
import { openaiResponsesCodec } from "./codecs/openai_responses.ts";
import {
  type Codec,
  type FinishedCall,
  type NormalizedRequest,
  nowSeconds,
  ProxyHttpError,
} from "./codecs/types.ts";
import { buildModelRequestEvent } from "./capture.ts";
import { generate, type GenerationOutcome, type UpstreamBinding } from "./generation.ts";
import type { OutputParserOptions, OutputPart } from "./parse_output.ts";
import { type Conversation, SessionTracker } from "./sessions.ts";
import { substitutePrompt } from "./substitute.ts";
import { OpenAICompatibleUpstream } from "./upstreams/openai_compatible.ts";
import { PoolFailure, UpstreamPool } from "./upstreams/pool.ts";
import { ReinsGenerateUpstream, SglangUpstream } from "./upstreams/token_level.ts";

/** The store operations the proxy uses (the gateway's `Store` satisfies it). */
export interface ProxyStore {
  getRollout(id: string): Promise<Rollout | null>;
  appendEvents(rollout_id: string, attempt_id: string, inputs: EventInput[]): Promise<unknown>;
  listModels(): Promise<Model[]>;
}

/** The phase gate the proxy waits on (the gateway's `PhaseGate` satisfies it). */
export interface ProxyPhaseGate {
  acquire(options?: { signal?: AbortSignal; maxHoldMs?: number }): Promise<() => void>;
}

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
}

const CODECS: Record<string, Codec> = {
  "chat/completions": openaiChatCodec,
  "completions": openaiCompletionsCodec,
  "responses": openaiResponsesCodec,
  "messages": anthropicMessagesCodec,
};

const ID_PREFIX: Record<string, string> = {
  openai_chat: "chatcmpl-",
  openai_completions: "cmpl-",
  openai_responses: "resp_",
  anthropic_messages: "msg_",
};

function errorResponse(codec: Codec, err: ProxyHttpError): Response {
  return new Response(JSON.stringify(codec.errorBody(err.status, err.message, err.param)), {
    status: err.status,
    headers: { "content-type": "application/json", ...err.headers },
  });
}

function isAbort(err: unknown): boolean {
  return err instanceof DOMException &&
      (err.name === "AbortError" || err.name === "TimeoutError") ||
    (err as Error)?.name === "AbortError";
}

interface PreparedCall {
  callId: string;
  rolloutId: string;
  attemptId: string;
  codec: Codec;
  body: unknown;
  request: NormalizedRequest;
  segment: Segment | null;
  conversation: Conversation | null;
  promptIds: Uint32Array | null;
  parser: OutputParserOptions | null;
  mode: PromptMode;
  startedAt: number;
  /**
   * The registry's policy version when the call started (upstreams that do not report one);
   * looked up while the call runs, so it costs no latency.
   */
  registryVersion?: Promise<number | null>;
}

/**
 * Builds the proxy app (mount it at `/proxy`).
 *
 * @example
 * ```ts
 * import { Hono } from "hono";
 * import { capabilityToken } from "../gateway/auth.ts";
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
 * (await res.json()).choices[0].message.content; // "4"
 * (await store.listEvents("r1", { type: "model_request" })).length; // 1: the call, token-exact
 * await policy.close();
 * await store.close();
 * ```
 */
export function createProxyApp(deps: ProxyDeps): Hono {
  const options: ProxyOptions = parseOrThrow(ProxyOptionsSchema, deps.options ?? {}, "options");
  const upstreamConfig = parseOrThrow(UpstreamConfigSchema, deps.upstream, "upstream");
  const pool = new UpstreamPool(upstreamConfig);
  const { tokenizer, store } = deps;
  const binding: UpstreamBinding = upstreamConfig.kind === "openai_compatible"
    ? {
      kind: "passthrough",
      pool,
      client: new OpenAICompatibleUpstream(),
      ...(upstreamConfig.model ? { model: upstreamConfig.model } : {}),
      ...(upstreamConfig.api_key ? { apiKey: upstreamConfig.api_key } : {}),
    }
    : {
      kind: "token",
      pool,
      tokenizer,
      client: upstreamConfig.kind === "sglang"
        ? new SglangUpstream({ incremental: upstreamConfig.sglang_incremental })
        : new ReinsGenerateUpstream(),
    };
  const sessions = new SessionTracker({ maxAttempts: options.max_sessions });
  const keys = { adminKey: deps.adminKey, secret: deps.secret };
  const decodeOptions = {
    defaultMaxTokens: options.default_max_tokens,
    maxTokensLimit: options.max_tokens_limit,
  };

  const app = new Hono();
  const knownAttempts = new Set<string>();

  const checkAccess = async (c: Context, codec: Codec): Promise<Response | null> => {
    const { rollout_id: rid, attempt_id: aid } = c.req.param() as Record<string, string>;
    const key = keyFromHeaders(c.req.raw.headers);
    if (!authorize(keys, key, { rollout_id: rid, attempt_id: aid })) {
      return errorResponse(
        codec,
        new ProxyHttpError(
          401,
          key ? "api key: not valid for this rollout attempt" : "api key: missing",
        ),
      );
    }
    const scope = `${rid}\u0000${aid}`;
    if (knownAttempts.has(scope)) return null;
    const rollout = await store.getRollout(rid);
    if (!rollout) {
      return errorResponse(codec, new ProxyHttpError(404, `rollout_id: no rollout '${rid}'`));
    }
    if (!rollout.attempts.some((a) => a.attempt_id === aid)) {
      return errorResponse(
        codec,
        new ProxyHttpError(404, `attempt_id: rollout '${rid}' has no attempt '${aid}'`),
      );
    }
    // Attempts are never deleted: remembering the ones seen saves a store read per call.
    knownAttempts.add(scope);
    if (knownAttempts.size > 65_536) knownAttempts.delete(knownAttempts.values().next().value!);
    return null;
  };

  const readBody = async (c: Context): Promise<unknown> => {
    const declared = Number(c.req.header("content-length") ?? "0");
    if (declared > options.max_body_bytes) {
      throw new ProxyHttpError(413, `body: larger than ${options.max_body_bytes} bytes`);
    }
    const text = await c.req.text();
    if (text.length > options.max_body_bytes) {
      throw new ProxyHttpError(413, `body: larger than ${options.max_body_bytes} bytes`);
    }
    try {
      return JSON.parse(text);
    } catch (err) {
      throw new ProxyHttpError(400, `body: invalid JSON (${(err as Error).message})`, "body");
    }
  };

  const renderOptions = (request: NormalizedRequest): RenderOptions => {
    const enableThinking = request.enableThinking ?? options.enable_thinking;
    return {
      addGenerationPrompt: true,
      ...(request.tools.length ? { tools: request.tools } : {}),
      ...(enableThinking !== undefined ? { enableThinking } : {}),
    };
  };

  /** Tokenizes the prompt (token level) and tags the call; throws ProxyHttpError. */
  const prepare = (
    callId: string,
    rolloutId: string,
    attemptId: string,
    codec: Codec,
    body: unknown,
    request: NormalizedRequest,
    startedAt: number,
  ): PreparedCall => {
    const tagged = request.messages ? sessions.tag(rolloutId, attemptId, request.messages) : null;
    const conversation = tagged?.conversation ?? null;
    let promptIds: Uint32Array | null = null;
    let parser: OutputParserOptions | null = null;
    let mode: PromptMode = "faithful";
    if (binding.kind === "token") {
      if (request.messages) {
        const render = renderOptions(request);
        if (options.mode === "substitute" && conversation?.last) {
          promptIds = substitutePrompt(tokenizer, conversation.last, request.messages, render);
          if (promptIds) mode = "substitute";
        }
        let text: string;
        if (promptIds) {
          text = tokenizer.decode(promptIds.subarray(Math.max(0, promptIds.length - 4)));
        } else {
          let encoder = conversation?.encoderState as IncrementalChatEncoder | undefined;
          if (!encoder) {
            encoder = new IncrementalChatEncoder(tokenizer);
            if (conversation) conversation.encoderState = encoder;
          }
          try {
            const rendered = encoder.renderAndEncode(request.messages, render);
            promptIds = rendered.ids;
            text = rendered.text;
          } catch (err) {
            throw new ProxyHttpError(
              400,
              `messages: cannot render the chat template: ${(err as Error).message}`,
              "messages",
            );
          }
        }
        parser = { startInReasoning: /<think>\s*$/.test(text) };
      } else if (request.promptIds) {
        for (const [i, id] of request.promptIds.entries()) {
          if (id >= tokenizer.vocabSize) {
            throw new ProxyHttpError(
              400,
              `prompt[${i}]: token id ${id} is outside the vocabulary`,
              "prompt",
            );
          }
        }
        promptIds = Uint32Array.from(request.promptIds);
      } else {
        promptIds = tokenizer.encode(request.prompt ?? "");
      }
      if (promptIds.length === 0) throw new ProxyHttpError(400, "prompt: is empty", "prompt");
    }
    return {
      callId,
      rolloutId,
      attemptId,
      codec,
      body,
      request,
      segment: tagged?.segment ?? null,
      conversation,
      promptIds,
      parser,
      mode,
      startedAt,
    };
  };

  let registry: { at: number; models: Promise<Model[]> } | null = null;
  const policyVersionFor = async (model: string): Promise<number> => {
    const now = performance.now();
    if (!registry || now - registry.at >= options.registry_cache_ms) {
      registry = { at: now, models: store.listModels() };
      // A failed read must not be reused.
      registry.models.catch(() => (registry = null));
    }
    const models = await registry.models;
    const found = models.find((m) => m.name === model) ?? models[0];
    return found?.version ?? 0;
  };

  const capture = async (
    call: PreparedCall,
    result: {
      outcome: GenerationOutcome | null;
      partial: { ids: number[]; logprobs: number[]; text: string };
      httpStatus: number;
      error: string | null;
      retries: number;
      endpoint: string | null;
      clientDisconnected: boolean;
    },
  ): Promise<void> => {
    const o = result.outcome;
    const version = o?.policy_version ?? await call.registryVersion ??
      await policyVersionFor(call.request.model);
    const event = buildModelRequestEvent({
      callId: call.callId,
      flavor: call.request.flavor,
      body: call.body,
      messages: call.request.messages,
      promptIds: o?.promptIds ?? call.promptIds ?? [],
      responseIds: o?.ids ?? result.partial.ids,
      responseLogprobs: o?.logprobs ?? result.partial.logprobs,
      responseText: o?.text ?? result.partial.text,
      policyVersion: version,
      finishReason: o
        ? o.finish_reason
        : result.clientDisconnected
        ? "client_disconnected"
        : "error",
      upstream: o?.endpoint ?? result.endpoint,
      latencyMs: performance.now() - call.startedAt,
      retryCount: o?.retries ?? result.retries,
      httpStatus: result.httpStatus,
      error: result.error,
      segment: call.segment,
      mode: call.mode,
      clientDisconnected: result.clientDisconnected,
    });
    await store.appendEvents(call.rolloutId, call.attemptId, [event]);
    if (o && call.conversation && o.finish_reason) {
      call.conversation.last = {
        messages: call.request.messages ?? [],
        promptIds: o.promptIds,
        responseIds: o.ids,
        finishReason: o.finish_reason,
        content: o.output.content,
        toolCalls: o.output.tool_calls.map((t) => ({ name: t.name, arguments: t.arguments })),
      };
    }
  };

  const finished = (call: PreparedCall, o: GenerationOutcome): FinishedCall => ({
    id: ID_PREFIX[call.request.flavor] + call.callId,
    model: call.request.model || options.default_model,
    created: Math.floor(Date.now() / 1000),
    output: o.output,
    text: o.text,
    finish_reason: o.finish_reason,
    stop_sequence: o.stop_sequence,
    prompt_tokens: o.promptIds.length,
    completion_tokens: o.ids.length,
  });

  const failure = (err: unknown) => {
    if (err instanceof PoolFailure) {
      return {
        status: err.failure.status,
        message: err.message,
        retries: err.retries,
        endpoint: err.endpoint,
      };
    }
    return {
      status: 500,
      message: `proxy: ${(err as Error)?.message ?? String(err)}`,
      retries: 0,
      endpoint: null,
    };
  };

  const handle = async (c: Context, codec: Codec): Promise<Response> => {
    const startedAt = performance.now();
    const denied = await checkAccess(c, codec);
    if (denied) return denied;
    const { rollout_id: rid, attempt_id: aid } = c.req.param() as Record<string, string>;
    const callId = crypto.randomUUID().replaceAll("-", "");
    let call: PreparedCall;
    try {
      const body = await readBody(c);
      const request = codec.decode(body, decodeOptions);
      call = prepare(callId, rid, aid, codec, body, request, startedAt);
    } catch (err) {
      if (err instanceof ProxyHttpError) return errorResponse(codec, err);
      throw err;
    }
    const partial = { ids: [] as number[], logprobs: [] as number[], text: "" };
    if (call.promptIds && call.promptIds.length > options.max_prompt_tokens) {
      const message = `messages: the prompt is ${call.promptIds.length} tokens, more than ` +
        `max_prompt_tokens (${options.max_prompt_tokens})`;
      await capture(call, {
        outcome: null,
        partial,
        httpStatus: 400,
        error: message,
        retries: 0,
        endpoint: null,
        clientDisconnected: false,
      });
      return errorResponse(codec, new ProxyHttpError(400, message, "messages"));
    }
    const clientSignal = c.req.raw.signal;
    let release: () => void;
    try {
      release = deps.phase
        ? await deps.phase.acquire({ signal: clientSignal, maxHoldMs: options.max_hold_ms })
        : () => {};
    } catch (err) {
      if ((err as Error)?.name === "PhaseHoldTimeout") {
        return errorResponse(
          codec,
          new ProxyHttpError(
            503,
            `proxy: the policy is being updated (${(err as Error).message})`,
            undefined,
            {
              "retry-after": "5",
            },
          ),
        );
      }
      // The harness went away while held: nothing ran, nothing to record.
      return errorResponse(codec, new ProxyHttpError(499, "client closed the request"));
    }
    // Read after the phase gate: a call held through an update is served by the new version.
    if (binding.kind === "passthrough" || binding.client.kind === "sglang") {
      call.registryVersion = policyVersionFor(call.request.model).catch(() => null);
    }
    const controller = new AbortController();
    const abortFromClient = () =>
      controller.abort(new DOMException("client disconnected", "AbortError"));
    clientSignal.addEventListener("abort", abortFromClient, { once: true });
    const cleanup = () => {
      clientSignal.removeEventListener("abort", abortFromClient);
      release();
    };
    // What `capture` records for a served call, and for a failed one (the client may be gone).
    const served = (outcome: GenerationOutcome) => ({
      outcome,
      partial,
      httpStatus: 200,
      error: null,
      retries: outcome.retries,
      endpoint: outcome.endpoint,
      clientDisconnected: false,
    });
    const failed = (err: unknown) => {
      const disconnected = controller.signal.aborted;
      const f = failure(err);
      const record = {
        outcome: null,
        partial,
        httpStatus: disconnected ? 499 : f.status,
        error: disconnected ? "client disconnected" : f.message,
        retries: f.retries,
        endpoint: f.endpoint,
        clientDisconnected: disconnected,
      };
      return { disconnected, f, record };
    };
    const onParts = (parts: OutputPart[]) => {
      for (const p of parts) if (p.type !== "tool_call") partial.text += p.text;
    };
    const run = () =>
      generate(binding, {
        request: call.request,
        rolloutId: rid,
        promptIds: call.promptIds,
        parser: call.parser,
        signal: controller.signal,
        onParts,
        progress: partial,
      });

    if (!call.request.stream) {
      try {
        let outcome: GenerationOutcome;
        try {
          outcome = await run();
        } catch (err) {
          const { disconnected, f, record } = failed(err);
          await capture(call, record);
          if (disconnected || isAbort(err)) return new Response(null, { status: 499 });
          return errorResponse(codec, new ProxyHttpError(f.status, f.message));
        }
        await capture(call, served(outcome));
        return c.json(codec.respond(finished(call, outcome), call.request));
      } catch (err) {
        if (err instanceof ProxyHttpError) return errorResponse(codec, err);
        return errorResponse(codec, new ProxyHttpError(500, `proxy: ${(err as Error).message}`));
      } finally {
        cleanup();
      }
    }

    // Streaming: start events go out at once; parts follow as tokens arrive; the closing
    // events are written only after the call was captured.
    const encoder = codec.stream({
      id: ID_PREFIX[call.request.flavor] + callId,
      model: call.request.model || options.default_model,
      created: nowSeconds(),
      prompt_tokens: call.promptIds?.length ?? 0,
    }, call.request);
    const bytes = new TextEncoder();
    let closed = false;
    const stream = new ReadableStream<Uint8Array>({
      start(sink) {
        const write = (text: string) => {
          if (!closed && text) sink.enqueue(bytes.encode(text));
        };
        write(encoder.start());
        const streamParts = (parts: OutputPart[]) => {
          onParts(parts);
          for (const part of parts) write(encoder.part(part));
        };
        (async () => {
          try {
            const outcome = await generate(binding, {
              request: call.request,
              rolloutId: rid,
              promptIds: call.promptIds,
              parser: call.parser,
              signal: controller.signal,
              onParts: streamParts,
              progress: partial,
            });
            await capture(call, served(outcome));
            write(encoder.finish(finished(call, outcome)));
          } catch (err) {
            const { disconnected, f, record } = failed(err);
            try {
              await capture(call, record);
            } catch (captureErr) {
              console.error(
                `proxy: cannot record call ${callId}: ${(captureErr as Error).message}`,
              );
            }
            write(encoder.error(disconnected ? "client disconnected" : f.message));
          } finally {
            cleanup();
            if (!closed) {
              closed = true;
              sink.close();
            }
          }
        })();
      },
      cancel() {
        closed = true;
        abortFromClient();
      },
    });
    return new Response(stream, {
      status: 200,
      headers: {
        "content-type": "text/event-stream; charset=utf-8",
        "cache-control": "no-cache",
        "x-accel-buffering": "no",
      },
    });
  };

  const listModels = async (c: Context): Promise<Response> => {
    const denied = await checkAccess(c, openaiChatCodec);
    if (denied) return denied;
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
    const codec = anthropicMessagesCodec;
    const denied = await checkAccess(c, codec);
    if (denied) return denied;
    try {
      const body = await readBody(c) as Record<string, unknown>;
      const request = codec.decode({ ...body, max_tokens: 1 }, decodeOptions);
      const ids = tokenizer.encode(tokenizer.render(request.messages!, renderOptions(request)));
      return c.json({ input_tokens: ids.length });
    } catch (err) {
      if (err instanceof ProxyHttpError) return errorResponse(codec, err);
      throw err;
    }
  };

  // Claude Code probes the base URL with HEAD before its first call.
  app.on(["HEAD", "GET"], "/:rollout_id/:attempt_id", (c) => c.body(null, 200));
  app.on(["HEAD", "GET"], "/:rollout_id/:attempt_id/", (c) => c.body(null, 200));
  app.get("/:rollout_id/:attempt_id/v1/models", listModels);
  app.post("/:rollout_id/:attempt_id/v1/messages/count_tokens", countTokens);
  for (const [path, codec] of Object.entries(CODECS)) {
    app.post(`/:rollout_id/:attempt_id/v1/${path}`, (c) => handle(c, codec));
  }
  app.all("*", (c) => {
    const codec = c.req.path.includes("/v1/messages") ? anthropicMessagesCodec : openaiChatCodec;
    return errorResponse(
      codec,
      new ProxyHttpError(404, `path: no proxy route ${c.req.method} ${c.req.path}`),
    );
  });
  app.onError((err, c) => {
    const codec = c.req.path.includes("/v1/messages") ? anthropicMessagesCodec : openaiChatCodec;
    const status = err instanceof ProxyHttpError ? err.status : 500;
    return errorResponse(codec, new ProxyHttpError(status, err.message));
  });
  return app;
}

/** Proxy settings for {@link proxyMount} (the gateway supplies store, phase and keys). */
export type ProxyMountOptions = Omit<ProxyDeps, "store" | "phase" | "secret" | "adminKey">;

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
  }) => Hono;
} {
  return {
    path: "/proxy",
    create: (context) => createProxyApp({ ...options, ...context }),
  };
}
