/**
 * The built-in monitors on a worker thread, each check under a time budget. The events a
 * monitor scans are written by the agent; on the gateway's thread one slow check (a quadratic
 * pattern over 600 KB held it ~25 minutes, issue #29) stalls every request. Here a check holds
 * no request, and one that runs past `baseMs + msPerEvent × events` is stopped (its thread is
 * terminated, a fresh one takes the next check) and reported as a `warn` finding of that
 * monitor naming the budget: making a monitor slow shows up, it does not silence it.
 *
 * The worker builds its own {@link defaultMonitors}, imports the modules of custom monitors
 * loaded with `loadMonitorModule` (`module.ts`), and finds each by name, so only monitors that
 * carry one of those marks run here; any other monitor runs where it is called. Runs through
 * `node:worker_threads` so that it can be unref'd while idle.
 *
 * @module
 */
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { defaultMonitors, isBuiltIn } from "./defaults.ts";
import { monitorModuleOf } from "./module.ts";
import type { Finding, Monitor, MonitorInput } from "./types.ts";

/** How long one monitor may check one rollout: `baseMs + msPerEvent × events`. */
export interface MonitorBudget {
  baseMs: number;
  msPerEvent: number;
}

/**
 * The default check budget: 1 s plus 5 ms per event. Each event's scan is linear and capped at
 * 64 KiB (`MAX_SCAN_CHARS`), well under a millisecond; the rest is headroom for a loaded machine.
 */
export const DEFAULT_MONITOR_BUDGET: MonitorBudget = { baseMs: 1_000, msPerEvent: 5 };

/**
 * How long one check of `events` events may take under `budget`, and the words flags use for it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { budgetFor } from "./off_thread.ts";
 * const { ms, words } = budgetFor({ baseMs: 50, msPerEvent: 1 }, 10);
 * assert.equal(ms, 60);
 * assert.equal(words, "its time budget of 60 ms (50 ms + 1 ms per event × 10 events)");
 * ```
 */
export function budgetFor(budget: MonitorBudget, events: number): { ms: number; words: string } {
  const ms = budget.baseMs + budget.msPerEvent * events;
  return {
    ms,
    words: `its time budget of ${ms} ms (${budget.baseMs} ms + ${budget.msPerEvent} ms per ` +
      `event × ${events} events)`,
  };
}

/** A check; its input arrives first in slices (`part`), when it is not the last one sent. */
type Request =
  | { part: { rollout: MonitorInput["rollout"]; events: readonly unknown[]; first: boolean } }
  | { id: number; name: string };
type Reply =
  | { id: number; started: true }
  | { id: number; findings: Finding[] }
  | { id: number; error: string };

interface Pending {
  resolve: (findings: Finding[]) => void;
  reject: (err: Error) => void;
  budget: { ms: number; words: string };
  name: string;
  timer?: ReturnType<typeof setTimeout>;
}

/** The built-in monitors as facades over one checking thread, and a way to stop it. */
export interface OffThreadMonitors {
  readonly monitors: Monitor[];
  /**
   * Starts the checking thread now: starting one holds this thread ~0.1–0.4 s, better at
   * start-up than during a check (a check stopped at its budget costs one such restart).
   */
  warm(): void;
  close(): Promise<void>;
}

/**
 * Facades for `monitors` that run on a worker thread under `budget`: those made by
 * {@link defaultMonitors} or loaded by `loadMonitorModule`; any other monitor is returned as it
 * is.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { defaultMonitors, isBuiltIn } from "./defaults.ts";
 * import { runMonitors } from "./runner.ts";
 * import { offThreadMonitors } from "./off_thread.ts";
 * const rollout = {
 *   rollout_id: "r1", group_id: "r1", input: {}, mode: "train" as const,
 *   config: { timeout_s: 600, max_attempts: 1 }, labels: {}, status: "succeeded" as const,
 *   version: 1, attempts: [], created_at: 0, updated_at: 0, policy_version_min: null,
 *   policy_version_max: null, reward: 1, reward_attempt_id: null, reward_credential: null,
 * };
 * const off = offThreadMonitors(defaultMonitors());
 * assert.deepEqual(await runMonitors({ rollout, events: [] }, off.monitors), []);
 * await off.close();
 * ```
 */
export function offThreadMonitors(
  monitors: readonly Monitor[],
  budget: MonitorBudget = DEFAULT_MONITOR_BUDGET,
): OffThreadMonitors {
  const onThread = (monitor: Monitor) =>
    isBuiltIn(monitor) || monitorModuleOf(monitor) !== undefined;
  const modules = [
    ...new Set(monitors.map(monitorModuleOf).filter((href): href is string => href !== undefined)),
  ];
  let worker: Worker | null = null;
  let sentInput: MonitorInput | null = null;
  let nextId = 0;
  const pending = new Map<number, Pending>();

  const stop = (running: Worker) => {
    if (worker === running) {
      worker = null;
      sentInput = null;
    }
    running.terminate().catch(() => {});
  };
  const start = (): Worker => {
    if (worker) return worker;
    const started = new Worker(new URL(import.meta.url), {
      workerData: { monitors: true, modules } satisfies ThreadData,
    });
    started.unref();
    started.on("message", (reply: Reply) => {
      const waiter = pending.get(reply.id);
      if (!waiter) return;
      if ("started" in reply) {
        // The clock starts with the check, not with the thread's start-up.
        waiter.timer = setTimeout(() => {
          pending.delete(reply.id);
          stop(started);
          waiter.resolve([overBudget(waiter)]);
          for (const [id, other] of pending) {
            pending.delete(id);
            other.reject(new Error("the checking thread was stopped"));
          }
        }, waiter.budget.ms);
        return;
      }
      pending.delete(reply.id);
      clearTimeout(waiter.timer);
      if ("error" in reply) waiter.reject(new Error(reply.error));
      else waiter.resolve(reply.findings);
      if (pending.size === 0) started.unref();
    });
    const gone = (err: Error) => {
      if (worker !== started) return;
      worker = null;
      sentInput = null;
      for (const [id, waiter] of pending) {
        pending.delete(id);
        clearTimeout(waiter.timer);
        waiter.reject(err);
      }
    };
    started.on("error", (err: Error) => gone(new Error(`checking thread: ${err.message}`)));
    started.on("exit", () => gone(new Error("checking thread exited")));
    worker = started;
    return started;
  };

  /** Sends `input` in slices of ~1 MiB, each its own task: no one clone holds the loop. */
  const send = async (target: Worker, input: MonitorInput) => {
    let first = true;
    let from = 0;
    do {
      let size = 0;
      let to = from;
      while (to < input.events.length && (to === from || size < SLICE_BYTES)) {
        size += roughSize(input.events[to++]);
      }
      const events = input.events.slice(from, to);
      target.postMessage({ part: { rollout: input.rollout, events, first } } satisfies Request);
      first = false;
      from = to;
      if (from < input.events.length) await new Promise((r) => setTimeout(r, 0));
    } while (from < input.events.length);
  };

  const check = async (name: string, input: MonitorInput): Promise<Finding[]> => {
    let target = start();
    // runMonitors hands every monitor the same input: it crosses to the thread once.
    if (sentInput !== input) {
      sentInput = input;
      await send(target, input);
      // The thread may have been stopped (another check's budget) while the slices went.
      if (worker !== target) {
        sentInput = null;
        return check(name, input);
      }
    }
    target = start();
    const id = nextId++;
    const { promise, resolve, reject } = Promise.withResolvers<Finding[]>();
    pending.set(id, { resolve, reject, name, budget: budgetFor(budget, input.events.length) });
    target.ref();
    target.postMessage({ id, name } satisfies Request);
    return await promise;
  };

  const overBudget = (waiter: Pending): Finding => ({
    severity: "warn",
    message: `${waiter.name}: the check ran past ${waiter.budget.words} and was stopped; ` +
      "the rollout was not fully checked",
    evidence: [],
  });

  return {
    monitors: monitors.map((monitor) => {
      if (!onThread(monitor)) return monitor;
      const facade: Monitor = { name: monitor.name, check: (input) => check(monitor.name, input) };
      BUDGETED.add(facade);
      return facade;
    }),
    warm() {
      if (monitors.some(onThread)) start();
    },
    async close() {
      const running = worker;
      worker = null;
      if (running) await running.terminate();
    },
  };
}

/** The facades whose checks run on the checking thread under their own budget. */
const BUDGETED = new WeakSet<Monitor>();

/** Whether `monitor` is a facade of {@link offThreadMonitors} (budgeted on its own thread). */
export function isBudgeted(monitor: Monitor): boolean {
  return BUDGETED.has(monitor);
}

/** About how many bytes of events cross to the thread per task. */
const SLICE_BYTES = 1 << 20;

/** A cheap estimate of an event's size (its payload's strings and arrays), for slicing. */
function roughSize(event: unknown): number {
  let size = 256;
  const payload = (event as { payload?: unknown }).payload;
  if (payload && typeof payload === "object") {
    for (const value of Object.values(payload)) {
      if (typeof value === "string") size += value.length;
      else if (Array.isArray(value)) size += value.length * 8;
      else if (value && typeof value === "object") size += 4_096;
    }
  }
  return size;
}

/** What the checking thread is started with. */
interface ThreadData {
  monitors: true;
  /** URLs of the modules of custom monitors (`loadMonitorModule`). */
  modules: string[];
}

/** The worker's side: the built-in and module monitors by name, one check at a time. */
function runWorker(port: NonNullable<typeof parentPort>, modules: readonly string[]): void {
  const byName = new Map(defaultMonitors().map((m) => [m.name, m]));
  // The modules load before the first check starts its clock; a module that fails here fails
  // each of its checks (the runner turns that into an `info` flag naming the error).
  const ready = Promise.all(modules.map(async (href) => {
    const exported = await import(href) as { monitors(): Monitor[] | Promise<Monitor[]> };
    for (const monitor of await exported.monitors()) byName.set(monitor.name, monitor);
  }));
  ready.catch(() => {});
  let input: { rollout: MonitorInput["rollout"]; events: unknown[] } | null = null;
  port.on("message", async (request: Request) => {
    if ("part" in request) {
      const { rollout, events, first } = request.part;
      if (first || !input) input = { rollout, events: [] };
      for (const event of events) input.events.push(event);
      return;
    }
    // The input this check was sent for, whatever parts arrive while the modules load.
    const checked = input;
    try {
      await ready;
      const monitor = byName.get(request.name);
      if (!monitor || !checked) throw new Error(`no monitor '${request.name}' on the thread`);
      port.postMessage({ id: request.id, started: true } satisfies Reply);
      const findings = await monitor.check(checked as MonitorInput);
      port.postMessage({ id: request.id, findings } satisfies Reply);
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err);
      port.postMessage({ id: request.id, error } satisfies Reply);
    }
  });
}

if (!isMainThread && parentPort && (workerData as ThreadData | undefined)?.monitors) {
  runWorker(parentPort, (workerData as ThreadData).modules ?? []);
}
