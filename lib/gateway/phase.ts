/**
 * Phase control for collocated training: in the `update` phase new LLM calls are held (not
 * refused) until the phase returns to `rollout`, while calls already in flight finish.
 *
 * @module
 */
import { HttpError } from "../util/error.ts";
import type { Phase, PhaseSnapshot } from "../schema.ts";

/**
 * Thrown by {@link PhaseGate.acquire} when a call was held longer than its `maxHoldMs`: a 504
 * for the gateway (the proxy answers its callers 503 with `Retry-After`).
 */
export class PhaseHoldTimeout extends HttpError {
  /** How long the call was held, in ms. */
  readonly heldMs: number;
  constructor(heldMs: number) {
    super(504, `held ${heldMs} ms in the update phase, longer than the maximum hold time`, {
      code: "timeout",
    });
    this.name = "PhaseHoldTimeout";
    this.heldMs = heldMs;
  }
}

/** Options of {@link PhaseGate.acquire}. */
export interface AcquireOptions {
  /** Aborting while held rejects with the signal's reason and leaves no trace. */
  signal?: AbortSignal;
  /** Longest time to wait in the update phase (default: the gate's `maxHoldMs`). */
  maxHoldMs?: number;
}

interface Waiter {
  resolve: (release: () => void) => void;
  reject: (reason: unknown) => void;
  cleanup: () => void;
}

/**
 * Holds LLM calls during the update phase and counts the ones in flight.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { PhaseGate } from "./phase.ts";
 * const gate = new PhaseGate();
 * const release = await gate.acquire(); // rollout phase: at once
 * assert.equal(gate.snapshot().in_flight, 1);
 * gate.setPhase("update");
 * const drained = gate.waitForDrain(); // pending until release()
 * release();
 * await drained;
 * const held = gate.acquire(); // held until the rollout phase
 * assert.equal(gate.snapshot().held, 1);
 * gate.setPhase("rollout");
 * (await held)();
 * assert.deepEqual([gate.snapshot().in_flight, gate.snapshot().held], [0, 0]);
 * ```
 */
export class PhaseGate {
  #phase: Phase;
  #since: number;
  #inFlight = 0;
  #held = new Set<Waiter>();
  #drainWaiters: Array<() => void> = [];
  readonly #maxHoldMs: number;

  constructor(options: { phase?: Phase; maxHoldMs?: number } = {}) {
    this.#phase = options.phase ?? "rollout";
    this.#since = Date.now();
    this.#maxHoldMs = options.maxHoldMs ?? 600_000;
  }

  /** The current phase. */
  get phase(): Phase {
    return this.#phase;
  }

  /** Switches the phase; switching to `rollout` lets every held call through. */
  setPhase(phase: Phase): void {
    if (phase === this.#phase) return;
    this.#phase = phase;
    this.#since = Date.now();
    if (phase === "rollout") {
      const waiters = [...this.#held];
      this.#held.clear();
      for (const waiter of waiters) {
        waiter.cleanup();
        waiter.resolve(this.#enter());
      }
    }
  }

  /**
   * Waits until a call may run and returns its `release` (call it exactly once when the call
   * ends; later calls are ignored).
   */
  acquire(options: AcquireOptions = {}): Promise<() => void> {
    const { signal } = options;
    if (signal?.aborted) return Promise.reject(signal.reason);
    if (this.#phase === "rollout") return Promise.resolve(this.#enter());
    const maxHoldMs = options.maxHoldMs ?? this.#maxHoldMs;
    const startedAt = Date.now();
    return new Promise((resolve, reject) => {
      const onAbort = () => {
        this.#held.delete(waiter);
        waiter.cleanup();
        reject(signal?.reason);
      };
      const timer = setTimeout(() => {
        this.#held.delete(waiter);
        waiter.cleanup();
        reject(new PhaseHoldTimeout(Date.now() - startedAt));
      }, maxHoldMs);
      const waiter: Waiter = {
        resolve,
        reject,
        cleanup: () => {
          clearTimeout(timer);
          signal?.removeEventListener("abort", onAbort);
        },
      };
      signal?.addEventListener("abort", onAbort, { once: true });
      this.#held.add(waiter);
    });
  }

  /** Phase, calls in flight, calls held, and when the phase last changed. */
  snapshot(): PhaseSnapshot {
    return {
      phase: this.#phase,
      in_flight: this.#inFlight,
      held: this.#held.size,
      since: this.#since,
    };
  }

  /** Resolves once no call is in flight (at once when none is). */
  waitForDrain(): Promise<void> {
    if (this.#inFlight === 0) return Promise.resolve();
    return new Promise((resolve) => this.#drainWaiters.push(resolve));
  }

  #enter(): () => void {
    this.#inFlight++;
    let released = false;
    return () => {
      if (released) return;
      released = true;
      this.#inFlight--;
      if (this.#inFlight === 0) {
        const waiters = this.#drainWaiters;
        this.#drainWaiters = [];
        for (const done of waiters) done();
      }
    };
  }
}
