/**
 * The per-attempt budget of what an agent may store: how many events its capability token
 * posts for one attempt (`max_events_per_attempt`, 429 above) and how many bytes of payload
 * (`max_event_bytes_per_attempt`, 413 above). Without it one token fills the disk.
 *
 * A gateway process keeps one running total per attempt, seeded from the store the first time
 * it sees the attempt (so a restart does not reset it). Several gateway processes on one
 * PostgreSQL database each keep their own total: the agent may then store up to the budget
 * once per process, still a bound.
 *
 * @module
 */
import { HttpError } from "../util/error.ts";
import { AGENT_EVENT_KEY_PREFIX } from "../schema.ts";
import type { Store } from "./store.ts";

/** Limits of {@link AttemptBudgets}. */
export interface AttemptBudgetLimits {
  max_events_per_attempt: number;
  max_event_bytes_per_attempt: number;
}

interface Usage {
  events: number;
  bytes: number;
}

/** Most attempts whose totals are kept (the oldest are dropped and re-read when seen again). */
const MAX_TRACKED = 100_000;

/** The payload bytes an event counts for (its JSON text). */
export function eventBytes(event: { payload: unknown }): number {
  return JSON.stringify(event.payload).length;
}

/**
 * Running totals per attempt; {@link AttemptBudgets.charge} refuses a post that would pass a
 * limit before anything is stored.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { AttemptBudgets } from "./attempt_budget.ts";
 * import { openSqliteStore } from "./sqlite_store.ts";
 * const store = openSqliteStore(":memory:");
 * await store.createRollouts([{ rollout_id: "r", input: {} }]);
 * const budgets = new AttemptBudgets(store, {
 *   max_events_per_attempt: 2, max_event_bytes_per_attempt: 1_000,
 * });
 * const log = { type: "log" as const, payload: { stream: "stdout" as const, text: "hi" } };
 * await budgets.charge("r", "a", [log, log]);
 * await assert.rejects(budgets.charge("r", "a", [log]), { status: 429 });
 * await store.close();
 * ```
 */
export class AttemptBudgets {
  readonly #store: Store;
  readonly #limits: AttemptBudgetLimits;
  readonly #usage = new Map<string, Usage>();
  readonly #loading = new Map<string, Promise<Usage>>();

  constructor(store: Store, limits: AttemptBudgetLimits) {
    this.#store = store;
    this.#limits = limits;
  }

  /**
   * Reserves `events` against the attempt's budget, or throws 429 (count) / 413 (bytes) naming
   * the limit. Returns a refund for when the store then refuses the post.
   */
  async charge(
    rollout_id: string,
    attempt_id: string,
    events: readonly { payload: unknown }[],
  ): Promise<() => void> {
    const usage = await this.#usageOf(rollout_id, attempt_id);
    let bytes = 0;
    for (const event of events) bytes += eventBytes(event);
    const { max_events_per_attempt: maxEvents, max_event_bytes_per_attempt: maxBytes } =
      this.#limits;
    if (usage.events + events.length > maxEvents) {
      throw new HttpError(
        429,
        `events: attempt '${attempt_id}' has stored ${usage.events} event(s); ` +
          `max_events_per_attempt is ${maxEvents}`,
        { field: "events" },
      );
    }
    if (usage.bytes + bytes > maxBytes) {
      throw new HttpError(
        413,
        `events: attempt '${attempt_id}' has stored ${usage.bytes} bytes of events and this ` +
          `post holds ${bytes}; max_event_bytes_per_attempt is ${maxBytes}`,
        { field: "events" },
      );
    }
    usage.events += events.length;
    usage.bytes += bytes;
    let refunded = false;
    return () => {
      if (refunded) return;
      refunded = true;
      usage.events -= events.length;
      usage.bytes -= bytes;
    };
  }

  async #usageOf(rollout_id: string, attempt_id: string): Promise<Usage> {
    const key = `${rollout_id}\u0000${attempt_id}`;
    const known = this.#usage.get(key);
    if (known) return known;
    let loading = this.#loading.get(key);
    if (!loading) {
      loading = this.#read(rollout_id, attempt_id);
      this.#loading.set(key, loading);
    }
    try {
      const usage = await loading;
      if (!this.#usage.has(key)) {
        if (this.#usage.size >= MAX_TRACKED) {
          this.#usage.delete(this.#usage.keys().next().value!);
        }
        this.#usage.set(key, usage);
      }
      return this.#usage.get(key)!;
    } finally {
      this.#loading.delete(key);
    }
  }

  /** What the attempt's token already stored (custom and log events). */
  async #read(rollout_id: string, attempt_id: string): Promise<Usage> {
    const usage = { events: 0, bytes: 0 };
    let after_seq = 0;
    for (;;) {
      const page = await this.#store.listEvents(rollout_id, {
        attempt_id,
        type: ["custom", "log"],
        after_seq,
        limit: 1_000,
      });
      for (const event of page) {
        // What a token posts: keys in the agent's namespace, or none (not the controller's logs).
        if (event.event_key !== null && !event.event_key.startsWith(AGENT_EVENT_KEY_PREFIX)) {
          continue;
        }
        usage.events++;
        usage.bytes += eventBytes(event);
      }
      if (page.length < 1_000) return usage;
      after_seq = page[page.length - 1].seq;
    }
  }
}
