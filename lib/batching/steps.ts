/**
 * Cutting a batch into optimizer steps without ever splitting a rollout (SPEC §7).
 *
 * All samples of one rollout stay in the same optimizer step, so no rollout is trained half
 * under one policy version and half under the next. Plans are made from token counts: how many
 * samples a rollout split into is only known once it finished, and it is tokens, not prompts,
 * that cost time and memory.
 *
 * @module
 */
import { parseOrThrow, ValidationError } from "../schema.ts";
import { type StepPlanOptions, StepPlanOptionsSchema } from "./schema.ts";
import { imbalance, partitionKk } from "./balance.ts";

/** One optimizer step of a plan. */
export interface PlannedStep {
  /** Indices of the step's rollouts in the planner's input, ascending. */
  units: number[];
  rollout_ids: string[];
  tokens: number;
}

/** What {@link planOptimizerSteps} returns. */
export interface StepPlan {
  steps: PlannedStep[];
  /** Rollouts larger than `step_tokens`, each given a step of its own. */
  oversized: string[];
  /** Token imbalance between steps (max / mean − 1). */
  imbalance: number;
}

/**
 * Plans optimizer steps over whole rollouts from their token counts.
 *
 * With `num_steps: K` the rollouts are split into min(K, R) steps of near-equal tokens
 * (Karmarkar–Karp); with `step_tokens: T` steps are filled in input order (e.g. finish order)
 * up to T tokens; with neither, everything is one step.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { planOptimizerSteps } from "./steps.ts";
 * const plan = planOptimizerSteps(
 *   [{ rollout_id: "a", tokens: 60 }, { rollout_id: "b", tokens: 50 },
 *    { rollout_id: "c", tokens: 40 }, { rollout_id: "d", tokens: 30 }],
 *   { num_steps: 2 },
 * );
 * assert.deepEqual(plan.steps.map((s) => s.tokens), [90, 90]);
 * ```
 */
export function planOptimizerSteps(
  units: readonly { rollout_id: string; tokens: number }[],
  options: StepPlanOptions = {},
): StepPlan {
  const opts = parseOrThrow(StepPlanOptionsSchema, options, "options");
  const seen = new Set<string>();
  units.forEach((u, i) => {
    if (!Number.isInteger(u.tokens) || u.tokens < 0) {
      throw new ValidationError(`units[${i}].tokens`, [
        `units[${i}].tokens: must be an integer >= 0, got ${u.tokens}`,
      ]);
    }
    if (seen.has(u.rollout_id)) {
      throw new ValidationError(`units[${i}].rollout_id`, [
        `units[${i}].rollout_id: rollout ${u.rollout_id} appears twice; a rollout is one unit`,
      ]);
    }
    seen.add(u.rollout_id);
  });
  const oversized: string[] = [];
  let groups: number[][];
  if (units.length === 0) {
    groups = [];
  } else if (opts.num_steps !== undefined) {
    const k = Math.min(opts.num_steps, units.length);
    groups = partitionKk(units.map((u) => u.tokens), k).parts
      .filter((p) => p.length > 0)
      // Steps in order of their first rollout, so a plan reads in input order.
      .sort((a, b) => a[0] - b[0]);
  } else if (opts.step_tokens !== undefined) {
    const budget = opts.step_tokens;
    groups = [];
    let current: number[] = [];
    let used = 0;
    units.forEach((u, i) => {
      if (u.tokens > budget) {
        oversized.push(u.rollout_id);
        if (current.length) groups.push(current);
        groups.push([i]);
        current = [];
        used = 0;
        return;
      }
      if (current.length && used + u.tokens > budget) {
        groups.push(current);
        current = [];
        used = 0;
      }
      current.push(i);
      used += u.tokens;
    });
    if (current.length) groups.push(current);
  } else {
    groups = [units.map((_, i) => i)];
  }
  const steps = groups.map((g) => ({
    units: g,
    rollout_ids: g.map((i) => units[i].rollout_id),
    tokens: g.reduce((acc, i) => acc + units[i].tokens, 0),
  }));
  return { steps, oversized, imbalance: imbalance(steps.map((s) => s.tokens)) };
}
