/**
 * Backend-independent rules of the store: input normalization, the transition guard, attempt
 * ids, cursors and the row ⇄ record mapping of model calls. Both backends call these so they
 * cannot drift apart.
 *
 * @module
 */
import {
  type Attempt,
  type AttemptStatus,
  canTransition,
  type EventInput,
  EventInputSchema,
  isPlainJsonObject,
  type JsonObject,
  type Model,
  type ModelRequest,
  modelRequestFromWire,
  parseOrThrow,
  type Rollout,
  type RolloutCreate,
  RolloutCreateSchema,
  type RolloutEvent,
  type RolloutMode,
  type RolloutStatus,
  ValidationError,
} from "../schema.ts";
import { StoreError, type TransitionOptions } from "./store.ts";
import { type CallTokens, decodeF32 } from "./token_blob.ts";
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
 * import { normalizeCreates } from "./records.ts";
 * normalizeCreates([{ rollout_id: "r1", input: 1 }])[0].group_id; // "r1"
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
export function parseEvents(inputs: EventInput[]): ParsedEvent[] {
  if (!Array.isArray(inputs)) throw new ValidationError("events", ["events: must be an array"]);
  return inputs.map((input, i) => parseEvent(input, `events[${i}]`));
}

const TOKEN_FIELDS = ["prompt_token_ids", "response_token_ids", "response_logprobs"] as const;

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
  const parsed = parseOrThrow(
    EventInputSchema,
    {
      ...(input as object),
      payload: {
        ...payload,
        ...(plainRequest ? { request: {} } : {}),
        prompt_token_ids: [],
        response_token_ids: [],
        response_logprobs: [],
      },
    },
    prefix,
  );
  if (parsed.type !== "model_request") throw new Error("unreachable: type changed while parsing");
  if (plainRequest) parsed.payload.request = request as JsonObject;
  parsed.payload.prompt_token_ids = arrays.prompt_token_ids as number[];
  parsed.payload.response_token_ids = arrays.response_token_ids as number[];
  parsed.payload.response_logprobs = logprobs as number[];
  return parsed;
}

function checkIds(ids: unknown[], field: string): void {
  for (let j = 0; j < ids.length; j++) {
    const v = ids[j];
    if (typeof v !== "number" || !Number.isInteger(v) || v < 0 || v > 0xffffffff) {
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

/** The metadata of a model call, stored as JSON beside its token blobs. */
export type ModelRequestMeta = Omit<
  ModelRequest,
  "prompt_token_ids" | "response_token_ids" | "response_logprobs"
>;

/** Splits a model call into its JSON metadata (token arrays go to blobs). */
export function modelRequestMeta(request: ModelRequest): ModelRequestMeta {
  const { prompt_token_ids: _p, response_token_ids: _r, response_logprobs: _l, ...meta } = request;
  return meta;
}

/** A fresh attempt id: its 1-based index plus a random suffix (ids never repeat on reuse). */
export function newAttemptId(index: number): string {
  const suffix = crypto.getRandomValues(new Uint8Array(4));
  return `a${index}-${Array.from(suffix, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** The status a running attempt ends with when its rollout moves to `to`. */
export function defaultAttemptStatus(to: RolloutStatus): Exclude<AttemptStatus, "running"> {
  switch (to) {
    case "succeeded":
      return "succeeded";
    case "cancelled":
      return "cancelled";
    default:
      return "failed";
  }
}

/** What {@link checkTransition} decided. */
export type TransitionDecision = "noop" | "apply";

/**
 * The transition guard both backends share. Returns "noop" for a retried transition that
 * already took effect, "apply" for a valid one, and throws a 409/400 {@link StoreError} naming
 * the field otherwise.
 *
 * @example
 * ```ts
 * import { checkTransition } from "./records.ts";
 * import { StoreError } from "./store.ts";
 * const rollout = { rollout_id: "r", status: "running" as const, version: 2,
 *   config: { timeout_s: 600, max_attempts: 1 } };
 * checkTransition(rollout, { attempt_id: "a1-x" }, 1, { to: "succeeded" }); // "apply"
 * try {
 *   checkTransition(rollout, { attempt_id: "a1-x" }, 1, { to: "running" });
 * } catch (err) {
 *   (err as StoreError).status; // 400
 * }
 * ```
 */
export function checkTransition(
  rollout: Pick<Rollout, "rollout_id" | "status" | "version" | "config">,
  currentAttempt: { attempt_id: string } | null,
  attemptCount: number,
  options: TransitionOptions,
): TransitionDecision {
  const { to } = options;
  if (to === "running") {
    throw new StoreError(
      "invalid",
      "to: a rollout enters 'running' only through POST /v1/rollouts/claim",
    );
  }
  if (options.attempt_id !== undefined && currentAttempt?.attempt_id !== options.attempt_id) {
    throw new StoreError(
      "conflict",
      `attempt_id: '${options.attempt_id}' is not the current attempt of rollout ` +
        `'${rollout.rollout_id}' (current: ${
          currentAttempt ? `'${currentAttempt.attempt_id}'` : "none"
        })`,
    );
  }
  if (rollout.status === to) return "noop";
  if (!canTransition(rollout.status, to)) {
    throw new StoreError(
      "conflict",
      `to: rollout '${rollout.rollout_id}' cannot go from '${rollout.status}' to '${to}'`,
    );
  }
  if (options.expected_version !== undefined && options.expected_version !== rollout.version) {
    throw new StoreError(
      "conflict",
      `expected_version: rollout '${rollout.rollout_id}' is at version ${rollout.version}, ` +
        `not ${options.expected_version}`,
    );
  }
  if (to === "requeuing" && attemptCount >= rollout.config.max_attempts) {
    throw new StoreError(
      "conflict",
      `to: rollout '${rollout.rollout_id}' has used all ${rollout.config.max_attempts} ` +
        `attempt(s); move it to 'failed' instead of 'requeuing'`,
    );
  }
  return "apply";
}

/**
 * Encodes a listing position as an opaque cursor.
 *
 * @example
 * ```ts
 * import { decodeCursor, encodeCursor } from "./records.ts";
 * decodeCursor(encodeCursor(42)); // 42
 * ```
 */
export function encodeCursor(pos: number): string {
  return btoa(`p:${pos}`).replace(/=+$/, "");
}

/** Decodes a cursor from {@link encodeCursor}; 400 naming `after` when it is not one. */
export function decodeCursor(cursor: string): number {
  let text = "";
  try {
    text = atob(cursor);
  } catch {
    // Reported below.
  }
  const match = /^p:(\d+)$/.exec(text);
  if (!match) throw new StoreError("invalid", `after: '${cursor}' is not a cursor of this gateway`);
  return Number(match[1]);
}

/** Merges attempt `info` updates (shallow). */
export function mergeInfo(base: JsonObject, extra: JsonObject | undefined): JsonObject {
  return extra ? { ...base, ...extra } : base;
}

/** The 404 for an unknown rollout. */
export function noRollout(id: string): StoreError {
  return new StoreError("not_found", `rollout_id: no rollout '${id}'`);
}

/** The 404 for an unknown attempt. */
export function noAttempt(rolloutId: string, attemptId: string): StoreError {
  return new StoreError(
    "not_found",
    `attempt_id: no attempt '${attemptId}' in rollout '${rolloutId}'`,
  );
}

/** An `attempts` row, as both backends store it. */
export interface AttemptRow {
  rollout_id: string;
  attempt_id: string;
  idx: number;
  status: string;
  started_at: number;
  ended_at: number | null;
  exit_code: number | null;
  error: string | null;
  worker: string | null;
  lease_expires_at: number | null;
  log_location: string | null;
  info: string;
}

/**
 * The columns of a `rollouts` row both backends share. `labels` is JSON text in SQLite and an
 * already decoded object in PostgreSQL (`jsonb`); `pos` is typed per backend.
 */
export interface RolloutRowBase {
  rollout_id: string;
  group_id: string;
  mode: string;
  status: string;
  version: number;
  input: string;
  config: string;
  labels: string | Record<string, string>;
  created_at: number;
  updated_at: number;
  policy_version_min: number | null;
  policy_version_max: number | null;
  reward: number | null;
}

/** The columns of a `models` row that make a {@link Model} (`seq` is typed per backend). */
export interface ModelRowBase {
  name: string;
  endpoints: string;
  version: number;
  info: string;
  updated_at: number;
}

/** A stored model row as a {@link Model}. */
export function modelFromRow(row: ModelRowBase): Model {
  return {
    name: row.name,
    endpoints: JSON.parse(row.endpoints),
    version: row.version,
    info: JSON.parse(row.info),
    updated_at: row.updated_at,
  };
}

/** A stored attempt row as an {@link Attempt}. */
export function attemptFromRow(row: AttemptRow): Attempt {
  return {
    attempt_id: row.attempt_id,
    rollout_id: row.rollout_id,
    index: row.idx,
    status: row.status as AttemptStatus,
    started_at: row.started_at,
    ended_at: row.ended_at,
    exit_code: row.exit_code,
    error: row.error,
    worker: row.worker,
    lease_expires_at: row.lease_expires_at,
    log_location: row.log_location,
    info: JSON.parse(row.info),
  };
}

/** A stored rollout row with its attempts as a {@link Rollout}. */
export function rolloutFromRow(row: RolloutRowBase, attempts: Attempt[]): Rollout {
  return {
    rollout_id: row.rollout_id,
    group_id: row.group_id,
    input: JSON.parse(row.input),
    mode: row.mode as RolloutMode,
    config: JSON.parse(row.config),
    labels: typeof row.labels === "string" ? JSON.parse(row.labels) : row.labels,
    status: row.status as RolloutStatus,
    version: row.version,
    attempts,
    created_at: row.created_at,
    updated_at: row.updated_at,
    policy_version_min: row.policy_version_min,
    policy_version_max: row.policy_version_max,
    reward: row.reward,
  };
}

/**
 * Rollout rows joined with their attempt rows (given ordered by rollout and index), in the
 * order of `rows`.
 */
export function rolloutsFromRows(rows: RolloutRowBase[], attemptRows: AttemptRow[]): Rollout[] {
  const byRollout = new Map<string, Attempt[]>();
  for (const a of attemptRows) {
    const list = byRollout.get(a.rollout_id) ?? [];
    list.push(attemptFromRow(a));
    byRollout.set(a.rollout_id, list);
  }
  return rows.map((row) => rolloutFromRow(row, byRollout.get(row.rollout_id) ?? []));
}

/** The lease-renewal guard: 409 unless the attempt is running and leased to `worker`. */
export function checkLeaseHolder(row: AttemptRow, attempt_id: string, worker: string): void {
  if (row.status !== "running") {
    throw new StoreError(
      "conflict",
      `attempt_id: attempt '${attempt_id}' is ${row.status}, not running; its lease is over`,
    );
  }
  if (row.worker !== worker) {
    throw new StoreError(
      "conflict",
      `worker: attempt '${attempt_id}' is leased to '${row.worker}', not '${worker}'`,
    );
  }
}

/** Where a running rollout goes when its attempt's lease expires. */
export function statusAfterLostLease(rollout: Rollout): RolloutStatus {
  return rollout.attempts.length < rollout.config.max_attempts ? "requeuing" : "failed";
}

/** How an attempt ends: its final status and what to record. */
export interface AttemptEnd {
  status: Exclude<AttemptStatus, "running">;
  exit_code?: number | null;
  error?: string | null;
  info?: JsonObject;
  log_location?: string | null;
}

/**
 * The columns an ending attempt gets: what `end` gives, else what the attempt already holds;
 * `info` merged (as JSON text).
 */
export function attemptEndColumns(attempt: Attempt, end: AttemptEnd): {
  exit_code: number | null;
  error: string | null;
  info: string;
  log_location: string | null;
} {
  return {
    exit_code: end.exit_code ?? attempt.exit_code,
    error: end.error ?? attempt.error,
    info: JSON.stringify(mergeInfo(attempt.info, end.info)),
    log_location: end.log_location ?? attempt.log_location,
  };
}

/** The columns of an `events` row that {@link eventFromRow} reads (`seq` is typed per backend). */
export interface EventRowBase {
  rollout_id: string;
  attempt_id: string;
  type: string;
  event_key: string | null;
  created_at: number;
  payload: string;
  response_logprobs: Uint8Array | null;
}

/**
 * A stored event as a {@link RolloutEvent}. A model call's token arrays are rebuilt by the
 * backend (its prompt may reference earlier calls) and passed as `tokens`; other events take
 * `null`.
 */
export function eventFromRow(
  row: EventRowBase,
  seq: number,
  tokens: CallTokens | null,
): RolloutEvent {
  const base = {
    seq,
    rollout_id: row.rollout_id,
    attempt_id: row.attempt_id,
    event_key: row.event_key,
    created_at: row.created_at,
  };
  const payload = JSON.parse(row.payload);
  if (row.type !== "model_request") {
    return { ...base, type: row.type, payload } as RolloutEvent;
  }
  if (!tokens) throw new Error("unreachable: a model call decoded without its tokens");
  const request: ModelRequest = {
    ...(payload as ModelRequestMeta),
    prompt_token_ids: tokens.prompt.slice(),
    response_token_ids: tokens.response.slice(),
    response_logprobs: decodeF32(row.response_logprobs!),
  };
  return { ...base, type: "model_request", payload: request };
}
