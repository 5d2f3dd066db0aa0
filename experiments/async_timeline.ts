/**
 * Sync vs collocated async on the same workload, measured as a timeline (the paper's
 * Figure 6 analogue): every rollout's harness interval, every update phase, every LLM call
 * (device busy generating), the calls held by the phase gate when an update began, and the
 * device's busy/idle share over the run.
 *
 * The workload: the toy arithmetic task on the built-in harness, each rollout's harness first
 * waiting a Pareto-distributed time drawn from its rollout id (most short, a few long, as
 * agent episodes are), an untrained tiny policy and a scripted reward that splits every group
 * (this measures time, not learning).
 *
 * @module
 */
import { builtinResolver } from "../lib/harness/builtin/resolver.ts";
import type { HarnessResolver } from "../lib/controller/local_backend.ts";
import type { RewardContext } from "../lib/controller/reward_hooks.ts";
import type { LocalHarness } from "../lib/controller/schema.ts";
import type { LoopStepMetrics, ScheduleMode } from "../lib/loop/schema.ts";
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

/** A time interval in seconds since the run's start. */
export interface Span {
  start: number;
  end: number;
}

/** One mode's measured timeline. */
export interface ModeTimeline {
  mode: ScheduleMode;
  wall_s: number;
  /** Harness intervals (first attempt start → last attempt end), ordered by start. */
  rollouts: (Span & { rollout_id: string; delay_s: number })[];
  /** Update phases (drained → trained and the new version registered). */
  updates: (Span & { step: number; held_calls: number; in_flight: number })[];
  /**
   * LLM calls with their rollout: from arrival at the proxy to the answer (a call held by an
   * update phase includes the hold).
   */
  calls: (Span & { rollout_id: string })[];
  /** Union of generation and update intervals. */
  busy: Span[];
  idle_share: number;
  metrics: LoopStepMetrics[];
}

/** What {@link measureTimeline} returns. */
export interface TimelineResult {
  sync: ModeTimeline;
  async: ModeTimeline;
  /** sync wall time / async wall time. */
  speedup: number;
  settings: TimelineOptions;
}

/** Options of {@link measureTimeline}. */
export interface TimelineOptions {
  steps?: number;
  group_size?: number;
  groups_per_step?: number;
  /** Pareto scale (s), shape and cap (s) of the harness delay. */
  delay_scale_s?: number;
  delay_alpha?: number;
  delay_cap_s?: number;
  /** Harness processes at once. */
  concurrency?: number;
  /** The async schedule's groups in flight beyond a step's (the schedule's default if unset). */
  extra_groups_in_flight?: number;
  /**
   * Run name per mode (default `timeline-<mode>-<attempt>`; a retry appends `-<attempt>`):
   * the harness delays are drawn from the rollout ids, so the names fix the workload.
   */
  run_names?: Partial<Record<ScheduleMode, string>>;
}

/**
 * The harness delay of a rollout: Pareto(scale, alpha) from an FNV hash of its id, capped.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { paretoDelayS } from "./async_timeline.ts";
 * const delay = paretoDelayS("run-g0-r0", 0.3, 1.2, 8);
 * assert.equal(delay, paretoDelayS("run-g0-r0", 0.3, 1.2, 8)); // a function of the id
 * assert.ok(delay >= 0.3 && delay <= 8); // at least the scale, at most the cap
 * ```
 */
export function paretoDelayS(id: string, scale: number, alpha: number, cap: number): number {
  let h = 2166136261;
  for (let i = 0; i < id.length; i++) h = Math.imul(h ^ id.charCodeAt(i), 16777619);
  const u = ((h >>> 0) + 0.5) / 4294967296;
  return Math.min(cap, scale / Math.pow(u, 1 / alpha));
}

/**
 * Merges overlapping spans.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { unionSpans } from "./async_timeline.ts";
 * assert.deepEqual(
 *   unionSpans([{ start: 0, end: 2 }, { start: 1, end: 3 }, { start: 5, end: 6 }]),
 *   [{ start: 0, end: 3 }, { start: 5, end: 6 }],
 * );
 * ```
 */
export function unionSpans(spans: Span[]): Span[] {
  const sorted = spans.filter((s) => s.end > s.start).sort((a, b) => a.start - b.start);
  const out: Span[] = [];
  for (const s of sorted) {
    const last = out.at(-1);
    if (last && s.start <= last.end) last.end = Math.max(last.end, s.end);
    else out.push({ ...s });
  }
  return out;
}

/**
 * Runs the same workload in `sync` and in `collocated_async` on one embedded stack and
 * returns both timelines.
 *
 * @example
 * ```ts ignore
 * const t = await measureTimeline({ steps: 3 });
 * t.speedup; // e.g. 1.6
 * ```
 */
export async function measureTimeline(options: TimelineOptions = {}): Promise<TimelineResult> {
  const settings:
    & Required<Omit<TimelineOptions, "extra_groups_in_flight" | "run_names">>
    & TimelineOptions = {
      steps: 3,
      group_size: 4,
      groups_per_step: 2,
      delay_scale_s: 0.3,
      delay_alpha: 1.2,
      delay_cap_s: 8,
      concurrency: 16,
      ...options,
    };
  const delayOf = (id: string) =>
    paretoDelayS(id, settings.delay_scale_s, settings.delay_alpha, settings.delay_cap_s);
  const dir = await Deno.makeTempDir({ prefix: "reins_timeline_" });
  const tokenizer = await loadCharTokenizer();
  const tasks = toyArithmeticTasks();
  const dataDir = await writeToyDataset(`${dir}/data`, tasks);
  const builtin = builtinResolver({ env: "arithmetic", rewardFunction: "timeline_split" });
  const slow: HarnessResolver = (opts, rollout) => {
    const spec = builtin(opts, rollout) as LocalHarness;
    const delay = delayOf(rollout.rollout_id).toFixed(2);
    return { ...spec, command: ["sh", "-c", `sleep ${delay}; exec "$@"`, "sh", ...spec.command] };
  };
  // Half of each group gets 1: every group trains whatever the untrained policy says.
  const split = (ctx: RewardContext) =>
    Number(/-r(\d+)$/.exec(ctx.rollout.rollout_id)?.[1] ?? 0) < settings.group_size / 2 ? 1 : 0;
  const stack = await startEmbedded({
    outDir: dir,
    tokenizer,
    concurrency: settings.concurrency,
    threads: 2,
    registry: {
      dataDir,
      extra: { "timeline-slow": slow },
      extraRewards: { timeline_split: split },
    },
  });

  const runMode = async (mode: ScheduleMode, attempt: number): Promise<ModeTimeline> => {
    const given = settings.run_names?.[mode];
    const name = given === undefined
      ? `timeline-${mode.replace("_", "-")}-${attempt}`
      : attempt === 1
      ? given
      : `${given}-${attempt}`;
    const updates: ModeTimeline["updates"] = [];
    let trainStart = 0;
    let held = 0;
    let inFlight = 0;
    const t0 = Date.now();
    const result = await runLoop(
      {
        name,
        out_dir: `${dir}/${name}`,
        tasks: toyLoopTasks(tasks),
        harness: {
          name: "timeline-slow",
          // A process: the slow resolver wraps its command in a sleep.
          options: toyHarness(dataDir, { max_tokens: 32, runner: "process" }).options,
        },
        model: toyModel(tokenizer, { d_model: 64, n_layers: 2, max_seq_len: 512 }),
        group_size: settings.group_size,
        groups_per_step: settings.groups_per_step,
        steps: settings.steps,
        checkpoint_every: 0,
        schedule: {
          mode,
          max_staleness: 8,
          stale_policy: "tis",
          poll_ms: 50,
          ...(settings.extra_groups_in_flight !== undefined
            ? { extra_groups_in_flight: settings.extra_groups_in_flight }
            : {}),
        },
        seed: 1,
      },
      stack.services,
      {
        progress: silentProgress(),
        hooks: {
          beforeTrain: async () => {
            trainStart = Date.now();
            const phase = await stack.client.getPhase();
            held = phase.held;
            inFlight = phase.in_flight;
          },
          afterStep: (m) => {
            updates.push({
              step: m.step,
              start: (trainStart - t0) / 1000,
              end: (Date.now() - t0) / 1000,
              held_calls: Math.max(held, m.held_calls),
              in_flight: inFlight,
            });
          },
        },
      },
    );
    const t1 = Date.now();
    const rollouts: ModeTimeline["rollouts"] = [];
    const calls: ModeTimeline["calls"] = [];
    let cursor: string | undefined;
    while (true) {
      const page = await stack.client.listRollouts({
        labels: { run: name },
        limit: 500,
        ...(cursor ? { after: cursor } : {}),
      });
      for (const r of page.items) {
        if (r.labels.kind === "run" || r.attempts.length === 0) continue;
        const start = Math.min(...r.attempts.map((a) => a.started_at));
        const end = Math.max(...r.attempts.map((a) => a.ended_at ?? t1));
        rollouts.push({
          rollout_id: r.rollout_id,
          start: (start - t0) / 1000,
          end: (Math.min(end, t1) - t0) / 1000,
          delay_s: delayOf(r.rollout_id),
        });
        for (const e of await stack.client.listEvents(r.rollout_id, { type: "model_request" })) {
          if (e.type !== "model_request") continue;
          const a = Math.max(e.created_at - e.payload.latency_ms, t0);
          const b = Math.min(e.created_at, t1);
          if (b > a) {
            calls.push({ rollout_id: r.rollout_id, start: (a - t0) / 1000, end: (b - t0) / 1000 });
          }
        }
      }
      if (!page.next_cursor) break;
      cursor = page.next_cursor;
    }
    rollouts.sort((a, b) => a.start - b.start);
    // A call that arrived during an update and finished after it was held by the phase gate
    // (its recorded latency includes the hold).
    for (const u of updates) {
      const heldHere = calls.filter((c) => c.start > u.start && c.start < u.end && c.end >= u.end)
        .length;
      u.held_calls = Math.max(u.held_calls, heldHere);
    }
    const wall_s = (t1 - t0) / 1000;
    const busy = unionSpans([...calls, ...updates]);
    const busyS = busy.reduce((acc, s) => acc + (s.end - s.start), 0);
    return {
      mode,
      wall_s,
      rollouts,
      updates,
      calls,
      busy,
      idle_share: 1 - busyS / wall_s,
      metrics: result.metrics,
    };
  };

  // A run's bookkeeping rollout can be claimed by the controller already running for the
  // previous run (a race of a shared stack) before anything trains: retry with a new name.
  const withRetry = async (mode: ScheduleMode): Promise<ModeTimeline> => {
    for (let attempt = 1;; attempt++) {
      try {
        return await runMode(mode, attempt);
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        if (attempt >= 3 || !/-run' cannot go from/.test(message)) throw error;
      }
    }
  };
  try {
    const sync = await withRetry("sync");
    const async = await withRetry("collocated_async");
    return { sync, async, speedup: sync.wall_s / async.wall_s, settings };
  } finally {
    await stack.close();
    await Deno.remove(dir, { recursive: true }).catch(() => undefined);
  }
}
