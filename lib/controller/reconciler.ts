/**
 * The reconcile loop: makes execution match the gateway's declared rollouts.
 *
 * The gateway's status is the truth. The loop claims up to its free slots (each claim is a
 * lease), starts each attempt through an {@link ExecutionBackend}, renews the leases while the
 * attempts run, streams their output as `log` events, and reports the outcome as a guarded
 * transition (`succeeded`, or `requeuing` while attempts remain, else `failed`). Every gateway
 * call is idempotent (event keys, attempt-scoped transitions), so a retried or repeated action
 * changes nothing, and an unreachable gateway only delays the loop: finished outcomes wait in a
 * queue and are reported when it answers again.
 *
 * On start it recovers: attempts this controller (same `worker` id) still runs are re-adopted,
 * those that ended while it was down are reported, and the gateway's running attempts it holds
 * but cannot find are reported `lost` (and retried). Attempts the gateway no longer runs for
 * it are killed, so one attempt never runs twice at once.
 *
 * @module
 */
import type { GatewayClient } from "../gateway/client.ts";
import { statusOf } from "../util/error.ts";
import { backoffDelay } from "../http/retry.ts";
import { sleep } from "../util/time.ts";
import {
  type Attempt,
  type EventInput,
  parseOrThrow,
  RESERVED_EVENT_KEY_PREFIX,
  type Rollout,
} from "../schema.ts";
import { type ControllerOptions, ControllerOptionsSchema } from "./schema.ts";
import type {
  AttemptHandle,
  AttemptOutcome,
  AttemptSpec,
  ExecutionBackend,
  LogChunk,
} from "./backend.ts";
import { SpecError } from "./backend.ts";

/** The part of the gateway client the controller uses (a fake can stand in for tests). */
export type ControllerGateway = Pick<
  GatewayClient,
  | "claim"
  | "renewLease"
  | "transition"
  | "postEvents"
  | "getRollout"
  | "listRollouts"
  | "expireLeases"
  | "attemptToken"
  | "listEvents"
>;

/** Options of {@link Reconciler}. */
export interface ReconcilerOptions extends ControllerOptions {
  /** Gateway base URL handed to harnesses (their proxy URLs derive from it). */
  gatewayUrl: string;
  /** Receives one line per notable action (default: silent). */
  logger?: (line: string) => void;
}

/** Counters of what the loop did (for tests, benches and the CLI's status line). */
export interface ReconcilerStats {
  claimed: number;
  started: number;
  adopted: number;
  succeeded: number;
  failed: number;
  retried: number;
  spec_errors: number;
  lost: number;
  gateway_errors: number;
}

interface Tracked {
  rollout: Rollout;
  attempt: Attempt;
  handle: AttemptHandle | null;
  logs: EventInput[];
  /** The gateway no longer runs this attempt for us: kill it, report nothing. */
  abandoned: boolean;
  lastRenew: number;
}

interface PendingReport {
  rollout: Rollout;
  attempt: Attempt;
  outcome: AttemptOutcome;
  /** Fail without retry (bad spec). */
  final: boolean;
  /** Log events still to post before the outcome (the rollout's log is complete first). */
  logs?: EventInput[];
}

const MAX_LOG_TEXT = 16 * 1024;

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

/**
 * The controller's reconcile loop.
 *
 * @example
 * ```ts ignore
 * import { GatewayClient } from "../gateway/client.ts";
 * import { LocalBackend } from "./local_backend.ts";
 * import { Reconciler } from "./reconciler.ts";
 * const gateway = new GatewayClient("http://127.0.0.1:8420", { apiKey: "admin-key" });
 * const loop = new Reconciler(gateway, new LocalBackend({ root: "/tmp/reins-ctl" }), {
 *   worker: "ctl-1", concurrency: 8, gatewayUrl: "http://127.0.0.1:8420",
 * });
 * await loop.start();
 * // … later
 * await loop.stop("drain");
 * ```
 */
export class Reconciler {
  readonly stats: ReconcilerStats = {
    claimed: 0,
    started: 0,
    adopted: 0,
    succeeded: 0,
    failed: 0,
    retried: 0,
    spec_errors: 0,
    lost: 0,
    gateway_errors: 0,
  };
  readonly #gateway: ControllerGateway;
  readonly #backend: ExecutionBackend;
  readonly #options: ReturnType<typeof ControllerOptionsSchema.parse>;
  readonly #gatewayUrl: string;
  readonly #log: (line: string) => void;
  readonly #tracked = new Map<string, Tracked>();
  readonly #pending: PendingReport[] = [];
  readonly #inflight = new Set<Promise<unknown>>();
  #claiming = true;
  #stopped = false;
  #stopMode: "drain" | "detach" | "kill" | null = null;
  #loop: Promise<void> | null = null;
  #wake: (() => void) | null = null;
  #poked = false;
  #timer: ReturnType<typeof setTimeout> | undefined;
  #lastSweep = 0;

  constructor(gateway: ControllerGateway, backend: ExecutionBackend, options: ReconcilerOptions) {
    this.#gateway = gateway;
    this.#backend = backend;
    const { gatewayUrl, logger, ...rest } = options;
    this.#options = parseOrThrow(ControllerOptionsSchema, rest);
    this.#gatewayUrl = gatewayUrl.replace(/\/+$/, "");
    this.#log = logger ?? (() => {});
  }

  /** Attempts currently held (running or waiting for their outcome to be reported). */
  get active(): number {
    return this.#tracked.size + this.#pending.length;
  }

  /** Recovers what a previous run of this worker left, then starts the loop. */
  async start(): Promise<void> {
    // Recovery needs the gateway; while it is unreachable, keep trying (nothing runs meanwhile).
    for (let failures = 0;; failures++) {
      try {
        await this.#recover();
        break;
      } catch (error) {
        this.stats.gateway_errors++;
        this.#log(`recovery failed (${message(error)}); retrying`);
        await sleep(backoffDelay(failures + 1, { baseMs: 400, maxMs: 5_000 }));
      }
    }
    this.#loop = this.#run();
  }

  /**
   * Stops the loop.
   * - `drain`: claim nothing more, wait until every held attempt ended and was reported;
   * - `detach`: leave running attempts running (a restarted controller re-adopts them);
   * - `kill`: kill running attempts and report them `lost` (they are retried if allowed).
   */
  async stop(mode: "drain" | "detach" | "kill" = "drain"): Promise<void> {
    this.#claiming = false;
    // A later call wins: a second signal turns a drain into a detach.
    this.#stopMode = mode;
    if (mode === "kill") {
      await Promise.all(
        [...this.#tracked.values()].map((t) =>
          this.#backend.kill(t.attempt.attempt_id, "lost", "controller stopped")
        ),
      );
    }
    if (mode === "drain" || mode === "kill") {
      while (
        (this.#tracked.size > 0 || this.#pending.length > 0) && this.#stopMode !== "detach"
      ) {
        await sleep(20);
      }
    }
    if (this.#stopped) return;
    this.#stopped = true;
    this.#poke();
    await this.#loop;
    if (this.#stopMode !== "detach") await Promise.allSettled([...this.#inflight]);
    await this.#backend.close();
  }

  #poke(): void {
    // A poke during a tick must not be lost: the next sleep is skipped instead.
    this.#poked = true;
    clearTimeout(this.#timer);
    this.#wake?.();
  }

  async #run(): Promise<void> {
    while (!this.#stopped) {
      this.#poked = false;
      try {
        await this.#tick();
      } catch (error) {
        this.stats.gateway_errors++;
        this.#log(`tick failed: ${message(error)}`);
      }
      if (this.#stopped) break;
      if (this.#poked) continue;
      await new Promise<void>((resolve) => {
        this.#wake = resolve;
        this.#timer = setTimeout(resolve, this.#options.poll_ms);
      });
      this.#wake = null;
    }
  }

  async #tick(): Promise<void> {
    await this.#flushReports();
    await this.#flushLogs();
    await this.#renewLeases();
    const now = Date.now();
    if (now - this.#lastSweep >= this.#options.sweep_ms) {
      this.#lastSweep = now;
      try {
        const changed = await this.#gateway.expireLeases();
        if (changed.length > 0) this.#log(`expired ${changed.length} lease(s)`);
      } catch (error) {
        this.stats.gateway_errors++;
        this.#log(`lease sweep failed: ${message(error)}`);
      }
    }
    const free = this.#options.concurrency - this.active;
    if (!this.#claiming || free <= 0) return;
    let claimed;
    try {
      claimed = await this.#gateway.claim({
        worker: this.#options.worker,
        limit: free,
        lease_ms: this.#options.lease_ms,
        ...(this.#options.labels ? { labels: this.#options.labels } : {}),
      });
    } catch (error) {
      this.stats.gateway_errors++;
      this.#log(`claim failed: ${message(error)}`);
      return;
    }
    this.stats.claimed += claimed.length;
    // Starts may be slow (workspace copies, the k8s creation rate limit): they run beside the
    // loop, which keeps renewing leases and reporting meanwhile. Each holds its slot at once.
    for (const c of claimed) this.#background(this.#launch(c.rollout, c.attempt, c.token));
  }

  #track(rollout: Rollout, attempt: Attempt): Tracked {
    const tracked: Tracked = {
      rollout,
      attempt,
      handle: null,
      logs: [],
      abandoned: false,
      lastRenew: Date.now(),
    };
    this.#tracked.set(attempt.attempt_id, tracked);
    return tracked;
  }

  #spec(tracked: Tracked, token: string): AttemptSpec {
    return {
      rollout: tracked.rollout,
      attempt: tracked.attempt,
      token,
      gatewayUrl: this.#gatewayUrl,
      log: (chunk) => this.#onLog(tracked, chunk),
    };
  }

  #onLog(tracked: Tracked, chunk: LogChunk): void {
    for (let i = 0; i * MAX_LOG_TEXT < chunk.text.length; i++) {
      tracked.logs.push({
        type: "log",
        // Short and per rollout (keys are unique per rollout): attempt index, stream, bytes.
        event_key: `${RESERVED_EVENT_KEY_PREFIX}log:${tracked.attempt.index}:${chunk.stream}:` +
          `${chunk.offset}-${chunk.end}:${i}`,
        payload: {
          stream: chunk.stream,
          text: chunk.text.slice(i * MAX_LOG_TEXT, (i + 1) * MAX_LOG_TEXT),
        },
      });
    }
  }

  async #launch(rollout: Rollout, attempt: Attempt, token: string): Promise<void> {
    const tracked = this.#track(rollout, attempt);
    try {
      tracked.handle = await this.#backend.start(this.#spec(tracked, token));
      this.stats.started++;
      this.#log(`started ${rollout.rollout_id}/${attempt.attempt_id}`);
      if (tracked.abandoned) {
        this.#background(this.#backend.kill(attempt.attempt_id, "cancelled", "no longer ours"));
      }
    } catch (error) {
      const spec = error instanceof SpecError;
      if (spec) this.stats.spec_errors++;
      this.#log(`start of ${rollout.rollout_id} failed: ${message(error)}`);
      this.#tracked.delete(attempt.attempt_id);
      this.#pending.push({
        rollout,
        attempt,
        final: spec,
        outcome: {
          status: "failed",
          exit_code: null,
          error: spec ? `invalid spec: ${message(error)}` : `start failed: ${message(error)}`,
          reward: null,
          info: { backend: this.#backend.name },
        },
      });
      this.#poke();
      return;
    }
    this.#follow(tracked, tracked.handle);
  }

  #follow(tracked: Tracked, handle: AttemptHandle): void {
    const done = handle.done.then((outcome) => {
      this.#tracked.delete(tracked.attempt.attempt_id);
      if (tracked.abandoned) {
        this.#background(this.#backend.release(tracked.attempt.attempt_id));
        return;
      }
      this.#pending.push({
        rollout: tracked.rollout,
        attempt: tracked.attempt,
        outcome,
        final: false,
        logs: tracked.logs,
      });
      this.#poke();
    });
    this.#inflight.add(done);
    done.finally(() => this.#inflight.delete(done));
  }

  async #flushLogs(): Promise<void> {
    await Promise.all(
      [...this.#tracked.values()].map((t) => this.#postLogs(t.rollout, t.attempt, t.logs)),
    );
  }

  async #postLogs(rollout: Rollout, attempt: Attempt, logs: EventInput[]): Promise<boolean> {
    if (logs.length === 0) return true;
    const batch = logs.splice(0, 200);
    try {
      await this.#gateway.postEvents(rollout.rollout_id, attempt.attempt_id, batch);
      return logs.length === 0 ? true : await this.#postLogs(rollout, attempt, logs);
    } catch (error) {
      const status = statusOf(error);
      if (status !== null && status >= 400 && status < 500) {
        this.#log(
          `dropping ${batch.length} log event(s) of ${attempt.attempt_id}: ${message(error)}`,
        );
        return true;
      }
      logs.unshift(...batch);
      this.stats.gateway_errors++;
      return false;
    }
  }

  async #renewLeases(): Promise<void> {
    const now = Date.now();
    const due = [...this.#tracked.values()].filter((t) =>
      !t.abandoned && now - t.lastRenew >= this.#options.lease_ms / 3
    );
    await Promise.all(due.map(async (t) => {
      try {
        await this.#gateway.renewLease(t.rollout.rollout_id, t.attempt.attempt_id, {
          worker: this.#options.worker,
          lease_ms: this.#options.lease_ms,
        });
        t.lastRenew = now;
      } catch (error) {
        const status = statusOf(error);
        if (status === 409 || status === 404) {
          // Cancelled, or our lease expired and the gateway gave the rollout up: stop it.
          t.abandoned = true;
          this.#log(`attempt ${t.attempt.attempt_id} no longer ours (${message(error)}): killing`);
          // Still starting: #launch kills it once the backend has it.
          if (t.handle) {
            this.#background(this.#backend.kill(t.attempt.attempt_id, "cancelled", message(error)));
          }
        } else {
          this.stats.gateway_errors++;
        }
      }
    }));
  }

  async #flushReports(): Promise<void> {
    const reports = this.#pending.splice(0, this.#pending.length);
    const results = await Promise.all(reports.map((report) => this.#report(report)));
    reports.forEach((report, i) => {
      if (!results[i]) this.#pending.push(report);
    });
  }

  /** Reports an outcome; false when the gateway could not be reached (retried next tick). */
  async #report(report: PendingReport): Promise<boolean> {
    const { rollout, attempt, outcome } = report;
    if (report.logs && !await this.#postLogs(rollout, attempt, report.logs)) return false;
    try {
      if (outcome.reward !== null) {
        await this.#gateway.postEvents(rollout.rollout_id, attempt.attempt_id, [{
          type: "reward",
          // Reserved: no agent token can post (and so pre-empt) the verified reward's key.
          event_key: `${RESERVED_EVENT_KEY_PREFIX}reward:${attempt.index}`,
          payload: { value: outcome.reward, info: { source: "reward_hook" } },
        }]);
      }
      const succeeded = outcome.status === "succeeded";
      const retry = !succeeded && !report.final && attempt.index < rollout.config.max_attempts;
      const to = succeeded ? "succeeded" : retry ? "requeuing" : "failed";
      await this.#gateway.transition(rollout.rollout_id, {
        to,
        attempt_id: attempt.attempt_id,
        attempt_status: outcome.status,
        exit_code: outcome.exit_code,
        error: outcome.error,
        reason: outcome.error ?? `attempt ${outcome.status}`,
        info: outcome.info,
      });
      if (succeeded) this.stats.succeeded++;
      else if (retry) this.stats.retried++;
      else this.stats.failed++;
      if (outcome.status === "lost") this.stats.lost++;
      this.#log(`${rollout.rollout_id}/${attempt.attempt_id} ${outcome.status} → ${to}`);
    } catch (error) {
      const status = statusOf(error);
      if (status === null || status >= 500 || status === 0) {
        this.stats.gateway_errors++;
        return false;
      }
      // 409/404: the gateway already moved on (cancelled, expired and retried): it is the truth.
      this.#log(`report of ${attempt.attempt_id} refused (${message(error)}); gateway wins`);
    }
    // Cleanup (workdir removal, Job deletion) is off the loop's critical path.
    this.#background(this.#backend.release(attempt.attempt_id));
    return true;
  }

  #background(work: Promise<unknown>): void {
    const tracked = work.catch((error) => this.#log(`background task failed: ${message(error)}`));
    this.#inflight.add(tracked);
    tracked.finally(() => this.#inflight.delete(tracked));
  }

  /** Where each stream's posted log ends (from the event keys), to resume without duplicates. */
  async #postedLogEnds(
    rolloutId: string,
    attempt: Attempt,
  ): Promise<{ stdout: number; stderr: number }> {
    const ends = { stdout: 0, stderr: 0 };
    const events = await this.#gateway.listEvents(rolloutId, {
      type: "log",
      attempt_id: attempt.attempt_id,
    });
    for (const event of events) {
      const m = event.event_key?.match(/^(?:reins:)?log:\d+:(stdout|stderr):\d+-(\d+):\d+$/);
      if (m) {
        const stream = m[1] as "stdout" | "stderr";
        ends[stream] = Math.max(ends[stream], Number(m[2]));
      }
    }
    return ends;
  }

  async #recover(): Promise<void> {
    const worker = this.#options.worker;
    const adopted = new Set<string>();
    // Without the backend's listing, live attempts would be reported lost and run twice:
    // a failure here fails the recovery, which start() retries.
    const known = await this.#backend.known();
    for (const { rollout_id, attempt_id } of known) {
      let rollout: Rollout | null = null;
      try {
        rollout = await this.#gateway.getRollout(rollout_id);
      } catch (error) {
        if (statusOf(error) !== 404) throw error;
      }
      const attempt = rollout?.attempts.find((a) => a.attempt_id === attempt_id);
      const current = rollout?.attempts.at(-1);
      const ours = rollout && attempt && rollout.status === "running" &&
        current?.attempt_id === attempt_id && attempt.status === "running" &&
        attempt.worker === worker;
      if (!ours || !rollout || !attempt) {
        // The gateway gave it up (or another worker holds it): it must not keep running.
        this.#log(`stopping ${rollout_id}/${attempt_id}: the gateway no longer runs it here`);
        await this.#backend.kill(attempt_id, "lost", "not running for this controller");
        await this.#backend.release(attempt_id);
        continue;
      }
      // Handled by an earlier, interrupted try of this recovery.
      if (this.#tracked.has(attempt_id)) continue;
      if (this.#pending.some((p) => p.attempt.attempt_id === attempt_id)) continue;
      const token = await this.#gateway.attemptToken(rollout_id, attempt_id);
      const resume = await this.#postedLogEnds(rollout_id, attempt);
      const tracked = this.#track(rollout, attempt);
      const result = await this.#backend.adopt({ ...this.#spec(tracked, token), resume });
      adopted.add(attempt_id);
      if (result && "done" in result) {
        tracked.handle = result;
        this.stats.adopted++;
        this.#log(`adopted ${rollout_id}/${attempt_id}`);
        this.#follow(tracked, result);
      } else {
        this.#tracked.delete(attempt_id);
        this.#pending.push({
          rollout,
          attempt,
          final: false,
          logs: tracked.logs,
          outcome: result ?? {
            status: "lost",
            exit_code: null,
            error: "the controller restarted and the attempt could not be found",
            reward: null,
            info: { backend: this.#backend.name },
          },
        });
      }
    }
    // Running attempts held by this worker that the backend does not know: lost, retry.
    let after: string | undefined;
    do {
      const page = await this.#gateway.listRollouts({ status: "running", after, limit: 500 });
      for (const rollout of page.items) {
        const attempt = rollout.attempts.at(-1);
        if (!attempt || attempt.worker !== worker || attempt.status !== "running") continue;
        if (adopted.has(attempt.attempt_id) || this.#tracked.has(attempt.attempt_id)) continue;
        if (this.#pending.some((p) => p.attempt.attempt_id === attempt.attempt_id)) continue;
        this.#pending.push({
          rollout,
          attempt,
          final: false,
          outcome: {
            status: "lost",
            exit_code: null,
            error: "the controller restarted and the attempt could not be found",
            reward: null,
            info: { backend: this.#backend.name },
          },
        });
      }
      after = page.next_cursor ?? undefined;
    } while (after);
    await this.#flushReports();
  }
}
