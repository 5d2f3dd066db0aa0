/**
 * reins — harnessed agentic RL on Deno.
 *
 * @example
 * ```ts
 * import { canTransition } from "./mod.ts";
 * canTransition("queuing", "running"); // true
 * ```
 *
 * @module
 */
export * from "./lib/schema.ts";
export type * from "./lib/tokens/types.ts";
