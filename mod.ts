/**
 * reins — harnessed agentic RL on Deno.
 *
 * The public API: the shared data model (`lib/schema.ts`), tokenizers and chat templates, sample
 * assembly from captured model calls, the RL math (advantages, loss weights, alignment) and
 * batching.
 *
 * @example
 * ```ts
 * import { computeAdvantages, planLossWeights } from "./mod.ts";
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
