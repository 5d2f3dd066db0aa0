/**
 * The built-in monitors on a worker thread, each check under a time budget. The events a
 * monitor scans are written by the agent; on the gateway's thread one slow check (a quadratic
 * pattern over 600 KB held it ~25 minutes, issue #29) stalls every request. Here a check holds
 * no request, and one that runs past `baseMs + msPerEvent × events` is stopped (its thread is
 * terminated, a fresh one takes the next check) and reported as a `warn` finding of that
 * monitor naming the budget: making a monitor slow shows up, it does not silence it.
 *
 * The worker builds its own {@link defaultMonitors} and finds each by name, so only monitors
 * made by `defaultMonitors()` run here (they carry a mark); any other monitor runs where it is
 * called. Runs through `node:worker_threads` so that it can be unref'd while idle.
 *
 * @module
 */
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";
import { defaultMonitors, isBuiltIn } from "./defaults.ts";
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

type Request = { id: number; name: string; input?: MonitorInput };
type Reply =
  | { id: number; started: true }
  | { id: number; findings: Finding[] }
  | { id: number; error: string };

interface Pending {
  resolve: (findings: Finding[]) => void;
  reject: (err: Error) => void;
  budgetMs: number;
  name: string;
  events: number;
  timer?: ReturnType<typeof setTimeout>;
}

/** The built-in monitors as facades over one checking thread, and a way to stop it. */
export interface OffThreadMonitors {
  readonly monitors: Monitor[];
  close(): Promise<void>;
}

/**
 * Facades for `monitors` that run on a worker thread under `budget`: those made by
 * {@link defaultMonitors}; any other monitor is returned as it is.
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
    const started = new Worker(new URL(import.meta.url), { workerData: { monitors: true } });
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
        }, waiter.budgetMs);
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

  const check = (name: string, input: MonitorInput): Promise<Finding[]> => {
    const target = start();
    const id = nextId++;
    const { promise, resolve, reject } = Promise.withResolvers<Finding[]>();
    const events = input.events.length;
    pending.set(id, {
      resolve,
      reject,
      name,
      events,
      budgetMs: budget.baseMs + budget.msPerEvent * events,
    });
    // runMonitors hands every monitor the same input: it crosses to the thread once.
    const request: Request = sentInput === input ? { id, name } : { id, name, input };
    sentInput = input;
    target.ref();
    target.postMessage(request);
    return promise;
  };

  const overBudget = (waiter: Pending): Finding => ({
    severity: "warn",
    message: `${waiter.name}: the check ran past its time budget of ${waiter.budgetMs} ms ` +
      `(${budget.baseMs} ms + ${budget.msPerEvent} ms per event × ${waiter.events} events) ` +
      "and was stopped; the rollout was not fully checked",
    evidence: [],
  });

  return {
    monitors: monitors.map((monitor) =>
      isBuiltIn(monitor)
        ? { name: monitor.name, check: (input) => check(monitor.name, input) }
        : monitor
    ),
    async close() {
      const running = worker;
      worker = null;
      if (running) await running.terminate();
    },
  };
}

/** The worker's side: the built-in monitors by name, one check at a time. */
function runWorker(port: NonNullable<typeof parentPort>): void {
  const byName = new Map(defaultMonitors().map((m) => [m.name, m]));
  let input: MonitorInput | null = null;
  port.on("message", async (request: Request) => {
    if (request.input) input = request.input;
    const monitor = byName.get(request.name);
    try {
      if (!monitor || !input) throw new Error(`no built-in monitor '${request.name}'`);
      port.postMessage({ id: request.id, started: true } satisfies Reply);
      const findings = await monitor.check(input);
      port.postMessage({ id: request.id, findings } satisfies Reply);
    } catch (err) {
      const error = err instanceof Error ? err.message : String(err);
      port.postMessage({ id: request.id, error } satisfies Reply);
    }
  });
}

if (!isMainThread && parentPort && (workerData as { monitors?: boolean } | undefined)?.monitors) {
  runWorker(parentPort);
}
