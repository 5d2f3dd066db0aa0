/**
 * The embedded store: one SQLite file per run through `node:sqlite`.
 *
 * Durability: WAL journal with `synchronous=FULL` by default, so a write is on disk (fsynced
 * WAL) before the gateway acknowledges it: it survives a SIGKILL of the gateway and also an OS
 * crash or power loss. `synchronous: "NORMAL"` is offered for throughput: with WAL it still
 * survives a killed process (the WAL pages are in the OS cache), but an OS crash may lose the
 * last transactions (never corrupt the file). Every write method is one `BEGIN IMMEDIATE`
 * transaction, so a second process on the same file waits instead of interleaving.
 *
 * @module
 */
import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite";
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

/** Options of {@link openSqliteStore}. */
export interface SqliteStoreOptions {
  /** `FULL` (default): fsync per commit; `NORMAL`: survives process kills, not power loss. */
  synchronous?: "NORMAL" | "FULL";
  /** How long to wait for another process's write lock (default 5 000 ms). */
  busyTimeoutMs?: number;
}

const SCHEMA = `
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS counters (name TEXT PRIMARY KEY, value INTEGER NOT NULL);
INSERT OR IGNORE INTO counters (name, value) VALUES ('seq', 0);
CREATE TABLE IF NOT EXISTS rollouts (
  pos INTEGER PRIMARY KEY AUTOINCREMENT,
  rollout_id TEXT NOT NULL UNIQUE,
  group_id TEXT NOT NULL,
  mode TEXT NOT NULL,
  status TEXT NOT NULL,
  version INTEGER NOT NULL,
  input TEXT NOT NULL,
  config TEXT NOT NULL,
  labels TEXT NOT NULL,
  created_at REAL NOT NULL,
  updated_at REAL NOT NULL,
  policy_version_min INTEGER,
  policy_version_max INTEGER,
  reward REAL
);
CREATE INDEX IF NOT EXISTS rollouts_status ON rollouts (status, pos);
CREATE INDEX IF NOT EXISTS rollouts_group ON rollouts (group_id, pos);
CREATE TABLE IF NOT EXISTS attempts (
  rollout_id TEXT NOT NULL,
  attempt_id TEXT NOT NULL,
  idx INTEGER NOT NULL,
  status TEXT NOT NULL,
  started_at REAL NOT NULL,
  ended_at REAL,
  exit_code INTEGER,
  error TEXT,
  worker TEXT,
  lease_expires_at REAL,
  log_location TEXT,
  info TEXT NOT NULL,
  claim_key TEXT,
  PRIMARY KEY (rollout_id, attempt_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS attempts_idx ON attempts (rollout_id, idx);
CREATE INDEX IF NOT EXISTS attempts_lease ON attempts (status, lease_expires_at);
CREATE INDEX IF NOT EXISTS attempts_claim ON attempts (worker, claim_key);
CREATE TABLE IF NOT EXISTS events (
  seq INTEGER PRIMARY KEY,
  rollout_id TEXT NOT NULL,
  attempt_id TEXT NOT NULL,
  type TEXT NOT NULL,
  event_key TEXT,
  created_at REAL NOT NULL,
  status TEXT,
  payload TEXT NOT NULL,
  prompt_ref INTEGER,
  prompt_ref_len INTEGER,
  prompt_tail BLOB,
  response_ids BLOB,
  response_logprobs BLOB
);
CREATE INDEX IF NOT EXISTS events_rollout ON events (rollout_id, seq);
CREATE INDEX IF NOT EXISTS events_calls ON events (rollout_id, attempt_id, type, seq);
CREATE UNIQUE INDEX IF NOT EXISTS events_key ON events (rollout_id, event_key)
  WHERE event_key IS NOT NULL;
CREATE TABLE IF NOT EXISTS models (
  name TEXT PRIMARY KEY,
  endpoints TEXT NOT NULL,
  version INTEGER NOT NULL,
  info TEXT NOT NULL,
  updated_at REAL NOT NULL,
  seq INTEGER NOT NULL
);
`;

/** Candidate earlier calls examined when storing a prompt as a reference. */
const REFERENCE_CANDIDATES = 4;

/** Adds one condition per label (its value must match exactly) to `where` and `params`. */
function labelFilter(
  labels: Record<string, string> | undefined,
  where: string[],
  params: SQLInputValue[],
): void {
  for (const [key, value] of Object.entries(labels ?? {})) {
    where.push("json_extract(labels, ?) = ?");
    params.push(`$."${key.replaceAll('"', '""')}"`, value);
  }
}

interface Group {
  done: Promise<void>;
  resolve: () => void;
  reject: (err: unknown) => void;
  timer: ReturnType<typeof setImmediate>;
}

interface RolloutRow extends RolloutRowBase {
  pos: number;
  labels: string;
}

interface EventRow {
  seq: number;
  rollout_id: string;
  attempt_id: string;
  type: string;
  event_key: string | null;
  created_at: number;
  status: string | null;
  payload: string;
  prompt_ref: number | null;
  prompt_ref_len: number | null;
  prompt_tail: Uint8Array | null;
  response_ids: Uint8Array | null;
  response_logprobs: Uint8Array | null;
}

/**
 * Opens (creating when needed) a SQLite store. `":memory:"` gives a throwaway store.
 *
 * @example
 * ```ts
 * import { openSqliteStore } from "./sqlite_store.ts";
 * const store = openSqliteStore(":memory:");
 * await store.createRollouts([{ rollout_id: "r1", input: "task" }]);
 * (await store.getRollout("r1"))?.status; // "queuing"
 * await store.close();
 * ```
 */
export function openSqliteStore(path: string, options: SqliteStoreOptions = {}): SqliteStore {
  return new SqliteStore(path, options);
}

/** The SQLite backend of {@link Store}. */
export class SqliteStore implements Store {
  readonly kind = "sqlite" as const;
  readonly path: string;
  readonly #db: DatabaseSync;
  readonly #cache = new TokenCache();
  readonly #statements = new Map<string, StatementSync>();
  /** The open group transaction (writes not yet committed), if any. */
  #group: Group | null = null;
  readonly #busyTimeoutMs: number;
  /** Decoded tokens of uncommitted calls; they enter the cache on commit. */
  readonly #pendingCache = new Map<number, CallTokens>();
  #opCacheKeys: number[] = [];
  #closed = false;

  constructor(path: string, options: SqliteStoreOptions = {}) {
    this.path = path;
    this.#db = new DatabaseSync(path);
    const sync = options.synchronous ?? "FULL";
    this.#busyTimeoutMs = options.busyTimeoutMs ?? 5_000;
    this.#db.exec(`PRAGMA busy_timeout = ${this.#busyTimeoutMs}`);
    // Big pages keep multi-KB token rows several to a page (only applies to a new file).
    this.#db.exec("PRAGMA page_size = 16384");
    this.#db.exec("PRAGMA journal_mode = WAL");
    this.#db.exec(`PRAGMA synchronous = ${sync}`);
    this.#db.exec("PRAGMA foreign_keys = ON");
    // Every write runs in a savepoint; this keeps its statement journal a plain in-memory one
    // (the default, a buffer ready to spill to a temporary file, cost ~50 µs more per write).
    // That journal only serves rolling back a failed operation: durability is unchanged.
    this.#db.exec("PRAGMA temp_store = MEMORY");
    this.#db.exec("BEGIN IMMEDIATE");
    try {
      this.#db.exec(SCHEMA);
      this.#db.exec("COMMIT");
    } catch (err) {
      this.#db.exec("ROLLBACK");
      this.#db.close();
      throw err;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Rollouts

  createRollouts(creates: RolloutCreate[]): Promise<{ rollouts: Rollout[]; created: boolean[] }> {
    return this.#run(() => {
      const normalized = normalizeCreates(creates);
      return this.#tx(() => {
        const now = Date.now();
        const created: boolean[] = [];
        const ids: string[] = [];
        for (const c of normalized) {
          ids.push(c.rollout_id);
          const info = this.#stmt(
            `INSERT INTO rollouts (rollout_id, group_id, mode, status, version, input, config,
              labels, created_at, updated_at) VALUES (?, ?, ?, 'queuing', 1, ?, ?, ?, ?, ?)
             ON CONFLICT (rollout_id) DO NOTHING`,
          ).run(
            c.rollout_id,
            c.group_id,
            c.mode,
            JSON.stringify(c.input),
            JSON.stringify(c.config),
            JSON.stringify(c.labels),
            now,
            now,
          );
          const isNew = Number(info.changes) === 1;
          created.push(isNew);
          if (isNew) {
            this.#insertStatusEvent(c.rollout_id, "", null, "queuing", null, now);
          }
        }
        return { rollouts: ids.map((id) => this.#loadRollout(id)!), created };
      });
    });
  }

  getRollout(id: string): Promise<Rollout | null> {
    return this.#read(() => this.#loadRollout(id));
  }

  listRollouts(options: ListRolloutsOptions): Promise<Page<Rollout>> {
    return this.#read(() => {
      const where: string[] = [];
      const params: SQLInputValue[] = [];
      const desc = options.order === "desc";
      if (options.after !== undefined) {
        where.push(desc ? "pos < ?" : "pos > ?");
        params.push(decodeCursor(options.after));
      }
      if (options.status !== undefined) {
        const list = Array.isArray(options.status) ? options.status : [options.status];
        where.push(`status IN (${list.map(() => "?").join(",")})`);
        params.push(...list);
      }
      if (options.mode) {
        where.push("mode = ?");
        params.push(options.mode);
      }
      if (options.group_id) {
        where.push("group_id = ?");
        params.push(options.group_id);
      }
      labelFilter(options.labels, where, params);
      const sql = `SELECT * FROM rollouts ${where.length ? `WHERE ${where.join(" AND ")}` : ""}
        ORDER BY pos ${desc ? "DESC" : "ASC"} LIMIT ?`;
      const rows = this.#stmt(sql).all(...params, options.limit + 1) as unknown as RolloutRow[];
      const more = rows.length > options.limit;
      const page = more ? rows.slice(0, options.limit) : rows;
      const items = this.#withAttempts(page);
      return {
        items,
        next_cursor: more ? encodeCursor(page[page.length - 1].pos) : null,
      };
    });
  }

  claimRollouts(options: ClaimOptions): Promise<Claimed[]> {
    return this.#run(() =>
      this.#tx(() => {
        if (options.claim_key !== undefined) {
          const previous = this.#stmt(
            `SELECT rollout_id, attempt_id FROM attempts WHERE worker = ? AND claim_key = ?
             ORDER BY started_at, rollout_id`,
          ).all(options.worker, options.claim_key) as Array<
            { rollout_id: string; attempt_id: string }
          >;
          if (previous.length > 0) {
            return previous.map(({ rollout_id, attempt_id }) => {
              const rollout = this.#loadRollout(rollout_id)!;
              const attempt = rollout.attempts.find((a) => a.attempt_id === attempt_id)!;
              return { rollout, attempt };
            });
          }
        }
        const now = options.now ?? Date.now();
        const params: SQLInputValue[] = [];
        const where = ["status IN ('queuing', 'requeuing')"];
        if (options.mode) {
          where.push("mode = ?");
          params.push(options.mode);
        }
        labelFilter(options.labels, where, params);
        const rows = this.#stmt(
          `SELECT rollout_id, status FROM rollouts WHERE ${where.join(" AND ")}
           ORDER BY pos LIMIT ?`,
        ).all(...params, options.limit) as Array<{ rollout_id: string; status: RolloutStatus }>;
        const out: Claimed[] = [];
        for (const row of rows) {
          const { n } = this.#stmt(
            "SELECT COALESCE(MAX(idx), 0) AS n FROM attempts WHERE rollout_id = ?",
          ).get(row.rollout_id) as { n: number };
          const index = n + 1;
          const attemptId = newAttemptId(index);
          this.#stmt(
            `INSERT INTO attempts (rollout_id, attempt_id, idx, status, started_at, worker,
              lease_expires_at, info, claim_key) VALUES (?, ?, ?, 'running', ?, ?, ?, '{}', ?)`,
          ).run(
            row.rollout_id,
            attemptId,
            index,
            now,
            options.worker,
            now + options.lease_ms,
            options.claim_key ?? null,
          );
          this.#stmt(
            `UPDATE rollouts SET status = 'running', version = version + 1, updated_at = ?
             WHERE rollout_id = ?`,
          ).run(now, row.rollout_id);
          this.#insertStatusEvent(row.rollout_id, attemptId, row.status, "running", null, now);
          const rollout = this.#loadRollout(row.rollout_id)!;
          out.push({ rollout, attempt: rollout.attempts[rollout.attempts.length - 1] });
        }
        return out;
      })
    );
  }

  renewLease(
    rollout_id: string,
    attempt_id: string,
    worker: string,
    lease_ms: number,
  ): Promise<Attempt> {
    return this.#run(() =>
      this.#tx(() => {
        const row = this.#stmt(
          "SELECT * FROM attempts WHERE rollout_id = ? AND attempt_id = ?",
        ).get(rollout_id, attempt_id) as AttemptRow | undefined;
        if (!row) {
          if (!this.#exists(rollout_id)) throw noRollout(rollout_id);
          throw noAttempt(rollout_id, attempt_id);
        }
        checkLeaseHolder(row, attempt_id, worker);
        const expires = Date.now() + lease_ms;
        this.#stmt(
          "UPDATE attempts SET lease_expires_at = ? WHERE rollout_id = ? AND attempt_id = ?",
        ).run(expires, rollout_id, attempt_id);
        return attemptFromRow({ ...row, lease_expires_at: expires });
      })
    );
  }

  transition(rollout_id: string, options: TransitionOptions): Promise<Rollout> {
    return this.#run(() =>
      this.#tx(() => {
        const rollout = this.#loadRollout(rollout_id);
        if (!rollout) throw noRollout(rollout_id);
        const current = rollout.attempts[rollout.attempts.length - 1] ?? null;
        const decision = checkTransition(rollout, current, rollout.attempts.length, options);
        if (decision === "noop") return rollout;
        const now = Date.now();
        if (rollout.status === "running" && current) {
          this.#endAttempt(rollout_id, current, now, {
            status: options.attempt_status ?? defaultAttemptStatus(options.to),
            exit_code: options.exit_code,
            error: options.error,
            info: options.info,
            log_location: options.log_location,
          });
        }
        this.#stmt(
          "UPDATE rollouts SET status = ?, version = version + 1, updated_at = ? WHERE rollout_id = ?",
        ).run(options.to, now, rollout_id);
        this.#insertStatusEvent(
          rollout_id,
          current?.attempt_id ?? "",
          rollout.status,
          options.to,
          options.reason ?? null,
          now,
        );
        return this.#loadRollout(rollout_id)!;
      })
    );
  }

  async expireLeases(now: number = Date.now()): Promise<Rollout[]> {
    // The sweep runs every second: only open a write (and pay a commit) when a lease is over.
    const due = await this.#read(() =>
      this.#stmt(
        "SELECT 1 AS due FROM attempts WHERE status = 'running' AND lease_expires_at < ? LIMIT 1",
      ).get(now)
    );
    if (!due) return [];
    return await this.#run(() =>
      this.#tx(() => {
        const rows = this.#stmt(
          `SELECT * FROM attempts WHERE status = 'running' AND lease_expires_at < ?
           ORDER BY rollout_id`,
        ).all(now) as unknown as AttemptRow[];
        const out: Rollout[] = [];
        for (const row of rows) {
          const rollout = this.#loadRollout(row.rollout_id)!;
          this.#endAttempt(row.rollout_id, attemptFromRow(row), now, {
            status: "lost",
            error: "lease expired",
          });
          const current = rollout.attempts[rollout.attempts.length - 1];
          if (rollout.status !== "running" || current?.attempt_id !== row.attempt_id) continue;
          const to = statusAfterLostLease(rollout);
          this.#stmt(
            "UPDATE rollouts SET status = ?, version = version + 1, updated_at = ? WHERE rollout_id = ?",
          ).run(to, now, row.rollout_id);
          this.#insertStatusEvent(
            row.rollout_id,
            row.attempt_id,
            "running",
            to,
            "lease expired",
            now,
          );
          out.push(this.#loadRollout(row.rollout_id)!);
        }
        return out;
      })
    );
  }

  // ---------------------------------------------------------------------------------------------
  // Events

  appendEvents(
    rollout_id: string,
    attempt_id: string,
    inputs: EventInput[],
  ): Promise<RolloutEvent[]> {
    return this.#run(() => {
      const parsed = parseEvents(inputs);
      return this.#tx(() => {
        // An attempt belongs to an existing rollout: the rollout is looked up only to tell
        // which of the two is missing.
        const attempt = this.#stmt(
          "SELECT 1 AS ok FROM attempts WHERE rollout_id = ? AND attempt_id = ?",
        ).get(rollout_id, attempt_id);
        if (!attempt) {
          throw this.#exists(rollout_id)
            ? noAttempt(rollout_id, attempt_id)
            : noRollout(rollout_id);
        }
        const now = Date.now();
        const out: RolloutEvent[] = [];
        for (const event of parsed) {
          if (event.event_key !== undefined) {
            const existing = this.#stmt(
              "SELECT * FROM events WHERE rollout_id = ? AND event_key = ?",
            ).get(rollout_id, event.event_key) as EventRow | undefined;
            if (existing) {
              out.push(this.#decodeEvent(existing));
              continue;
            }
          }
          out.push(this.#insertEvent(rollout_id, attempt_id, event, now));
        }
        return out;
      });
    });
  }

  listEvents(rollout_id: string, options: ListEventsOptions = {}): Promise<RolloutEvent[]> {
    return this.#read(() => {
      if (!this.#exists(rollout_id)) throw noRollout(rollout_id);
      const where = ["rollout_id = ?"];
      const params: SQLInputValue[] = [rollout_id];
      if (options.type !== undefined) {
        const list: EventType[] = Array.isArray(options.type) ? options.type : [options.type];
        where.push(`type IN (${list.map(() => "?").join(",")})`);
        params.push(...list);
      }
      if (options.attempt_id !== undefined) {
        where.push("attempt_id = ?");
        params.push(options.attempt_id);
      }
      if (options.after_seq !== undefined) {
        where.push("seq > ?");
        params.push(options.after_seq);
      }
      const rows = this.#stmt(
        `SELECT * FROM events WHERE ${where.join(" AND ")} ORDER BY seq LIMIT ?`,
      ).all(...params, options.limit ?? 1_000_000) as unknown as EventRow[];
      return rows.map((row) => this.#decodeEvent(row));
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Models, change feed, meta

  upsertModel(model: Omit<Model, "updated_at">): Promise<Model> {
    return this.#run(() => {
      const parsed = parseOrThrow(ModelSchema, model);
      return this.#tx(() => {
        const now = Date.now();
        const seq = this.#nextSeq();
        this.#stmt(
          `INSERT INTO models (name, endpoints, version, info, updated_at, seq) VALUES (?, ?, ?, ?, ?, ?)
           ON CONFLICT (name) DO UPDATE SET endpoints = excluded.endpoints,
             version = excluded.version, info = excluded.info, updated_at = excluded.updated_at,
             seq = excluded.seq`,
        ).run(
          parsed.name,
          JSON.stringify(parsed.endpoints),
          parsed.version,
          JSON.stringify(parsed.info),
          now,
          seq,
        );
        return { ...parsed, updated_at: now };
      });
    });
  }

  listModels(): Promise<Model[]> {
    return this.#read(() =>
      (this.#stmt("SELECT * FROM models ORDER BY name").all() as unknown as ModelRowBase[])
        .map(modelFromRow)
    );
  }

  getModel(name: string): Promise<Model | null> {
    return this.#read(() => {
      const row = this.#stmt("SELECT * FROM models WHERE name = ?").get(name) as
        | ModelRowBase
        | undefined;
      return row ? modelFromRow(row) : null;
    });
  }

  changesSince(seq: number, limit: number): Promise<Change[]> {
    return this.#read(() => {
      const events = this.#stmt(
        `SELECT seq, rollout_id, attempt_id, type, status, created_at FROM events WHERE seq > ?
         ORDER BY seq LIMIT ?`,
      ).all(seq, limit) as Array<
        {
          seq: number;
          rollout_id: string;
          attempt_id: string;
          type: EventType;
          status: RolloutStatus | null;
          created_at: number;
        }
      >;
      const models = this.#stmt(
        "SELECT name, version, updated_at, seq FROM models WHERE seq > ? ORDER BY seq LIMIT ?",
      ).all(seq, limit) as Array<
        { name: string; version: number; updated_at: number; seq: number }
      >;
      const changes: Change[] = [
        ...events.map((e): Change => ({ kind: "event", ...e })),
        ...models.map((m): Change => ({
          kind: "model",
          seq: m.seq,
          name: m.name,
          version: m.version,
          created_at: m.updated_at,
        })),
      ];
      changes.sort((a, b) => a.seq - b.seq);
      return changes.slice(0, limit);
    });
  }

  lastSeq(): Promise<number> {
    return this.#read(() =>
      (this.#stmt("SELECT value FROM counters WHERE name = 'seq'").get() as { value: number })
        .value
    );
  }

  ensureMeta(key: string, value: string): Promise<string> {
    return this.#run(() =>
      this.#tx(() => {
        this.#stmt("INSERT OR IGNORE INTO meta (key, value) VALUES (?, ?)").run(key, value);
        return (this.#stmt("SELECT value FROM meta WHERE key = ?").get(key) as {
          value: string;
        }).value;
      })
    );
  }

  close(): Promise<void> {
    if (!this.#closed) {
      this.#flush();
      this.#closed = true;
      this.#db.close();
    }
    return Promise.resolve();
  }

  // ---------------------------------------------------------------------------------------------
  // Internals

  /**
   * Runs a write operation inside the open group transaction (opening one when needed) and
   * resolves only after the group commit that holds its changes: nothing is acknowledged
   * before it is durable. Groups commit once pending I/O was handled, so operations that arrive
   * together share one commit (one fsync), which is what makes `synchronous=FULL` affordable.
   */
  async #run<T>(fn: () => T): Promise<T> {
    if (this.#closed) throw new StoreError("internal", "store is closed");
    const group = this.#group ?? await this.#begin();
    const out = fn();
    await group.done;
    return out;
  }

  /** Opens a group transaction; waits (without blocking the thread) for another writer's lock. */
  async #begin(): Promise<Group> {
    const deadline = Date.now() + this.#busyTimeoutMs;
    while (!this.#group) {
      this.#db.exec("PRAGMA busy_timeout = 0");
      try {
        this.#db.exec("BEGIN IMMEDIATE");
      } catch (err) {
        if (!/locked|busy/i.test(String(err)) || Date.now() > deadline) throw err;
        await new Promise((resolve) => setTimeout(resolve, 2));
        continue;
      } finally {
        this.#db.exec(`PRAGMA busy_timeout = ${this.#busyTimeoutMs}`);
      }
      const { promise, resolve, reject } = Promise.withResolvers<void>();
      promise.catch(() => {});
      // setImmediate runs once the requests that arrived with this one were handled, so they
      // share the commit, without the extra millisecond a timer would wait.
      this.#group = { done: promise, resolve, reject, timer: setImmediate(() => this.#flush()) };
    }
    return this.#group;
  }

  /** Runs a read once no uncommitted group is open, so reads only see durable data. */
  async #read<T>(fn: () => T): Promise<T> {
    while (this.#group) await this.#group.done.catch(() => {});
    if (this.#closed) throw new StoreError("internal", "store is closed");
    return fn();
  }

  /** Runs `fn` as one all-or-nothing unit (a savepoint) of the open group transaction. */
  #tx<T>(fn: () => T): T {
    if (!this.#group) throw new StoreError("internal", "write outside a group transaction");
    this.#db.exec("SAVEPOINT op");
    this.#opCacheKeys = [];
    try {
      const out = fn();
      this.#db.exec("RELEASE op");
      return out;
    } catch (err) {
      try {
        this.#db.exec("ROLLBACK TO op");
        this.#db.exec("RELEASE op");
      } catch {
        // SQLite already rolled the whole transaction back (I/O error, full disk, interrupt):
        // the savepoint is gone, the group's commit will fail, and `err` is the real cause.
      }
      for (const key of this.#opCacheKeys) this.#pendingCache.delete(key);
      throw err;
    } finally {
      this.#opCacheKeys = [];
    }
  }

  #flush(): void {
    const group = this.#group;
    if (!group) return;
    this.#group = null;
    clearImmediate(group.timer);
    try {
      this.#db.exec("COMMIT");
    } catch (err) {
      try {
        this.#db.exec("ROLLBACK");
      } catch {
        // The failed COMMIT may already have ended the transaction.
      }
      this.#pendingCache.clear();
      group.reject(err);
      return;
    }
    for (const [seq, tokens] of this.#pendingCache) this.#cache.set(seq, tokens);
    this.#pendingCache.clear();
    group.resolve();
  }

  /** Caches decoded tokens; inside a write they wait for the commit (seqs of a rolled-back write are reused). */
  #cacheSet(seq: number, tokens: CallTokens): void {
    if (this.#group) {
      this.#pendingCache.set(seq, tokens);
      this.#opCacheKeys.push(seq);
    } else {
      this.#cache.set(seq, tokens);
    }
  }

  #cacheGet(seq: number): CallTokens | undefined {
    return this.#pendingCache.get(seq) ?? this.#cache.get(seq);
  }

  /** A prepared statement, cached by its text (preparing costs more than running). */
  #stmt(sql: string): StatementSync {
    let statement = this.#statements.get(sql);
    if (!statement) {
      statement = this.#db.prepare(sql);
      if (this.#statements.size > 500) this.#statements.clear();
      this.#statements.set(sql, statement);
    }
    return statement;
  }

  #nextSeq(): number {
    const row = this.#stmt(
      "UPDATE counters SET value = value + 1 WHERE name = 'seq' RETURNING value",
    ).get() as { value: number };
    return row.value;
  }

  #exists(rollout_id: string): boolean {
    return this.#stmt("SELECT 1 AS ok FROM rollouts WHERE rollout_id = ?").get(rollout_id) !==
      undefined;
  }

  #loadRollout(id: string): Rollout | null {
    const row = this.#stmt("SELECT * FROM rollouts WHERE rollout_id = ?").get(id) as
      | RolloutRow
      | undefined;
    if (!row) return null;
    return this.#withAttempts([row])[0];
  }

  #withAttempts(rows: RolloutRow[]): Rollout[] {
    if (rows.length === 0) return [];
    const attempts = this.#stmt(
      `SELECT * FROM attempts WHERE rollout_id IN (SELECT value FROM json_each(?))
       ORDER BY rollout_id, idx`,
    ).all(JSON.stringify(rows.map((r) => r.rollout_id))) as unknown as AttemptRow[];
    return rolloutsFromRows(rows, attempts);
  }

  #endAttempt(
    rollout_id: string,
    attempt: Attempt,
    now: number,
    end: AttemptEnd,
  ): void {
    const columns = attemptEndColumns(attempt, end);
    this.#stmt(
      `UPDATE attempts SET status = ?, ended_at = ?, exit_code = ?, error = ?, info = ?,
        log_location = ?, lease_expires_at = NULL WHERE rollout_id = ? AND attempt_id = ?`,
    ).run(
      end.status,
      now,
      columns.exit_code,
      columns.error,
      columns.info,
      columns.log_location,
      rollout_id,
      attempt.attempt_id,
    );
  }

  #insertStatusEvent(
    rollout_id: string,
    attempt_id: string,
    from: RolloutStatus | null,
    to: RolloutStatus,
    reason: string | null,
    now: number,
  ): void {
    const seq = this.#nextSeq();
    this.#stmt(
      `INSERT INTO events (seq, rollout_id, attempt_id, type, event_key, created_at, status,
        payload) VALUES (?, ?, ?, 'status', NULL, ?, ?, ?)`,
    ).run(seq, rollout_id, attempt_id, now, to, JSON.stringify({ from, to, reason }));
  }

  #insertEvent(
    rollout_id: string,
    attempt_id: string,
    event: ParsedEvent,
    now: number,
  ): RolloutEvent {
    const seq = this.#nextSeq();
    const base = {
      seq,
      rollout_id,
      attempt_id,
      event_key: event.event_key ?? null,
      created_at: now,
    };
    if (event.type !== "model_request") {
      this.#stmt(
        `INSERT INTO events (seq, rollout_id, attempt_id, type, event_key, created_at, payload)
         VALUES (?, ?, ?, ?, ?, ?, ?)`,
      ).run(
        seq,
        rollout_id,
        attempt_id,
        event.type,
        base.event_key,
        now,
        JSON.stringify(event.payload),
      );
      if (event.type === "reward") {
        this.#stmt("UPDATE rollouts SET reward = ?, updated_at = ? WHERE rollout_id = ?")
          .run(event.payload.value, now, rollout_id);
      }
      return { ...base, type: event.type, payload: event.payload } as RolloutEvent;
    }
    const request = modelRequestOf(event);
    const candidates = (this.#stmt(
      `SELECT seq FROM events WHERE rollout_id = ? AND attempt_id = ? AND type = 'model_request'
       ORDER BY seq DESC LIMIT ${REFERENCE_CANDIDATES}`,
    ).all(rollout_id, attempt_id) as Array<{ seq: number }>).map(({ seq }) => ({
      seq,
      tokens: this.#callTokens(seq),
    }));
    const plan = planPrompt(request.prompt_token_ids, candidates);
    this.#stmt(
      `INSERT INTO events (seq, rollout_id, attempt_id, type, event_key, created_at, payload,
        prompt_ref, prompt_ref_len, prompt_tail, response_ids, response_logprobs)
       VALUES (?, ?, ?, 'model_request', ?, ?, ?, ?, ?, ?, ?, ?)`,
    ).run(
      seq,
      rollout_id,
      attempt_id,
      base.event_key,
      now,
      JSON.stringify(modelRequestMeta(request)),
      plan.ref_seq,
      plan.ref_len,
      encodeU32(plan.tail),
      encodeU32(request.response_token_ids),
      encodeF32(request.response_logprobs),
    );
    this.#stmt(
      `UPDATE rollouts SET policy_version_min = MIN(COALESCE(policy_version_min, ?1), ?1),
        policy_version_max = MAX(COALESCE(policy_version_max, ?1), ?1), updated_at = ?2
       WHERE rollout_id = ?3`,
    ).run(request.policy_version, now, rollout_id);
    this.#cacheSet(seq, {
      prompt: request.prompt_token_ids.slice(),
      response: request.response_token_ids.slice(),
    });
    return { ...base, type: "model_request", payload: request };
  }

  /** The decoded prompt and response of a stored call (through the cache). */
  #callTokens(seq: number): CallTokens {
    const hit = this.#cacheGet(seq);
    if (hit) return hit;
    const row = this.#stmt(
      "SELECT prompt_ref, prompt_ref_len, prompt_tail, response_ids FROM events WHERE seq = ?",
    ).get(seq) as Pick<EventRow, "prompt_ref" | "prompt_ref_len" | "prompt_tail" | "response_ids">;
    const tokens = this.#decodeCall(row);
    this.#cacheSet(seq, tokens);
    return tokens;
  }

  #decodeCall(
    row: Pick<EventRow, "prompt_ref" | "prompt_ref_len" | "prompt_tail" | "response_ids">,
  ): CallTokens {
    const ref = row.prompt_ref === null ? null : this.#callTokens(row.prompt_ref);
    return {
      prompt: resolvePrompt(ref, row.prompt_ref_len ?? 0, decodeU32(row.prompt_tail!)),
      response: decodeU32(row.response_ids!),
    };
  }

  #decodeEvent(row: EventRow): RolloutEvent {
    if (row.type !== "model_request") return eventFromRow(row, row.seq, null);
    const tokens = this.#cacheGet(row.seq) ?? this.#decodeCall(row);
    this.#cacheSet(row.seq, tokens);
    return eventFromRow(row, row.seq, tokens);
  }
}
