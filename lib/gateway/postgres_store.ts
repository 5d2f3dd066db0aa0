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
 * - A reward is applied by a statement that reads the current attempt under the seq lock, which
 *   claims and expiries also take: a claim in between cannot let a superseded reward through.
 *
 * Tables are prefixed `reins_`; opening migrates the schema (under an advisory lock, so
 * gateways starting together do not race) and refuses a database of a newer schema. The SQL
 * and logic of every operation but appending events are shared with the SQLite store
 * (`./sql/flows.ts`).
 *
 * @module
 */
import { sleep } from "../util/time.ts";
import postgres from "postgres";
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
import { appendGroup, type AppendJob, flows, KeyRace, pgQuery, pgRun } from "./postgres_events.ts";
import { MIGRATE_LOCK, POSTGRES } from "./sql/dialect.ts";
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
import { TokenCache } from "./token_blob.ts";

/** Options of {@link openPostgresStore}. */
export interface PostgresStoreOptions {
  /** Connection pool size (default 8). */
  max?: number;
}

type Sql = postgres.Sql;

/**
 * Connects to PostgreSQL, creating the reins tables or migrating an older schema; refuses a
 * database written by a newer reins.
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
  const sql = postgres(url, {
    max: options.max ?? 8,
    onnotice: () => {},
    prepare: true,
    // The event path's statements are prepared (`pgPrepared`) to be pipelined, not to be planned
    // once: PostgreSQL's generic plan for them, chosen after five runs, made 8k-token model calls
    // ~40% slower as the events table grew (263 → 151 per s); a custom plan per run keeps the
    // plan an unprepared statement had.
    connection: { plan_cache_mode: "force_custom_plan" },
  });
  try {
    await sql.begin(async (tx) => {
      await pgQuery(tx, `SELECT pg_advisory_xact_lock(${MIGRATE_LOCK})`);
      const where = `PostgreSQL database '${new URL(url).pathname.slice(1) || url}'`;
      await pgRun(tx, migrate(POSTGRES, where));
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
    return await this.#tx((tx) => pgRun(tx, flows.createRollouts(normalized)));
  }

  async getRollout(id: string): Promise<Rollout | null> {
    this.#open();
    return isId(id) ? await pgRun(this.#sql, flows.loadRollout(id)) : null;
  }

  async listRollouts(options: ListRolloutsOptions): Promise<Page<Rollout>> {
    this.#open();
    checkListing(options);
    return await pgRun(this.#sql, flows.listRollouts(options));
  }

  async claimRollouts(options: ClaimOptions): Promise<Claimed[]> {
    checkClaim(options);
    return await this.#tx((tx) => pgRun(tx, flows.claimRollouts(options)));
  }

  async renewLease(
    rollout_id: string,
    attempt_id: string,
    worker: string,
    lease_ms: number,
  ): Promise<Attempt> {
    checkRenewalArgs(rollout_id, attempt_id, worker);
    return await this.#tx((tx) =>
      pgRun(tx, flows.renewLease(rollout_id, attempt_id, worker, lease_ms))
    );
  }

  async transition(rollout_id: string, options: TransitionOptions): Promise<Rollout> {
    checkTransitionArgs(rollout_id, options);
    return await this.#tx((tx) => pgRun(tx, flows.transition(rollout_id, options)));
  }

  async expireLeases(now: number = Date.now()): Promise<Rollout[]> {
    return await this.#tx((tx) => pgRun(tx, flows.expireLeases(now)));
  }

  // ---------------------------------------------------------------------------------------------
  // Events

  appendEvents(
    rollout_id: string,
    attempt_id: string,
    inputs: EventInput[],
    options: AppendOptions = {},
  ): Promise<RolloutEvent[]> {
    try {
      this.#open();
      const { credential, parsed } = checkAppend(rollout_id, attempt_id, inputs, options);
      return new Promise((resolve, reject) => {
        this.#queue.push({ rollout_id, attempt_id, credential, parsed, resolve, reject });
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
   * the next one (one seq lock, a handful of round trips, one commit). A post that is refused
   * (unknown rollout or attempt, a key taken by another event, a token's finished attempt)
   * fails alone; nothing is answered before its transaction committed.
   */
  async #drain(): Promise<void> {
    while (this.#queue.length > 0) {
      const jobs = this.#queue.splice(0, 256);
      for (let tries = 1;; tries++) {
        try {
          this.#open();
          const conn = await this.#sql.reserve();
          let results: Array<RolloutEvent[] | StoreError>;
          try {
            results = await appendGroup(conn, jobs, this.#cache);
          } finally {
            conn.release();
          }
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

  async listEvents(rollout_id: string, options: ListEventsOptions = {}): Promise<RolloutEvent[]> {
    this.#open();
    if (!isId(rollout_id)) throw noRollout(rollout_id);
    if (options.attempt_id !== undefined && !isId(options.attempt_id)) return [];
    return await pgRun(this.#sql, flows.listEvents(rollout_id, options, this.#cache));
  }

  // ---------------------------------------------------------------------------------------------
  // Models, change feed, meta

  async upsertModel(model: Omit<Model, "updated_at">): Promise<Model> {
    const parsed = parseOrThrow(ModelSchema, model);
    return await this.#tx((tx) => pgRun(tx, flows.upsertModel(parsed)));
  }

  async listModels(): Promise<Model[]> {
    this.#open();
    return await pgRun(this.#sql, flows.listModels());
  }

  async getModel(name: string): Promise<Model | null> {
    this.#open();
    return isId(name) ? await pgRun(this.#sql, flows.getModel(name)) : null;
  }

  async changesSince(seq: number, limit: number, filter?: ChangeFilter): Promise<Change[]> {
    this.#open();
    return await pgRun(this.#sql, flows.changesSince(seq, limit, filter));
  }

  async lastSeq(): Promise<number> {
    this.#open();
    return await pgRun(this.#sql, flows.lastSeq());
  }

  async ensureMeta(key: string, value: string): Promise<string> {
    this.#open();
    return await pgRun(this.#sql, flows.ensureMeta(key, value));
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    // Let queued event posts commit first.
    while (this.#draining) await sleep(5);
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
}
