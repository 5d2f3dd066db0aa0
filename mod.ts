/**
 * reins — harnessed agentic RL on Deno.
 *
 * This module re-exports the whole API. Each area is also an entry point of its own (deno.json
 * `exports`), with its own documentation, so that an import says which part of reins it uses
 * and loads only that part:
 *
 * | entry point              | what it holds                                                                     |
 * | ------------------------ | --------------------------------------------------------------------------------- |
 * | `@reins/reins/schema`    | the data model: zod schemas and types of rollouts, events, samples, configs       |
 * | `@reins/reins/tokens`    | tokenizers and chat templates (Hugging Face, bundled Qwen3, char-level)           |
 * | `@reins/reins/samples`   | sample assembly from captured calls: merge strategies, break diagnosis, metrics   |
 * | `@reins/reins/algo`      | RL math: GRPO advantages, loss normalization, policy losses, alignment            |
 * | `@reins/reins/batching`  | rollout-whole batches, data-parallel balancing, micro-batch packing               |
 * | `@reins/reins/trainer`   | the PyTorch worker and its typed client                                           |
 * | `@reins/reins/loop`      | the training loop (sync and collocated async), evaluation, `parseLoopConfig`      |
 * | `@reins/reins/http`      | the shared HTTP layer: one error type, credentials, limits, SSE, retry            |
 * | `@reins/reins/gateway`   | the durable rollout/event/model service and its client                            |
 * | `@reins/reins/proxy`     | token-exact capture of every LLM call in four wire formats                        |
 * | `@reins/reins/controller`| the rollout controller: leases, retries, local backend and sandbox                |
 * | `@reins/reins/k8s`       | the controller's Kubernetes backend (kept apart: it loads the Kubernetes client)  |
 * | `@reins/reins/harness`   | the built-in harness, real CLI harnesses (OpenCode, Claude Code, Codex, Qwen Code), environments |
 * | `@reins/reins/curation`  | task curation: the SWE-smith recipe as a pipeline, the task generator             |
 * | `@reins/reins/trajectories` | real agent transcripts: importers and replay                                   |
 * | `@reins/reins/ui`        | the Live UI served by the gateway                                                 |
 * | `@reins/reins/monitors`  | reward-hacking monitors and the LLM auditor                                       |
 * | `@reins/reins/plot`      | figures: Observable Plot on the server, Jupyter display, SVG/PNG export           |
 *
 * Inside this repository the same modules are `./lib/<area>/mod.ts` (and `./lib/schema.ts`).
 *
 * @example Turn one rollout's captured calls into weighted training rows
 * ```ts
 * import assert from "node:assert/strict";
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
 * // Rewards 1 and 0, normalized within the group: ±1/√2.
 * assert.deepEqual(rows.map((row) => Math.round(row.advantages[3] * 100) / 100), [0.71, -0.71]);
 * ```
 *
 * @module
 */
// The data model.
export * from "./lib/schema.ts";
// From captured calls to training rows.
export type * from "./lib/tokens/types.ts";
export * from "./lib/tokens/mod.ts";
export * from "./lib/samples/mod.ts";
export * from "./lib/algo/mod.ts";
export * from "./lib/batching/mod.ts";
// Training.
export * from "./lib/trainer/mod.ts";
export * from "./lib/loop/mod.ts";
// Services: HTTP layer, gateway, proxy, controller.
export * from "./lib/http/mod.ts";
export * from "./lib/gateway/mod.ts";
export * from "./lib/proxy/mod.ts";
export * from "./lib/controller/mod.ts";
// What runs in a rollout, and the tasks it runs on.
export * from "./lib/harness/mod.ts";
export * from "./lib/curation/mod.ts";
export * from "./lib/trajectories/mod.ts";
// Looking at runs.
export * from "./lib/ui/mod.ts";
export * from "./lib/monitors/mod.ts";
export * from "./lib/plot/mod.ts";
