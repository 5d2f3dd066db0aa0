/**
 * The store operations both backends share, as flows (see `./flow.ts`): rollout creation,
 * claims, lease renewal and expiry, transitions, listings, event decoding, models, the change
 * feed and meta values. A backend runs them inside its own transactions; only appending
 * events is written per backend (group commit works differently in each).
 *
 * @module
 */
import type { Attempt, Change, Model, Rollout, RolloutEvent, RolloutStatus } from "../../schema.ts";
import type {
  ChangeFilter,
  Claimed,
  ClaimOptions,
  ListEventsOptions,
  ListRolloutsOptions,
  Page,
  TransitionOptions,
} from "../store.ts";
import type { NormalizedCreate } from "../store_input.ts";
import {
  type AttemptEnd,
  attemptEndColumns,
  type AttemptState,
  checkLeaseHolder,
  checkTransition,
  countedAttempts,
  defaultAttemptStatus,
  encodeCursor,
  newAttemptId,
  noAttempt,
  noRollout,
  statusAfterLostLease,
} from "../store_rules.ts";
import { type CallTokens, decodeU32, resolvePrompt } from "../token_blob.ts";
import type { Dialect } from "./dialect.ts";
import { all, type Flow } from "./flow.ts";
import {
  claimCandidatesQuery,
  listEventsQuery,
  listRolloutsQuery,
  type Statements,
  statements,
} from "./queries.ts";
import {
  attemptFromRow,
  type AttemptRow,
  type CallRow,
  type ChangeRow,
  changesFromRows,
  eventFromRow,
  type EventRow,
  modelFromRow,
  type ModelRow,
  type RolloutRow,
  rolloutsFromRows,
} from "./rows.ts";

/** Where decoded token arrays of stored calls are kept between reads. */
export interface TokenStore {
  get(seq: number): CallTokens | undefined;
  set(seq: number, tokens: CallTokens): void;
}

/**
 * The shared operations of a store in dialect `d`; a store runs each flow inside its own
 * transaction with `runSync` or `runAsync` (`./flow.ts`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DatabaseSync } from "node:sqlite";
 * import { SQLITE, sqliteText } from "./dialect.ts";
 * import { type Query, runSync } from "./flow.ts";
 * import { SqlFlows } from "./flows.ts";
 * import { migrate } from "./migrations.ts";
 * const db = new DatabaseSync(":memory:");
 * const exec = (q: Query) => db.prepare(sqliteText(q.sql)).all(...(q.params as string[]));
 * runSync(migrate(SQLITE, ":memory:"), exec);
 * const flows = new SqlFlows(SQLITE);
 * const { created } = runSync(flows.createRollouts([{
 *   rollout_id: "r1", group_id: "r1", input: 1, mode: "train",
 *   config: { timeout_s: 600, max_attempts: 1 }, labels: {},
 * }]), exec);
 * assert.deepEqual(created, [true]);
 * assert.equal(runSync(flows.loadRollout("r1"), exec)?.status, "queuing");
 * ```
 */
export class SqlFlows {
  readonly d: Dialect;
  readonly q: Statements;

  constructor(d: Dialect) {
    this.d = d;
    this.q = statements(d);
  }

  // ---- building blocks ----------------------------------------------------------------------

  /** Orders `seq` assignment by commit (PostgreSQL); a no-op for SQLite's single writer. */
  *lockSeq(): Flow<void> {
    if (this.d.lockSeq) yield* all(this.d.lockSeq);
  }

  /** Readies the next `seq` for an insert that uses `d.seq` (SQLite bumps its counter). */
  *bumpSeq(): Flow<void> {
    if (this.d.bumpSeq) yield* all(this.d.bumpSeq);
  }

  *exists(rollout_id: string): Flow<boolean> {
    return (yield* all(this.q.exists, [rollout_id])).length > 0;
  }

  *withAttempts(rows: RolloutRow[]): Flow<Rollout[]> {
    if (rows.length === 0) return [];
    const ids = JSON.stringify(rows.map((r) => r.rollout_id));
    return rolloutsFromRows(rows, yield* all<AttemptRow>(this.q.attemptsOf, [ids]));
  }

  *loadRollout(id: string): Flow<Rollout | null> {
    const rows = yield* all<RolloutRow>(this.q.rolloutById, [id]);
    return rows.length ? (yield* this.withAttempts(rows))[0] : null;
  }

  /** Rollouts by id, in the order of `ids` (missing ids are skipped). */
  *loadRollouts(ids: string[]): Flow<Rollout[]> {
    if (ids.length === 0) return [];
    const rows = yield* all<RolloutRow>(this.q.rolloutsByIds, [JSON.stringify(ids)]);
    const byId = new Map((yield* this.withAttempts(rows)).map((r) => [r.rollout_id, r]));
    return ids.map((id) => byId.get(id)).filter((r): r is Rollout => r !== undefined);
  }

  *insertStatusEvent(
    rollout_id: string,
    attempt_id: string,
    from: RolloutStatus | null,
    to: RolloutStatus,
    reason: string | null,
    now: number,
  ): Flow<void> {
    yield* this.bumpSeq();
    yield* all(this.q.insertStatusEvent, [
      rollout_id,
      attempt_id,
      now,
      to,
      JSON.stringify({ from, to, reason }),
    ]);
  }

  *endAttempt(rollout_id: string, attempt: Attempt, now: number, end: AttemptEnd): Flow<void> {
    const c = attemptEndColumns(attempt, end);
    yield* all(this.q.endAttempt, [
      end.status,
      now,
      c.exit_code,
      c.error,
      c.info,
      c.log_location,
      rollout_id,
      attempt.attempt_id,
    ]);
  }

  /** The state of an attempt for an events post; 404 naming what is missing. */
  *attemptState(rollout_id: string, attempt_id: string): Flow<AttemptState> {
    const [row] = yield* all<{ status: Attempt["status"]; current: boolean | number }>(
      this.q.attemptState,
      [rollout_id, attempt_id],
    );
    if (!row) {
      throw (yield* this.exists(rollout_id))
        ? noAttempt(rollout_id, attempt_id)
        : noRollout(rollout_id);
    }
    return { status: row.status, current: Boolean(row.current) };
  }

  // ---- rollouts -----------------------------------------------------------------------------

  *createRollouts(
    creates: NormalizedCreate[],
  ): Flow<{ rollouts: Rollout[]; created: boolean[] }> {
    yield* this.lockSeq();
    const now = Date.now();
    const created: boolean[] = [];
    for (const c of creates) {
      const rows = yield* all(this.q.insertRollout, [
        c.rollout_id,
        c.group_id,
        c.mode,
        JSON.stringify(c.input),
        JSON.stringify(c.config),
        JSON.stringify(c.labels),
        now,
      ]);
      created.push(rows.length === 1);
      if (rows.length === 1) {
        yield* this.insertStatusEvent(c.rollout_id, "", null, "queuing", null, now);
      }
    }
    return { rollouts: yield* this.loadRollouts(creates.map((c) => c.rollout_id)), created };
  }

  *listRollouts(options: ListRolloutsOptions): Flow<Page<Rollout>> {
    const { sql, params } = listRolloutsQuery(this.d, options);
    const rows = yield* all<RolloutRow>(sql, params);
    const more = rows.length > options.limit;
    const page = more ? rows.slice(0, options.limit) : rows;
    return {
      items: yield* this.withAttempts(page),
      next_cursor: more ? encodeCursor(Number(page[page.length - 1].pos)) : null,
    };
  }

  *claimRollouts(options: ClaimOptions): Flow<Claimed[]> {
    yield* this.lockSeq();
    let picked: Array<{ rollout_id: string; attempt_id: string }> = [];
    if (options.claim_key !== undefined) {
      picked = yield* all(this.q.claimedBefore, [options.worker, options.claim_key]);
    }
    if (picked.length === 0) {
      const now = options.now ?? Date.now();
      const { sql, params } = claimCandidatesQuery(this.d, options);
      const rows = yield* all<{ rollout_id: string; status: RolloutStatus }>(sql, params);
      for (const row of rows) {
        const [{ n }] = yield* all<{ n: number }>(this.q.lastIndex, [row.rollout_id]);
        const index = Number(n) + 1;
        const attempt_id = newAttemptId(index);
        yield* all(this.q.insertAttempt, [
          row.rollout_id,
          attempt_id,
          index,
          now,
          options.worker,
          now + options.lease_ms,
          options.claim_key ?? null,
        ]);
        yield* all(this.q.startRunning, [now, row.rollout_id]);
        yield* this.insertStatusEvent(row.rollout_id, attempt_id, row.status, "running", null, now);
        picked.push({ rollout_id: row.rollout_id, attempt_id });
      }
    }
    const rollouts = yield* this.loadRollouts(picked.map((p) => p.rollout_id));
    return picked.map(({ attempt_id }, i) => ({
      rollout: rollouts[i],
      attempt: rollouts[i].attempts.find((a) => a.attempt_id === attempt_id)!,
    }));
  }

  *renewLease(
    rollout_id: string,
    attempt_id: string,
    worker: string,
    lease_ms: number,
  ): Flow<Attempt> {
    const [row] = yield* all<AttemptRow>(this.q.attempt, [rollout_id, attempt_id]);
    if (!row) {
      if (!(yield* this.exists(rollout_id))) throw noRollout(rollout_id);
      throw noAttempt(rollout_id, attempt_id);
    }
    checkLeaseHolder(row, attempt_id, worker);
    const expires = Date.now() + lease_ms;
    yield* all(this.q.renewLease, [expires, rollout_id, attempt_id]);
    return attemptFromRow({ ...row, lease_expires_at: expires });
  }

  *transition(rollout_id: string, options: TransitionOptions): Flow<Rollout> {
    yield* this.lockSeq();
    const rows = yield* all<RolloutRow>(this.q.rolloutForUpdate, [rollout_id]);
    if (rows.length === 0) throw noRollout(rollout_id);
    const [rollout] = yield* this.withAttempts(rows);
    const current = rollout.attempts[rollout.attempts.length - 1] ?? null;
    // Attempts the infrastructure ended do not count against max_attempts (store_rules.ts).
    const counted = countedAttempts(rollout.attempts, options.info?.infra_failure === true);
    if (checkTransition(rollout, current, counted, options) === "noop") {
      return rollout;
    }
    const now = Date.now();
    if (rollout.status === "running" && current) {
      yield* this.endAttempt(rollout_id, current, now, {
        status: options.attempt_status ?? defaultAttemptStatus(options.to),
        exit_code: options.exit_code,
        error: options.error,
        info: options.info,
        log_location: options.log_location,
      });
    }
    yield* all(this.q.setStatus, [options.to, now, rollout_id]);
    yield* this.insertStatusEvent(
      rollout_id,
      current?.attempt_id ?? "",
      rollout.status,
      options.to,
      options.reason ?? null,
      now,
    );
    return (yield* this.loadRollout(rollout_id))!;
  }

  /** Whether some running attempt's lease ended before `now`. */
  *leasesDue(now: number): Flow<boolean> {
    return (yield* all(this.q.leasesDue, [now])).length > 0;
  }

  *expireLeases(now: number): Flow<Rollout[]> {
    if (!(yield* this.leasesDue(now))) return [];
    yield* this.lockSeq();
    const rows = yield* all<AttemptRow>(this.q.expiredAttempts, [now]);
    const out: Rollout[] = [];
    for (const row of rows) {
      const rollout = (yield* this.loadRollout(row.rollout_id))!;
      yield* this.endAttempt(row.rollout_id, attemptFromRow(row), now, {
        status: "lost",
        error: "lease expired",
      });
      const current = rollout.attempts[rollout.attempts.length - 1];
      if (rollout.status !== "running" || current?.attempt_id !== row.attempt_id) continue;
      const to = statusAfterLostLease(rollout);
      yield* all(this.q.setStatus, [to, now, row.rollout_id]);
      yield* this.insertStatusEvent(
        row.rollout_id,
        row.attempt_id,
        "running",
        to,
        "lease expired",
        now,
      );
      out.push((yield* this.loadRollout(row.rollout_id))!);
    }
    return out;
  }

  // ---- events -------------------------------------------------------------------------------

  /** The decoded prompt and response of a stored call (through `cache`). */
  *callTokens(seq: number, cache: TokenStore): Flow<CallTokens> {
    const hit = cache.get(seq);
    if (hit) return hit;
    const [row] = yield* all<CallRow>(this.q.callRow, [seq]);
    const tokens = yield* this.decodeCall(row, cache);
    cache.set(seq, tokens);
    return tokens;
  }

  *decodeCall(row: CallRow, cache: TokenStore): Flow<CallTokens> {
    const ref = row.prompt_ref === null
      ? null
      : yield* this.callTokens(Number(row.prompt_ref), cache);
    return {
      prompt: resolvePrompt(ref, row.prompt_ref_len ?? 0, decodeU32(row.prompt_tail!)),
      response: decodeU32(row.response_ids!),
    };
  }

  *decodeEvent(row: EventRow, cache: TokenStore): Flow<RolloutEvent> {
    if (row.type !== "model_request") return eventFromRow(row, null);
    const seq = Number(row.seq);
    const tokens = cache.get(seq) ?? (yield* this.decodeCall(row, cache));
    cache.set(seq, tokens);
    return eventFromRow(row, tokens);
  }

  *listEvents(
    rollout_id: string,
    options: ListEventsOptions,
    cache: TokenStore,
  ): Flow<RolloutEvent[]> {
    if (!(yield* this.exists(rollout_id))) throw noRollout(rollout_id);
    const { sql, params } = listEventsQuery(this.d, rollout_id, options);
    const out: RolloutEvent[] = [];
    for (const row of yield* all<EventRow>(sql, params)) {
      out.push(yield* this.decodeEvent(row, cache));
    }
    return out;
  }

  // ---- models, change feed, meta ------------------------------------------------------------

  *upsertModel(model: Omit<Model, "updated_at">): Flow<Model> {
    yield* this.lockSeq();
    yield* this.bumpSeq();
    const now = Date.now();
    yield* all(this.q.upsertModel, [
      model.name,
      JSON.stringify(model.endpoints),
      model.version,
      JSON.stringify(model.info),
      now,
    ]);
    return { ...model, updated_at: now };
  }

  *listModels(): Flow<Model[]> {
    return (yield* all<ModelRow>(this.q.models)).map(modelFromRow);
  }

  *getModel(name: string): Flow<Model | null> {
    const [row] = yield* all<ModelRow>(this.q.model, [name]);
    return row ? modelFromRow(row) : null;
  }

  *changesSince(seq: number, limit: number, filter: ChangeFilter = {}): Flow<Change[]> {
    if (filter.eventType !== undefined) {
      const events = yield* all<ChangeRow>(this.q.changedEventsOfType, [
        seq,
        filter.eventType,
        limit,
      ]);
      return changesFromRows(events, [], limit);
    }
    const events = yield* all<ChangeRow>(this.q.changedEvents, [seq, limit]);
    const models = yield* all<ModelRow>(this.q.changedModels, [seq, limit]);
    return changesFromRows(events, models, limit);
  }

  *lastSeq(): Flow<number> {
    return Number((yield* all<{ n: number | string }>(this.d.lastSeq))[0].n);
  }

  *ensureMeta(key: string, value: string): Flow<string> {
    yield* all(this.q.insertMeta, [key, value]);
    return (yield* all<{ value: string }>(this.q.meta, [key]))[0].value;
  }
}
