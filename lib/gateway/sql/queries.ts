/**
 * The stores' SQL, written once: fixed statements per dialect ({@link statements}) and the
 * WHERE builders of listings and claims. Placeholders are `$n` (see `./dialect.ts`).
 *
 * @module
 */
import type { EventType } from "../../schema.ts";
import type { ClaimOptions, ListEventsOptions, ListRolloutsOptions } from "../store.ts";
import { decodeCursor } from "../store_rules.ts";
import { binder, type Dialect, type SqlParam } from "./dialect.ts";
import type { Query } from "./flow.ts";

/** Earlier calls of an attempt examined when a prompt is stored as a reference. */
export const REFERENCE_CANDIDATES = 4;

/** The columns of an event's change-feed entry. */
const CHANGE_COLUMNS = "seq, rollout_id, attempt_id, type, event_key, status, created_at";

/** The fixed statements of a store, for dialect `d`. */
export type Statements = ReturnType<typeof statements>;

/**
 * The fixed statements of a store.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { POSTGRES, SQLITE } from "./dialect.ts";
 * import { statements } from "./queries.ts";
 * assert.match(statements(SQLITE).rolloutById, /FROM rollouts WHERE/);
 * assert.match(statements(POSTGRES).rolloutForUpdate, /FROM reins_rollouts .* FOR UPDATE$/);
 * ```
 */
export function statements(d: Dialect) {
  const { rollouts: R, attempts: A, events: E, models: M, meta: X } = d.table;
  return {
    insertRollout: `INSERT INTO ${R} (${d.pos.column}rollout_id, group_id, mode, status, version,
        input, config, labels, created_at, updated_at)
      VALUES (${d.pos.value}$1, $2, $3, 'queuing', 1, $4, $5, ${d.json("$6")}, $7, $7)
      ON CONFLICT (rollout_id) DO NOTHING RETURNING rollout_id`,
    rolloutById: `SELECT * FROM ${R} WHERE rollout_id = $1`,
    rolloutForUpdate: `SELECT * FROM ${R} WHERE rollout_id = $1${d.forUpdate}`,
    rolloutsByIds: `SELECT * FROM ${R} WHERE rollout_id IN (${d.textsOf("$1")})`,
    attemptsOf: `SELECT * FROM ${A} WHERE rollout_id IN (${d.textsOf("$1")})
      ORDER BY rollout_id, idx`,
    exists: `SELECT 1 AS ok FROM ${R} WHERE rollout_id = $1`,
    claimedBefore: `SELECT rollout_id, attempt_id FROM ${A} WHERE worker = $1 AND claim_key = $2
      ORDER BY started_at, rollout_id`,
    lastIndex: `SELECT COALESCE(MAX(idx), 0) AS n FROM ${A} WHERE rollout_id = $1`,
    insertAttempt: `INSERT INTO ${A} (rollout_id, attempt_id, idx, status, started_at, worker,
        lease_expires_at, info, claim_key) VALUES ($1, $2, $3, 'running', $4, $5, $6, '{}', $7)`,
    // A new attempt starts without a reward: the previous attempt's is superseded.
    startRunning: `UPDATE ${R} SET status = 'running', version = version + 1, updated_at = $1,
        reward = NULL, reward_attempt_id = NULL, reward_credential = NULL WHERE rollout_id = $2`,
    setStatus: `UPDATE ${R} SET status = $1, version = version + 1, updated_at = $2
      WHERE rollout_id = $3`,
    attempt: `SELECT * FROM ${A} WHERE rollout_id = $1 AND attempt_id = $2${d.forUpdate}`,
    attemptState: `SELECT a.status, a.idx = (SELECT MAX(b.idx) FROM ${A} b
        WHERE b.rollout_id = a.rollout_id) AS current
      FROM ${A} a WHERE a.rollout_id = $1 AND a.attempt_id = $2`,
    renewLease: `UPDATE ${A} SET lease_expires_at = $1 WHERE rollout_id = $2 AND attempt_id = $3`,
    endAttempt: `UPDATE ${A} SET status = $1, ended_at = $2, exit_code = $3, error = $4, info = $5,
        log_location = $6, lease_expires_at = NULL WHERE rollout_id = $7 AND attempt_id = $8`,
    insertStatusEvent: `INSERT INTO ${E} (seq, rollout_id, attempt_id, type, event_key,
        created_at, status, payload) VALUES (${d.seq}, $1, $2, 'status', NULL, $3, $4, $5)`,
    leasesDue: `SELECT 1 AS due FROM ${A} WHERE status = 'running' AND lease_expires_at < $1
      LIMIT 1`,
    expiredAttempts: `SELECT * FROM ${A} WHERE status = 'running' AND lease_expires_at < $1
      ORDER BY rollout_id${d.forUpdate}`,
    eventByKey: `SELECT * FROM ${E} WHERE rollout_id = $1 AND event_key = $2`,
    callRow: `SELECT prompt_ref, prompt_ref_len, prompt_tail, response_ids FROM ${E}
      WHERE seq = $1`,
    recentCalls: `SELECT seq FROM ${E} WHERE rollout_id = $1 AND attempt_id = $2
      AND type = 'model_request' ORDER BY seq DESC LIMIT ${REFERENCE_CANDIDATES}`,
    // Under the seq lock (PostgreSQL) or the one writer (SQLite), the current attempt is read
    // in the same statement that sets the reward: a claim in between cannot slip a stale one in.
    setReward: `UPDATE ${R} SET reward = $1, reward_attempt_id = $2, reward_credential = $3,
        updated_at = $4
      WHERE rollout_id = $5 AND EXISTS (SELECT 1 FROM ${A} a WHERE a.rollout_id = $5
        AND a.attempt_id = $2 AND a.status <> 'lost'
        AND a.idx = (SELECT MAX(b.idx) FROM ${A} b WHERE b.rollout_id = $5))`,
    upsertModel: `INSERT INTO ${M} (name, endpoints, version, info, updated_at, seq)
      VALUES ($1, $2, $3, $4, $5, ${d.seq})
      ON CONFLICT (name) DO UPDATE SET endpoints = excluded.endpoints,
        version = excluded.version, info = excluded.info, updated_at = excluded.updated_at,
        seq = excluded.seq`,
    models: `SELECT * FROM ${M} ORDER BY name`,
    model: `SELECT * FROM ${M} WHERE name = $1`,
    changedEvents: `SELECT ${CHANGE_COLUMNS} FROM ${E} WHERE seq > $1 ORDER BY seq LIMIT $2`,
    changedEventsOfType: `SELECT ${CHANGE_COLUMNS} FROM ${E} WHERE seq > $1 AND type = $2
      ORDER BY seq LIMIT $3`,
    changedModels: `SELECT name, version, updated_at, seq FROM ${M} WHERE seq > $1
      ORDER BY seq LIMIT $2`,
    insertMeta: `INSERT INTO ${X} (key, value) VALUES ($1, $2) ON CONFLICT DO NOTHING`,
    meta: `SELECT value FROM ${X} WHERE key = $1`,
  };
}

function list<T>(value: T | T[]): T[] {
  return Array.isArray(value) ? value : [value];
}

/**
 * A rollout listing page (one row more than `limit`, to tell whether another page follows).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { SQLITE } from "./dialect.ts";
 * import { listRolloutsQuery } from "./queries.ts";
 * const q = listRolloutsQuery(SQLITE, { status: ["queuing"], labels: { step: "1" }, limit: 10 });
 * assert.match(q.sql, /status IN \(\$1\) AND json_extract\(labels, \$2\) = \$3/);
 * assert.deepEqual(q.params, ["queuing", '$."step"', "1", 11]);
 * ```
 */
export function listRolloutsQuery(d: Dialect, options: ListRolloutsOptions): Query {
  const params: SqlParam[] = [];
  const p = binder(params);
  const where: string[] = [];
  const desc = options.order === "desc";
  if (options.after !== undefined) {
    where.push(`pos ${desc ? "<" : ">"} ${p(decodeCursor(options.after))}`);
  }
  if (options.status !== undefined) {
    where.push(`status IN (${list(options.status).map(p).join(", ")})`);
  }
  if (options.mode) where.push(`mode = ${p(options.mode)}`);
  if (options.group_id) where.push(`group_id = ${p(options.group_id)}`);
  for (const [key, value] of Object.entries(options.labels ?? {})) {
    where.push(d.label(p, key, value));
  }
  const sql = `SELECT * FROM ${d.table.rollouts} ${
    where.length ? `WHERE ${where.join(" AND ")}` : ""
  }
    ORDER BY pos ${desc ? "DESC" : "ASC"} LIMIT ${p(options.limit + 1)}`;
  return { sql, params };
}

/** The claimable rollouts of a claim, oldest first (locked and skipped when taken, in PostgreSQL). */
export function claimCandidatesQuery(d: Dialect, options: ClaimOptions): Query {
  const params: SqlParam[] = [];
  const p = binder(params);
  const where = ["status IN ('queuing', 'requeuing')"];
  if (options.mode) where.push(`mode = ${p(options.mode)}`);
  for (const [key, value] of Object.entries(options.labels ?? {})) {
    where.push(d.label(p, key, value));
  }
  const sql = `SELECT rollout_id, status FROM ${d.table.rollouts} WHERE ${where.join(" AND ")}
    ORDER BY pos LIMIT ${p(options.limit)}${d.skipLocked}`;
  return { sql, params };
}

/** A rollout's events in `seq` order, filtered. */
export function listEventsQuery(
  d: Dialect,
  rollout_id: string,
  options: ListEventsOptions,
): Query {
  const params: SqlParam[] = [];
  const p = binder(params);
  const where = [`rollout_id = ${p(rollout_id)}`];
  if (options.type !== undefined) {
    where.push(`type IN (${list<EventType>(options.type).map(p).join(", ")})`);
  }
  if (options.attempt_id !== undefined) where.push(`attempt_id = ${p(options.attempt_id)}`);
  if (options.after_seq !== undefined) where.push(`seq > ${p(options.after_seq)}`);
  const sql = `SELECT * FROM ${d.table.events} WHERE ${where.join(" AND ")} ORDER BY seq
    LIMIT ${p(options.limit ?? 1_000_000)}`;
  return { sql, params };
}
