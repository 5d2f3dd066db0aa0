/**
 * reins — harnessed agentic RL on Deno.
 *
 * The public API of every area: the shared data model (`lib/schema.ts`), tokenizers and chat
 * templates, sample assembly from captured model calls, the RL math (advantages, loss weights,
 * alignment) and batching, plots and trajectory importers, the gateway and its client, the proxy,
 * the controller (its Kubernetes backend lives in `lib/controller/k8s_backend.ts`, so importing
 * reins does not load the Kubernetes client), harnesses and environments, the Live UI and
 * monitors, and the trainer client.
 *
 * @example Turn one rollout's captured calls into weighted training rows
 * ```ts
 * import {
 *   assembleRollout,
 *   computeAdvantages,
 *   computeLossWeights,
 *   flattenBatch,
 *   loadQwen3Tokenizer,
 * } from "./mod.ts";
 *
 * // One group as the gateway holds it: each rollout's events (a model call, then its reward).
 * const rolloutOf = (rollout_id: string, reward: number) => {
 *   const head = { rollout_id, attempt_id: "a1", event_key: null, created_at: 0 };
 *   const call = {
 *     flavor: "generate" as const, request: {}, prompt_token_ids: Uint32Array.of(1, 2),
 *     response_token_ids: Uint32Array.of(3, 4), response_logprobs: Float32Array.of(-0.5, -0.5),
 *     policy_version: 0, finish_reason: "stop", upstream: null, latency_ms: 1, retry_count: 0,
 *     http_status: 200, error: null, segment: null, mode: "faithful" as const,
 *     client_disconnected: false,
 *   };
 *   const score = { value: reward, name: "reward", info: {} };
 *   return {
 *     rollout: { rollout_id, group_id: "g1" },
 *     events: [
 *       { ...head, seq: 1, type: "model_request" as const, payload: call },
 *       { ...head, seq: 2, type: "reward" as const, payload: score },
 *     ],
 *   };
 * };
 * const groupRollouts = [rolloutOf("r1", 1), rolloutOf("r2", 0)];
 *
 * const tokenizer = await loadQwen3Tokenizer();
 * const samples = groupRollouts.flatMap(({ rollout, events }) =>
 *   assembleRollout(events, { tokenizer, group_id: rollout.group_id }).samples
 * );
 * const advantaged = computeAdvantages(samples, { level: "rollout" }).samples;
 * const weighted = computeLossWeights(advantaged, { mode: "rollout_token_mean" }).samples;
 * const rows = flattenBatch(weighted); // what the worker's forward_backward takes
 * rows.map((row) => row.advantages[3]); // [≈0.71, ≈-0.71]: rewards 1 and 0, normalized
 * ```
 *
 * @module
 */
export * from "./lib/schema.ts";
export type * from "./lib/tokens/types.ts";
export * from "./lib/tokens/mod.ts";
export * from "./lib/samples/mod.ts";
export * from "./lib/algo/mod.ts";
export * from "./lib/batching/mod.ts";
export * from "./lib/plot/mod.ts";
export * from "./lib/trajectories/mod.ts";
export * from "./lib/http/mod.ts";
export * from "./lib/gateway/mod.ts";
export * from "./lib/proxy/mod.ts";
export * from "./lib/ui/mod.ts";
export * from "./lib/monitors/mod.ts";
export * from "./lib/controller/mod.ts";
export * from "./lib/harness/mod.ts";
export * from "./lib/trainer/mod.ts";
export * from "./lib/loop/mod.ts";
export * from "./lib/curation/mod.ts";
