/**
 * The SQLite store's event path (`./sqlite_store.ts`): appending a post's events to an attempt
 * inside the open group transaction, synchronously (node:sqlite is synchronous), on the store's
 * connection through {@link SqliteEventDb}. PostgreSQL's counterpart is
 * `./postgres_events.ts`.
 *
 * A new event key is inserted at once, the unique `(rollout_id, event_key)` index telling whether
 * it was taken (`ON CONFLICT … DO NOTHING`; its seq is given back): one statement where a lookup
 * and an insert were two. A taken key is read and compared: a retry of the same event is answered
 * with what was stored, a different event under the key is a 409 naming it.
 *
 * @module
 */
import type { SQLInputValue, StatementSync } from "node:sqlite";
import type { Credential, RolloutEvent } from "../schema.ts";
import { SQLITE } from "./sql/dialect.ts";
import type { Flow } from "./sql/flow.ts";
import { SqlFlows, type TokenStore } from "./sql/flows.ts";
import type { EventRow } from "./sql/rows.ts";
import { EVENT_COLUMNS, modelRequestOf, newEventRow, type ParsedEvent } from "./store_input.ts";
import {
  attemptMayPost,
  type AttemptState,
  checkLiveAttempt,
  keyConflict,
  rewardCounts,
} from "./store_rules.ts";
import { planPrompt } from "./token_blob.ts";

const flows = new SqlFlows(SQLITE);
const INSERT =
  `INSERT INTO events (${EVENT_COLUMNS}, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`;
const INSERT_UNLESS_KEY_TAKEN =
  `${INSERT} ON CONFLICT (rollout_id, event_key) WHERE event_key IS NOT NULL DO NOTHING`;

/** What the event path uses of the store's connection, inside a group transaction. */
export interface SqliteEventDb {
  /** A prepared statement (cached by its text). */
  stmt(sql: string): StatementSync;
  /** Runs a shared flow on the connection. */
  flow<T>(flow: Flow<T>): T;
  /** Takes the next `seq`. */
  nextSeq(): number;
  /** Gives back the `seq` just taken (its insert did nothing). */
  giveBackSeq(): void;
  /** Decoded tokens of model calls (a write's wait for its commit). */
  tokens: TokenStore;
}

/**
 * Stores a checked post's events (`parsed`, from `checkAppend`) for an attempt and returns them
 * as stored, in order: the new ones, and for a retried key the event stored under it. Throws the
 * `StoreError` to answer (the caller's transaction or savepoint undoes what was written).
 */
export function appendToAttempt(
  db: SqliteEventDb,
  rollout_id: string,
  attempt_id: string,
  parsed: ParsedEvent[],
  credential: Credential,
): RolloutEvent[] {
  const state = db.flow(flows.attemptState(rollout_id, attempt_id));
  const now = Date.now();
  const out: RolloutEvent[] = [];
  const posted = new Map<string, ParsedEvent>();
  const mayPost = attemptMayPost(state, credential);
  parsed.forEach((event, i) => {
    const key = event.event_key;
    // A new key is inserted at once, the unique index telling whether it was taken: one
    // statement where a lookup and an insert were two (~6 µs an event). A taken key, or an
    // attempt that may not post, goes the long way below (a retry is answered with what
    // was stored; a different event under the key is a conflict).
    if (key !== undefined && mayPost && !posted.has(key)) {
      const stored = insertEvent(db, rollout_id, attempt_id, event, now, state, credential, true);
      if (stored) {
        posted.set(key, event);
        out.push(stored);
        return;
      }
    }
    if (key !== undefined) {
      const [existing] = db.stmt(flows.q.eventByKey).all(
        rollout_id,
        key,
      ) as unknown as EventRow[];
      if (existing) {
        const stored = db.flow(flows.decodeEvent(existing, db.tokens));
        const earlier = posted.get(key);
        const conflict = keyConflict(
          earlier ? { attempt_id, event: earlier } : stored,
          attempt_id,
          event,
          i,
        );
        if (conflict) throw conflict;
        out.push(stored);
        return;
      }
      posted.set(key, event);
    }
    checkLiveAttempt(state, credential, rollout_id, attempt_id);
    out.push(insertEvent(db, rollout_id, attempt_id, event, now, state, credential)!);
  });
  return out;
}

function insertEvent(
  db: SqliteEventDb,
  rollout_id: string,
  attempt_id: string,
  event: ParsedEvent,
  now: number,
  state: AttemptState,
  credential: Credential,
  unlessKeyTaken = false,
): RolloutEvent | null {
  const at = { seq: db.nextSeq(), rollout_id, attempt_id, created_at: now };
  const insert = db.stmt(unlessKeyTaken ? INSERT_UNLESS_KEY_TAKEN : INSERT);
  // Nothing inserted (the key was taken): the seq goes back, nothing else is written.
  const inserted = (values: SQLInputValue[]) => {
    if (insert.run(...values, now).changes !== 0) return true;
    db.giveBackSeq();
    return false;
  };
  if (event.type !== "model_request") {
    const row = newEventRow(at, event);
    if (!inserted(row.values)) return null;
    if (event.type === "reward" && rewardCounts(state, credential)) {
      db.stmt(flows.q.setReward).run(
        event.payload.value,
        attempt_id,
        credential,
        now,
        rollout_id,
      );
    }
    return row.event;
  }
  const request = modelRequestOf(event);
  const candidates = (db.stmt(flows.q.recentCalls).all(rollout_id, attempt_id) as Array<
    { seq: number }
  >).map(({ seq }) => ({ seq, tokens: db.flow(flows.callTokens(seq, db.tokens)) }));
  const plan = planPrompt(request.prompt_token_ids, candidates);
  const row = newEventRow(at, event, { request, plan });
  if (!inserted(row.values)) return null;
  db.stmt(
    `UPDATE rollouts SET policy_version_min = MIN(COALESCE(policy_version_min, ?1), ?1),
      policy_version_max = MAX(COALESCE(policy_version_max, ?1), ?1), updated_at = ?2
     WHERE rollout_id = ?3`,
  ).run(request.policy_version, now, rollout_id);
  db.tokens.set(at.seq, {
    prompt: request.prompt_token_ids.slice(),
    response: request.response_token_ids.slice(),
  });
  return row.event;
}
