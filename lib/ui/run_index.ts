/**
 * What the UI keeps in memory about a run, built by following the store's change feed: status
 * counts, which rollouts monitors flagged (and auditor verdicts), training-step metrics
 * (`train_step` custom events), recently finished rollouts and recent model calls. The store
 * stays the truth; the index only saves the UI from scanning it on every page.
 *
 * @module
 */
import type { Store } from "../gateway/store.ts";
import {
  isReservedEventKey,
  parseJsonlLines,
  parseOrThrow,
  type RolloutStatus,
  TERMINAL_ROLLOUT_STATUSES,
  type ValidationError,
} from "../schema.ts";
import {
  AUDIT_VERDICT_EVENT,
  type AuditVerdict,
  AuditVerdictSchema,
  type FlagSeverity,
  MONITOR_FLAGS_EVENT,
  type MonitorFlag,
  MonitorFlagsDataSchema,
  TRAIN_STEP_EVENT,
  type TrainStepMetrics,
  TrainStepMetricsSchema,
} from "../schema/ui.ts";

/** Flags of one rollout as the index keeps them. */
export interface FlagSummary {
  flags: MonitorFlag[];
  worst: FlagSeverity | null;
  seq: number;
}

const RANK: Record<FlagSeverity, number> = { info: 0, warn: 1, alert: 2 };
const RECENT = 20;
const RECENT_CALLS = 500;

/**
 * The UI's run index over a store.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "../gateway/sqlite_store.ts";
 * import { RunIndex } from "./run_index.ts";
 * const store = openSqliteStore(":memory:");
 * await store.createRollouts([{ rollout_id: "r1", input: {} }]);
 * const index = new RunIndex(store);
 * await index.refresh();
 * assert.equal(index.statusCounts().queuing, 1);
 * await store.close();
 * ```
 */
export class RunIndex {
  readonly store: Store;
  /** Seq of the last change read. */
  lastSeq = 0;
  /** Whether the last refresh reached the end of the feed. */
  caughtUp = false;
  readonly status = new Map<string, RolloutStatus>();
  /** Rollout ids in creation order (as the feed first showed them). */
  readonly created: string[] = [];
  readonly flags = new Map<string, FlagSummary>();
  /** Rollouts with at least one flag, in the order they were flagged. */
  readonly flagged: string[] = [];
  readonly verdicts = new Map<string, AuditVerdict>();
  /** Latest metrics per step. */
  readonly steps = new Map<number, TrainStepMetrics>();
  /** Latest metrics per step of each rollout that reported steps (one per run). */
  readonly stepsByRollout = new Map<string, Map<number, TrainStepMetrics>>();
  /** Problems met while reading step metrics (shown on the overview, newest last). */
  readonly stepErrors: string[] = [];
  /** Most recently finished rollouts, newest first. */
  readonly recentFinished: string[] = [];
  /** The last model calls seen: seq and rollout. */
  readonly recentCalls: { seq: number; rollout_id: string }[] = [];
  #running: Promise<boolean> | null = null;

  constructor(store: Store) {
    this.store = store;
  }

  /** Status counts over every rollout seen. */
  statusCounts(): Record<RolloutStatus, number> {
    const counts: Record<RolloutStatus, number> = {
      queuing: 0,
      running: 0,
      requeuing: 0,
      succeeded: 0,
      failed: 0,
      cancelled: 0,
    };
    for (const status of this.status.values()) counts[status]++;
    return counts;
  }

  /** Steps in order. */
  stepList(): TrainStepMetrics[] {
    return [...this.steps.values()].sort((a, b) => a.step - b.step);
  }

  /**
   * Reads the change feed at least up to the store's last seq at the time of the call (or until
   * `budgetMs` is spent); true when caught up. Refreshes run one at a time: a caller that finds
   * one running waits for it, then reads what is still missing.
   */
  async refresh(budgetMs = Infinity): Promise<boolean> {
    const target = await this.store.lastSeq();
    while (this.#running) await this.#running;
    if (this.lastSeq >= target) return true;
    this.#running = this.#refresh(budgetMs).finally(() => {
      this.#running = null;
    });
    return await this.#running;
  }

  async #refresh(budgetMs: number): Promise<boolean> {
    const started = performance.now();
    while (performance.now() - started < budgetMs) {
      const changes = await this.store.changesSince(this.lastSeq, 1_000);
      for (const change of changes) {
        if (change.kind === "event") {
          if (change.type === "status" && change.status) {
            if (!this.status.has(change.rollout_id)) this.created.push(change.rollout_id);
            this.status.set(change.rollout_id, change.status);
            if (TERMINAL_ROLLOUT_STATUSES.includes(change.status)) {
              this.recentFinished.unshift(change.rollout_id);
              if (this.recentFinished.length > RECENT) this.recentFinished.pop();
            }
          } else if (
            change.type === "custom" &&
            // An agent's custom events (any key but a reserved one) are not read at all: each
            // read was work an agent posting events as fast as it can could cause.
            (change.event_key === undefined || isReservedEventKey(change.event_key))
          ) {
            await this.#readCustom(change.rollout_id, change.seq);
          } else if (change.type === "model_request") {
            this.recentCalls.push({ seq: change.seq, rollout_id: change.rollout_id });
            if (this.recentCalls.length > RECENT_CALLS) this.recentCalls.shift();
          }
        }
        this.lastSeq = change.seq;
      }
      if (changes.length < 1_000) {
        this.caughtUp = true;
        return true;
      }
    }
    this.caughtUp = false;
    return false;
  }

  async #readCustom(rolloutId: string, seq: number): Promise<void> {
    const [event] = await this.store.listEvents(rolloutId, {
      type: "custom",
      after_seq: seq - 1,
      limit: 1,
    });
    // Only reins' own events (reserved keys) count: an agent may post any custom event name.
    if (!event || event.seq !== seq || event.type !== "custom") return;
    if (!isReservedEventKey(event.event_key)) return;
    const { name, data } = event.payload;
    try {
      if (name === TRAIN_STEP_EVENT) {
        const step = parseOrThrow(TrainStepMetricsSchema, data, "data");
        this.steps.set(step.step, step);
        if (!this.stepsByRollout.has(rolloutId)) this.stepsByRollout.set(rolloutId, new Map());
        this.stepsByRollout.get(rolloutId)!.set(step.step, step);
      } else if (name === MONITOR_FLAGS_EVENT) {
        const parsed = parseOrThrow(MonitorFlagsDataSchema, data, "data");
        this.#setFlags(rolloutId, parsed.flags, seq);
      } else if (name === AUDIT_VERDICT_EVENT) {
        this.verdicts.set(rolloutId, parseOrThrow(AuditVerdictSchema, data, "data"));
      }
    } catch (err) {
      this.stepErrors.push(
        `${name} event seq ${seq} of ${rolloutId}: ${(err as ValidationError).message}`,
      );
      if (this.stepErrors.length > 20) this.stepErrors.shift();
    }
  }

  #setFlags(rolloutId: string, flags: MonitorFlag[], seq: number): void {
    const previous = this.flags.get(rolloutId);
    // Several attempts may each be checked; keep every flag, the worst severity wins.
    const all = previous ? [...previous.flags, ...flags] : flags;
    let worst: FlagSeverity | null = null;
    for (const f of all) if (worst === null || RANK[f.severity] > RANK[worst]) worst = f.severity;
    this.flags.set(rolloutId, { flags: all, worst, seq });
    if (all.length > 0 && !(previous && previous.flags.length > 0)) this.flagged.push(rolloutId);
  }

  /**
   * Reads training-step metrics from a JSONL file (one {@link TrainStepMetrics} per line) into
   * the index; bad lines are reported in `stepErrors` with their line number.
   */
  async loadMetricsFile(path: string): Promise<void> {
    let text: string;
    try {
      text = await Deno.readTextFile(path);
    } catch (err) {
      if (err instanceof Deno.errors.NotFound) return;
      throw err;
    }
    for (const line of parseJsonlLines(text, TrainStepMetricsSchema)) {
      if ("value" in line) this.steps.set(line.value.step, line.value);
      else {
        const message = `${path}: line ${line.line}: ${line.error.message}`;
        if (!this.stepErrors.includes(message)) this.stepErrors.push(message);
        if (this.stepErrors.length > 20) this.stepErrors.shift();
      }
    }
  }
}
