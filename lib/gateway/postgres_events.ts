/**
 * The PostgreSQL store's event path: posts that arrive while a transaction runs are appended
 * together in the next one (see `PostgresStore.appendEvents`). Each post is checked on its own
 * (unknown ids, taken keys, a token's finished attempt) and a refused post adds nothing; the
 * rest share one seq lock, one `nextval` series, multi-row inserts and one rollout update.
 *
 * The seqs are taken with the lock, in the first round trip, one for every posted event: what
 * a retried key or a refused post does not use is a gap in the series (PostgreSQL's sequences
 * have gaps anyway: a rolled-back transaction leaves one), never a reordering, since seqs are
 * still taken and committed under the one lock. `lastSeq` is the largest stored seq, so a retry
 * still moves nothing a reader sees.
 *
 * @module
 */
import type postgres from "postgres";
import type { Credential, RolloutEvent } from "../schema.ts";
import { POSTGRES, type SqlParam } from "./sql/dialect.ts";
import { type Flow, runAsync } from "./sql/flow.ts";
import { SqlFlows, type TokenStore } from "./sql/flows.ts";
import { REFERENCE_CANDIDATES } from "./sql/queries.ts";
import type { EventRow } from "./sql/rows.ts";
import { StoreError } from "./store.ts";
import { EVENT_COLUMNS, modelRequestOf, newEventRow, type ParsedEvent } from "./store_input.ts";
import {
  type AttemptState,
  checkLiveAttempt,
  keyConflict,
  noAttempt,
  noRollout,
  rewardCounts,
} from "./store_rules.ts";
import { type CallTokens, planPrompt } from "./token_blob.ts";

/** Rows per multi-row insert at most (11 parameters each, under PostgreSQL's 65 535). */
const INSERT_CHUNK = 4_096;

/**
 * How a group's `n` new rows are split into multi-row inserts: powers of two, largest first
 * (37 → 32, 4, 1). An insert's text depends on its row count and is prepared once per connection
 * and text ({@link pgPrepared}), so a connection prepares at most thirteen insert texts.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { insertSizes } from "./postgres_events.ts";
 * assert.deepEqual(insertSizes(37), [32, 4, 1]);
 * assert.deepEqual(insertSizes(1), [1]);
 * assert.deepEqual(insertSizes(9_000), [4_096, 4_096, 512, 256, 32, 8]);
 * ```
 */
export function insertSizes(n: number): number[] {
  const sizes: number[] = [];
  for (let left = n; left > 0;) {
    let size = INSERT_CHUNK;
    while (size > left) size >>= 1;
    sizes.push(size);
    left -= size;
  }
  return sizes;
}

/** A connection, pool or transaction. */
export type Tx = postgres.TransactionSql | postgres.Sql;

/** The shared operations in PostgreSQL's dialect. */
export const flows: SqlFlows = new SqlFlows(POSTGRES);

/** Runs one statement. */
export async function pgQuery<T>(tx: Tx, text: string, params: SqlParam[] = []): Promise<T[]> {
  const rows = await tx.unsafe(text, params as never[]);
  return rows as unknown as T[];
}

/**
 * Runs one statement of fixed text as a prepared statement (once per connection and text). The
 * event path's statements take this: `postgres` runs an unprepared statement with parameters
 * (its `unsafe` default) by sending Parse and Describe and waiting for the answer before it binds
 * the values, and queues every later statement of the connection behind that wait. So a group's
 * "two round trips" were eleven: 20 parameterized statements sent at once on one connection took
 * 20 round trips (18–20 ms here), 20 without parameters 1.5 ms. Prepared, they go out together.
 * (The store's connections still plan each run: `plan_cache_mode` in `openPostgresStore`.)
 */
export async function pgPrepared<T>(tx: Tx, text: string, params: SqlParam[]): Promise<T[]> {
  const rows = await tx.unsafe(text, params as never[], { prepare: true });
  return rows as unknown as T[];
}

/** Runs a shared flow on `tx`. */
export function pgRun<T>(tx: Tx, flow: Flow<T>): Promise<T> {
  return runAsync(flow, (query) => pgQuery(tx, query.sql, query.params));
}

const pairKey = (r: string, a: string) => JSON.stringify([r, a]);
const keyOf = (rollout_id: string, key: string) => JSON.stringify([rollout_id, key]);

/** What a group of posts reads before its transaction's writes (see {@link readGroup}). */
interface GroupReads {
  /** Per posted (rollout, attempt): whether the rollout exists, the attempt's state. */
  found: Array<{
    rollout_id: string;
    attempt_id: string;
    r: boolean;
    status: string | null;
    current: boolean;
  }>;
  /** The events already stored under the posted keys. */
  keyed: EventRow[];
}

/**
 * Reads what a group of posts needs first: the attempts' states and the events already stored
 * under the posted keys, two statements sent together ({@link appendGroup} sends them right
 * behind its BEGIN, the seq lock and the seqs).
 */
function readGroup(sql: Tx, jobs: AppendJob[]): Promise<GroupReads> {
  const pairs = [...new Set(jobs.map((j) => pairKey(j.rollout_id, j.attempt_id)))].map(
    (k) => JSON.parse(k) as [string, string],
  );
  const wanted = new Map<string, { rollout_id: string; event_key: string }>();
  for (const job of jobs) {
    for (const e of job.parsed) {
      if (e.event_key === undefined) continue;
      wanted.set(keyOf(job.rollout_id, e.event_key), {
        rollout_id: job.rollout_id,
        event_key: e.event_key,
      });
    }
  }
  return Promise.all([
    pgPrepared<GroupReads["found"][number]>(
      sql,
      `SELECT x.rollout_id, x.attempt_id,
         EXISTS (SELECT 1 FROM reins_rollouts r WHERE r.rollout_id = x.rollout_id) AS r,
         a.status, a.idx = (SELECT MAX(b.idx) FROM reins_attempts b
           WHERE b.rollout_id = x.rollout_id) AS current
       FROM jsonb_to_recordset($1::text::jsonb) AS x(rollout_id text, attempt_id text)
       LEFT JOIN reins_attempts a ON a.rollout_id = x.rollout_id AND a.attempt_id = x.attempt_id`,
      [JSON.stringify(pairs.map(([rollout_id, attempt_id]) => ({ rollout_id, attempt_id })))],
    ),
    wanted.size
      ? pgPrepared<EventRow>(
        sql,
        `SELECT e.* FROM reins_events e
         JOIN jsonb_to_recordset($1::text::jsonb) AS x(rollout_id text, event_key text)
           ON e.rollout_id = x.rollout_id AND e.event_key = x.event_key`,
        [JSON.stringify([...wanted.values()])],
      )
      : Promise.resolve([]),
  ]).then(([found, keyed]) => ({ found, keyed }));
}

/**
 * Appends the events of several posts in one transaction on `conn` (a reserved connection, not
 * in a transaction): under the seq lock, one `nextval` series and what {@link readGroup} reads,
 * then multi-row inserts and one rollout update. The statements go out pipelined in two round
 * trips: BEGIN, the lock, the seqs and the reads; the inserts, the update and COMMIT (a group
 * with model calls reads their prompt-prefix candidates in between). Each round trip also waits
 * its turn on the gateway's busy event loop (~1–3 ms under load), and the posts of the group
 * wait through each; the transaction had taken eight, then three.
 *
 * With COMMIT sent before the inserts' outcome is known, an event key that another gateway
 * stored since the reads cannot be skipped (`ON CONFLICT DO NOTHING` would commit the rest): the
 * insert fails on the unique index instead, PostgreSQL answers the COMMIT of the failed
 * transaction with a rollback, and {@link KeyRace} asks for the group to run again.
 */
export async function appendGroup(
  conn: Tx,
  jobs: AppendJob[],
  cache: TokenStore,
): Promise<Array<RolloutEvent[] | StoreError>> {
  try {
    const posted = jobs.reduce((n, job) => n + job.parsed.length, 0);
    // Sent together, run in this order: the reads see the attempts as the lock holder does.
    const [, , seqRows, { found, keyed }] = await Promise.all([
      pgQuery(conn, "BEGIN"),
      pgQuery(conn, POSTGRES.lockSeq!),
      pgPrepared<{ seq: string }>(
        conn,
        "SELECT nextval('reins_seq') AS seq FROM generate_series(1, $1::int)",
        [posted],
      ),
      readGroup(conn, jobs),
    ]);
    const seqs = seqRows.map((r) => Number(r.seq));
    return await appendRead(conn, jobs, cache, { found, keyed, seqs });
  } catch (err) {
    // Also after a pipelined COMMIT: the failed transaction was seen still open at the next
    // BEGIN on this connection (the COMMIT queued behind the failed statement had not ended it),
    // and a ROLLBACK outside a transaction is only a warning.
    await pgQuery(conn, "ROLLBACK").catch(() => {});
    // A key stored by another writer since the reads (unique_violation): run the group again.
    if ((err as { code?: string })?.code === "23505") throw new KeyRace();
    throw err;
  }
}

/** {@link appendGroup} once its reads are in, up to its COMMIT (sent with the last writes). */
async function appendRead(
  tx: Tx,
  jobs: AppendJob[],
  cache: TokenStore,
  { found, keyed, seqs }: GroupReads & { seqs: number[] },
): Promise<Array<RolloutEvent[] | StoreError>> {
  const states = new Map<string, AttemptState>();
  const errors = new Map<AppendJob, StoreError>();
  for (const f of found) {
    if (f.status !== null) {
      states.set(pairKey(f.rollout_id, f.attempt_id), {
        status: f.status as AttemptState["status"],
        current: f.current,
      });
    } else {
      const error = f.r ? noAttempt(f.rollout_id, f.attempt_id) : noRollout(f.rollout_id);
      for (const job of jobs) {
        if (job.rollout_id === f.rollout_id && job.attempt_id === f.attempt_id) {
          errors.set(job, error);
        }
      }
    }
  }

  const byKey = new Map<string, RolloutEvent>();
  for (const row of keyed) {
    byKey.set(
      keyOf(row.rollout_id, row.event_key!),
      await pgRun(tx, flows.decodeEvent(row, cache)),
    );
  }

  // Per post, in order: each event is a stored one retried, one retried within the group, or
  // new. A refused post adds nothing, so later posts see only what will be stored.
  const fresh: Array<{ job: AppendJob; event: ParsedEvent }> = [];
  const pending = new Map<string, { attempt_id: string; event: ParsedEvent }>();
  for (const job of jobs) {
    if (errors.has(job)) continue;
    const state = states.get(pairKey(job.rollout_id, job.attempt_id))!;
    const mine: Array<{ job: AppendJob; event: ParsedEvent }> = [];
    const mineKeys = new Map<string, { attempt_id: string; event: ParsedEvent }>();
    try {
      job.parsed.forEach((event, i) => {
        if (event.event_key !== undefined) {
          const k = keyOf(job.rollout_id, event.event_key);
          const earlier = byKey.get(k) ?? pending.get(k) ?? mineKeys.get(k);
          if (earlier) {
            const conflict = keyConflict(earlier, job.attempt_id, event, i);
            if (conflict) throw conflict;
            return;
          }
          mineKeys.set(k, { attempt_id: job.attempt_id, event });
        }
        checkLiveAttempt(state, job.credential, job.rollout_id, job.attempt_id);
        mine.push({ job, event });
      });
    } catch (err) {
      if (!(err instanceof StoreError)) throw err;
      errors.set(job, err);
      continue;
    }
    fresh.push(...mine);
    for (const [k, v] of mineKeys) pending.set(k, v);
  }

  // Per attempt with new model calls, its latest calls to reference.
  const candidates = await referenceCandidates(tx, fresh, cache);
  const now = Date.now();
  const made = new Map<ParsedEvent, RolloutEvent>();
  if (fresh.length) {
    // The first of the seqs taken with the lock, in order; the rest stay unused.
    const rows: SqlParam[][] = [];
    const updates = new Map<string, RolloutUpdate>();
    fresh.forEach(({ job, event }, i) => {
      const seq = seqs[i];
      const { rollout_id, attempt_id } = job;
      const at = { seq, rollout_id, attempt_id, created_at: now };
      const update = updates.get(rollout_id) ?? {
        rollout_id,
        reward: null,
        reward_attempt_id: null,
        reward_credential: null,
        pmin: null,
        pmax: null,
      };
      updates.set(rollout_id, update);
      if (event.type === "model_request") {
        const request = modelRequestOf(event);
        const k = pairKey(rollout_id, attempt_id);
        const list = candidates.get(k) ?? [];
        const plan = planPrompt(request.prompt_token_ids, list);
        const row = newEventRow(at, event, { request, plan });
        rows.push(row.values);
        const tokens = {
          prompt: request.prompt_token_ids.slice(),
          response: request.response_token_ids.slice(),
        };
        list.unshift({ seq, tokens });
        if (list.length > REFERENCE_CANDIDATES) list.pop();
        candidates.set(k, list);
        cache.set(seq, tokens);
        update.pmin = Math.min(update.pmin ?? request.policy_version, request.policy_version);
        update.pmax = Math.max(update.pmax ?? request.policy_version, request.policy_version);
        made.set(event, row.event);
      } else {
        const row = newEventRow(at, event);
        rows.push(row.values);
        const state = states.get(pairKey(rollout_id, attempt_id))!;
        if (event.type === "reward" && rewardCounts(state, job.credential)) {
          update.reward = event.payload.value;
          update.reward_attempt_id = attempt_id;
          update.reward_credential = job.credential;
        }
        made.set(event, row.event);
      }
    });
    // The inserts and the rollouts' update go together (the update reads none of the new rows);
    // a key another gateway took meanwhile rolls both back.
    const inserts: Array<Promise<void>> = [];
    let from = 0;
    for (const size of insertSizes(rows.length)) {
      inserts.push(insertEvents(tx, rows.slice(from, from + size), now));
      from += size;
    }
    const changed = [...updates.values()].filter((u) => u.reward !== null || u.pmin !== null);
    await Promise.all([
      Promise.all(inserts),
      // The reward counts only if its attempt is still the current one and not lost: read
      // here, under the seq lock that claims and lease expiry take too.
      changed.length
        ? pgPrepared(
          tx,
          `UPDATE reins_rollouts r SET
           reward = CASE WHEN c.ok THEN x.reward ELSE r.reward END,
           reward_attempt_id = CASE WHEN c.ok THEN x.reward_attempt_id ELSE r.reward_attempt_id END,
           reward_credential = CASE WHEN c.ok THEN x.reward_credential ELSE r.reward_credential END,
           policy_version_min = LEAST(r.policy_version_min, x.pmin),
           policy_version_max = GREATEST(r.policy_version_max, x.pmax), updated_at = $2
         FROM jsonb_to_recordset($1::text::jsonb) AS x(rollout_id text, reward float8,
             reward_attempt_id text, reward_credential text, pmin int, pmax int)
           CROSS JOIN LATERAL (SELECT x.reward IS NOT NULL AND EXISTS (
             SELECT 1 FROM reins_attempts a WHERE a.rollout_id = x.rollout_id
               AND a.attempt_id = x.reward_attempt_id AND a.status <> 'lost'
               AND a.idx = (SELECT MAX(b.idx) FROM reins_attempts b
                 WHERE b.rollout_id = x.rollout_id)) AS ok) c
         WHERE r.rollout_id = x.rollout_id`,
          [JSON.stringify(changed), now],
        )
        : null,
      pgQuery(tx, "COMMIT"),
    ]);
  } else {
    await pgQuery(tx, "COMMIT");
  }

  return jobs.map((job) => {
    const error = errors.get(job);
    if (error) return error;
    return job.parsed.map((e) => {
      const own = made.get(e);
      if (own) {
        if (e.event_key !== undefined) byKey.set(keyOf(job.rollout_id, e.event_key), own);
        return own;
      }
      return byKey.get(keyOf(job.rollout_id, e.event_key!))!;
    });
  });
}

/** Per attempt that posts model calls, its latest stored calls (newest first). */
async function referenceCandidates(
  tx: Tx,
  fresh: Array<{ job: AppendJob; event: ParsedEvent }>,
  cache: TokenStore,
): Promise<Map<string, Array<{ seq: number; tokens: CallTokens }>>> {
  const candidates = new Map<string, Array<{ seq: number; tokens: CallTokens }>>();
  const callers = [
    ...new Set(
      fresh.filter((f) => f.event.type === "model_request").map((f) =>
        JSON.stringify([f.job.rollout_id, f.job.attempt_id])
      ),
    ),
  ];
  if (callers.length === 0) return candidates;
  const rows = await pgPrepared<{ rollout_id: string; attempt_id: string; seq: string }>(
    tx,
    `SELECT rollout_id, attempt_id, seq FROM (
       SELECT e.rollout_id, e.attempt_id, e.seq, row_number() OVER (
         PARTITION BY e.rollout_id, e.attempt_id ORDER BY e.seq DESC) AS n
       FROM reins_events e
       JOIN jsonb_to_recordset($1::text::jsonb) AS x(rollout_id text, attempt_id text)
         ON e.rollout_id = x.rollout_id AND e.attempt_id = x.attempt_id
       WHERE e.type = 'model_request') t
     WHERE n <= ${REFERENCE_CANDIDATES} ORDER BY seq DESC`,
    [JSON.stringify(callers.map((k) => {
      const [rollout_id, attempt_id] = JSON.parse(k) as [string, string];
      return { rollout_id, attempt_id };
    }))],
  );
  for (const row of rows) {
    const k = JSON.stringify([row.rollout_id, row.attempt_id]);
    const list = candidates.get(k) ?? [];
    const seq = Number(row.seq);
    list.push({ seq, tokens: await pgRun(tx, flows.callTokens(seq, cache)) });
    candidates.set(k, list);
  }
  return candidates;
}

/** One multi-row insert (a taken event key fails it: unique_violation). */
async function insertEvents(tx: Tx, rows: SqlParam[][], now: number): Promise<void> {
  const values: string[] = [];
  const params: SqlParam[] = [now];
  for (const row of rows) {
    const at = params.length;
    params.push(...row);
    const p = (i: number, cast: string) => `$${at + i}::${cast}`;
    values.push(
      `(${p(1, "bigint")}, ${p(2, "text")}, ${p(3, "text")}, ${p(4, "text")}, ` +
        `${p(5, "text")}, ${p(6, "text")}, ${p(7, "bigint")}, ${p(8, "int")}, ` +
        `${p(9, "bytea")}, ${p(10, "bytea")}, ${p(11, "bytea")}, $1::float8)`,
    );
  }
  await pgPrepared(
    tx,
    `INSERT INTO reins_events (${EVENT_COLUMNS}, created_at)
     VALUES ${values.join(", ")}`,
    params,
  );
}

/** One events post waiting for its group commit. */
export interface AppendJob {
  rollout_id: string;
  attempt_id: string;
  credential: Credential;
  parsed: ParsedEvent[];
  resolve: (events: RolloutEvent[]) => void;
  reject: (err: unknown) => void;
}

interface RolloutUpdate {
  rollout_id: string;
  reward: number | null;
  reward_attempt_id: string | null;
  reward_credential: Credential | null;
  pmin: number | null;
  pmax: number | null;
}

/** An event key was stored concurrently by another gateway: the batch is run again. */
export class KeyRace extends Error {
  constructor() {
    super("event_key: stored concurrently by another writer; retrying");
  }
}
