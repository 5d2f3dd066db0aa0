/**
 * The `per_call` strategy: every call is its own sample (always exact, no sharing).
 *
 * @module
 */
import { planOf, type SamplePlan } from "./build.ts";
import type { ValidCall } from "./validate.ts";

/**
 * One plan per call: `prompt ∥ response`, the response trained.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { planPerCall } from "./per_call.ts";
 * assert.equal(planPerCall([]).length, 0);
 * ```
 */
export function planPerCall(calls: readonly ValidCall[]): SamplePlan[] {
  return calls.map((call) => planOf(call, null));
}
