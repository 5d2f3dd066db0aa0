/**
 * Builds the `model_request` event of one proxied call (SPEC §2): the request as received
 * (with the large parts replaced by digests; the normalized messages are stored beside it),
 * prompt and response ids, behaviour logprobs, policy version, finish reason, upstream, latency,
 * retries, HTTP status, error, segment, mode and whether the harness went away.
 *
 * @module
 */
import { createHash } from "node:crypto";
import type {
  ChatMessage,
  EventInput,
  Flavor,
  JsonObject,
  JsonValue,
  PromptMode,
  Segment,
} from "../schema.ts";

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
 * import { digestRequest } from "./capture.ts";
 * const body = digestRequest({ model: "m", messages: [{ role: "user", content: "hi" }] });
 * typeof (body.messages as { sha256: string }).sha256; // "string"
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
}

/**
 * The event to append through the store; `event_key` makes a re-sent write idempotent.
 *
 * @example
 * ```ts
 * import { buildModelRequestEvent } from "./capture.ts";
 * const event = buildModelRequestEvent({
 *   callId: "c1", flavor: "generate", body: {}, messages: null, promptIds: [1, 2],
 *   responseIds: [3], responseLogprobs: [-0.1], responseText: "x", policyVersion: 0,
 *   finishReason: "stop", upstream: null, latencyMs: 1, retryCount: 0, httpStatus: 200,
 *   error: null, segment: null, mode: "faithful", clientDisconnected: false,
 * });
 * event.type; // "model_request"
 * ```
 */
export function buildModelRequestEvent(record: CaptureRecord): EventInput {
  return {
    type: "model_request",
    event_key: `proxy:${record.callId}`,
    payload: {
      flavor: record.flavor,
      request: digestRequest(record.body),
      ...(record.messages ? { messages: record.messages } : {}),
      prompt_token_ids: Array.from(record.promptIds),
      response_token_ids: Array.from(record.responseIds),
      response_logprobs: Array.from(record.responseLogprobs),
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
    },
  };
}
