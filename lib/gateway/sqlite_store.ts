/**
 * The embedded store: one SQLite file per run through `node:sqlite`.
 *
 * Durability: WAL journal; with `synchronous: "FULL"` (the default) a write is on disk (the WAL
 * fsynced) before the gateway acknowledges it or a read sees it: it survives a SIGKILL and also
 * power loss. The fsync runs off the gateway's thread (issue #29: SQLite's own held the loop
 * ~50 ms per commit on a loaded disk): the connection commits with SQLite's `NORMAL`, then the
 * commit's group waits for an fsync of the WAL that started after it (`./sqlite_wal_sync.ts`);
 * a failed fsync fails the group (the caller retries; keyed events stay idempotent).
 * Checkpoints run on a worker thread (`./sqlite_checkpointer.ts`). `synchronous: "NORMAL"`
 * skips the fsync: a killed process loses nothing, an OS crash may lose the last transactions
 * (never corrupt the file). `:memory:` and `file:` URIs keep SQLite's own syncing; `:memory:`
 * answers a write before its group commits (nothing to make durable; reads still wait). Every write
 * method is one `BEGIN IMMEDIATE` transaction, so a second process on the same file waits
 * instead of interleaving.
 *
 * The SQL and the logic of every operation but appending events are shared with the
 * PostgreSQL store (`./sql/flows.ts`); this file holds the group commit and the event path.
 *
 * @module
 */
import { sleep } from "../util/time.ts";
import { DatabaseSync, type SQLInputValue, type StatementSync } from "node:sqlite";
import type {
  Attempt,
  Change,
  EventInput,
  Model,
  Rollout,
  RolloutCreate,
  RolloutEvent,
} from "../schema.ts";
import { ModelSchema, parseOrThrow } from "../schema.ts";
import { SQLITE, sqliteText } from "./sql/dialect.ts";
import { type Flow, type Query, runSync } from "./sql/flow.ts";
import { SqlFlows, type TokenStore } from "./sql/flows.ts";
import { migrate } from "./sql/migrations.ts";
import {
  type AppendOptions,
  type ChangeFilter,
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
  checkClaim,
  checkListing,
  checkRenewalArgs,
  checkTransitionArgs,
  isId,
  normalizeCreates,
} from "./store_input.ts";
import { checkAppend, noRollout } from "./store_rules.ts";
import { type CallTokens, TokenCache } from "./token_blob.ts";
import { appendToAttempt, type SqliteEventDb } from "./sqlite_events.ts";
import { WalSync } from "./sqlite_wal_sync.ts";
import { type Checkpointer, checkpointOffThread } from "./sqlite_checkpointer.ts";

/** Options of {@link openSqliteStore}. */
export interface SqliteStoreOptions {
  /**
   * `FULL` (default): acknowledged after the WAL is fsynced (off the event loop); `NORMAL`: no
   * fsync, survives process kills, not power loss.
   */
  synchronous?: "NORMAL" | "FULL";
  /** How long to wait for another process's write lock (default 5 000 ms). */
  busyTimeoutMs?: number;
}

interface Group {
  done: Promise<void>;
  resolve: () => void;
  reject: (err: unknown) => void;
  timer: ReturnType<typeof setImmediate>;
  /** Operations run in it so far (the first one needs no savepoint). */
  ops: number;
}

const flows = new SqlFlows(SQLITE);

/**
 * Opens (creating when needed, migrating an older schema) a SQLite store. `":memory:"` gives a
 * throwaway store. A file written by a newer reins (a newer schema version) is refused.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "./sqlite_store.ts";
 * const store = openSqliteStore(":memory:");
 * await store.createRollouts([{ rollout_id: "r1", input: "task" }]);
 * assert.equal((await store.getRollout("r1"))?.status, "queuing");
 * await store.close();
 * ```
 */
export function openSqliteStore(path: string, options: SqliteStoreOptions = {}): SqliteStore {
  return new SqliteStore(path, options);
}

/** Throws naming the directory when `path`'s directory does not exist (SQLite would fail vaguely). */
function checkParentDirectory(path: string): void {
  const dir = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) || "/" : ".";
  try {
    if (Deno.statSync(dir).isDirectory) return;
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  throw new Error(`SQLite file '${path}': the directory '${dir}' does not exist`);
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
  /** Fsyncs the WAL off the event loop before a commit is acknowledged (`FULL`, plain files). */
  readonly #walSync: WalSync | null;
  /** An in-memory database: nothing to make durable, so a write is answered before its commit. */
  readonly #volatile: boolean;
  #checkpointer: Checkpointer | null = null;
  /**
   * The store-wide `seq` counter while a group transaction holds the write lock: read once per
   * group, advanced here, written back before a statement that reads or bumps it and before the
   * commit. An `UPDATE ... RETURNING` per event cost ~12 µs, a third of storing a small event.
   */
  #seq: { value: number; dirty: boolean } | null = null;
  readonly #tokens: TokenStore = {
    get: (seq) => this.#pendingCache.get(seq) ?? this.#cache.get(seq),
    set: (seq, tokens) => this.#cacheSet(seq, tokens),
  };
  /** What the event path (`./sqlite_events.ts`) uses of this connection. */
  readonly #events: SqliteEventDb = {
    stmt: (sql) => this.#stmt(sql),
    flow: (flow) => this.#flow(flow),
    nextSeq: () => this.#nextSeq(),
    giveBackSeq: () => void this.#seq!.value--,
    tokens: this.#tokens,
  };

  constructor(path: string, options: SqliteStoreOptions = {}) {
    this.path = path;
    const plainFile = path !== ":memory:" && path !== "" && !path.startsWith("file:");
    if (plainFile) checkParentDirectory(path);
    this.#volatile = path === ":memory:" || path === "";
    this.#walSync = plainFile && (options.synchronous ?? "FULL") === "FULL"
      ? new WalSync(`${path}-wal`, path)
      : null;
    this.#db = new DatabaseSync(path);
    this.#busyTimeoutMs = options.busyTimeoutMs ?? 5_000;
    try {
      this.#open(path, options);
      if (plainFile) {
        this.#checkpointer = checkpointOffThread(
          this.#db,
          path,
          this.#busyTimeoutMs,
          () => this.#closed,
        );
      }
    } catch (err) {
      try {
        this.#db.close();
      } catch { /* already closed */ }
      // A store's own refusal (a newer schema, say) already names the file: keep its type.
      if (err instanceof StoreError) throw err;
      // SQLite's own words ("file is not a database") do not say which file.
      const message = err instanceof Error ? err.message : String(err);
      throw new Error(
        message.includes(path) ? message : `SQLite file '${path}': ${message}`,
        { cause: err },
      );
    }
  }

  #open(path: string, options: SqliteStoreOptions): void {
    const sync = options.synchronous ?? "FULL";
    this.#db.exec(`PRAGMA busy_timeout = ${this.#busyTimeoutMs}`);
    // Big pages keep multi-KB token rows several to a page (only applies to a new file).
    this.#db.exec("PRAGMA page_size = 16384");
    this.#db.exec("PRAGMA journal_mode = WAL");
    // With a WAL fsync of our own (off the thread), the connection itself need not sync.
    this.#db.exec(`PRAGMA synchronous = ${this.#walSync ? "NORMAL" : sync}`);
    this.#db.exec("PRAGMA foreign_keys = ON");
    // Every write runs in a savepoint; this keeps its statement journal a plain in-memory one
    // (the default, a buffer ready to spill to a temporary file, cost ~50 µs more per write).
    // That journal only serves rolling back a failed operation: durability is unchanged.
    this.#db.exec("PRAGMA temp_store = MEMORY");
    this.#db.exec("BEGIN IMMEDIATE");
    try {
      this.#flow(migrate(SQLITE, `SQLite file '${path}'`));
      this.#db.exec("COMMIT");
    } catch (err) {
      this.#db.exec("ROLLBACK");
      throw err;
    }
  }

  // ---------------------------------------------------------------------------------------------
  // Rollouts

  createRollouts(creates: RolloutCreate[]): Promise<{ rollouts: Rollout[]; created: boolean[] }> {
    return this.#run(() => {
      const normalized = normalizeCreates(creates);
      return this.#tx(() => this.#flow(flows.createRollouts(normalized)));
    });
  }

  getRollout(id: string): Promise<Rollout | null> {
    return this.#read(() => (isId(id) ? this.#flow(flows.loadRollout(id)) : null));
  }

  listRollouts(options: ListRolloutsOptions): Promise<Page<Rollout>> {
    return this.#read(() => {
      checkListing(options);
      return this.#flow(flows.listRollouts(options));
    });
  }

  claimRollouts(options: ClaimOptions): Promise<Claimed[]> {
    return this.#run(() => {
      checkClaim(options);
      return this.#tx(() => this.#flow(flows.claimRollouts(options)));
    });
  }

  renewLease(
    rollout_id: string,
    attempt_id: string,
    worker: string,
    lease_ms: number,
  ): Promise<Attempt> {
    return this.#run(() => {
      checkRenewalArgs(rollout_id, attempt_id, worker);
      return this.#tx(() => this.#flow(flows.renewLease(rollout_id, attempt_id, worker, lease_ms)));
    });
  }

  transition(rollout_id: string, options: TransitionOptions): Promise<Rollout> {
    return this.#run(() => {
      checkTransitionArgs(rollout_id, options);
      return this.#tx(() => this.#flow(flows.transition(rollout_id, options)));
    });
  }

  async expireLeases(now: number = Date.now()): Promise<Rollout[]> {
    // The sweep runs every second: only open a write (and pay a commit) when a lease is over.
    if (!await this.#read(() => this.#flow(flows.leasesDue(now)))) return [];
    return await this.#run(() => this.#tx(() => this.#flow(flows.expireLeases(now))));
  }

  // ---------------------------------------------------------------------------------------------
  // Events

  appendEvents(
    rollout_id: string,
    attempt_id: string,
    inputs: EventInput[],
    options: AppendOptions = {},
  ): Promise<RolloutEvent[]> {
    return this.#run(() => {
      const { credential, parsed } = checkAppend(rollout_id, attempt_id, inputs, options);
      // One log or custom event is one INSERT (its seq is taken in memory); a reward may also
      // set the rollout's reward, a model call also updates the rollout's versions.
      const oneStatement = parsed.length === 1 && parsed[0].type !== "model_request" &&
        parsed[0].type !== "reward";
      return this.#tx(
        () => appendToAttempt(this.#events, rollout_id, attempt_id, parsed, credential),
        oneStatement,
      );
    });
  }

  listEvents(rollout_id: string, options: ListEventsOptions = {}): Promise<RolloutEvent[]> {
    return this.#read(() => {
      if (!isId(rollout_id)) throw noRollout(rollout_id);
      if (options.attempt_id !== undefined && !isId(options.attempt_id)) return [];
      return this.#flow(flows.listEvents(rollout_id, options, this.#tokens));
    });
  }

  // ---------------------------------------------------------------------------------------------
  // Models, change feed, meta

  upsertModel(model: Omit<Model, "updated_at">): Promise<Model> {
    return this.#run(() => {
      const parsed = parseOrThrow(ModelSchema, model);
      return this.#tx(() => this.#flow(flows.upsertModel(parsed)));
    });
  }

  listModels(): Promise<Model[]> {
    return this.#read(() => this.#flow(flows.listModels()));
  }

  getModel(name: string): Promise<Model | null> {
    return this.#read(() => (isId(name) ? this.#flow(flows.getModel(name)) : null));
  }

  changesSince(seq: number, limit: number, filter?: ChangeFilter): Promise<Change[]> {
    return this.#read(() => this.#flow(flows.changesSince(seq, limit, filter)));
  }

  lastSeq(): Promise<number> {
    return this.#read(() => this.#flow(flows.lastSeq()));
  }

  ensureMeta(key: string, value: string): Promise<string> {
    return this.#run(() => this.#tx(() => this.#flow(flows.ensureMeta(key, value))));
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#flush(true);
    this.#closed = true;
    // The last group's fsync runs on; the file and the connection close after it.
    await this.#walSync?.pending()?.catch(() => {});
    this.#walSync?.close();
    await this.#checkpointer?.close();
    this.#checkpointer = null;
    this.#db.close();
  }

  // ---------------------------------------------------------------------------------------------
  // Internals

  /** Runs a shared flow on this connection (inside whatever transaction is open). */
  #flow<T>(flow: Flow<T>): T {
    return runSync(flow, (q: Query) => {
      if (q.sql.includes("counters")) this.#syncSeq();
      return this.#stmt(q.sql).all(...(q.params as SQLInputValue[]));
    });
  }

  /** Writes an advanced `seq` back to its row and forgets it (the row is the truth again). */
  #syncSeq(): void {
    if (this.#seq?.dirty) {
      this.#stmt("UPDATE counters SET value = ? WHERE name = 'seq'").run(this.#seq.value);
    }
    this.#seq = null;
  }

  /**
   * Runs a write operation inside the open group transaction (opening one when needed) and
   * resolves only after the group commit that holds its changes: nothing is acknowledged
   * before it is durable (an in-memory database has no durability to wait for). Groups commit once pending I/O was handled, so operations that arrive
   * together share one commit (one fsync), which is what makes `synchronous=FULL` affordable.
   */
  async #run<T>(fn: () => T): Promise<T> {
    if (this.#closed) throw new StoreError("internal", "store is closed");
    const group = this.#group ?? await this.#begin();
    const out = fn();
    // Reads still wait for the commit (`#read`); only the ack of a volatile write does not.
    if (!this.#volatile) await group.done;
    return out;
  }

  /** Opens a group transaction; waits (without blocking the thread) for another writer's lock. */
  async #begin(): Promise<Group> {
    const deadline = Date.now() + this.#busyTimeoutMs;
    while (!this.#group) {
      // An in-memory database is this connection's alone: no other writer to wait for.
      if (this.#volatile) this.#db.exec("BEGIN IMMEDIATE");
      else {
        this.#db.exec("PRAGMA busy_timeout = 0");
        try {
          this.#db.exec("BEGIN IMMEDIATE");
        } catch (err) {
          if (!/locked|busy/i.test(String(err)) || Date.now() > deadline) throw err;
          await sleep(2);
          continue;
        } finally {
          this.#db.exec(`PRAGMA busy_timeout = ${this.#busyTimeoutMs}`);
        }
      }
      // Another process may have taken seqs since this connection last held the lock.
      this.#seq = null;
      const { promise, resolve, reject } = Promise.withResolvers<void>();
      promise.catch(() => {});
      // setImmediate runs once the requests that arrived with this one were handled, so they
      // share the commit, without the extra millisecond a timer would wait.
      this.#group = {
        done: promise,
        resolve,
        reject,
        timer: setImmediate(() => this.#flush()),
        ops: 0,
      };
    }
    return this.#group;
  }

  /** Runs a read once no uncommitted (or committed, not yet fsynced) group is left, so reads only see durable data. */
  async #read<T>(fn: () => T): Promise<T> {
    for (;;) {
      const pending = this.#group?.done ?? this.#walSync?.pending();
      if (!pending) break;
      await pending.catch(() => {});
    }
    if (this.#closed) throw new StoreError("internal", "store is closed");
    return fn();
  }

  /**
   * Runs `fn` as one all-or-nothing unit of the open group transaction: a savepoint, unless
   * `oneStatement` says `fn` writes with one statement at most (SQLite keeps a statement whole by
   * itself), or `fn` is the group's first operation: nothing else is in the transaction yet, so a
   * failure rolls the whole of it back and the group ends (a lone call, the proxy's capture of one
   * model call, saves the ~15 µs the savepoint and its release cost). The savepoint made a small
   * event's insert ~12 µs dearer: it journals every page the group had already changed.
   */
  #tx<T>(fn: () => T, oneStatement = false): T {
    const group = this.#group;
    if (!group) throw new StoreError("internal", "write outside a group transaction");
    const first = group.ops++ === 0;
    const savepoint = !oneStatement && !first;
    if (savepoint) this.#db.exec("SAVEPOINT op");
    this.#opCacheKeys = [];
    // Rolling back to the savepoint restores the counter's row; this restores what was cached.
    const seqBefore = this.#seq && { ...this.#seq };
    try {
      const out = fn();
      if (savepoint) this.#db.exec("RELEASE op");
      return out;
    } catch (err) {
      this.#seq = seqBefore;
      try {
        if (savepoint) {
          this.#db.exec("ROLLBACK TO op");
          this.#db.exec("RELEASE op");
        } else if (!oneStatement) this.#abandon(group);
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

  /** Ends a group whose only operation failed: its transaction is rolled back, not committed. */
  #abandon(group: Group): void {
    this.#group = null;
    clearImmediate(group.timer);
    this.#seq = null;
    group.resolve();
    this.#db.exec("ROLLBACK");
  }

  /**
   * Commits the open group. While the log's previous fsync still runs, a commit now would wait
   * for the next fsync anyway: the group stays open until that fsync ends (and the writes that
   * arrive meanwhile join it), so a burst of writers pays one COMMIT per fsync rather than one
   * per turn of the event loop. `force` commits at once (closing).
   */
  #flush(force = false): void {
    const group = this.#group;
    if (!group) return;
    clearImmediate(group.timer);
    const running = force ? null : this.#walSync?.running();
    if (running) {
      const retry = () => {
        if (this.#group === group) this.#flush();
      };
      running.then(retry, retry);
      return;
    }
    this.#group = null;
    try {
      this.#syncSeq();
      this.#db.exec("COMMIT");
    } catch (err) {
      this.#seq = null;
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
    this.#checkpointer?.committed();
    // Acknowledged once durable: after an fsync of the WAL that started after this COMMIT.
    if (!this.#walSync) return group.resolve();
    this.#walSync.sync().then(() => group.resolve(), (err) => group.reject(err));
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

  /** A prepared statement, cached by its text (preparing costs more than running). */
  #stmt(sql: string): StatementSync {
    let statement = this.#statements.get(sql);
    if (!statement) {
      statement = this.#db.prepare(sqliteText(sql));
      if (this.#statements.size > 500) this.#statements.clear();
      this.#statements.set(sql, statement);
    }
    return statement;
  }

  #nextSeq(): number {
    if (!this.#seq) {
      const row = this.#stmt("SELECT value FROM counters WHERE name = 'seq'").get() as {
        value: number;
      };
      this.#seq = { value: row.value, dirty: false };
    }
    this.#seq.value++;
    this.#seq.dirty = true;
    return this.#seq.value;
  }
}
