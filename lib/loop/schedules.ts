/**
 * The loop's two schedules and the update phase they share.
 *
 * - `sync`: each step declares its groups, waits until every rollout of the batch is final,
 *   then trains. The device idles while the slowest rollout of the batch finishes.
 * - `collocated_async` (Agent Lightning's): more groups than one step needs are kept running;
 *   as soon as `groups_per_step` groups are complete, the gateway switches to `update` (new LLM
 *   calls are held, in-flight ones finish), the same worker trains on those groups, the new
 *   version is registered and the phase returns to `rollout`. Unfinished rollouts just
 *   continue — their later calls are served by the new policy — and join a later batch; the
 *   staleness bound of `updatePolicy` drops or reweights samples that fell too far behind.
 *
 * The update phase is the same in both: switch the gateway to `update` (new LLM calls are
 * held, in-flight ones drain), load the chosen groups' rollouts and events, train, and switch
 * back to `rollout` whatever happens.
 *
 * @module
 */
import { sleep } from "../util/time.ts";
import type { Rollout } from "../schema.ts";
import {
  createGroup,
  fetchGroup,
  finishStep,
  groupId,
  isFinal,
  loadGroupData,
  type LoopContext,
} from "./context.ts";
import { updatePolicy, type UpdateResult } from "./train.ts";
import { syncEngine } from "./engine_sync.ts";

/** What an update phase did. */
export interface UpdatePhase {
  update: UpdateResult;
  /** LLM calls held while training, and calls still in flight when the phase began. */
  held: number;
  in_flight: number;
  /** Time spent waiting for in-flight calls to drain. */
  drain_ms: number;
  /** Time spent pushing the new weights to the engine (0 when the worker samples). */
  sync_ms: number;
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
    // The engine serves the new version before any held call goes through.
    const t1 = performance.now();
    if (ctx.engine && update.updated) {
      await syncEngine(ctx.engine, ctx.client, ctx.outDir, update.policy_version, ctx.progress);
    }
    const syncMs = performance.now() - t1;
    return {
      update,
      held: snapshot.held,
      in_flight: snapshot.in_flight,
      drain_ms: drainMs,
      sync_ms: syncMs,
    };
  } finally {
    await ctx.gateway.setPhase("rollout");
  }
}

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
      await sleep(config.schedule.poll_ms, ctx.signal, { rejectOnAbort: true });
    }
    const tRollout = performance.now() - t0;
    // Nothing is in flight in sync mode; the phase switch keeps the protocol identical.
    const phase = await trainInUpdatePhase(ctx, step, rollouts);
    for (const k of groups) state.consumed.add(groupId(config, k));
    await finishStep(ctx, phase.update, {
      step,
      held_calls: phase.held,
      in_flight_at_update: phase.in_flight,
      timings_ms: {
        rollout: tRollout,
        ...(ctx.engine ? { sync: phase.sync_ms } : {}),
        step: performance.now() - t0,
      },
    });
  }
}

/**
 * Runs the remaining steps with collocated asynchronous updates.
 *
 * @example
 * ```ts ignore
 * await runAsync(ctx);
 * ```
 */
export async function runAsync(ctx: LoopContext): Promise<void> {
  const { config, state } = ctx;
  const G = config.groups_per_step;
  const target = G + (config.schedule.extra_groups_in_flight || G);
  // Groups keep being declared up to the end, so the last updates do not wait for a tail of
  // stragglers; whatever is still unfinished when the last step is done gets cancelled.
  const total = config.steps * G + (target - G);
  // A resumed run picks up the groups it had declared but not trained on.
  const pending: number[] = [];
  for (let k = 0; k < state.nextGroup; k++) {
    if (!state.consumed.has(groupId(config, k))) pending.push(k);
  }
  let stepStart = performance.now();
  while (state.nextStep < config.steps) {
    const step = state.nextStep;
    while (pending.length < target && state.nextGroup < total) {
      await createGroup(ctx, state.nextGroup);
      pending.push(state.nextGroup);
      state.nextGroup++;
    }
    const groups = await Promise.all(pending.map((k) => fetchGroup(ctx, groupId(config, k))));
    const complete = pending.filter((_, i) =>
      groups[i].length === config.group_size && groups[i].every(isFinal)
    );
    if (complete.length < G) {
      ctx.progress.status(
        `step ${step + 1}: ${complete.length}/${G} groups complete, ${pending.length} in flight`,
      );
      await sleep(config.schedule.poll_ms, ctx.signal, { rejectOnAbort: true });
      continue;
    }
    const chosen = complete.slice(0, G);
    const tWait = performance.now() - stepStart;
    const tUpdate = performance.now();
    const phase = await trainInUpdatePhase(
      ctx,
      step,
      chosen.map((k) => groups[pending.indexOf(k)]),
    );
    for (const k of chosen) {
      state.consumed.add(groupId(config, k));
      pending.splice(pending.indexOf(k), 1);
    }
    const now = performance.now();
    await finishStep(ctx, phase.update, {
      step,
      held_calls: phase.held,
      in_flight_at_update: phase.in_flight,
      timings_ms: {
        rollout: tWait,
        drain: phase.drain_ms,
        ...(ctx.engine ? { sync: phase.sync_ms } : {}),
        update: now - tUpdate,
        step: now - stepStart,
      },
    });
    stepStart = performance.now();
  }
  await cancelPending(ctx, pending);
}

/** Cancels the unfinished rollouts of groups the run will not train on (cancelled is final). */
async function cancelPending(ctx: LoopContext, pending: number[]): Promise<void> {
  for (const k of pending) {
    for (const rollout of await fetchGroup(ctx, groupId(ctx.config, k))) {
      if (isFinal(rollout)) continue;
      await ctx.gateway.transition(rollout.rollout_id, {
        to: "cancelled",
        reason: "the run finished its last step",
      }).catch(() => undefined); // it finished meanwhile
    }
  }
}
