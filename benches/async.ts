/**
 * `deno task bench:async`: the same RL workload in `sync` and in `collocated_async` on the
 * same worker, with a long-tailed harness duration (each rollout's harness first waits a
 * Pareto-distributed time, drawn from its rollout id: most are short, a few are very long, as
 * agent episodes are). Prints the end-to-end time of each, the device idle share (share of the
 * wall time the worker was neither generating nor training) and
 * `async_over_sync_speedup: <n>`, `sync_idle_share: <n>`, `async_idle_share: <n>`.
 *
 * Flags: `--steps <n>` (default 8), `--quick` (3 steps).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { measureTimeline } from "../experiments/async_timeline.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    steps: { type: "string", default: "8" },
    quick: { type: "boolean", default: false },
  },
});
const STEPS = args.quick ? 3 : Number(args.steps);

// Pareto(x_m = 1 s, α = 1.1) harness delays, capped at 20 s, from a hash of the rollout id
// (the run names fix the draws); every group gets a signal whatever the untrained policy says:
// the bench measures time.
const { sync, async: asyncRun, speedup } = await measureTimeline({
  steps: STEPS,
  group_size: 4,
  groups_per_step: 2,
  delay_scale_s: 1,
  delay_alpha: 1.1,
  delay_cap_s: 20,
  concurrency: 20,
  extra_groups_in_flight: 3,
  run_names: { sync: "bench-sync", collocated_async: "bench-collocated-async" },
});
console.log(`bench:async — ${STEPS} steps × 2 groups × 4 rollouts, Pareto harness delays`);
console.log(`sync: ${sync.wall_s.toFixed(1)}s, idle ${(sync.idle_share * 100).toFixed(1)}%`);
console.log(
  `collocated_async: ${asyncRun.wall_s.toFixed(1)}s, idle ${
    (asyncRun.idle_share * 100).toFixed(1)
  }%, max staleness ${Math.max(...asyncRun.metrics.map((m) => m.staleness_max))}, held calls ${
    asyncRun.metrics.reduce((a, m) => a + m.held_calls, 0)
  }`,
);
console.log(`async_over_sync_speedup: ${speedup.toFixed(3)}`);
console.log(`sync_idle_share: ${sync.idle_share.toFixed(3)}`);
console.log(`async_idle_share: ${asyncRun.idle_share.toFixed(3)}`);
