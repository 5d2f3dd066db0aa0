/**
 * The rules both stores follow, written once: the transition guard, attempt ids and endings,
 * lease rules, listing cursors, and what an events post may do (which credential may post
 * what, which rewards count, when a retried `event_key` is the same event).
 *
 * @module
 */
import {
  type Attempt,
  type AttemptStatus,
  canTransition,
  type Credential,
  type JsonObject,
  type Rollout,
  type RolloutEvent,
  type RolloutStatus,
} from "../schema.ts";
import {
  AGENT_EVENT_KEY_PREFIX,
  isReservedEventKey,
  RESERVED_EVENT_KEY_PREFIX,
} from "../schema/gateway_api.ts";
import type { AttemptRow } from "./sql/rows.ts";
import { type AppendOptions, StoreError, type TransitionOptions } from "./store.ts";
import { checkId, modelRequestOf, type ParsedEvent, parseEvents } from "./store_input.ts";

/** A fresh attempt id: its 1-based index plus a random suffix (ids never repeat on reuse). */
export function newAttemptId(index: number): string {
  const suffix = crypto.getRandomValues(new Uint8Array(4));
  return `a${index}-${Array.from(suffix, (b) => b.toString(16).padStart(2, "0")).join("")}`;
}

/** The status a running attempt ends with when its rollout moves to `to`. */
export function defaultAttemptStatus(to: RolloutStatus): Exclude<AttemptStatus, "running"> {
  switch (to) {
    case "succeeded":
      return "succeeded";
    case "cancelled":
      return "cancelled";
    default:
      return "failed";
  }
}

/** What {@link checkTransition} decided. */
export type TransitionDecision = "noop" | "apply";

/**
 * The transition guard both backends share. Returns "noop" for a retried transition that
 * already took effect, "apply" for a valid one, and throws a 409/400 {@link StoreError} naming
 * the field otherwise.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkTransition } from "./store_rules.ts";
 * import { StoreError } from "./store.ts";
 * const rollout = { rollout_id: "r", status: "running" as const, version: 2,
 *   config: { timeout_s: 600, max_attempts: 1 } };
 * assert.equal(checkTransition(rollout, { attempt_id: "a1-x" }, 1, { to: "succeeded" }), "apply");
 * assert.throws(
 *   () => checkTransition(rollout, { attempt_id: "a1-x" }, 1, { to: "running" }),
 *   (err) => err instanceof StoreError && err.status === 400,
 * );
 * ```
 */
export function checkTransition(
  rollout: Pick<Rollout, "rollout_id" | "status" | "version" | "config">,
  currentAttempt: { attempt_id: string } | null,
  attemptCount: number,
  options: TransitionOptions,
): TransitionDecision {
  const { to } = options;
  if (to === "running") {
    throw new StoreError(
      "invalid",
      "to: a rollout enters 'running' only through POST /v1/rollouts/claim",
    );
  }
  if (options.attempt_id !== undefined && currentAttempt?.attempt_id !== options.attempt_id) {
    throw new StoreError(
      "conflict",
      `attempt_id: '${options.attempt_id}' is not the current attempt of rollout ` +
        `'${rollout.rollout_id}' (current: ${
          currentAttempt ? `'${currentAttempt.attempt_id}'` : "none"
        })`,
    );
  }
  if (rollout.status === to) return "noop";
  if (!canTransition(rollout.status, to)) {
    throw new StoreError(
      "conflict",
      `to: rollout '${rollout.rollout_id}' cannot go from '${rollout.status}' to '${to}'`,
    );
  }
  if (options.expected_version !== undefined && options.expected_version !== rollout.version) {
    throw new StoreError(
      "conflict",
      `expected_version: rollout '${rollout.rollout_id}' is at version ${rollout.version}, ` +
        `not ${options.expected_version}`,
    );
  }
  if (to === "requeuing" && attemptCount >= rollout.config.max_attempts) {
    throw new StoreError(
      "conflict",
      `to: rollout '${rollout.rollout_id}' has used all ${rollout.config.max_attempts} ` +
        `attempt(s); move it to 'failed' instead of 'requeuing'`,
    );
  }
  return "apply";
}

/**
 * Encodes a listing position as an opaque cursor.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { decodeCursor, encodeCursor } from "./store_rules.ts";
 * assert.equal(decodeCursor(encodeCursor(42)), 42);
 * ```
 */
export function encodeCursor(pos: number): string {
  return btoa(`p:${pos}`).replace(/=+$/, "");
}

/** Decodes a cursor from {@link encodeCursor}; 400 naming `after` when it is not one. */
export function decodeCursor(cursor: string): number {
  let text = "";
  try {
    text = atob(cursor);
  } catch {
    // Reported below.
  }
  const match = /^p:(\d+)$/.exec(text);
  if (!match) throw new StoreError("invalid", `after: '${cursor}' is not a cursor of this gateway`);
  return Number(match[1]);
}

/** Merges attempt `info` updates (shallow). */
export function mergeInfo(base: JsonObject, extra: JsonObject | undefined): JsonObject {
  return extra ? { ...base, ...extra } : base;
}

/** The 404 for an unknown rollout. */
export function noRollout(id: string): StoreError {
  return new StoreError("not_found", `rollout_id: no rollout '${id}'`);
}

/** The 404 for an unknown attempt. */
export function noAttempt(rolloutId: string, attemptId: string): StoreError {
  return new StoreError(
    "not_found",
    `attempt_id: no attempt '${attemptId}' in rollout '${rolloutId}'`,
  );
}

/** The lease-renewal guard: 409 unless the attempt is running and leased to `worker`. */
export function checkLeaseHolder(
  row: Pick<AttemptRow, "status" | "worker">,
  attempt_id: string,
  worker: string,
): void {
  if (row.status !== "running") {
    throw new StoreError(
      "conflict",
      `attempt_id: attempt '${attempt_id}' is ${row.status}, not running; its lease is over`,
    );
  }
  if (row.worker !== worker) {
    throw new StoreError(
      "conflict",
      `worker: attempt '${attempt_id}' is leased to '${row.worker}', not '${worker}'`,
    );
  }
}

/**
 * Infrastructure failures a rollout may have retried for free before they count too: a setup
 * that is broken for good must still end its rollouts.
 */
export const MAX_FREE_INFRA_RETRIES = 20;

/** True for an attempt ended by the infrastructure (`info.infra_failure`, set by the
 * controller that reported it). */
export function isInfraAttempt(attempt: { info?: Record<string, unknown> }): boolean {
  return attempt.info?.infra_failure === true;
}

/**
 * Attempts that count against `max_attempts`: all but those the infrastructure ended (a
 * worker, proxy upstream or controller that died), up to {@link MAX_FREE_INFRA_RETRIES} of
 * them. `endingInfra`: the current attempt is being ended by the infrastructure right now.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { countedAttempts } from "./store_rules.ts";
 * const attempts = [{ info: { infra_failure: true } }, { info: {} }, { info: {} }];
 * assert.equal(countedAttempts(attempts), 2);
 * assert.equal(countedAttempts(attempts, true), 1);
 * ```
 */
export function countedAttempts(
  attempts: readonly { info?: Record<string, unknown> }[],
  endingInfra = false,
): number {
  const last = attempts.length - 1;
  const infra = attempts.filter((a, i) => isInfraAttempt(a) || (endingInfra && i === last)).length;
  return attempts.length - Math.min(infra, MAX_FREE_INFRA_RETRIES);
}

/**
 * Where a running rollout goes when its attempt's lease expires. The expired attempt counts:
 * a controller that comes back within the lease reports its attempts lost itself, as
 * infrastructure failures that do not.
 */
export function statusAfterLostLease(rollout: Rollout): RolloutStatus {
  return countedAttempts(rollout.attempts) < rollout.config.max_attempts ? "requeuing" : "failed";
}

/** How an attempt ends: its final status and what to record. */
export interface AttemptEnd {
  status: Exclude<AttemptStatus, "running">;
  exit_code?: number | null;
  error?: string | null;
  info?: JsonObject;
  log_location?: string | null;
}

/**
 * The columns an ending attempt gets: what `end` gives, else what the attempt already holds;
 * `info` merged (as JSON text).
 */
export function attemptEndColumns(attempt: Attempt, end: AttemptEnd): {
  exit_code: number | null;
  error: string | null;
  info: string;
  log_location: string | null;
} {
  return {
    exit_code: end.exit_code ?? attempt.exit_code,
    error: end.error ?? attempt.error,
    info: JSON.stringify(mergeInfo(attempt.info, end.info)),
    log_location: end.log_location ?? attempt.log_location,
  };
}

// ---------------------------------------------------------------------------------------------
// Events: credentials, rewards, idempotency

/** What an events post needs to know about its attempt. */
export interface AttemptState {
  status: AttemptStatus;
  /** True when it is the rollout's latest attempt. */
  current: boolean;
}

/**
 * Why `credential` may not post an event under `key`, or null when it may. Each credential
 * kind has its namespace, so none can take another's key first (a key taken first would
 * pre-empt the real event, which then gets 409):
 *
 * | key                   | who may post it                                    |
 * | --------------------- | -------------------------------------------------- |
 * | `reins:…`             | the admin (controller, proxy, monitors, verifier)  |
 * | `agent:…`             | a capability token (and the admin)                 |
 * | `reporter:…`, any other | the reporter and the admin                       |
 *
 * A capability token's keys must start with `agent:`; the reporter may use any key outside
 * `reins:` and `agent:`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { eventKeyRefusal } from "./store_rules.ts";
 * assert.equal(eventKeyRefusal("capability", "agent:step-1"), null);
 * assert.match(eventKeyRefusal("capability", "reward:1")!, /must start with 'agent:'/);
 * assert.match(eventKeyRefusal("reporter", "reins:reward:1")!, /reserved for reins/);
 * assert.equal(eventKeyRefusal("reporter", "reward:1"), null);
 * assert.equal(eventKeyRefusal("admin", "agent:x"), null);
 * ```
 */
export function eventKeyRefusal(
  credential: Credential,
  key: string | null | undefined,
): string | null {
  if (credential === "admin" || key === null || key === undefined) return null;
  if (isReservedEventKey(key)) {
    return `'${key}' is in the namespace reserved for reins itself ` +
      `('${RESERVED_EVENT_KEY_PREFIX}'); only the admin credential posts it`;
  }
  if (credential === "capability" && !key.startsWith(AGENT_EVENT_KEY_PREFIX)) {
    return `a capability token's keys must start with '${AGENT_EVENT_KEY_PREFIX}' ` +
      `(got '${key}'); other keys belong to the verifier, the reporter and reins`;
  }
  if (credential === "reporter" && key.startsWith(AGENT_EVENT_KEY_PREFIX)) {
    return `'${key}' is in the agent's namespace ('${AGENT_EVENT_KEY_PREFIX}'); ` +
      `the reporter posts other keys`;
  }
  return null;
}

/**
 * What a credential may post, whatever the attempt's state (403 before anything is stored),
 * written once for both stores and the gateway app: a capability token posts only `custom` and
 * `log` events (never a reward, never a model call), and every key stays in its credential's
 * namespace ({@link eventKeyRefusal}).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkCredential } from "./store_rules.ts";
 * const reward = { type: "reward" as const, payload: { value: 1, name: "reward", info: {} } };
 * checkCredential([reward], "admin");
 * assert.throws(() => checkCredential([reward], "capability"), /events\[0\]\.type: a capability/);
 * assert.throws(
 *   () => checkCredential([{ type: "custom", event_key: "reward:1" }], "capability"),
 *   /events\[0\]\.event_key: a capability token's keys must start with 'agent:'/,
 * );
 * ```
 */
export function checkCredential(
  events: ReadonlyArray<{ type: string; event_key?: string | null }>,
  credential: Credential,
): void {
  if (credential === "admin") return;
  events.forEach((event, i) => {
    if (credential === "capability" && event.type === "reward") {
      throw new StoreError(
        "forbidden",
        `events[${i}].type: a capability token cannot post rewards; rewards come from the ` +
          `admin or reporter credential (a verifier outside the agent's reach)`,
      );
    }
    // Model calls are training data: only the proxy (admin) records them, from the tokens the
    // engine really sampled. A token that could post its own would write its own samples.
    if (credential === "capability" && event.type !== "custom" && event.type !== "log") {
      throw new StoreError(
        "forbidden",
        `events[${i}].type: a capability token posts only 'custom' and 'log' events; ` +
          `'${event.type}' events come from reins itself (model calls from the proxy)`,
      );
    }
    const refusal = eventKeyRefusal(credential, event.event_key);
    if (refusal) throw new StoreError("forbidden", `events[${i}].event_key: ${refusal}`);
  });
}

/**
 * Checks an events post before anything is stored: ids, events, and the {@link checkCredential}
 * rules for the credential it is posted under (the admin's when unsaid).
 */
export function checkAppend(
  rollout_id: string,
  attempt_id: string,
  inputs: unknown,
  options: AppendOptions,
): { credential: Credential; parsed: ParsedEvent[] } {
  const credential = options.credential ?? "admin";
  checkId("rollout_id", rollout_id);
  checkId("attempt_id", attempt_id);
  const parsed = parseEvents(inputs);
  checkCredential(parsed, credential);
  return { credential, parsed };
}

/**
 * Whether `credential` may post new events to an attempt in `state` (what
 * {@link checkLiveAttempt} refuses, as a yes or no): an attempt's own token only while it is the
 * current attempt and running; the admin and reporter credentials always.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { attemptMayPost } from "./store_rules.ts";
 * assert.equal(attemptMayPost({ status: "running", current: true }, "capability"), true);
 * assert.equal(attemptMayPost({ status: "succeeded", current: true }, "capability"), false);
 * assert.equal(attemptMayPost({ status: "failed", current: false }, "admin"), true);
 * ```
 */
export function attemptMayPost(state: AttemptState, credential: Credential): boolean {
  return credential !== "capability" || (state.current && state.status === "running");
}

/** 409 unless a capability token's attempt is running and current (for events it would add). */
export function checkLiveAttempt(
  state: AttemptState,
  credential: Credential,
  rollout_id: string,
  attempt_id: string,
): void {
  if (attemptMayPost(state, credential)) return;
  if (!state.current) {
    throw new StoreError(
      "conflict",
      `attempt_id: attempt '${attempt_id}' is no longer the current attempt of rollout ` +
        `'${rollout_id}'; its token cannot post events`,
    );
  }
  if (state.status !== "running") {
    throw new StoreError(
      "conflict",
      `attempt_id: attempt '${attempt_id}' is ${state.status}, not running; its token cannot ` +
        `post events`,
    );
  }
}

/**
 * Whether a reward posted with `credential` for an attempt in `state` sets `rollout.reward`:
 * only the current attempt's, and not once that attempt was given up as lost. Other rewards
 * are kept as events but never overwrite it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { rewardCounts } from "./store_rules.ts";
 * assert.equal(rewardCounts({ status: "succeeded", current: true }, "admin"), true);
 * assert.equal(rewardCounts({ status: "failed", current: false }, "admin"), false);
 * assert.equal(rewardCounts({ status: "lost", current: true }, "reporter"), false);
 * ```
 */
export function rewardCounts(state: AttemptState, credential: Credential): boolean {
  return credential !== "capability" && state.current && state.status !== "lost";
}

/** JSON with sorted object keys and typed arrays as arrays: equal events, equal text. */
function canonical(value: unknown): string {
  return JSON.stringify(value, (_key, v) => {
    if (ArrayBuffer.isView(v)) return Array.from(v as Uint32Array);
    if (typeof v === "object" && v !== null && !Array.isArray(v)) {
      const sorted: Record<string, unknown> = {};
      for (const k of Object.keys(v).sort()) sorted[k] = (v as Record<string, unknown>)[k];
      return sorted;
    }
    return v;
  });
}

/** The payload of a parsed event as the store keeps it (a model call's arrays typed). */
function storedPayload(event: ParsedEvent): unknown {
  return event.type === "model_request" ? modelRequestOf(event) : event.payload;
}

/**
 * The 409 for an `event_key` that is already taken by a different event (another attempt,
 * type or payload), or null when `incoming` is the same event retried (which then answers the
 * stored one). `earlier` is the stored event, or an event earlier in the same post.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { keyConflict } from "./store_rules.ts";
 * const stored = {
 *   seq: 5, rollout_id: "r", attempt_id: "a1-x", event_key: "k", created_at: 0,
 *   type: "reward" as const, payload: { value: 0, name: "reward", info: {} },
 * };
 * const retry = { type: "reward" as const, event_key: "k", payload: { value: 0, name: "reward", info: {} } };
 * assert.equal(keyConflict(stored, "a1-x", retry, 0), null);
 * const other = { ...retry, payload: { ...retry.payload, value: 1 } };
 * assert.match(keyConflict(stored, "a1-x", other, 0)!.message, /different payload/);
 * ```
 */
export function keyConflict(
  earlier: RolloutEvent | { attempt_id: string; event: ParsedEvent },
  attempt_id: string,
  incoming: ParsedEvent,
  index: number,
): StoreError | null {
  const stored = "event" in earlier
    ? {
      attempt_id: earlier.attempt_id,
      type: earlier.event.type,
      payload: storedPayload(earlier.event),
    }
    : earlier;
  let what: string | null = null;
  if (stored.attempt_id !== attempt_id) what = `attempt ('${stored.attempt_id}')`;
  else if (stored.type !== incoming.type) what = `type ('${stored.type}')`;
  else if (canonical(stored.payload) !== canonical(storedPayload(incoming))) what = "payload";
  if (what === null) return null;
  const where = "seq" in earlier ? ` (seq ${earlier.seq})` : " earlier in this post";
  return new StoreError(
    "conflict",
    `events[${index}].event_key: '${incoming.event_key}' is already taken${where} by an ` +
      `event with a different ${what}; a retry must resend the same event, a new event ` +
      `needs a new key`,
  );
}
