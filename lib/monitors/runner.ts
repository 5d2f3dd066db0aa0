/**
 * Running monitors: {@link runMonitors} checks one rollout (pure, for notebooks), and
 * {@link startMonitorRunner} follows a store's change feed, checks every rollout that reaches a
 * final status, and records the result as a `monitor_flags` custom event on its last attempt
 * (and, for flagged rollouts, the LLM auditor's verdict as an `audit_verdict` event). Both
 * writes carry an event key, so re-running over the same rollouts stores nothing twice.
 *
 * @module
 */
import type { Store } from "../gateway/store.ts";
import { TERMINAL_ROLLOUT_STATUSES } from "../schema.ts";
import { AUDIT_VERDICT_EVENT, MONITOR_FLAGS_EVENT, type MonitorFlag } from "../schema/ui.ts";
import { reinsEvent, reinsEventKey } from "../schema/gateway_api.ts";
import { type Auditor, worstAtLeast } from "./auditor.ts";
import type { Finding, Monitor, MonitorInput } from "./types.ts";
import {
  budgetFor,
  DEFAULT_MONITOR_BUDGET,
  isBudgeted,
  type MonitorBudget,
  offThreadMonitors,
} from "./off_thread.ts";

/**
 * Runs every monitor on one rollout. A monitor that throws yields an `info` flag saying so
 * instead of failing the run. With a `budget`, each check on this thread is held to it (see
 * `checkWithin`); facades of the off-thread built-ins keep their own.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runMonitors } from "./runner.ts";
 * import { defaultMonitors } from "./defaults.ts";
 * const rollout = {
 *   rollout_id: "r1", group_id: "r1", input: {}, mode: "train" as const,
 *   config: { timeout_s: 600, max_attempts: 1 }, labels: {}, status: "succeeded" as const,
 *   version: 1, attempts: [], created_at: 0, updated_at: 0, policy_version_min: null,
 *   policy_version_max: null, reward: 1, reward_attempt_id: null, reward_credential: null,
 * };
 * const flags = await runMonitors({ rollout, events: [] }, defaultMonitors());
 * assert.equal(flags.length, 0);
 * ```
 */
export async function runMonitors(
  input: MonitorInput,
  monitors: readonly Monitor[],
  budget?: MonitorBudget,
): Promise<MonitorFlag[]> {
  const flags: MonitorFlag[] = [];
  for (const monitor of monitors) {
    // Each monitor runs as its own task, so the requests waiting behind a check (the gateway
    // and the UI share this event loop) are served between monitors.
    await new Promise((resolve) => setTimeout(resolve, 0));
    try {
      const findings = budget && !isBudgeted(monitor)
        ? await checkWithin(monitor, input, budget)
        : await monitor.check(input);
      for (const finding of findings) flags.push({ monitor: monitor.name, ...finding });
    } catch (err) {
      flags.push({
        monitor: monitor.name,
        severity: "info",
        message: `monitor failed: ${err instanceof Error ? err.message : String(err)}`,
        evidence: [],
      });
    }
  }
  return flags;
}

/**
 * A check of a monitor that runs on this thread (a custom one), held to `budget`: an
 * asynchronous check still pending at the budget is no longer waited for (it cannot be
 * cancelled; its result is dropped), and a check that held the thread past the budget keeps
 * its findings and gains a `warn` finding saying so (synchronous code cannot be stopped
 * midway: such a monitor belongs off the thread). Either way the slowness shows in the flags;
 * it does not silence the monitor.
 */
async function checkWithin(
  monitor: Monitor,
  input: MonitorInput,
  budget: MonitorBudget,
): Promise<Finding[]> {
  const { ms, words } = budgetFor(budget, input.events.length);
  const started = performance.now();
  let timer: ReturnType<typeof setTimeout> | undefined;
  const late = new Promise<null>((resolve) => (timer = setTimeout(() => resolve(null), ms)));
  const findings = await Promise.race([Promise.resolve(monitor.check(input)), late]);
  clearTimeout(timer);
  const spentMs = Math.round(performance.now() - started);
  if (findings === null) {
    return [{
      severity: "warn",
      message: `${monitor.name}: the check was still running at ${words} and was no longer ` +
        "waited for; the rollout was not fully checked",
      evidence: [],
    }];
  }
  if (spentMs <= ms) return findings;
  return [...findings, {
    severity: "warn",
    message: `${monitor.name}: the check held the gateway's thread ${spentMs} ms, past ${words}`,
    evidence: [],
  }];
}

/** Options of {@link startMonitorRunner}. */
export interface MonitorRunnerOptions {
  store: Store;
  monitors: readonly Monitor[];
  auditor?: Auditor;
  /** Start after this change seq (default 0: check every finished rollout in the store). */
  afterSeq?: number;
  /** How often the change feed is polled when idle (default 250 ms). */
  pollMs?: number;
  /** Also record clean results (an empty `flags` list), default true. */
  recordClean?: boolean;
  /** Called after each checked rollout. */
  onChecked?: (rolloutId: string, flags: MonitorFlag[]) => void;
  /**
   * Run the built-in monitors (those of `defaultMonitors()`) on a worker thread, each check
   * under `budget` (default true): agent-written events then hold no request. Other monitors
   * run on this thread either way.
   */
  offThread?: boolean;
  /**
   * The time budget of one monitor's check (default {@link DEFAULT_MONITOR_BUDGET}): built-ins on
   * their thread are stopped at it; a custom monitor's pending check is no longer waited for, and
   * one that held this thread past it gets a `warn` flag saying so.
   */
  budget?: MonitorBudget;
}

/** A running monitor loop. */
export interface MonitorRunner {
  /** Resolves once every change up to the store's current last seq has been handled. */
  drain(): Promise<void>;
  /** Rollouts checked so far and how many of them got flags. */
  readonly stats: { checked: number; flagged: number; audited: number };
  /** Stops the loop (after the rollout it is checking). */
  close(): Promise<void>;
}

/**
 * Follows the store's change feed and checks each rollout once it is final.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "../gateway/sqlite_store.ts";
 * import { defaultMonitors, startMonitorRunner } from "./mod.ts";
 * const store = openSqliteStore(":memory:"); // usually the gateway's store
 * const runner = startMonitorRunner({ store, monitors: defaultMonitors() });
 * await runner.drain();
 * assert.equal(runner.stats.checked, 0); // no rollout has finished yet
 * await runner.close();
 * await store.close();
 * ```
 */
export function startMonitorRunner(options: MonitorRunnerOptions): MonitorRunner {
  const { store, auditor } = options;
  const offThread = options.offThread ?? true
    ? offThreadMonitors(options.monitors, options.budget ?? DEFAULT_MONITOR_BUDGET)
    : null;
  offThread?.warm();
  const monitors = offThread?.monitors ?? options.monitors;
  const budget = options.budget ?? DEFAULT_MONITOR_BUDGET;
  const pollMs = options.pollMs ?? 250;
  const recordClean = options.recordClean ?? true;
  const stats = { checked: 0, flagged: 0, audited: 0 };
  let after = options.afterSeq ?? 0;
  let closed = false;
  let wake: (() => void) | undefined;
  const waiters: { seq: number; resolve: () => void }[] = [];

  const check = async (rolloutId: string) => {
    const rollout = await store.getRollout(rolloutId);
    const attempt = rollout?.attempts.at(-1);
    if (!rollout || !attempt) return;
    const events = await store.listEvents(rolloutId);
    // Checked before (a restarted UI reads the feed from the start): the stored result stands.
    // Storing again would carry a new `checked_at`, which the store refuses as a different
    // event under the same key.
    const flagsKey = reinsEventKey(MONITOR_FLAGS_EVENT, attempt.attempt_id);
    if (events.some((e) => e.type === "custom" && e.event_key === flagsKey)) return;
    const input: MonitorInput = { rollout, events };
    const flags = await runMonitors(input, monitors, budget);
    stats.checked++;
    if (flags.length) stats.flagged++;
    if (flags.length || recordClean) {
      await store.appendEvents(rolloutId, attempt.attempt_id, [
        reinsEvent(MONITOR_FLAGS_EVENT, attempt.attempt_id, {
          flags: flags.map((f) => ({ ...f, evidence: f.evidence.map((e) => ({ ...e })) })),
          monitors: monitors.map((m) => m.name),
          checked_at: Date.now(),
        }),
      ]);
    }
    if (auditor && worstAtLeast(flags, auditor.minSeverity)) {
      const key = reinsEventKey(AUDIT_VERDICT_EVENT, attempt.attempt_id);
      const already = events.some((e) => e.type === "custom" && e.event_key === key);
      if (!already) {
        const verdict = await auditor.audit(input, flags);
        await store.appendEvents(rolloutId, attempt.attempt_id, [
          reinsEvent(AUDIT_VERDICT_EVENT, attempt.attempt_id, {
            ...verdict,
            flagged_by: [...verdict.flagged_by],
          }),
        ]);
        stats.audited++;
      }
    }
    options.onChecked?.(rolloutId, flags);
  };

  const tick = async (): Promise<number> => {
    const changes = await store.changesSince(after, 500);
    for (const change of changes) {
      if (closed) break;
      if (
        change.kind === "event" && change.type === "status" && change.status !== null &&
        TERMINAL_ROLLOUT_STATUSES.includes(change.status)
      ) {
        try {
          await check(change.rollout_id);
        } catch (err) {
          console.error(
            `monitors: checking ${change.rollout_id} failed:`,
            err instanceof Error ? err.message : err,
          );
        }
      }
      after = change.seq;
    }
    for (let i = waiters.length - 1; i >= 0; i--) {
      if (waiters[i].seq <= after) waiters.splice(i, 1)[0].resolve();
    }
    return changes.length;
  };

  const loop = (async () => {
    while (!closed) {
      let n = 0;
      try {
        n = await tick();
      } catch (err) {
        if (closed) break;
        console.error(
          "monitors: change feed read failed:",
          err instanceof Error ? err.message : err,
        );
      }
      if (n > 0 || closed) continue;
      await new Promise<void>((resolve) => {
        const timer = setTimeout(done, pollMs);
        function done() {
          clearTimeout(timer);
          wake = undefined;
          resolve();
        }
        wake = done;
      });
    }
    for (const w of waiters.splice(0)) w.resolve();
  })();

  return {
    stats,
    async drain() {
      const target = await store.lastSeq();
      if (after >= target || closed) return;
      await new Promise<void>((resolve) => {
        waiters.push({ seq: target, resolve });
        wake?.();
      });
    },
    async close() {
      closed = true;
      wake?.();
      await loop;
      await offThread?.close();
    },
  };
}
