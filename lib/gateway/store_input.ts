/**
 * What the stores accept: every argument that reaches SQL is validated here first, for both
 * backends, so a refusal is a 400 naming the field and never a driver error (PostgreSQL
 * refuses a NUL in text; SQLite stores it but reads the string back only up to it).
 *
 * @module
 */
import {
  type ChatMessage,
  EventInputSchema,
  ID_PATTERN,
  IdSchema,
  isPlainJsonObject,
  type JsonObject,
  LabelsSchema,
  MAX_ID_CHARS,
  type ModelRequest,
  modelRequestFromWire,
  ModelRequestWireSchema,
  parseOrThrow,
  type RolloutCreate,
  RolloutCreateSchema,
  type RolloutEvent,
  ValidationError,
  WorkerSchema,
} from "../schema.ts";
import type { SqlParam } from "./sql/dialect.ts";
import type { ModelRequestMeta } from "./sql/rows.ts";
import type { ClaimOptions, ListRolloutsOptions, TransitionOptions } from "./store.ts";
import { encodeF32, encodeU32, type PromptPlan } from "./token_blob.ts";
import type { z } from "zod";

/** A validated rollout create with its id filled in. */
export type NormalizedCreate = z.infer<typeof RolloutCreateSchema> & {
  rollout_id: string;
  group_id: string;
};

/**
 * Validates creates (field errors name `rollouts[i].…`) and fills in ids.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { normalizeCreates } from "./store_input.ts";
 * assert.equal(normalizeCreates([{ rollout_id: "r1", input: 1 }])[0].group_id, "r1");
 * assert.throws(
 *   () => normalizeCreates([{ input: 1, config: { max_attemps: 3 } as never }]),
 *   /rollouts\[0\]\.config\.max_attemps: unknown key/,
 * );
 * ```
 */
export function normalizeCreates(creates: RolloutCreate[]): NormalizedCreate[] {
  if (!Array.isArray(creates)) {
    throw new ValidationError("rollouts", ["rollouts: must be an array"]);
  }
  return creates.map((create, i) => {
    const parsed = parseOrThrow(RolloutCreateSchema, create, `rollouts[${i}]`);
    const rollout_id = parsed.rollout_id ?? `r-${crypto.randomUUID()}`;
    return { ...parsed, rollout_id, group_id: parsed.group_id ?? rollout_id };
  });
}

/** A validated event input. */
export type ParsedEvent = z.infer<typeof EventInputSchema>;

/**
 * Validates event inputs (field errors name `events[i].…`).
 *
 * Token arrays of model calls are checked by a plain loop first and shown to zod empty: zod
 * spends milliseconds on an 8k-element array, the loop microseconds. The rules are the same as
 * `ModelRequestWireSchema`'s (ids are integers in [0, 2^32), logprobs finite, one per
 * response token).
 */
export function parseEvents(inputs: unknown): ParsedEvent[] {
  if (!Array.isArray(inputs)) throw new ValidationError("events", ["events: must be an array"]);
  if (PARSED.has(inputs)) return inputs as ParsedEvent[];
  const parsed = inputs.map((input, i) => parseEvent(input, `events[${i}]`));
  PARSED.add(parsed);
  return parsed;
}

/**
 * Arrays this module's {@link parseEvents} returned: the gateway's route parses a post once
 * (to check credentials and charge budgets on valid events) and the store takes its result as
 * it is instead of walking an 8k-token prompt a second time. Only this function adds to it, so
 * an array a caller built is always parsed.
 */
const PARSED = new WeakSet<unknown[]>();

const TOKEN_FIELDS = ["prompt_token_ids", "response_token_ids", "response_logprobs"] as const;

/**
 * Messages of model calls checked ahead of their append by {@link checkCallMessages}, with their
 * JSON text. The proxy checks a call's messages while its upstream works; the append then shows
 * zod none of them (as it does the token arrays) and writes the text kept here instead of
 * serializing them again. Only this module adds to it, and what it holds is frozen, so the text
 * is always the array's.
 */
const CHECKED_MESSAGES = new WeakMap<object, string>();

/** The schema of a model call's messages: the very one the append checks them with. */
const CALL_MESSAGES = ModelRequestWireSchema.shape.messages.unwrap();

/**
 * Checks a model call's messages as {@link parseEvents} would (`ModelRequestWireSchema`'s
 * `messages`), ahead of the append: the array returned (zod's output, frozen) is taken by the
 * stores without a second check, and its JSON text without a second serialization. For a 63 KB
 * conversation the two cost ~0.3 ms, which the proxy spends while the engine samples rather than
 * between the engine's answer and the harness's.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkCallMessages } from "./store_input.ts";
 * const messages = checkCallMessages([{ role: "user", content: "hi", extra: 1 }]);
 * assert.deepEqual(messages, [{ role: "user", content: "hi" }]); // as the store keeps them
 * assert.ok(Object.isFrozen(messages[0]));
 * assert.throws(() => checkCallMessages([{ role: "robot" }]), /messages\[0\]\.role/);
 * ```
 */
export function checkCallMessages(messages: unknown, field = "messages"): ChatMessage[] {
  const checked = parseOrThrow(CALL_MESSAGES, messages, field);
  deepFreeze(checked);
  CHECKED_MESSAGES.set(checked, JSON.stringify(checked));
  return checked;
}

function deepFreeze(value: unknown): void {
  if (typeof value !== "object" || value === null || Object.isFrozen(value)) return;
  for (const inner of Object.values(value)) deepFreeze(inner);
  Object.freeze(value);
}

function parseEvent(input: unknown, prefix: string): ParsedEvent {
  const payload = (input as { type?: unknown; payload?: unknown } | null)?.payload;
  if (
    (input as { type?: unknown } | null)?.type !== "model_request" ||
    typeof payload !== "object" || payload === null ||
    !TOKEN_FIELDS.every((f) => Array.isArray((payload as Record<string, unknown>)[f]))
  ) {
    return parseOrThrow(EventInputSchema, input, prefix);
  }
  const arrays = payload as Record<(typeof TOKEN_FIELDS)[number], unknown[]>;
  checkIds(arrays.prompt_token_ids, `${prefix}.payload.prompt_token_ids`);
  checkIds(arrays.response_token_ids, `${prefix}.payload.response_token_ids`);
  const logprobs = arrays.response_logprobs;
  for (let j = 0; j < logprobs.length; j++) {
    const v = logprobs[j];
    if (typeof v !== "number" || !Number.isFinite(v)) {
      const field = `${prefix}.payload.response_logprobs[${j}]`;
      throw new ValidationError(field, [`${field}: must be a finite number`]);
    }
  }
  if (logprobs.length !== arrays.response_token_ids.length) {
    const field = `${prefix}.payload.response_logprobs`;
    throw new ValidationError(field, [
      `${field}: expected ${arrays.response_token_ids.length} logprobs (one per response ` +
      `token), got ${logprobs.length}`,
    ]);
  }
  // The request body (a JSON object) is checked the same way when it is plain JSON; anything
  // else goes to zod whole, which then reports it.
  const request = (payload as { request?: unknown }).request;
  const plainRequest = isPlainJsonObject(request);
  const messages = (payload as { messages?: unknown }).messages;
  const checkedMessages = typeof messages === "object" && messages !== null &&
    CHECKED_MESSAGES.has(messages);
  const parsed = parseOrThrow(
    EventInputSchema,
    {
      ...(input as object),
      payload: {
        ...payload,
        ...(plainRequest ? { request: {} } : {}),
        ...(checkedMessages ? { messages: [] } : {}),
        prompt_token_ids: [],
        response_token_ids: [],
        response_logprobs: [],
      },
    },
    prefix,
  );
  if (parsed.type !== "model_request") throw new Error("unreachable: type changed while parsing");
  if (plainRequest) parsed.payload.request = request as JsonObject;
  if (checkedMessages) parsed.payload.messages = messages as ChatMessage[];
  parsed.payload.prompt_token_ids = arrays.prompt_token_ids as number[];
  parsed.payload.response_token_ids = arrays.response_token_ids as number[];
  parsed.payload.response_logprobs = logprobs as number[];
  return parsed;
}

function checkIds(ids: unknown[], field: string): void {
  for (let j = 0; j < ids.length; j++) {
    const v = ids[j];
    // An integer in [0, 2^32) is exactly a number that `>>> 0` leaves unchanged (~5× faster
    // over a 16k-id prompt than testing integer and range apart).
    if (typeof v !== "number" || (v >>> 0) !== v) {
      throw new ValidationError(`${field}[${j}]`, [
        `${field}[${j}]: must be a token id (an integer in [0, 4294967295])`,
      ]);
    }
  }
}

/** Converts a validated model_request payload into typed arrays (see `modelRequestFromWire`). */
export function modelRequestOf(event: ParsedEvent & { type: "model_request" }): ModelRequest {
  return modelRequestFromWire(event.payload);
}

/** Splits a model call into its JSON metadata (token arrays go to blobs). */
export function modelRequestMeta(request: ModelRequest): ModelRequestMeta {
  const { prompt_token_ids: _p, response_token_ids: _r, response_logprobs: _l, ...meta } = request;
  return meta;
}

/**
 * `JSON.stringify(meta)`, with messages that {@link checkCallMessages} checked written from their
 * kept text.
 */
function metaJson(meta: ModelRequestMeta): string {
  const text = meta.messages === undefined ? undefined : CHECKED_MESSAGES.get(meta.messages);
  if (text === undefined) return JSON.stringify(meta);
  const members: string[] = [];
  for (const [key, value] of Object.entries(meta)) {
    const json = key === "messages" ? text : JSON.stringify(value);
    // Left out as JSON.stringify leaves them out: a value with no JSON (undefined).
    if (json !== undefined) members.push(`${JSON.stringify(key)}:${json}`);
  }
  return `{${members.join(",")}}`;
}

/** The `events` columns that {@link newEventRow} fills, in its order (`created_at` comes apart). */
export const EVENT_COLUMNS =
  "seq, rollout_id, attempt_id, type, event_key, payload, prompt_ref, prompt_ref_len, " +
  "prompt_tail, response_ids, response_logprobs";

/** Where a new event is stored: the row values of {@link EVENT_COLUMNS}, and the stored event. */
export interface NewEventRow {
  values: SqlParam[];
  event: RolloutEvent;
}

/**
 * The `events` row of a new event, for both stores. A model call (`call`) keeps its metadata as
 * JSON and its tokens as blobs, the prompt as `plan` says (a reference to an earlier call and
 * the tail after it).
 */
export function newEventRow(
  at: { seq: number; rollout_id: string; attempt_id: string; created_at: number },
  event: ParsedEvent,
  call?: { request: ModelRequest; plan: PromptPlan },
): NewEventRow {
  const { seq, rollout_id, attempt_id, created_at } = at;
  const base = { seq, rollout_id, attempt_id, event_key: event.event_key ?? null, created_at };
  if (call) {
    const { request, plan } = call;
    return {
      values: [
        seq,
        rollout_id,
        attempt_id,
        "model_request",
        base.event_key,
        metaJson(modelRequestMeta(request)),
        plan.ref_seq,
        plan.ref_len,
        encodeU32(plan.tail),
        encodeU32(request.response_token_ids),
        encodeF32(request.response_logprobs),
      ],
      event: { ...base, type: "model_request", payload: request },
    };
  }
  return {
    values: [
      seq,
      rollout_id,
      attempt_id,
      event.type,
      base.event_key,
      JSON.stringify(event.payload),
      null,
      null,
      null,
      null,
      null,
    ],
    event: { ...base, type: event.type, payload: event.payload } as RolloutEvent,
  };
}

/**
 * Checks an id argument (a rollout or attempt id from a URL path): 400 naming `field` unless
 * it is an id the store could hold.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkId } from "./store_input.ts";
 * checkId("attempt_id", "a1-00ff");
 * assert.throws(() => checkId("attempt_id", "a1\u0000x"), /attempt_id: must use only/);
 * ```
 */
export function checkId(field: string, id: unknown): void {
  // Every store call checks its ids with the fast `isId`; only an id it refuses goes through
  // the schema, which names what is wrong.
  if (!isId(id)) parseOrThrow(IdSchema, id, field);
}

/**
 * True when `id` is an id the store could hold (reads answer "not found" for others):
 * `IdSchema`'s rules as one regex test and two comparisons (zod's chain of checks cost ~5 µs on
 * every store call; `tests/store_ids_test.ts` checks both accept the same ids).
 */
export function isId(id: unknown): boolean {
  return typeof id === "string" && id.length <= MAX_ID_CHARS && ID_PATTERN.test(id) &&
    id !== "." && id !== "..";
}

/** Checks a worker name (claims, lease renewals). */
export function checkWorker(worker: unknown): void {
  parseOrThrow(WorkerSchema, worker, "worker");
}

/** Checks the fields of a claim that reach SQL: worker, claim key, labels. */
export function checkClaim(options: ClaimOptions): void {
  checkWorker(options.worker);
  if (options.claim_key !== undefined) parseOrThrow(WorkerSchema, options.claim_key, "claim_key");
  if (options.labels !== undefined) parseOrThrow(LabelsSchema, options.labels, "labels");
}

/** Checks the filters of a listing that reach SQL. */
export function checkListing(options: ListRolloutsOptions): void {
  if (options.group_id !== undefined) parseOrThrow(IdSchema, options.group_id, "group_id");
  if (options.labels !== undefined) parseOrThrow(LabelsSchema, options.labels, "labels");
}

/**
 * Checks free text bound for a TEXT column (an attempt's error or log location): no NUL,
 * which PostgreSQL refuses and SQLite would cut the string at.
 */
export function checkText(field: string, text: string | null | undefined): void {
  if (typeof text === "string" && text.includes("\u0000")) {
    throw new ValidationError(field, [`${field}: must not contain NUL characters`]);
  }
}

/** Checks the arguments of a lease renewal. */
export function checkRenewalArgs(rollout_id: string, attempt_id: string, worker: string): void {
  checkId("rollout_id", rollout_id);
  checkId("attempt_id", attempt_id);
  checkWorker(worker);
}

/** Checks the arguments of a status transition that reach SQL. */
export function checkTransitionArgs(rollout_id: string, options: TransitionOptions): void {
  checkId("rollout_id", rollout_id);
  checkText("error", options.error);
  checkText("log_location", options.log_location);
}
