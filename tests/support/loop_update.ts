/**
 * Fixtures of the update-step tests: model-call events that prefix-merge, rollout records, and a
 * fake trainer worker that records its requests.
 */
import type {
  ForwardBackwardRequest,
  ModelRequestEvent,
  Rollout,
  RolloutEvent,
} from "../../lib/schema.ts";
import type { TrainerClient } from "../../lib/trainer/client.ts";
import type { RolloutData } from "../../lib/loop/mod.ts";

let seq = 0;

/** One model call of rollout `rolloutId` (attempt `<id>-a1`), behaviour logprobs from the ids. */
export function call(rolloutId: string, prompt: number[], response: number[], version: number) {
  const event: ModelRequestEvent = {
    type: "model_request",
    seq: ++seq,
    rollout_id: rolloutId,
    attempt_id: `${rolloutId}-a1`,
    event_key: `k${seq}`,
    created_at: Date.now(),
    payload: {
      flavor: "openai_chat",
      request: {},
      prompt_token_ids: Uint32Array.from(prompt),
      response_token_ids: Uint32Array.from(response),
      response_logprobs: Float32Array.from(response.map((t) => -0.1 * (t % 7) - 0.05)),
      policy_version: version,
      finish_reason: "stop",
      upstream: null,
      latency_ms: 1,
      retry_count: 0,
      http_status: 200,
      error: null,
      segment: null,
      mode: "faithful",
      client_disconnected: false,
    },
  };
  return event;
}

/** A rollout record with one attempt `<id>-a1` (`reward` null: no reward event). */
export function rollout(
  id: string,
  group: string,
  reward: number | null,
  status: Rollout["status"] = "succeeded",
): Rollout {
  return {
    rollout_id: id,
    group_id: group,
    input: {},
    mode: "train",
    config: { timeout_s: 60, max_attempts: 1 },
    labels: {},
    status,
    version: 3,
    attempts: [{
      attempt_id: `${id}-a1`,
      rollout_id: id,
      index: 1,
      status: status === "succeeded" ? "succeeded" : status === "running" ? "running" : "failed",
      started_at: 0,
      ended_at: null,
      exit_code: null,
      error: null,
      worker: null,
      lease_expires_at: null,
      log_location: null,
      info: {},
    }],
    created_at: 0,
    updated_at: 0,
    policy_version_min: null,
    policy_version_max: null,
    reward,
    reward_attempt_id: reward === null ? null : `${id}-a1`,
    reward_credential: reward === null ? null : "admin",
  };
}

/** Two calls that prefix-merge into one sample; a third on another conversation (2 samples). */
export function data(
  id: string,
  group: string,
  reward: number | null,
  version: number,
  opts: { split?: boolean; status?: Rollout["status"] } = {},
): RolloutData {
  const events: RolloutEvent[] = [
    call(id, [1, 2, 3], [4, 5, 6], version),
    call(id, [1, 2, 3, 4, 5, 6, 7], [8, 9], version),
  ];
  if (opts.split) events.push(call(id, [1, 11, 12], [13, 14], version));
  return { rollout: rollout(id, group, reward, opts.status), events };
}

/** A fake worker: records requests, echoes behaviour logprobs as its own. */
export function fakeClient(
  version: number,
  /** The logprobs the fake worker answers for a row (default: its behaviour logprobs). */
  answer: (row: ForwardBackwardRequest["rows"][number]) => number[] = (row) =>
    row.rollout_logprobs.slice(),
) {
  const requests: ForwardBackwardRequest[] = [];
  let v = version;
  const client = {
    health: () => Promise.resolve({ world_size: 1 }),
    forwardBackward: (req: ForwardBackwardRequest) => {
      requests.push(req);
      const row = req.rows[0];
      return Promise.resolve({
        loss: 0.5,
        metrics: {
          tokens: row.loss_mask.filter((m) => m === 1).length,
          clip_fraction: 0,
          entropy: 1,
          ratio_mean: 1,
          ratio_max: 1,
          ratio_min: 1,
          kl: 0,
        },
        policy_version: v,
        logprobs: [answer(row)],
      });
    },
    optimStep: () => Promise.resolve({ grad_norm: 0.25, policy_version: ++v }),
  };
  return { client: client as unknown as TrainerClient, requests };
}
