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
 * assert.ok(lag.takeMax() >= 30);
 * lag.stop();
 * ```
 */
export class EventLoopLag {
  readonly #intervalMs: number;
  #last = performance.now();
  #max = 0;
  readonly #timer: ReturnType<typeof setInterval>;

  constructor(intervalMs = 10) {
    this.#intervalMs = intervalMs;
    this.#timer = setInterval(() => {
      const now = performance.now();
      this.#max = Math.max(this.#max, now - this.#last - this.#intervalMs);
      this.#last = now;
    }, intervalMs);
    // A measuring timer must not keep a process alive.
    Deno.unrefTimer(this.#timer);
  }

  /** The longest stall (ms) since the last call, and starts a new window. */
  takeMax(): number {
    const now = performance.now();
    const max = Math.max(this.#max, now - this.#last - this.#intervalMs, 0);
    this.#max = 0;
    return max;
  }

  stop(): void {
    clearInterval(this.#timer);
  }
}
