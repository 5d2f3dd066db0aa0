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
 * ```ts ignore
 * import {
 *   assembleRollout,
 *   computeAdvantages,
 *   computeLossWeights,
 *   flattenBatch,
 *   loadQwen3Tokenizer,
 * } from "./mod.ts";
 *
 * const tokenizer = await loadQwen3Tokenizer();
 * const samples = groupRollouts.flatMap(({ rollout, events }) =>
 *   assembleRollout(events, { tokenizer, group_id: rollout.group_id }).samples
 * );
 * const advantaged = computeAdvantages(samples, { level: "rollout" }).samples;
 * const weighted = computeLossWeights(advantaged, { mode: "rollout_token_mean" }).samples;
 * const rows = flattenBatch(weighted); // what the worker's forward_backward takes
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
export * from "./lib/gateway/mod.ts";
export * from "./lib/proxy/mod.ts";
export * from "./lib/ui/mod.ts";
export * from "./lib/monitors/mod.ts";
export * from "./lib/controller/mod.ts";
export * from "./lib/harness/mod.ts";
export * from "./lib/trainer/mod.ts";
export * from "./lib/trainer/loop/mod.ts";
