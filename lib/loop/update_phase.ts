/**
 * One update phase, the same in both schedules: switch the gateway to `update` (new LLM calls
 * are held, in-flight ones drain), load the chosen groups' rollouts and events, train, and
 * switch back to `rollout` whatever happens.
 *
 * @module
 */
import type { Rollout } from "../schema.ts";
import { loadGroupData, type LoopContext } from "./context.ts";
import { updatePolicy, type UpdateResult } from "./train.ts";

/** What an update phase did. */
export interface UpdatePhase {
  update: UpdateResult;
  /** LLM calls held while training, and calls still in flight when the phase began. */
  held: number;
  in_flight: number;
  /** Time spent waiting for in-flight calls to drain. */
  drain_ms: number;
}

/**
 * Trains on `groups` (their rollouts, already final) inside an `update` phase.
 *
 * @example
 * ```ts ignore
 * const { update, held } = await trainInUpdatePhase(ctx, step, groups);
 * ```
 */
export async function trainInUpdatePhase(
  ctx: LoopContext,
  step: number,
  groups: Rollout[][],
): Promise<UpdatePhase> {
  const t0 = performance.now();
  const snapshot = await ctx.gateway.setPhase("update", {
    drain: true,
    drain_timeout_ms: ctx.config.schedule.drain_timeout_ms,
  });
  const drainMs = performance.now() - t0;
  try {
    await ctx.hooks.beforeTrain?.(step);
    const data = await Promise.all(groups.map((rollouts) => loadGroupData(ctx, rollouts)));
    const update = await updatePolicy(data, {
      client: ctx.client,
      config: ctx.config,
      version: ctx.state.version,
      ...(ctx.tokenizer ? { tokenizer: ctx.tokenizer } : {}),
    });
    return { update, held: snapshot.held, in_flight: snapshot.in_flight, drain_ms: drainMs };
  } finally {
    await ctx.gateway.setPhase("rollout");
  }
}
