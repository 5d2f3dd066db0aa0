/**
 * Which attempts are live: running, and the current attempt of their running rollout. Only a
 * live attempt's capability token may call the proxy or post events; a finished, lost or
 * superseded one gets a 409 saying which. Verdicts are cached for a short time and dropped as
 * soon as the change feed shows a status change of their rollout (any process's), so a token
 * stops working within one feed poll of its attempt ending.
 *
 * @module
 */
import { HttpError } from "../util/error.ts";
import type { Change, Rollout } from "../schema.ts";

/** What {@link LiveAttempts} reads (the gateway's `Store` satisfies it). */
export interface LiveAttemptsStore {
  getRollout(id: string): Promise<Rollout | null>;
  /**
   * When present, cached verdicts are dropped from the change feed. Asked for status events
   * alone (`eventType`); a store that ignores the filter still works, it only reads more.
   */
  changesSince?(seq: number, limit: number, filter?: { eventType?: "status" }): Promise<Change[]>;
  lastSeq?(): Promise<number>;
}

/** Options of {@link LiveAttempts}. */
export interface LiveAttemptsOptions {
  /** How long a "live" verdict is reused at most (default 2 000 ms). */
  ttlMs?: number;
  /** How often the change feed is read, at most (default 100 ms). */
  feedMs?: number;
  /** Most verdicts kept (the oldest are dropped first; default 65 536). */
  maxEntries?: number;
}

/** Changes read per feed page, and pages per sync before the cache is simply cleared. */
const FEED_PAGE = 1_000;
const FEED_PAGES = 8;

/**
 * Why `attempt_id` of `rollout` is not live, as the 404/409 to answer; null when it is live.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "./sqlite_store.ts";
 * import { attemptRefusal } from "./live_attempts.ts";
 * const store = openSqliteStore(":memory:");
 * await store.createRollouts([{ rollout_id: "r1", input: {} }]);
 * const [{ attempt, rollout }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
 * assert.equal(attemptRefusal(rollout, "r1", attempt.attempt_id), null);
 * const done = await store.transition("r1", { to: "succeeded" });
 * assert.equal(attemptRefusal(done, "r1", attempt.attempt_id)?.status, 409);
 * await store.close();
 * ```
 */
export function attemptRefusal(
  rollout: Rollout | null,
  rolloutId: string,
  attemptId: string,
): HttpError | null {
  if (!rollout) {
    return new HttpError(404, `rollout_id: no rollout '${rolloutId}'`, { field: "rollout_id" });
  }
  const attempt = rollout.attempts.find((a) => a.attempt_id === attemptId);
  if (!attempt) {
    return new HttpError(404, `attempt_id: rollout '${rolloutId}' has no attempt '${attemptId}'`, {
      field: "attempt_id",
    });
  }
  const current = rollout.attempts.at(-1)!;
  const refuse = (why: string) =>
    new HttpError(
      409,
      `attempt_id: attempt '${attemptId}' ${why}; it takes no more calls or events`,
      {
        code: "attempt_not_live",
        field: "attempt_id",
      },
    );
  if (attempt.status === "lost") return refuse("is lost (its lease expired)");
  if (current.attempt_id !== attemptId) {
    return refuse(`was superseded by attempt '${current.attempt_id}'`);
  }
  if (attempt.status !== "running") return refuse(`is ${attempt.status}`);
  if (rollout.status !== "running") return refuse(`belongs to a ${rollout.status} rollout`);
  return null;
}

/**
 * A short-lived cache of attempt verdicts, invalidated from the change feed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "./sqlite_store.ts";
 * import { LiveAttempts } from "./live_attempts.ts";
 * const store = openSqliteStore(":memory:");
 * const live = new LiveAttempts(store, { feedMs: 0 });
 * await store.createRollouts([{ rollout_id: "r1", input: {} }]);
 * const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
 * await assert.doesNotReject(live.require("r1", attempt.attempt_id));
 * await store.transition("r1", { to: "failed" });
 * await assert.rejects(live.require("r1", attempt.attempt_id), { status: 409 });
 * await store.close();
 * ```
 */
export class LiveAttempts {
  readonly #store: LiveAttemptsStore;
  readonly #ttlMs: number;
  readonly #feedMs: number;
  readonly #maxEntries: number;
  /** `rollout_id` → attempt_id → when it was found live (performance.now()). */
  #live = new Map<string, Map<string, number>>();
  #size = 0;
  #after: number | null = null;
  #syncedAt = -Infinity;
  #syncing: Promise<void> | null = null;

  constructor(store: LiveAttemptsStore, options: LiveAttemptsOptions = {}) {
    this.#store = store;
    this.#ttlMs = options.ttlMs ?? 2_000;
    this.#feedMs = options.feedMs ?? 100;
    this.#maxEntries = options.maxEntries ?? 65_536;
  }

  /** Resolves when the attempt is live; throws the 404/409 {@link HttpError} otherwise. */
  async require(rolloutId: string, attemptId: string): Promise<void> {
    await this.#sync();
    const seenAt = this.#live.get(rolloutId)?.get(attemptId);
    if (seenAt !== undefined && performance.now() - seenAt < this.#ttlMs) return;
    const rollout = await this.#store.getRollout(rolloutId);
    const refusal = attemptRefusal(rollout, rolloutId, attemptId);
    if (refusal) {
      this.invalidate(rolloutId);
      throw refusal;
    }
    this.#remember(rolloutId, attemptId);
  }

  /** Drops the verdicts of a rollout (called on its status changes). */
  invalidate(rolloutId: string): void {
    const attempts = this.#live.get(rolloutId);
    if (!attempts) return;
    this.#size -= attempts.size;
    this.#live.delete(rolloutId);
  }

  #remember(rolloutId: string, attemptId: string): void {
    let attempts = this.#live.get(rolloutId);
    if (!attempts) {
      if (this.#size >= this.#maxEntries) this.invalidate(this.#live.keys().next().value!);
      attempts = new Map();
      this.#live.set(rolloutId, attempts);
    }
    if (!attempts.has(attemptId)) this.#size++;
    attempts.set(attemptId, performance.now());
  }

  #sync(): Promise<void> {
    const store = this.#store;
    if (!store.changesSince || !store.lastSeq) return Promise.resolve();
    if (this.#syncing) return this.#syncing;
    if (performance.now() - this.#syncedAt < this.#feedMs) return Promise.resolve();
    this.#syncing = (async () => {
      try {
        if (this.#after === null) {
          this.#after = await store.lastSeq!();
          this.#clear();
          return;
        }
        let after: number = this.#after;
        // Only status events are read (the rows of the model calls and logs in between were
        // ~10 µs a proxied call). Where the feed then stands is the last seq, read first: seqs
        // become visible in order, so every status event up to it is in the pages that follow.
        const last = await store.lastSeq!();
        for (let page = 0;; page++) {
          if (page === FEED_PAGES) {
            // Far behind: dropping every verdict is cheaper than reading the backlog.
            this.#after = await store.lastSeq!();
            this.#clear();
            return;
          }
          const changes = await store.changesSince!(after, FEED_PAGE, {
            eventType: "status",
          });
          for (const change of changes) {
            if (change.kind === "event" && change.type === "status") {
              this.invalidate(change.rollout_id);
            }
          }
          if (changes.length) after = changes[changes.length - 1].seq;
          if (changes.length < FEED_PAGE) {
            this.#after = Math.max(after, last);
            return;
          }
          this.#after = after;
        }
      } catch (error) {
        // The feed is an optimisation of freshness: on failure, trust nothing cached.
        this.#clear();
        this.#after = null;
        throw error;
      } finally {
        this.#syncedAt = performance.now();
        this.#syncing = null;
      }
    })();
    return this.#syncing;
  }

  #clear(): void {
    this.#live.clear();
    this.#size = 0;
  }
}
