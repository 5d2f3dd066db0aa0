/**
 * Builds the `model_request` event of one proxied call (docs/architecture.md#data-model): the
 * request as received (with the large parts replaced by digests; the normalized messages are stored
 * beside it), prompt and response ids, behaviour logprobs, policy version, finish reason, upstream,
 * latency, retries, HTTP status, error, segment, mode and whether the harness went away.
 *
 * @module
 */
import { createHash } from "node:crypto";
import type {
  CallSampling,
  ChatMessage,
  EventInput,
  Flavor,
  JsonObject,
  JsonValue,
  Model,
  PromptMode,
  Segment,
} from "../schema.ts";
import { RESERVED_EVENT_KEY_PREFIX } from "../schema.ts";
import { checkCallMessages } from "../gateway/store_input.ts";
import { floatArray, intArray } from "../util/arrays.ts";
import type { PreparedCall } from "./call.ts";
import type { GenerationOutcome } from "./generation.ts";

/** Keys of request bodies that hold the (large) conversation or tool list. */
const BULKY_KEYS = ["messages", "input", "instructions", "system", "prompt", "tools"];

function sha256(text: string): string {
  // Synchronous on purpose: WebCrypto's async digest costs more than the hash itself here.
  return createHash("sha256").update(text).digest("hex");
}

/**
 * The request body with its conversation, prompt and tools replaced by
 * `{sha256, chars}` digests (the messages are recorded separately, normalized).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { digestRequest } from "./capture.ts";
 * const body = digestRequest({ model: "m", messages: [{ role: "user", content: "hi" }] });
 * assert.equal(typeof (body.messages as { sha256: string }).sha256, "string");
 * ```
 */
export function digestRequest(body: unknown): JsonObject {
  if (typeof body !== "object" || body === null || Array.isArray(body)) return {};
  const out: JsonObject = {};
  for (const [key, value] of Object.entries(body as Record<string, unknown>)) {
    if (value === undefined) continue;
    if (BULKY_KEYS.includes(key)) {
      const text = JSON.stringify(value);
      out[key] = { sha256: sha256(text), chars: text.length };
    } else {
      out[key] = value as JsonValue;
    }
  }
  return out;
}

/** Everything one call leaves behind. */
export interface CaptureRecord {
  callId: string;
  flavor: Flavor;
  body: unknown;
  /** `digestRequest(body)`, when it was made ahead. */
  requestDigest?: JsonObject;
  messages: ChatMessage[] | null;
  promptIds: ArrayLike<number>;
  responseIds: ArrayLike<number>;
  responseLogprobs: ArrayLike<number>;
  responseText: string;
  policyVersion: number;
  finishReason: string | null;
  upstream: string | null;
  latencyMs: number;
  retryCount: number;
  httpStatus: number;
  error: string | null;
  segment: Segment | null;
  mode: PromptMode;
  clientDisconnected: boolean;
  /** How the upstream was asked to sample (absent: not known). */
  sampling?: CallSampling;
}

/**
 * The event to append through the store; `event_key` makes a re-sent write idempotent.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { buildModelRequestEvent } from "./capture.ts";
 * const event = buildModelRequestEvent({
 *   callId: "c1", flavor: "generate", body: {}, messages: null, promptIds: [1, 2],
 *   responseIds: [3], responseLogprobs: [-0.1], responseText: "x", policyVersion: 0,
 *   finishReason: "stop", upstream: null, latencyMs: 1, retryCount: 0, httpStatus: 200,
 *   error: null, segment: null, mode: "faithful", clientDisconnected: false,
 * });
 * assert.equal(event.type, "model_request");
 * assert.equal(event.event_key, "reins:proxy:c1");
 * ```
 */
export function buildModelRequestEvent(record: CaptureRecord): EventInput {
  return {
    type: "model_request",
    event_key: `${RESERVED_EVENT_KEY_PREFIX}proxy:${record.callId}`,
    payload: {
      flavor: record.flavor,
      request: record.requestDigest ?? digestRequest(record.body),
      ...(record.messages ? { messages: record.messages } : {}),
      prompt_token_ids: intArray(record.promptIds),
      response_token_ids: intArray(record.responseIds),
      response_logprobs: floatArray(record.responseLogprobs),
      response_text: record.responseText,
      policy_version: record.policyVersion,
      finish_reason: record.finishReason,
      upstream: record.upstream,
      latency_ms: Math.max(0, record.latencyMs),
      retry_count: record.retryCount,
      http_status: record.httpStatus,
      error: record.error,
      segment: record.segment,
      mode: record.mode,
      client_disconnected: record.clientDisconnected,
      ...(record.sampling ? { sampling: record.sampling } : {}),
    },
  };
}

/** How a call ended, as {@link CallRecorder.record} stores it. */
export interface CallResult {
  outcome: GenerationOutcome | null;
  /** What was sampled before a failure (ids, logprobs, text). */
  partial: { ids: number[]; logprobs: number[]; text: string };
  httpStatus: number;
  error: string | null;
  retries: number;
  endpoint: string | null;
  clientDisconnected: boolean;
}

/** The store operations the proxy uses (the gateway's `Store` satisfies it). */
export interface CaptureStore {
  appendEvents(
    rollout_id: string,
    attempt_id: string,
    inputs: EventInput[],
    options?: { credential?: "admin" | "reporter" | "capability" },
  ): Promise<unknown>;
  listModels(): Promise<Model[]>;
}

/**
 * Records calls as `model_request` events through the store (before the call's final byte),
 * with the policy version the upstream reported or, failing that, the registry's (read at
 * most every `registryCacheMs`).
 */
export class CallRecorder {
  readonly #store: CaptureStore;
  readonly #registryCacheMs: number;
  #registry: { at: number; models: Promise<Model[]> } | null = null;
  /** What {@link ready} made, by the request body and the messages it was made from. */
  readonly #digests = new WeakMap<object, JsonObject>();
  readonly #messages = new WeakMap<object, ChatMessage[]>();

  constructor(store: CaptureStore, registryCacheMs: number) {
    this.#store = store;
    this.#registryCacheMs = registryCacheMs;
  }

  /** The registry's version of `model` (or of the first model; 0 without any). */
  async policyVersionFor(model: string): Promise<number> {
    const now = performance.now();
    if (!this.#registry || now - this.#registry.at >= this.#registryCacheMs) {
      const entry = { at: now, models: this.#store.listModels() };
      this.#registry = entry;
      // A failed read must not be reused.
      entry.models.catch(() => {
        if (this.#registry === entry) this.#registry = null;
      });
    }
    const models = await this.#registry.models;
    const found = models.find((m) => m.name === model) ?? models[0];
    return found?.version ?? 0;
  }

  /**
   * Makes the parts of a call's record that its outcome does not change: the request's digest,
   * and its messages checked and serialized for the store (`checkCallMessages`). Called once the
   * upstream has the request, so that this work is done while the engine samples rather than
   * after its answer (~0.5 ms for a 63 KB conversation, measured). A part that fails is left to
   * {@link record}, which then fails the way it always did.
   */
  ready(call: PreparedCall): void {
    try {
      const { body } = call;
      if (typeof body === "object" && body !== null) this.#digests.set(body, digestRequest(body));
      const { messages } = call.request;
      if (messages) this.#messages.set(messages, checkCallMessages(messages));
    } catch { /* record() meets the same error */ }
  }

  /** Appends the call's event; a served call also becomes its conversation's last call. */
  async record(call: PreparedCall, result: CallResult): Promise<void> {
    const o = result.outcome;
    const { body } = call;
    const { messages } = call.request;
    const version = o?.policy_version ?? await call.registryVersion ??
      await this.policyVersionFor(call.request.model);
    const event = buildModelRequestEvent({
      callId: call.callId,
      flavor: call.request.flavor,
      body,
      // `WeakMap.get` answers undefined for a key that is not an object.
      requestDigest: this.#digests.get(body as object),
      messages: (messages && this.#messages.get(messages)) ?? messages,
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
      // The proxy samples with temperature and top-p only (codecs refuse top_k/min_p).
      sampling: {
        temperature: call.request.sampling.temperature,
        top_p: call.request.sampling.top_p,
        top_k: 0,
        min_p: 0,
      },
    });
    // The proxy records as the control plane it is (its `reins:proxy:` key is reserved to the
    // admin credential): what the model generated for a call admitted while the attempt was
    // live, even when the call outlives it.
    await this.#store.appendEvents(call.rolloutId, call.attemptId, [event], {
      credential: "admin",
    });
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
  }
}
