/**
 * Rows of the stores' tables and their decoding into records, for both dialects: PostgreSQL
 * answers `bigint` columns as strings and `labels` as a decoded object (`jsonb`), SQLite as
 * numbers and JSON text; the decoders take either.
 *
 * @module
 */
import type {
  Attempt,
  AttemptStatus,
  Change,
  EventType,
  Model,
  ModelRequest,
  Rollout,
  RolloutEvent,
  RolloutMode,
  RolloutStatus,
} from "../../schema.ts";
import { type CallTokens, decodeF32 } from "../token_blob.ts";

/** An `attempts` row. */
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

/** A `rollouts` row (`pos` is a string in PostgreSQL, `labels` decoded there). */
export interface RolloutRow {
  pos: number | string;
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
  reward_attempt_id: string | null;
  reward_credential: string | null;
}

/** An `events` row (`seq` and `prompt_ref` are strings in PostgreSQL). */
export interface EventRow {
  seq: number | string;
  rollout_id: string;
  attempt_id: string;
  type: string;
  event_key: string | null;
  created_at: number;
  status: string | null;
  payload: string;
  prompt_ref: number | string | null;
  prompt_ref_len: number | null;
  prompt_tail: Uint8Array | null;
  response_ids: Uint8Array | null;
  response_logprobs: Uint8Array | null;
}

/** The columns of an `events` row that hold a model call's token ids. */
export type CallRow = Pick<
  EventRow,
  "prompt_ref" | "prompt_ref_len" | "prompt_tail" | "response_ids"
>;

/** A `models` row. */
export interface ModelRow {
  name: string;
  endpoints: string;
  version: number;
  info: string;
  updated_at: number;
  seq: number | string;
}

/** The metadata of a model call, stored as JSON beside its token blobs. */
export type ModelRequestMeta = Omit<
  ModelRequest,
  "prompt_token_ids" | "response_token_ids" | "response_logprobs"
>;

/** A stored model row as a {@link Model}. */
export function modelFromRow(row: ModelRow): Model {
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
export function rolloutFromRow(row: RolloutRow, attempts: Attempt[]): Rollout {
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
    reward_attempt_id: row.reward_attempt_id,
    reward_credential: row.reward_credential as Rollout["reward_credential"],
  };
}

/**
 * Rollout rows joined with their attempt rows (given ordered by rollout and index), in the
 * order of `rows`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { rolloutsFromRows } from "./rows.ts";
 * const [rollout] = rolloutsFromRows([{
 *   pos: "7", rollout_id: "r", group_id: "r", mode: "train", status: "queuing", version: 1,
 *   input: "1", config: '{"timeout_s":600,"max_attempts":1}', labels: { step: "1" },
 *   created_at: 0, updated_at: 0, policy_version_min: null, policy_version_max: null,
 *   reward: null, reward_attempt_id: null, reward_credential: null,
 * }], []);
 * assert.deepEqual(rollout.labels, { step: "1" });
 * assert.deepEqual(rollout.attempts, []);
 * ```
 */
export function rolloutsFromRows(rows: RolloutRow[], attemptRows: AttemptRow[]): Rollout[] {
  const byRollout = new Map<string, Attempt[]>();
  for (const a of attemptRows) {
    const list = byRollout.get(a.rollout_id) ?? [];
    list.push(attemptFromRow(a));
    byRollout.set(a.rollout_id, list);
  }
  return rows.map((row) => rolloutFromRow(row, byRollout.get(row.rollout_id) ?? []));
}

/**
 * A stored event as a {@link RolloutEvent}. A model call's token arrays are rebuilt by the
 * caller (its prompt may reference earlier calls) and passed as `tokens`; other events take
 * `null`.
 */
export function eventFromRow(row: EventRow, tokens: CallTokens | null): RolloutEvent {
  const base = {
    seq: Number(row.seq),
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

/** A change-feed event row. */
export interface ChangeRow {
  seq: number | string;
  rollout_id: string;
  attempt_id: string;
  type: EventType;
  event_key: string | null;
  status: RolloutStatus | null;
  created_at: number;
}

/** Event and model changes merged in `seq` order, at most `limit`. */
export function changesFromRows(
  events: ChangeRow[],
  models: Array<Pick<ModelRow, "name" | "version" | "updated_at" | "seq">>,
  limit: number,
): Change[] {
  const changes: Change[] = [
    ...events.map((e): Change => ({ kind: "event", ...e, seq: Number(e.seq) })),
    ...models.map((m): Change => ({
      kind: "model",
      seq: Number(m.seq),
      name: m.name,
      version: m.version,
      created_at: m.updated_at,
    })),
  ];
  changes.sort((a, b) => a.seq - b.seq);
  return changes.slice(0, limit);
}
