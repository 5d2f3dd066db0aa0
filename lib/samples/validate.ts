/**
 * Input validation for sample assembly: every malformed model call is rejected with a
 * {@link ValidationError} whose message names the event and the field.
 *
 * @module
 */
import {
  type ModelRequest,
  modelRequestFromWire,
  ModelRequestWireSchema,
  parseOrThrow,
  type RolloutEvent,
  SegmentSchema,
  ValidationError,
} from "../schema.ts";

/** A model_request event whose payload passed validation (typed arrays guaranteed). */
export interface ValidCall {
  seq: number;
  attempt_id: string;
  rollout_id: string;
  request: ModelRequest;
}

function fail(field: string, message: string): never {
  throw new ValidationError(field, [`${field}: ${message}`]);
}

function isRecord(value: unknown): value is Record<string, unknown> {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

function checkIds(ids: Uint32Array, field: string, vocabSize: number | undefined): void {
  if (vocabSize === undefined) return;
  for (let i = 0; i < ids.length; i++) {
    if (ids[i] >= vocabSize) {
      fail(`${field}[${i}]`, `token id ${ids[i]} is out of range (vocabulary size ${vocabSize})`);
    }
  }
}

/**
 * Checks one model call (in-memory typed-array form, or wire form with number arrays) and
 * returns it in typed-array form. Wire-form payloads go through `ModelRequestWireSchema`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { validateModelRequest } from "./validate.ts";
 * const request = validateModelRequest({
 *   flavor: "generate", prompt_token_ids: [1, 2], response_token_ids: [3],
 *   response_logprobs: [-0.1], policy_version: 0,
 * }, "payload");
 * assert.deepEqual(request.prompt_token_ids, new Uint32Array([1, 2]));
 * ```
 */
export function validateModelRequest(
  payload: unknown,
  field: string,
  vocabSize?: number,
): ModelRequest {
  if (!isRecord(payload)) fail(field, "must be a model_request payload object");
  let request: ModelRequest;
  const typed = payload.prompt_token_ids instanceof Uint32Array ||
    payload.response_token_ids instanceof Uint32Array ||
    payload.response_logprobs instanceof Float32Array;
  if (!typed) {
    request = modelRequestFromWire(parseOrThrow(ModelRequestWireSchema, payload, field));
  } else {
    for (const key of ["prompt_token_ids", "response_token_ids"] as const) {
      if (!(payload[key] instanceof Uint32Array)) {
        fail(
          `${field}.${key}`,
          `must be a Uint32Array of token ids (got ${describe(payload[key])})`,
        );
      }
    }
    if (!(payload.response_logprobs instanceof Float32Array)) {
      fail(
        `${field}.response_logprobs`,
        `must be a Float32Array (got ${describe(payload.response_logprobs)})`,
      );
    }
    request = payload as unknown as ModelRequest;
    const n = request.response_token_ids.length;
    if (request.response_logprobs.length !== n) {
      fail(
        `${field}.response_logprobs`,
        `expected ${n} logprobs (one per response token), got ${request.response_logprobs.length}`,
      );
    }
    const lp = request.response_logprobs;
    for (let i = 0; i < lp.length; i++) {
      if (!Number.isFinite(lp[i])) {
        fail(`${field}.response_logprobs[${i}]`, `must be a finite number (got ${lp[i]})`);
      }
    }
    if (!Number.isInteger(request.http_status)) {
      fail(`${field}.http_status`, `must be an integer (got ${describe(request.http_status)})`);
    }
    if (request.error !== null && typeof request.error !== "string") {
      fail(`${field}.error`, `must be a string or null (got ${describe(request.error)})`);
    }
    if (!Number.isInteger(request.policy_version) || request.policy_version < 0) {
      fail(
        `${field}.policy_version`,
        `must be a non-negative integer (got ${describe(request.policy_version)})`,
      );
    }
    if (request.segment !== null && request.segment !== undefined) {
      parseOrThrow(SegmentSchema, request.segment, `${field}.segment`);
    }
    if (request.messages !== undefined && !Array.isArray(request.messages)) {
      fail(`${field}.messages`, "must be an array of chat messages when present");
    }
  }
  checkIds(request.prompt_token_ids, `${field}.prompt_token_ids`, vocabSize);
  checkIds(request.response_token_ids, `${field}.response_token_ids`, vocabSize);
  return request;
}

function describe(value: unknown): string {
  if (value === undefined) return "nothing (missing)";
  if (value === null) return "null";
  if (Array.isArray(value)) return "an array";
  if (ArrayBuffer.isView(value)) return value.constructor.name;
  return typeof value === "number" ? String(value) : typeof value;
}

/**
 * Validates a rollout's events and returns its model calls sorted by `seq`. Non-model events
 * are skipped; all events must belong to one rollout and carry distinct integer `seq`s.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { collectCalls } from "./validate.ts";
 * const calls = collectCalls([{
 *   type: "model_request", seq: 1, rollout_id: "r", attempt_id: "a", event_key: null,
 *   created_at: 0, payload: {
 *     flavor: "generate", request: {}, prompt_token_ids: Uint32Array.of(1),
 *     response_token_ids: Uint32Array.of(2), response_logprobs: Float32Array.of(-1),
 *     policy_version: 0, finish_reason: null, upstream: null, latency_ms: 0, retry_count: 0,
 *     http_status: 200, error: null, segment: null, mode: "faithful", client_disconnected: false,
 *   },
 * }]);
 * assert.equal(calls.length, 1);
 * ```
 */
export function collectCalls(
  events: readonly RolloutEvent[],
  vocabSize?: number,
): ValidCall[] {
  if (!Array.isArray(events)) fail("events", "must be an array of rollout events");
  const calls: ValidCall[] = [];
  const seen = new Set<number>();
  let rolloutId: string | undefined;
  for (let i = 0; i < events.length; i++) {
    const event: unknown = events[i];
    const field = `events[${i}]`;
    if (!isRecord(event)) fail(field, "must be an event object");
    if (typeof event.seq !== "number" || !Number.isInteger(event.seq)) {
      fail(`${field}.seq`, `must be an integer (got ${describe(event.seq)})`);
    }
    if (seen.has(event.seq)) fail(`${field}.seq`, `duplicate seq ${event.seq}`);
    seen.add(event.seq);
    if (typeof event.rollout_id !== "string" || event.rollout_id === "") {
      fail(`${field}.rollout_id`, `must be a non-empty string (got ${describe(event.rollout_id)})`);
    }
    if (rolloutId === undefined) rolloutId = event.rollout_id;
    else if (event.rollout_id !== rolloutId) {
      fail(
        `${field}.rollout_id`,
        `all events must belong to one rollout (got "${event.rollout_id}" after "${rolloutId}")`,
      );
    }
    if (event.type !== "model_request") continue;
    if (typeof event.attempt_id !== "string") {
      fail(`${field}.attempt_id`, `must be a string (got ${describe(event.attempt_id)})`);
    }
    let request: ModelRequest;
    try {
      request = validateModelRequest(event.payload, `${field}.payload`, vocabSize);
    } catch (error) {
      if (!(error instanceof ValidationError)) throw error;
      const issues = error.issues.map((issue) => `${issue} (model_request seq ${event.seq})`);
      throw new ValidationError(error.field, issues);
    }
    calls.push({ seq: event.seq, attempt_id: event.attempt_id, rollout_id: rolloutId, request });
  }
  calls.sort((a, b) => a.seq - b.seq);
  return calls;
}
