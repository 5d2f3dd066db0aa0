/**
 * The PostgreSQL store (`npm:postgres`), for several gateway processes sharing one database.
 *
 * Concurrency design:
 * - Every transaction that assigns a `seq` (events, status changes, claims, rollout creation,
 *   model updates) first takes one transaction-level advisory lock, so `seq` order equals commit
 *   order: a change-feed or cursor reader that saw `seq = n` can never later find a committed
 *   row with a smaller `seq`. Taking that lock first, always, also fixes one lock order (no
 *   deadlocks between reward updates and transitions).
 * - Claims pick rows with `FOR UPDATE SKIP LOCKED`, and transitions lock the rollout row and
 *   compare `version` (compare-and-swap), so two gateways never hand one rollout to two workers.
 * - Lease renewal touches one attempt row and takes no global lock.
 *
 * Tables are prefixed `reins_`; the schema is created on first open (under an advisory lock,
 * so gateways starting together do not race).
 *
 * @module
 */
import postgres from "postgres";
import type {
  Attempt,
  Change,
  EventInput,
  EventType,
  Model,
  Rollout,
  RolloutCreate,
  RolloutEvent,
  RolloutStatus,
} from "../schema.ts";
import { ModelSchema, parseOrThrow } from "../schema.ts";
import {
  type AttemptEnd,
  attemptEndColumns,
  attemptFromRow,
  type AttemptRow,
  checkLeaseHolder,
  checkTransition,
  decodeCursor,
  defaultAttemptStatus,
  encodeCursor,
  eventFromRow,
  modelFromRow,
  modelRequestMeta,
  modelRequestOf,
  type ModelRowBase,
  newAttemptId,
  noAttempt,
  normalizeCreates,
  noRollout,
  type ParsedEvent,
  parseEvents,
  type RolloutRowBase,
  rolloutsFromRows,
  statusAfterLostLease,
} from "./records.ts";
import {
  type Claimed,
  type ClaimOptions,
  type ListEventsOptions,
  type ListRolloutsOptions,
  type Page,
  type Store,
  StoreError,
  type TransitionOptions,
} from "./store.ts";
import {
  type CallTokens,
  decodeU32,
  encodeF32,
  encodeU32,
  planPrompt,
  resolvePrompt,
  TokenCache,
} from "./token_blob.ts";

/** Options of {@link openPostgresStore}. */
export interface PostgresStoreOptions {
  /** Connection pool size (default 8). */
  max?: number;
}

/** Key of the advisory lock that orders `seq` assignment. */
const SEQ_LOCK = 0x7265696e; // "rein"
const MIGRATE_LOCK = 0x7265696d;
const REFERENCE_CANDIDATES = 4;
/** Rows per multi-row insert (11 parameters each, under PostgreSQL's 65 535). */
const INSERT_CHUNK = 4_000;

const SCHEMA = [
  `CREATE SEQUENCE IF NOT EXISTS reins_seq`,
  `CREATE TABLE IF NOT EXISTS reins_meta (key text PRIMARY KEY, value text NOT NULL)`,
  `CREATE TABLE IF NOT EXISTS reins_rollouts (
    pos bigint PRIMARY KEY,
    rollout_id text NOT NULL UNIQUE,
    group_id text NOT NULL,
    mode text NOT NULL,
    status text NOT NULL,
    version integer NOT NULL,
    input text NOT NULL,
    config text NOT NULL,
    labels jsonb NOT NULL,
    created_at double precision NOT NULL,
    updated_at double precision NOT NULL,
    policy_version_min integer,
    policy_version_max integer,
    reward double precision
  )`,
  `CREATE INDEX IF NOT EXISTS reins_rollouts_status ON reins_rollouts (status, pos)`,
  `CREATE INDEX IF NOT EXISTS reins_rollouts_group ON reins_rollouts (group_id, pos)`,
  `CREATE TABLE IF NOT EXISTS reins_attempts (
    rollout_id text NOT NULL,
    attempt_id text NOT NULL,
    idx integer NOT NULL,
    status text NOT NULL,
    started_at double precision NOT NULL,
    ended_at double precision,
    exit_code integer,
    error text,
    worker text,
    lease_expires_at double precision,
    log_location text,
    info text NOT NULL,
    claim_key text,
    PRIMARY KEY (rollout_id, attempt_id),
    UNIQUE (rollout_id, idx)
  )`,
  `CREATE INDEX IF NOT EXISTS reins_attempts_lease ON reins_attempts (status, lease_expires_at)`,
  `CREATE INDEX IF NOT EXISTS reins_attempts_claim ON reins_attempts (worker, claim_key)`,
  `CREATE TABLE IF NOT EXISTS reins_events (
    seq bigint PRIMARY KEY,
    rollout_id text NOT NULL,
    attempt_id text NOT NULL,
    type text NOT NULL,
    event_key text,
    created_at double precision NOT NULL,
    status text,
    payload text NOT NULL,
    prompt_ref bigint,
    prompt_ref_len integer,
    prompt_tail bytea,
    response_ids bytea,
    response_logprobs bytea
  )`,
  `CREATE INDEX IF NOT EXISTS reins_events_rollout ON reins_events (rollout_id, seq)`,
  `CREATE INDEX IF NOT EXISTS reins_events_calls ON reins_events (rollout_id, attempt_id, type, seq)`,
  `CREATE UNIQUE INDEX IF NOT EXISTS reins_events_key ON reins_events (rollout_id, event_key)
    WHERE event_key IS NOT NULL`,
  `CREATE TABLE IF NOT EXISTS reins_models (
    name text PRIMARY KEY,
    endpoints text NOT NULL,
    version integer NOT NULL,
    info text NOT NULL,
    updated_at double precision NOT NULL,
    seq bigint NOT NULL
  )`,
];

type Sql = postgres.Sql;
type Tx = postgres.TransactionSql | postgres.Sql;
type Params = Array<string | number | boolean | null | Uint8Array>;

interface RolloutRow extends RolloutRowBase {
  pos: string;
  labels: Record<string, string>;
}

interface EventRow {
  seq: string;
  rollout_id: string;
  attempt_id: string;
  type: string;
  event_key: string | null;
  created_at: number;
  status: string | null;
  payload: string;
  prompt_ref: string | null;
  prompt_ref_len: number | null;
  prompt_tail: Uint8Array | null;
  response_ids: Uint8Array | null;
  response_logprobs: Uint8Array | null;
}

interface ModelRow extends ModelRowBase {
  seq: string;
}

/** A binder that appends a value to `params` and answers its `$n` placeholder. */
function placeholder(params: Params): (value: string | number) => string {
  return (value) => {
    params.push(value);
    return `$${params.length}`;
  };
}

/** One condition per label: its value must match exactly. */
function labelConditions(
  labels: Record<string, string> | undefined,
  p: (value: string) => string,
): string[] {
  return Object.entries(labels ?? {}).map(([key, value]) => `labels ->> ${p(key)} = ${p(value)}`);
}

async function q<T>(tx: Tx, text: string, params: Params = []): Promise<T[]> {
  const rows = await tx.unsafe(text, params as never[]);
  return rows as unknown as T[];
}

/**
 * Connects to PostgreSQL and creates the reins tables when missing.
 *
 * @example
 * ```ts ignore
 * // Needs a running PostgreSQL server (so not run as a doc test).
 * import { openPostgresStore } from "./postgres_store.ts";
 * const store = await openPostgresStore("postgres://postgres@127.0.0.1:5432/reins");
 * await store.createRollouts([{ rollout_id: "r1", input: "task" }]);
 * await store.close();
 * ```
 */
export async function openPostgresStore(
  url: string,
  options: PostgresStoreOptions = {},
): Promise<PostgresStore> {
  const sql = postgres(url, { max: options.max ?? 8, onnotice: () => {}, prepare: true });
  try {
    await sql.begin(async (tx) => {
      await q(tx, `SELECT pg_advisory_xact_lock(${MIGRATE_LOCK})`);
      for (const statement of SCHEMA) await q(tx, statement);
    });
  } catch (err) {
    await sql.end({ timeout: 1 });
    throw err;
  }
  return new PostgresStore(sql);
}

/** The PostgreSQL backend of {@link Store}. */
export class PostgresStore implements Store {
  readonly kind = "postgres" as const;
  readonly #sql: Sql;
  readonly #cache = new TokenCache();
  readonly #queue: AppendJob[] = [];
  #draining = false;
  #closed = false;

  constructor(sql: Sql) {
    this.#sql = sql;
  }

  // ---------------------------------------------------------------------------------------------
  // Rollouts

  async createRollouts(
    creates: RolloutCreate[],
  ): Promise<{ rollouts: Rollout[]; created: boolean[] }> {
    const normalized = normalizeCreates(creates);
    return await this.#tx(async (tx) => {
      await lockSeq(tx);
      const now = Date.now();
      const created: boolean[] = [];
      for (const c of normalized) {
        const rows = await q(
          tx,
          `INSERT INTO reins_rollouts (pos, rollout_id, group_id, mode, status, version, input,
            config, labels, created_at, updated_at)
           VALUES (nextval('reins_seq'), $1, $2, $3, 'queuing', 1, $4, $5, $6::text::jsonb, $7, $7)
           ON CONFLICT (rollout_id) DO NOTHING RETURNING rollout_id`,
          [
            c.rollout_id,
            c.group_id,
            c.mode,
            JSON.stringify(c.input),
            JSON.stringify(c.config),
            JSON.stringify(c.labels),
            now,
          ],
        );
        created.push(rows.length === 1);
        if (rows.length === 1) {
          await this.#insertStatusEvent(tx, c.rollout_id, "", null, "queuing", null, now);
        }
      }
      const rollouts = await this.#loadRollouts(tx, normalized.map((c) => c.rollout_id));
      return { rollouts, created };
    });
  }

  async getRollout(id: string): Promise<Rollout | null> {
    this.#open();
    return (await this.#loadRollouts(this.#sql, [id]))[0] ?? null;
  }

  async listRollouts(options: ListRolloutsOptions): Promise<Page<Rollout>> {
    this.#open();
    const where: string[] = [];
    const params: Params = [];
    const p = placeholder(params);
    const desc = options.order === "desc";
    if (options.after !== undefined) {
      where.push(`pos ${desc ? "<" : ">"} ${p(decodeCursor(options.after))}`);
    }
    if (options.status !== undefined) {
      const list = Array.isArray(options.status) ? options.status : [options.status];
      where.push(`status IN (${list.map(p).join(",")})`);
    }
    if (options.mode) where.push(`mode = ${p(options.mode)}`);
    if (options.group_id) where.push(`group_id = ${p(options.group_id)}`);
    where.push(...labelConditions(options.labels, p));
    const rows = await q<RolloutRow>(
      this.#sql,
      `SELECT * FROM reins_rollouts ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
       ORDER BY pos ${desc ? "DESC" : "ASC"} LIMIT ${p(options.limit + 1)}`,
      params,
    );
    const more = rows.length > options.limit;
    const page = more ? rows.slice(0, options.limit) : rows;
    return {
      items: await this.#withAttempts(this.#sql, page),
      next_cursor: more ? encodeCursor(Number(page[page.length - 1].pos)) : null,
    };
  }

  async claimRollouts(options: ClaimOptions): Promise<Claimed[]> {
    return await this.#tx(async (tx) => {
      await lockSeq(tx);
      if (options.claim_key !== undefined) {
        const previous = await q<{ rollout_id: string; attempt_id: string }>(
          tx,
          `SELECT rollout_id, attempt_id FROM reins_attempts WHERE worker = $1 AND claim_key = $2
           ORDER BY started_at, rollout_id`,
          [options.worker, options.claim_key],
        );
        if (previous.length > 0) {
          const rollouts = await this.#loadRollouts(tx, previous.map((r) => r.rollout_id));
          return previous.map(({ attempt_id }, i) => ({
            rollout: rollouts[i],
            attempt: rollouts[i].attempts.find((a) => a.attempt_id === attempt_id)!,
          }));
        }
      }
      const now = options.now ?? Date.now();
      const params: Params = [options.limit];
      const p = placeholder(params);
      const where = ["status IN ('queuing', 'requeuing')"];
      if (options.mode) where.push(`mode = ${p(options.mode)}`);
      where.push(...labelConditions(options.labels, p));
      const rows = await q<{ rollout_id: string; status: RolloutStatus }>(
        tx,
        `SELECT rollout_id, status FROM reins_rollouts
         WHERE ${where.join(" AND ")}
         ORDER BY pos LIMIT $1 FOR UPDATE SKIP LOCKED`,
        params,
      );
      const ids: string[] = [];
      const attemptIds: string[] = [];
      for (const row of rows) {
        const [{ n }] = await q<{ n: number }>(
          tx,
          "SELECT COALESCE(MAX(idx), 0)::int AS n FROM reins_attempts WHERE rollout_id = $1",
          [row.rollout_id],
        );
        const index = n + 1;
        const attemptId = newAttemptId(index);
        await q(
          tx,
          `INSERT INTO reins_attempts (rollout_id, attempt_id, idx, status, started_at, worker,
            lease_expires_at, info, claim_key) VALUES ($1, $2, $3, 'running', $4, $5, $6, '{}', $7)`,
          [
            row.rollout_id,
            attemptId,
            index,
            now,
            options.worker,
            now + options.lease_ms,
            options.claim_key ?? null,
          ],
        );
        await q(
          tx,
          `UPDATE reins_rollouts SET status = 'running', version = version + 1, updated_at = $1
           WHERE rollout_id = $2`,
          [now, row.rollout_id],
        );
        await this.#insertStatusEvent(
          tx,
          row.rollout_id,
          attemptId,
          row.status,
          "running",
          null,
          now,
        );
        ids.push(row.rollout_id);
        attemptIds.push(attemptId);
      }
      const rollouts = await this.#loadRollouts(tx, ids);
      return rollouts.map((rollout, i) => ({
        rollout,
        attempt: rollout.attempts.find((a) => a.attempt_id === attemptIds[i])!,
      }));
    });
  }

  async renewLease(
    rollout_id: string,
    attempt_id: string,
    worker: string,
    lease_ms: number,
  ): Promise<Attempt> {
    return await this.#tx(async (tx) => {
      const [row] = await q<AttemptRow>(
        tx,
        "SELECT * FROM reins_attempts WHERE rollout_id = $1 AND attempt_id = $2 FOR UPDATE",
        [rollout_id, attempt_id],
      );
      if (!row) {
        if (!(await this.#exists(tx, rollout_id))) throw noRollout(rollout_id);
        throw noAttempt(rollout_id, attempt_id);
      }
      checkLeaseHolder(row, attempt_id, worker);
      const expires = Date.now() + lease_ms;
      await q(
        tx,
        "UPDATE reins_attempts SET lease_expires_at = $1 WHERE rollout_id = $2 AND attempt_id = $3",
        [expires, rollout_id, attempt_id],
      );
      return attemptFromRow({ ...row, lease_expires_at: expires });
    });
  }

  async transition(rollout_id: string, options: TransitionOptions): Promise<Rollout> {
    return await this.#tx(async (tx) => {
      await lockSeq(tx);
      const [row] = await q<RolloutRow>(
        tx,
        "SELECT * FROM reins_rollouts WHERE rollout_id = $1 FOR UPDATE",
        [rollout_id],
      );
      if (!row) throw noRollout(rollout_id);
      const [rollout] = await this.#withAttempts(tx, [row]);
      const current = rollout.attempts[rollout.attempts.length - 1] ?? null;
      const decision = checkTransition(rollout, current, rollout.attempts.length, options);
      if (decision === "noop") return rollout;
      const now = Date.now();
      if (rollout.status === "running" && current) {
        await this.#endAttempt(tx, rollout_id, current, now, {
          status: options.attempt_status ?? defaultAttemptStatus(options.to),
          exit_code: options.exit_code,
          error: options.error,
          info: options.info,
          log_location: options.log_location,
        });
      }
      await q(
        tx,
        `UPDATE reins_rollouts SET status = $1, version = version + 1, updated_at = $2
         WHERE rollout_id = $3`,
        [options.to, now, rollout_id],
      );
      await this.#insertStatusEvent(
        tx,
        rollout_id,
        current?.attempt_id ?? "",
        rollout.status,
        options.to,
        options.reason ?? null,
        now,
      );
      return (await this.#loadRollouts(tx, [rollout_id]))[0];
    });
  }

  async expireLeases(now: number = Date.now()): Promise<Rollout[]> {
    return await this.#tx(async (tx) => {
      const candidates = await q<{ n: number }>(
        tx,
        `SELECT count(*)::int AS n FROM reins_attempts WHERE status = 'running'
         AND lease_expires_at < $1`,
        [now],
      );
      if (candidates[0].n === 0) return [];
      await lockSeq(tx);
      const rows = await q<AttemptRow>(
        tx,
        `SELECT * FROM reins_attempts WHERE status = 'running' AND lease_expires_at < $1
         ORDER BY rollout_id FOR UPDATE`,
        [now],
      );
      const out: Rollout[] = [];
      for (const row of rows) {
        const [rollout] = await this.#loadRollouts(tx, [row.rollout_id]);
        await this.#endAttempt(tx, row.rollout_id, attemptFromRow(row), now, {
          status: "lost",
          error: "lease expired",
        });
        const current = rollout.attempts[rollout.attempts.length - 1];
        if (rollout.status !== "running" || current?.attempt_id !== row.attempt_id) continue;
        const to = statusAfterLostLease(rollout);
        await q(
          tx,
          `UPDATE reins_rollouts SET status = $1, version = version + 1, updated_at = $2
           WHERE rollout_id = $3`,
          [to, now, row.rollout_id],
        );
        await this.#insertStatusEvent(
          tx,
          row.rollout_id,
          row.attempt_id,
          "running",
          to,
          "lease expired",
          now,
        );
        out.push((await this.#loadRollouts(tx, [row.rollout_id]))[0]);
      }
      return out;
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Events

  appendEvents(
    rollout_id: string,
    attempt_id: string,
    inputs: EventInput[],
  ): Promise<RolloutEvent[]> {
    try {
      this.#open();
      const parsed = parseEvents(inputs);
      return new Promise((resolve, reject) => {
        this.#queue.push({ rollout_id, attempt_id, parsed, resolve, reject });
        if (!this.#draining) {
          this.#draining = true;
          queueMicrotask(() => this.#drain());
        }
      });
    } catch (err) {
      return Promise.reject(err);
    }
  }

  /**
   * Group commit for event posts: the posts that arrived while a transaction was running share
   * the next one (one seq lock, a handful of round trips, one commit). A post for an unknown
   * rollout or attempt fails alone; nothing is answered before its transaction committed.
   */
  async #drain(): Promise<void> {
    while (this.#queue.length > 0) {
      const jobs = this.#queue.splice(0, 256);
      for (let tries = 1;; tries++) {
        try {
          const results = await this.#tx((tx) => this.#appendGroup(tx, jobs));
          jobs.forEach((job, i) => {
            const result = results[i];
            if (result instanceof Error) job.reject(result);
            else job.resolve(result);
          });
          break;
        } catch (err) {
          // Another gateway stored one of these event keys between our check and our insert:
          // run the group again, and that event is answered as already stored.
          if (err instanceof KeyRace && tries < 5) continue;
          for (const job of jobs) job.reject(err);
          break;
        }
      }
    }
    this.#draining = false;
  }

  /**
   * Appends the events of several posts in one transaction: checks and reads before the seq
   * lock; under it one `nextval` series, multi-row inserts and one rollout update.
   */
  async #appendGroup(
    tx: postgres.TransactionSql,
    jobs: AppendJob[],
  ): Promise<Array<RolloutEvent[] | StoreError>> {
    const pairKey = (r: string, a: string) => JSON.stringify([r, a]);
    const pairs = [...new Set(jobs.map((j) => pairKey(j.rollout_id, j.attempt_id)))].map(
      (k) => JSON.parse(k) as [string, string],
    );
    const found = await q<{ rollout_id: string; attempt_id: string; r: boolean; a: boolean }>(
      tx,
      `SELECT x.rollout_id, x.attempt_id,
         EXISTS (SELECT 1 FROM reins_rollouts r WHERE r.rollout_id = x.rollout_id) AS r,
         EXISTS (SELECT 1 FROM reins_attempts a
                 WHERE a.rollout_id = x.rollout_id AND a.attempt_id = x.attempt_id) AS a
       FROM jsonb_to_recordset($1::text::jsonb) AS x(rollout_id text, attempt_id text)`,
      [JSON.stringify(pairs.map(([rollout_id, attempt_id]) => ({ rollout_id, attempt_id })))],
    );
    const status = new Map(found.map((f) => [pairKey(f.rollout_id, f.attempt_id), f]));
    const errors = new Map<AppendJob, StoreError>();
    for (const job of jobs) {
      const f = status.get(pairKey(job.rollout_id, job.attempt_id));
      if (!f?.r) errors.set(job, noRollout(job.rollout_id));
      else if (!f.a) errors.set(job, noAttempt(job.rollout_id, job.attempt_id));
    }
    const valid = jobs.filter((j) => !errors.has(j));

    // Events already stored under the posted keys.
    const keyOf = (rollout_id: string, key: string) => JSON.stringify([rollout_id, key]);
    const wanted = new Map<string, { rollout_id: string; event_key: string }>();
    for (const job of valid) {
      for (const e of job.parsed) {
        if (e.event_key !== undefined) {
          wanted.set(keyOf(job.rollout_id, e.event_key), {
            rollout_id: job.rollout_id,
            event_key: e.event_key,
          });
        }
      }
    }
    const byKey = new Map<string, RolloutEvent>();
    if (wanted.size) {
      const rows = await q<EventRow>(
        tx,
        `SELECT e.* FROM reins_events e
         JOIN jsonb_to_recordset($1::text::jsonb) AS x(rollout_id text, event_key text)
           ON e.rollout_id = x.rollout_id AND e.event_key = x.event_key`,
        [JSON.stringify([...wanted.values()])],
      );
      for (const row of rows) {
        byKey.set(keyOf(row.rollout_id, row.event_key!), await this.#decodeEvent(tx, row));
      }
    }

    // The new events (first of each unseen key) and, per attempt, earlier calls to reference.
    const fresh: Array<{ job: AppendJob; event: ParsedEvent }> = [];
    const claimed = new Set<string>();
    for (const job of valid) {
      for (const event of job.parsed) {
        if (event.event_key !== undefined) {
          const k = keyOf(job.rollout_id, event.event_key);
          if (byKey.has(k) || claimed.has(k)) continue;
          claimed.add(k);
        }
        fresh.push({ job, event });
      }
    }
    const candidates = new Map<string, Array<{ seq: number; tokens: CallTokens }>>();
    const callers = [
      ...new Set(
        fresh.filter((f) => f.event.type === "model_request").map((f) =>
          pairKey(f.job.rollout_id, f.job.attempt_id)
        ),
      ),
    ];
    if (callers.length) {
      const rows = await q<{ rollout_id: string; attempt_id: string; seq: string }>(
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
        const k = pairKey(row.rollout_id, row.attempt_id);
        const list = candidates.get(k) ?? [];
        const seq = Number(row.seq);
        list.push({ seq, tokens: await this.#callTokens(tx, seq) });
        candidates.set(k, list);
      }
    }

    const now = Date.now();
    const made = new Map<ParsedEvent, RolloutEvent>();
    if (fresh.length) {
      await lockSeq(tx);
      const seqs = (await q<{ seq: string }>(
        tx,
        "SELECT nextval('reins_seq') AS seq FROM generate_series(1, $1::int)",
        [fresh.length],
      )).map((r) => Number(r.seq));
      const rows: Params[] = [];
      const updates = new Map<
        string,
        { rollout_id: string; reward: number | null; pmin: number | null; pmax: number | null }
      >();
      fresh.forEach(({ job, event }, i) => {
        const seq = seqs[i];
        const { rollout_id, attempt_id } = job;
        const base = {
          seq,
          rollout_id,
          attempt_id,
          event_key: event.event_key ?? null,
          created_at: now,
        };
        const update = updates.get(rollout_id) ??
          { rollout_id, reward: null, pmin: null, pmax: null };
        updates.set(rollout_id, update);
        if (event.type === "model_request") {
          const request = modelRequestOf(event);
          const k = pairKey(rollout_id, attempt_id);
          const list = candidates.get(k) ?? [];
          const plan = planPrompt(request.prompt_token_ids, list);
          rows.push([
            seq,
            rollout_id,
            attempt_id,
            "model_request",
            base.event_key,
            JSON.stringify(modelRequestMeta(request)),
            plan.ref_seq,
            plan.ref_len,
            encodeU32(plan.tail),
            encodeU32(request.response_token_ids),
            encodeF32(request.response_logprobs),
          ]);
          const tokens = {
            prompt: request.prompt_token_ids.slice(),
            response: request.response_token_ids.slice(),
          };
          list.unshift({ seq, tokens });
          if (list.length > REFERENCE_CANDIDATES) list.pop();
          candidates.set(k, list);
          this.#cache.set(seq, tokens);
          update.pmin = Math.min(update.pmin ?? request.policy_version, request.policy_version);
          update.pmax = Math.max(update.pmax ?? request.policy_version, request.policy_version);
          made.set(event, { ...base, type: "model_request", payload: request });
        } else {
          rows.push([
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
          ]);
          if (event.type === "reward") update.reward = event.payload.value;
          made.set(event, { ...base, type: event.type, payload: event.payload } as RolloutEvent);
        }
      });
      let inserted = 0;
      for (let from = 0; from < rows.length; from += INSERT_CHUNK) {
        inserted += await this.#insertEvents(tx, rows.slice(from, from + INSERT_CHUNK), now);
      }
      if (inserted !== fresh.length) throw new KeyRace();
      const changed = [...updates.values()].filter((u) => u.reward !== null || u.pmin !== null);
      if (changed.length) {
        await q(
          tx,
          `UPDATE reins_rollouts r SET reward = COALESCE(x.reward, r.reward),
             policy_version_min = LEAST(r.policy_version_min, x.pmin),
             policy_version_max = GREATEST(r.policy_version_max, x.pmax), updated_at = $2
           FROM jsonb_to_recordset($1::text::jsonb)
             AS x(rollout_id text, reward float8, pmin int, pmax int)
           WHERE r.rollout_id = x.rollout_id`,
          [JSON.stringify(changed), now],
        );
      }
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

  /** One multi-row insert; returns how many rows were new (a taken event key inserts none). */
  async #insertEvents(tx: postgres.TransactionSql, rows: Params[], now: number): Promise<number> {
    const values: string[] = [];
    const params: Params = [now];
    for (const row of rows) {
      const at = params.length;
      params.push(...row);
      const p = (i: number, cast: string) => `$${at + i}::${cast}`;
      values.push(
        `(${p(1, "bigint")}, ${p(2, "text")}, ${p(3, "text")}, ${p(4, "text")}, ` +
          `${p(5, "text")}, $1::float8, ${p(6, "text")}, ${p(7, "bigint")}, ${p(8, "int")}, ` +
          `${p(9, "bytea")}, ${p(10, "bytea")}, ${p(11, "bytea")})`,
      );
    }
    const inserted = await tx.unsafe(
      `INSERT INTO reins_events (seq, rollout_id, attempt_id, type, event_key, created_at,
        payload, prompt_ref, prompt_ref_len, prompt_tail, response_ids, response_logprobs)
       VALUES ${values.join(", ")}
       ON CONFLICT (rollout_id, event_key) WHERE event_key IS NOT NULL DO NOTHING RETURNING seq`,
      params as never[],
      { prepare: false },
    );
    return inserted.length;
  }

  async listEvents(rollout_id: string, options: ListEventsOptions = {}): Promise<RolloutEvent[]> {
    this.#open();
    if (!(await this.#exists(this.#sql, rollout_id))) throw noRollout(rollout_id);
    const params: Params = [rollout_id];
    const p = placeholder(params);
    const where = ["rollout_id = $1"];
    if (options.type !== undefined) {
      const list: EventType[] = Array.isArray(options.type) ? options.type : [options.type];
      where.push(`type IN (${list.map(p).join(",")})`);
    }
    if (options.attempt_id !== undefined) where.push(`attempt_id = ${p(options.attempt_id)}`);
    if (options.after_seq !== undefined) where.push(`seq > ${p(options.after_seq)}`);
    const rows = await q<EventRow>(
      this.#sql,
      `SELECT * FROM reins_events WHERE ${where.join(" AND ")} ORDER BY seq
       LIMIT ${p(options.limit ?? 1_000_000)}`,
      params,
    );
    const out: RolloutEvent[] = [];
    for (const row of rows) out.push(await this.#decodeEvent(this.#sql, row));
    return out;
  }

  // ---------------------------------------------------------------------------------------------
  // Models, change feed, meta

  async upsertModel(model: Omit<Model, "updated_at">): Promise<Model> {
    const parsed = parseOrThrow(ModelSchema, model);
    return await this.#tx(async (tx) => {
      await lockSeq(tx);
      const now = Date.now();
      await q(
        tx,
        `INSERT INTO reins_models (name, endpoints, version, info, updated_at, seq)
         VALUES ($1, $2, $3, $4, $5, nextval('reins_seq'))
         ON CONFLICT (name) DO UPDATE SET endpoints = excluded.endpoints,
           version = excluded.version, info = excluded.info, updated_at = excluded.updated_at,
           seq = excluded.seq`,
        [
          parsed.name,
          JSON.stringify(parsed.endpoints),
          parsed.version,
          JSON.stringify(parsed.info),
          now,
        ],
      );
      return { ...parsed, updated_at: now };
    });
  }

  async listModels(): Promise<Model[]> {
    this.#open();
    return (await q<ModelRow>(this.#sql, "SELECT * FROM reins_models ORDER BY name")).map(
      modelFromRow,
    );
  }

  async getModel(name: string): Promise<Model | null> {
    this.#open();
    const [row] = await q<ModelRow>(this.#sql, "SELECT * FROM reins_models WHERE name = $1", [
      name,
    ]);
    return row ? modelFromRow(row) : null;
  }

  async changesSince(seq: number, limit: number): Promise<Change[]> {
    this.#open();
    const events = await q<{
      seq: string;
      rollout_id: string;
      attempt_id: string;
      type: EventType;
      status: RolloutStatus | null;
      created_at: number;
    }>(
      this.#sql,
      `SELECT seq, rollout_id, attempt_id, type, status, created_at FROM reins_events
       WHERE seq > $1 ORDER BY seq LIMIT $2`,
      [seq, limit],
    );
    const models = await q<ModelRow>(
      this.#sql,
      "SELECT * FROM reins_models WHERE seq > $1 ORDER BY seq LIMIT $2",
      [seq, limit],
    );
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

  async lastSeq(): Promise<number> {
    this.#open();
    const [row] = await q<{ n: string }>(
      this.#sql,
      `SELECT GREATEST(
         (SELECT COALESCE(MAX(seq), 0) FROM reins_events),
         (SELECT COALESCE(MAX(seq), 0) FROM reins_models)) AS n`,
    );
    return Number(row.n);
  }

  async ensureMeta(key: string, value: string): Promise<string> {
    this.#open();
    await q(
      this.#sql,
      "INSERT INTO reins_meta (key, value) VALUES ($1, $2) ON CONFLICT DO NOTHING",
      [
        key,
        value,
      ],
    );
    const [row] = await q<{ value: string }>(
      this.#sql,
      "SELECT value FROM reins_meta WHERE key = $1",
      [key],
    );
    return row.value;
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    // Let queued event posts commit first.
    while (this.#draining) await new Promise((resolve) => setTimeout(resolve, 5));
    this.#closed = true;
    await this.#sql.end({ timeout: 5 });
  }

  // ---------------------------------------------------------------------------------------------
  // Internals

  #open(): void {
    if (this.#closed) throw new StoreError("internal", "store is closed");
  }

  async #tx<T>(fn: (tx: postgres.TransactionSql) => Promise<T>): Promise<T> {
    this.#open();
    return await this.#sql.begin(fn) as T;
  }

  async #exists(tx: Tx, rollout_id: string): Promise<boolean> {
    const rows = await q(tx, "SELECT 1 AS ok FROM reins_rollouts WHERE rollout_id = $1", [
      rollout_id,
    ]);
    return rows.length > 0;
  }

  /** Rollouts by id, in the order of `ids` (missing ids are skipped). */
  async #loadRollouts(tx: Tx, ids: string[]): Promise<Rollout[]> {
    if (ids.length === 0) return [];
    const rows = await q<RolloutRow>(
      tx,
      `SELECT * FROM reins_rollouts
       WHERE rollout_id IN (SELECT jsonb_array_elements_text($1::text::jsonb))`,
      [JSON.stringify(ids)],
    );
    const byId = new Map((await this.#withAttempts(tx, rows)).map((r) => [r.rollout_id, r]));
    return ids.map((id) => byId.get(id)).filter((r): r is Rollout => r !== undefined);
  }

  async #withAttempts(tx: Tx, rows: RolloutRow[]): Promise<Rollout[]> {
    if (rows.length === 0) return [];
    const attempts = await q<AttemptRow>(
      tx,
      `SELECT * FROM reins_attempts
       WHERE rollout_id IN (SELECT jsonb_array_elements_text($1::text::jsonb)) ORDER BY rollout_id, idx`,
      [JSON.stringify(rows.map((r) => r.rollout_id))],
    );
    return rolloutsFromRows(rows, attempts);
  }

  async #endAttempt(
    tx: Tx,
    rollout_id: string,
    attempt: Attempt,
    now: number,
    end: AttemptEnd,
  ): Promise<void> {
    const columns = attemptEndColumns(attempt, end);
    await q(
      tx,
      `UPDATE reins_attempts SET status = $1, ended_at = $2, exit_code = $3, error = $4, info = $5,
        log_location = $6, lease_expires_at = NULL WHERE rollout_id = $7 AND attempt_id = $8`,
      [
        end.status,
        now,
        columns.exit_code,
        columns.error,
        columns.info,
        columns.log_location,
        rollout_id,
        attempt.attempt_id,
      ],
    );
  }

  async #insertStatusEvent(
    tx: Tx,
    rollout_id: string,
    attempt_id: string,
    from: RolloutStatus | null,
    to: RolloutStatus,
    reason: string | null,
    now: number,
  ): Promise<void> {
    await q(
      tx,
      `INSERT INTO reins_events (seq, rollout_id, attempt_id, type, event_key, created_at, status,
        payload) VALUES (nextval('reins_seq'), $1, $2, 'status', NULL, $3, $4, $5)`,
      [rollout_id, attempt_id, now, to, JSON.stringify({ from, to, reason })],
    );
  }

  async #callTokens(tx: Tx, seq: number): Promise<CallTokens> {
    const hit = this.#cache.get(seq);
    if (hit) return hit;
    const [row] = await q<EventRow>(
      tx,
      "SELECT prompt_ref, prompt_ref_len, prompt_tail, response_ids FROM reins_events WHERE seq = $1",
      [seq],
    );
    const tokens = await this.#decodeCall(tx, row);
    this.#cache.set(seq, tokens);
    return tokens;
  }

  async #decodeCall(
    tx: Tx,
    row: Pick<EventRow, "prompt_ref" | "prompt_ref_len" | "prompt_tail" | "response_ids">,
  ): Promise<CallTokens> {
    const ref = row.prompt_ref === null ? null : await this.#callTokens(tx, Number(row.prompt_ref));
    return {
      prompt: resolvePrompt(ref, row.prompt_ref_len ?? 0, decodeU32(row.prompt_tail!)),
      response: decodeU32(row.response_ids!),
    };
  }

  async #decodeEvent(tx: Tx, row: EventRow): Promise<RolloutEvent> {
    const seq = Number(row.seq);
    if (row.type !== "model_request") return eventFromRow(row, seq, null);
    const tokens = this.#cache.get(seq) ?? await this.#decodeCall(tx, row);
    this.#cache.set(seq, tokens);
    return eventFromRow(row, seq, tokens);
  }
}

interface AppendJob {
  rollout_id: string;
  attempt_id: string;
  parsed: ParsedEvent[];
  resolve: (events: RolloutEvent[]) => void;
  reject: (err: unknown) => void;
}

/** An event key was stored concurrently by another gateway: the batch is run again. */
class KeyRace extends Error {
  constructor() {
    super("event_key: stored concurrently by another writer; retrying");
  }
}

async function lockSeq(tx: Tx): Promise<void> {
  await q(tx, `SELECT pg_advisory_xact_lock(${SEQ_LOCK})`);
}
