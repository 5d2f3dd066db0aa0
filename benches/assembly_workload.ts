/**
 * Synthetic assembly workload: rollouts whose calls' prompts grow by exact extension, each
 * prompt and response being a `subarray` view of one per-rollout buffer (as the gateway's
 * reference-based storage returns them), so inputs cost memory proportional to the final
 * context, not to the sum of all prompts.
 *
 * @module
 */
import type { ModelRequestEvent } from "../lib/schema.ts";
import { OK_CALL } from "../tests/fixtures/samples/events.ts";

/** Shape of the workload. */
export interface WorkloadShape {
  rollouts: number;
  calls: number;
  /** Length of the last call's prompt ∥ response. */
  finalTokens: number;
  responseTokens: number;
  /** Length of the first prompt. */
  firstPromptTokens: number;
}

/** The bench's contract: 512 rollouts × 20 calls with prompts growing to 16k tokens. */
export const FULL_SHAPE: WorkloadShape = {
  rollouts: 512,
  calls: 20,
  finalTokens: 16384,
  responseTokens: 256,
  firstPromptTokens: 1024,
};

/** A generated workload and the token count a pass processes. */
export interface Workload {
  rollouts: ModelRequestEvent[][];
  /** Sum over calls of prompt + response lengths. */
  tokens: number;
  /** Bytes of the per-rollout buffers (ids + logprobs). */
  inputBytes: number;
}

/** Builds the workload deterministically (ids from a xorshift stream). */
export function makeWorkload(shape: WorkloadShape): Workload {
  const { calls, finalTokens: n, responseTokens: r, firstPromptTokens: p0 } = shape;
  const delta = calls > 1 ? Math.floor((n - p0 - calls * r) / (calls - 1)) : 0;
  if (delta < 0) throw new RangeError("finalTokens too small for the calls and response sizes");
  let x = 0x9e3779b9;
  const rollouts: ModelRequestEvent[][] = [];
  let tokens = 0;
  let inputBytes = 0;
  let seq = 0;
  for (let k = 0; k < shape.rollouts; k++) {
    const ids = new Uint32Array(n);
    const lps = new Float32Array(n);
    for (let i = 0; i < n; i++) {
      x ^= x << 13;
      x ^= x >>> 17;
      x ^= x << 5;
      ids[i] = (x >>> 0) % 151_000;
      lps[i] = -((x >>> 0) % 1000) / 250;
    }
    inputBytes += ids.byteLength + lps.byteLength;
    const events: ModelRequestEvent[] = [];
    let promptLen = calls > 1 ? p0 : n - r;
    for (let c = 0; c < calls; c++) {
      const end = c === calls - 1 ? n : promptLen + r;
      events.push({
        type: "model_request",
        seq: ++seq,
        rollout_id: `r${k}`,
        attempt_id: `r${k}-a1`,
        event_key: null,
        created_at: seq,
        payload: {
          flavor: "generate",
          request: {},
          prompt_token_ids: ids.subarray(0, promptLen),
          response_token_ids: ids.subarray(promptLen, end),
          response_logprobs: lps.subarray(promptLen, end),
          policy_version: 0,
          ...OK_CALL,
          latency_ms: 0,
        },
      });
      tokens += end;
      // The last prompt absorbs the rounding so that the final context is exactly n tokens.
      promptLen = c === calls - 2 ? n - r : end + delta;
    }
    rollouts.push(events);
  }
  return { rollouts, tokens, inputBytes };
}
