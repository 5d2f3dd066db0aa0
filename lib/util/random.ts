/**
 * A small seeded generator so that task choice and SFT batches are reproducible (and resumable:
 * the draw for group `k` depends only on the seed and `k`).
 *
 * @module
 */

/**
 * Mulberry32: a fast 32-bit seeded generator returning floats in [0, 1).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { mulberry32 } from "./random.ts";
 * const a = mulberry32(1);
 * const b = mulberry32(1);
 * assert.equal(a() === b(), true);
 * ```
 */
export function mulberry32(seed: number): () => number {
  let state = seed >>> 0;
  return () => {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/**
 * The task index of group `group` (a pure function of seed and group index).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { taskIndexOf } from "./random.ts";
 * assert.equal(taskIndexOf(7, 3, 10) === taskIndexOf(7, 3, 10), true);
 * ```
 */
export function taskIndexOf(seed: number, group: number, tasks: number): number {
  const rand = mulberry32((seed * 1_000_003 + group * 7919) >>> 0);
  rand();
  return Math.floor(rand() * tasks);
}
