/**
 * The `Store` contract both gateway backends (SQLite, PostgreSQL) implement, and the error type
 * they throw. The HTTP app maps a {@link StoreError}'s `status` straight to the response.
 *
 * @module
 */
import type {
  Attempt,
  AttemptStatus,
  Change,
  Credential,
  EventInput,
  EventType,
  JsonObject,
  Model,
  Rollout,
  RolloutCreate,
  RolloutEvent,
  RolloutMode,
  RolloutStatus,
} from "../schema.ts";
import { HttpError, statusOfCode } from "../util/error.ts";

/** Machine-readable error codes of the gateway (also used in HTTP error bodies). */
export type GatewayErrorCode =
  | "invalid"
  | "not_found"
  | "conflict"
  | "unauthorized"
  | "forbidden"
  | "too_large"
  | "timeout"
  | "internal";

/**
 * A store refusal: an {@link HttpError} whose status follows its code. The message names the
 * field or id at fault.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { StoreError } from "./store.ts";
 * const err = new StoreError("not_found", "rollout_id: no rollout 'r1'");
 * assert.equal(err.status, 404);
 * ```
 */
export class StoreError extends HttpError {
  declare readonly code: GatewayErrorCode;
  constructor(code: GatewayErrorCode, message: string) {
    // Messages start with the field at fault ("events[0].type: …"): the answer names it too.
    const field = /^([A-Za-z_][\w.[\]]*): /.exec(message)?.[1];
    super(statusOfCode(code), message, { code, ...(field ? { field } : {}) });
    this.name = "StoreError";
  }
}

/** A page of a cursor listing; `next_cursor` is null on the last page. */
export interface Page<T> {
  items: T[];
  next_cursor: string | null;
}

/** Filters and paging of {@link Store.listRollouts} (validated by the caller). */
export interface ListRolloutsOptions {
  status?: RolloutStatus | RolloutStatus[];
  mode?: RolloutMode;
  group_id?: string;
  /** Every label given must match exactly. */
  labels?: Record<string, string>;
  /** `asc` (default): oldest first; `desc`: newest first. */
  order?: "asc" | "desc";
  /** Cursor from a previous page (of a listing in the same order). */
  after?: string;
  limit: number;
}

/** Arguments of {@link Store.claimRollouts}. */
export interface ClaimOptions {
  worker: string;
  limit: number;
  lease_ms: number;
  /** Idempotency key: a retried claim with the same worker and key returns the same attempts. */
  claim_key?: string;
  mode?: RolloutMode;
  /** Only rollouts whose labels hold every given key/value. */
  labels?: Record<string, string>;
  /** Clock override for tests (epoch ms). */
  now?: number;
}

/** A rollout moved to `running` together with its new attempt. */
export interface Claimed {
  rollout: Rollout;
  attempt: Attempt;
}

/** Arguments of {@link Store.transition}. */
export interface TransitionOptions {
  to: RolloutStatus;
  expected_version?: number;
  attempt_id?: string;
  attempt_status?: Exclude<AttemptStatus, "running">;
  exit_code?: number | null;
  error?: string | null;
  reason?: string | null;
  info?: JsonObject;
  log_location?: string | null;
}

/** Options of {@link Store.appendEvents}. */
export interface AppendOptions {
  /**
   * Who posts (default `admin`, as the control plane's in-process callers do). `capability`
   * (an attempt's token, which the agent holds) may not post rewards (403), and adds events
   * only while its attempt is running and is the rollout's current attempt (409). Only
   * `admin` posts event keys in the reserved `reins:` namespace (403). `reporter` posts
   * rewards like `admin`.
   */
  credential?: Credential;
}

/** Narrows {@link Store.changesSince}. */
export interface ChangeFilter {
  /**
   * Only events of this type (no model changes). Read by a process that watches one kind of
   * change (`LiveAttempts`, status changes): the rows of every other event are not fetched.
   */
  eventType?: EventType;
}

/** Filters of {@link Store.listEvents}; events come ordered by `seq`. */
export interface ListEventsOptions {
  type?: EventType | EventType[];
  attempt_id?: string;
  after_seq?: number;
  limit?: number;
}

/**
 * The gateway's durable state. Every method is safe to retry:
 * - `createRollouts` is idempotent by `rollout_id` (an existing id comes back unchanged);
 * - `claimRollouts` is idempotent by `(worker, claim_key)`;
 * - `transition` to the status the rollout already has, for the same attempt, is a no-op;
 * - `appendEvents` is idempotent by `(rollout_id, event_key)`: the same event posted again
 *   answers the stored one; a different event under a taken key is a 409 naming the key.
 *
 * `Rollout.version` bumps on every status or attempt change (claims, transitions, lease
 * expiry); event-derived fields (`reward`, `policy_version_min/max`) and lease renewals do not
 * bump it, so that a controller's compare-and-swap does not race the proxy's event stream.
 *
 * `Rollout.reward` is the current attempt's verified reward: the last reward event posted by
 * the admin or reporter credential for the rollout's latest attempt, unless that attempt was
 * lost. A claim starts the new attempt without one. Rewards of earlier, superseded or lost
 * attempts are stored as events and never overwrite it; capability tokens cannot post rewards.
 *
 * Every status change also appends a `status` event (creation: `null → queuing`, with
 * `attempt_id` ""), so the event log doubles as the change feed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "./sqlite_store.ts";
 * const store = openSqliteStore(":memory:");
 * await store.createRollouts([{ rollout_id: "r1", input: { q: "2+2" } }]);
 * const [claimed] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
 * const aid = claimed.attempt.attempt_id;
 * // The agent's token may not post a reward; the verifier (admin) may.
 * await assert.rejects(
 *   store.appendEvents("r1", aid, [{ type: "reward", payload: { value: 1 } }], {
 *     credential: "capability",
 *   }),
 *   /cannot post rewards/,
 * );
 * await store.appendEvents("r1", aid, [
 *   { type: "reward", event_key: "reward:1", payload: { value: 1 } },
 * ]);
 * const done = await store.transition("r1", {
 *   to: "succeeded",
 *   expected_version: claimed.rollout.version,
 * });
 * assert.equal(done.reward, 1);
 * assert.equal(done.reward_attempt_id, aid);
 * await store.close();
 * ```
 */
export interface Store {
  /** Which backend this is. */
  readonly kind: "sqlite" | "postgres";
  /** Creates rollouts; `created[i]` is false when `creates[i].rollout_id` already existed. */
  createRollouts(creates: RolloutCreate[]): Promise<{ rollouts: Rollout[]; created: boolean[] }>;
  /** The rollout, or null when there is none with this id. */
  getRollout(id: string): Promise<Rollout | null>;
  /**
   * Rollouts in creation order (`order: "desc"`: newest first) after the cursor, filtered.
   * `next_cursor` continues the listing in the same order, without skips or repeats.
   */
  listRollouts(options: ListRolloutsOptions): Promise<Page<Rollout>>;
  /**
   * Atomically moves up to `limit` `queuing` or `requeuing` rollouts (oldest first, only those
   * of `mode` and holding every `labels` key/value when given) to `running`, each with a new
   * attempt (index + 1) leased to `worker` for `lease_ms`.
   */
  claimRollouts(options: ClaimOptions): Promise<Claimed[]>;
  /** Extends a running attempt's lease; 409 unless it is running and held by `worker`. */
  renewLease(
    rollout_id: string,
    attempt_id: string,
    worker: string,
    lease_ms: number,
  ): Promise<Attempt>;
  /**
   * Applies a status transition allowed by `ROLLOUT_TRANSITIONS`; 409 on a forbidden one or a
   * version mismatch. Leaving `running` ends the current attempt (`succeeded → succeeded`,
   * `failed → failed`, `requeuing → failed`, `cancelled → cancelled` unless `attempt_status`
   * says otherwise).
   */
  transition(rollout_id: string, options: TransitionOptions): Promise<Rollout>;
  /**
   * Running attempts whose lease ended before `now` become `lost`; their rollouts go to
   * `requeuing` while attempts remain, else `failed`. Returns the rollouts it changed.
   */
  expireLeases(now?: number): Promise<Rollout[]>;
  /**
   * Appends events to an attempt (which must belong to the rollout); each gets a strictly
   * increasing store-wide `seq`. An `event_key` already used in this rollout answers the
   * stored event when the post repeats it exactly (same attempt, type and payload), else 409.
   * A post is all or nothing. Rewards set `rollout.reward` as the {@link Store} doc says;
   * model requests widen its policy range. See {@link AppendOptions} for credentials.
   */
  appendEvents(
    rollout_id: string,
    attempt_id: string,
    inputs: EventInput[],
    options?: AppendOptions,
  ): Promise<RolloutEvent[]>;
  /** A rollout's events in `seq` order (404 when the rollout does not exist). */
  listEvents(rollout_id: string, options?: ListEventsOptions): Promise<RolloutEvent[]>;
  /** Registers or updates a model (its `version` is the policy version). */
  upsertModel(model: Omit<Model, "updated_at">): Promise<Model>;
  listModels(): Promise<Model[]>;
  getModel(name: string): Promise<Model | null>;
  /**
   * Changes with `seq` greater than `seq`, in order (for SSE and notebooks); with
   * `eventType`, only the events of that type.
   */
  changesSince(seq: number, limit: number, filter?: ChangeFilter): Promise<Change[]>;
  /** The last assigned store-wide seq (0 when empty). */
  lastSeq(): Promise<number>;
  /**
   * Returns the value stored under `key`, storing `value` first when the key is new (used to
   * keep the capability-token secret stable across restarts).
   */
  ensureMeta(key: string, value: string): Promise<string>;
  close(): Promise<void>;
}
