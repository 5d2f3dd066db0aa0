/**
 * The `sync` schedule: each step declares its groups, waits until every rollout of the batch
 * is final, then trains. The device idles while the slowest rollout of the batch finishes.
 *
 * @module
 */
import {
  createGroup,
  fetchGroup,
  finishStep,
  groupId,
  isFinal,
  type LoopContext,
  pause,
} from "./context.ts";
import { trainInUpdatePhase } from "./update_phase.ts";

/**
 * Runs the remaining steps synchronously.
 *
 * @example
 * ```ts ignore
 * await runSync(ctx);
 * ```
 */
export async function runSync(ctx: LoopContext): Promise<void> {
  const { config, state } = ctx;
  const G = config.groups_per_step;
  while (state.nextStep < config.steps) {
    const step = state.nextStep;
    const t0 = performance.now();
    const groups = Array.from({ length: G }, (_, j) => step * G + j);
    for (const k of groups) await createGroup(ctx, k);
    state.nextGroup = Math.max(state.nextGroup, (step + 1) * G);
    let rollouts;
    while (true) {
      rollouts = await Promise.all(groups.map((k) => fetchGroup(ctx, groupId(config, k))));
      const done = rollouts.flat().filter(isFinal).length;
      ctx.progress.status(`step ${step + 1}: ${done}/${G * config.group_size} rollouts final`);
      if (done === G * config.group_size) break;
      await pause(config.schedule.poll_ms, ctx.signal);
    }
    const tRollout = performance.now() - t0;
    // Nothing is in flight in sync mode; the phase switch keeps the protocol identical.
    const phase = await trainInUpdatePhase(ctx, step, rollouts);
    for (const k of groups) state.consumed.add(groupId(config, k));
    await finishStep(ctx, phase.update, {
      step,
      held_calls: phase.held,
      in_flight_at_update: phase.in_flight,
      timings_ms: { rollout: tRollout, step: performance.now() - t0 },
    });
  }
}
