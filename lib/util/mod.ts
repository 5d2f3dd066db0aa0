/**
 * The bottom utility layer: what every other layer may use and which imports nothing of reins
 * itself. One mean ± 95% interval (Student-t), one seeded generator, one abortable sleep, one
 * error type with an HTTP status, one JSONL reader.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { meanCi, mulberry32 } from "./mod.ts";
 * const rand = mulberry32(1);
 * const draws = Array.from({ length: 100 }, () => rand());
 * const { mean, ci95 } = meanCi(draws);
 * assert.ok(Math.abs(mean - 0.5) < ci95 * 2);
 * ```
 *
 * @module
 */
export { ci95HalfWidth, type MeanCi, meanCi, median, welchDiff } from "./stats.ts";
export { mulberry32, taskIndexOf } from "./random.ts";
export { sleep } from "./time.ts";
export { floatArray, intArray } from "./arrays.ts";
