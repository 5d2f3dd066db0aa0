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
import { builtinResolver } from "../lib/harness/builtin/resolver.ts";
import { paretoDelayS, unionSpans } from "../experiments/async_timeline.ts";
import type { HarnessResolver } from "../lib/controller/local_backend.ts";
import type { RewardContext } from "../lib/controller/reward_hooks.ts";
import type { LocalHarness } from "../lib/schema.ts";
import type { LoopStepMetrics, ScheduleMode } from "../lib/schema/loop.ts";
import { loadCharTokenizer } from "../lib/tokens/mod.ts";
import {
  runLoop,
  silentProgress,
  startEmbedded,
  toyArithmeticTasks,
  toyHarness,
  toyLoopTasks,
  toyModel,
  writeToyDataset,
} from "../lib/loop/mod.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    steps: { type: "string", default: "8" },
    quick: { type: "boolean", default: false },
  },
});
const STEPS = args.quick ? 3 : Number(args.steps);

const builtin = builtinResolver({ env: "arithmetic", rewardFunction: "bench_split" });
const slowHarness: HarnessResolver = (options, rollout) => {
  const spec = builtin(options, rollout) as LocalHarness;
  // Pareto(x_m = 1 s, α = 1.1), capped at 20 s, from a hash of the rollout id.
  const delay = paretoDelayS(rollout.rollout_id, 1, 1.1, 20).toFixed(2);
  return { ...spec, command: ["sh", "-c", `sleep ${delay}; exec "$@"`, "sh", ...spec.command] };
};
// Every group gets a signal whatever the untrained policy says: the bench measures time.
const splitReward = (ctx: RewardContext) =>
  Number(/-r(\d+)$/.exec(ctx.rollout.rollout_id)?.[1] ?? 0) < 2 ? 1 : 0;

const dir = await Deno.makeTempDir({ prefix: "reins_bench_async_" });
const tokenizer = await loadCharTokenizer();
const tasks = toyArithmeticTasks();
const dataDir = await writeToyDataset(`${dir}/data`, tasks);
const stack = await startEmbedded({
  outDir: dir,
  tokenizer,
  concurrency: 20,
  threads: 2,
  registry: {
    dataDir,
    extra: { "bench-slow": slowHarness },
    extraRewards: { bench_split: splitReward },
  },
});

interface ModeResult {
  mode: ScheduleMode;
  wall_s: number;
  idle_share: number;
  metrics: LoopStepMetrics[];
}

async function runMode(mode: ScheduleMode): Promise<ModeResult> {
  const name = `bench-${mode.replace("_", "-")}`;
  const trainIntervals: [number, number][] = [];
  let trainStart = 0;
  const t0 = Date.now();
  const result = await runLoop(
    {
      name,
      out_dir: `${dir}/${name}`,
      tasks: toyLoopTasks(tasks),
      harness: {
        name: "bench-slow",
        // A process: the slow resolver wraps its command in a sleep.
        options: toyHarness(dataDir, { max_tokens: 32, runner: "process" }).options,
      },
      model: toyModel(tokenizer, { d_model: 64, n_layers: 2, max_seq_len: 512 }),
      group_size: 4,
      groups_per_step: 2,
      steps: STEPS,
      checkpoint_every: 0,
      schedule: {
        mode,
        extra_groups_in_flight: 3,
        max_staleness: 8,
        stale_policy: "tis",
        poll_ms: 50,
      },
      seed: 1,
    },
    stack.services,
    {
      progress: silentProgress(),
      hooks: {
        beforeTrain: () => {
          trainStart = Date.now();
        },
        afterStep: () => {
          trainIntervals.push([trainStart, Date.now()]);
        },
      },
    },
  );
  const t1 = Date.now();
  // Generation intervals: every model call of the run, from its upstream latency.
  const busy: [number, number][] = [...trainIntervals];
  let cursor: string | undefined;
  while (true) {
    const page = await stack.client.listRollouts({
      labels: { run: name },
      limit: 500,
      ...(cursor ? { after: cursor } : {}),
    });
    for (const r of page.items) {
      for (const e of await stack.client.listEvents(r.rollout_id, { type: "model_request" })) {
        if (e.type !== "model_request") continue;
        busy.push([e.created_at - e.payload.latency_ms, e.created_at]);
      }
    }
    if (!page.next_cursor) break;
    cursor = page.next_cursor;
  }
  const clipped = busy.map(([a, b]) => ({ start: Math.max(a, t0), end: Math.min(b, t1) }));
  const busyMs = unionSpans(clipped).reduce((sum, s) => sum + s.end - s.start, 0);
  const wall = t1 - t0;
  return {
    mode,
    wall_s: wall / 1000,
    idle_share: 1 - busyMs / wall,
    metrics: result.metrics,
  };
}

try {
  console.log(`bench:async — ${STEPS} steps × 2 groups × 4 rollouts, Pareto harness delays`);
  const sync = await runMode("sync");
  console.log(`sync: ${sync.wall_s.toFixed(1)}s, idle ${(sync.idle_share * 100).toFixed(1)}%`);
  const asyncRun = await runMode("collocated_async");
  console.log(
    `collocated_async: ${asyncRun.wall_s.toFixed(1)}s, idle ${
      (asyncRun.idle_share * 100).toFixed(1)
    }%, max staleness ${Math.max(...asyncRun.metrics.map((m) => m.staleness_max))}, held calls ${
      asyncRun.metrics.reduce((a, m) => a + m.held_calls, 0)
    }`,
  );
  console.log(`async_over_sync_speedup: ${(sync.wall_s / asyncRun.wall_s).toFixed(3)}`);
  console.log(`sync_idle_share: ${sync.idle_share.toFixed(3)}`);
  console.log(`async_idle_share: ${asyncRun.idle_share.toFixed(3)}`);
} finally {
  await stack.close();
  await Deno.remove(dir, { recursive: true }).catch(() => undefined);
}
