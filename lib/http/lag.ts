/**
 * Event-loop lag, measured as the late firing of a 10 ms ticker: how long the longest task
 * held the loop since the last read. A gateway answers `GET /v1/stats` with it (admin key),
 * so benches and operators can check that no request holds the loop for long.
 *
 * @module
 */

/**
 * The longest event-loop stall since the last {@link EventLoopLag.takeMax}.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { EventLoopLag } from "./lag.ts";
 * const lag = new EventLoopLag();
 * const until = performance.now() + 60;
 * while (performance.now() < until) Math.sqrt(2); // holds the loop
 * await new Promise((r) => setTimeout(r, 30));
 * assert.ok(lag.takeMax() >= 30); // from here on, the CPU in each stall is sampled too
 * // A stall the thread spends waiting (here blocked; on a loaded machine, for a core) is not
 * // its own work: next to no CPU in it (Linux; null elsewhere).
 * Atomics.wait(new Int32Array(new SharedArrayBuffer(4)), 0, 0, 100);
 * await new Promise((r) => setTimeout(r, 30));
 * const { maxLagMs, cpuMsInMaxLag } = lag.take();
 * assert.ok(maxLagMs >= 90);
 * assert.ok(cpuMsInMaxLag === null || cpuMsInMaxLag <= 30);
 * lag.stop();
 * ```
 */
export class EventLoopLag {
  readonly #intervalMs: number;
  #last = performance.now();
  /** CPU is sampled (a `/proc` read per tick, ~40 µs) only once someone reads the figures. */
  #measureCpu = false;
  #lastCpu: number | null = null;
  #max = 0;
  #maxCpu: number | null = null;
  #maxBusy: number | null = null;
  readonly #timer: ReturnType<typeof setInterval>;

  constructor(intervalMs = 10) {
    this.#intervalMs = intervalMs;
    this.#timer = setInterval(() => {
      const now = performance.now();
      const cpu = this.#measureCpu ? threadCpuMs() : null;
      const lag = now - this.#last - this.#intervalMs;
      if (cpu !== null && this.#lastCpu !== null) {
        this.#maxBusy = Math.max(this.#maxBusy ?? 0, cpu - this.#lastCpu);
      }
      if (lag > this.#max) {
        this.#max = lag;
        this.#maxCpu = cpu !== null && this.#lastCpu !== null ? cpu - this.#lastCpu : null;
      }
      this.#last = now;
      this.#lastCpu = cpu;
    }, intervalMs);
    // A measuring timer must not keep a process alive.
    Deno.unrefTimer(this.#timer);
  }

  /** The longest stall (ms) since the last call, and starts a new window. */
  takeMax(): number {
    return this.take().maxLagMs;
  }

  /**
   * The longest stall (ms) since the last call, and how much CPU this thread spent in it
   * (Linux, 10 ms resolution; `null` elsewhere): a stall the thread spent computing is our
   * work holding the loop, one it did not is the thread waiting for a core (a loaded machine).
   * `maxBusyMs` is the most CPU the thread spent between two ticks: the longest our own work
   * held the loop, whatever the machine's load (same resolution). Both are `null` in the first
   * window: the CPU is sampled from the first call on (a gateway nobody asks pays nothing).
   */
  take(): { maxLagMs: number; cpuMsInMaxLag: number | null; maxBusyMs: number | null } {
    const now = performance.now();
    const tail = now - this.#last - this.#intervalMs;
    let maxLagMs = this.#max;
    let cpuMsInMaxLag = this.#maxCpu;
    if (tail > maxLagMs) {
      maxLagMs = tail;
      const cpu = threadCpuMs();
      cpuMsInMaxLag = cpu !== null && this.#lastCpu !== null ? cpu - this.#lastCpu : null;
    }
    const maxBusyMs = this.#maxBusy;
    this.#max = 0;
    this.#maxCpu = null;
    this.#maxBusy = null;
    if (!this.#measureCpu) {
      this.#measureCpu = true;
      this.#lastCpu = threadCpuMs();
    }
    return { maxLagMs: Math.max(maxLagMs, 0), cpuMsInMaxLag, maxBusyMs };
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}

/** CPU time (user + system, ms) of the calling thread from `/proc/thread-self/stat`, or null. */
function threadCpuMs(): number | null {
  return cpuMsOf("/proc/thread-self/stat");
}

/**
 * CPU time (user + system, ms) from a Linux `stat` file (`/proc/<pid>/stat`,
 * `/proc/thread-self/stat`), or null where it cannot be read.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cpuMsOf } from "./lag.ts";
 * const ms = cpuMsOf("/proc/self/stat");
 * assert.ok(ms === null || ms >= 0);
 * ```
 */
export function cpuMsOf(statFile: string): number | null {
  try {
    const stat = Deno.readTextFileSync(statFile);
    // Fields after the command name (which may hold spaces) start at state (field 3).
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return (Number(fields[11]) + Number(fields[12])) * 10; // utime, stime in 100 Hz ticks
  } catch {
    return null;
  }
}
