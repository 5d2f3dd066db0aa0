/**
 * Test records: a running rollout and a running attempt with neutral defaults, for the tests
 * that hand records to backends, harnesses and reward functions directly (no gateway).
 *
 * @module
 */
import type { LogChunk } from "../../lib/controller/backend.ts";
import type { Attempt, Rollout, RolloutConfig } from "../../lib/schema.ts";

/**
 * A rollout in `running` with no attempts: `group_id` defaults to `rollout_id`, version 1,
 * config `{ timeout_s: 60, max_attempts: 1 }`; `fields` replace the defaults.
 */
export function runningRollout(
  fields: Partial<Rollout> & Pick<Rollout, "rollout_id" | "input">,
): Rollout {
  const { rollout_id, input, ...rest } = fields;
  return {
    rollout_id,
    group_id: rollout_id,
    input,
    mode: "train",
    config: { timeout_s: 60, max_attempts: 1 },
    labels: {},
    status: "running",
    version: 1,
    attempts: [],
    created_at: 0,
    updated_at: 0,
    policy_version_min: null,
    policy_version_max: null,
    reward: null,
    reward_attempt_id: null,
    reward_credential: null,
    ...rest,
  };
}

/**
 * Attempt 1 of a rollout, `running` since now, leased to worker `test` without a lease
 * expiry; `fields` replace the defaults.
 */
export function runningAttempt(
  fields: Partial<Attempt> & Pick<Attempt, "rollout_id" | "attempt_id">,
): Attempt {
  const { attempt_id, rollout_id, ...rest } = fields;
  return {
    attempt_id,
    rollout_id,
    index: 1,
    status: "running",
    started_at: Date.now(),
    ended_at: null,
    exit_code: null,
    error: null,
    worker: "test",
    lease_expires_at: null,
    log_location: null,
    info: {},
    ...rest,
  };
}

/**
 * A rollout for a backend test: `running`, version 2, `config` over
 * `{ timeout_s: 30, max_attempts: 1 }`.
 */
export function backendRollout(
  id: string,
  config: Partial<RolloutConfig>,
  input: unknown = { q: 1 },
): Rollout {
  return runningRollout({
    rollout_id: id,
    input: input as Rollout["input"],
    config: { timeout_s: 30, max_attempts: 1, ...config },
    version: 2,
  });
}

/** The start request a backend gets for attempt `<id>-a1` of `r`; log chunks go to `logs`. */
export function backendSpec(r: Rollout, logs: LogChunk[] = []) {
  return {
    rollout: r,
    attempt: runningAttempt({ attempt_id: `${r.rollout_id}-a1`, rollout_id: r.rollout_id }),
    token: "rk_test",
    gatewayUrl: "http://127.0.0.1:9",
    log: (chunk: LogChunk) => logs.push(chunk),
  };
}
