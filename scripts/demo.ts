/**
 * `deno task demo` — the main job of reins on embedded defaults: a SQLite gateway with the
 * proxy, a local controller running the built-in harness on the toy arithmetic environment
 * (calculator tool), a local CPU PyTorch worker with a tiny char-level model, an SFT warm start
 * on mixed demonstrations (half call the calculator, half guess a wrong number without it), then
 * collocated-async RL, which has to discover from reward alone that the calculator pays. Ends with a summary table, the lines `reward_before: <n>` and
 * `reward_after: <n>`, and figures under `runs/<name>/`.
 *
 * Flags: `--name <run>` (default `demo`), `--resume` (continue a killed run), `--steps <n>`
 * (20), `--sft-steps <n>` (400), `--tasks <k>` (1: how many arithmetic questions), `--mode
 * sync|collocated_async`, `--concurrency <n>` (8), `--eval-rollouts <n>` (32), `--no-png`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { assembleRollout } from "../lib/samples/mod.ts";
import { Plot, plot, saveFigure, table } from "../lib/plot/mod.ts";
import type { LoopConfigInput, ScheduleMode } from "../lib/schema/loop.ts";
import { loadCharTokenizer } from "../lib/tokens/mod.ts";
import {
  type EvalResult,
  evaluatePolicy,
  type LoopContext,
  runLoop,
  startEmbedded,
  toyArithmeticTasks,
  toyHarness,
  toyLoopTasks,
  toyModel,
  toySftRows,
  writeToyDataset,
} from "../lib/loop/mod.ts";
import { ensureSystemDeps } from "./ensure_deps.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    name: { type: "string", default: "demo" },
    resume: { type: "boolean", default: false },
    steps: { type: "string", default: "20" },
    "sft-steps": { type: "string", default: "400" },
    tasks: { type: "string", default: "1" },
    mode: { type: "string", default: "collocated_async" },
    concurrency: { type: "string", default: "8" },
    "eval-rollouts": { type: "string", default: "32" },
    "no-png": { type: "boolean", default: false },
  },
});

/** torch for the worker: Debian's python3-torch via apt, else pip. */
async function ensureTorch(): Promise<void> {
  const missing = await ensureSystemDeps({ only: ["torch", "fonts"] });
  if (!missing.includes("torch")) return;
  console.log("demo: torch not found; trying pip install torch (CPU wheels)");
  const pip = await new Deno.Command("python3", {
    args: ["-m", "pip", "install", "--quiet", "torch"],
    stdout: "inherit",
    stderr: "inherit",
  }).output().catch(() => null);
  if (!pip?.success) {
    throw new Error(
      "demo: torch is missing; install it with `apt-get install -y python3-torch` (Debian) " +
        "or `pip install torch`",
    );
  }
}

const started = performance.now();
await ensureTorch();
const name = args.name!;
const outDir = `runs/${name}`;
if (!args.resume) await Deno.remove(outDir, { recursive: true }).catch(() => undefined);
await Deno.mkdir(outDir, { recursive: true });

const tokenizer = await loadCharTokenizer();
const allTasks = toyArithmeticTasks();
// A fixed, seeded choice of `--tasks` questions (see docs/loop.md for why the CPU demo uses few).
const shuffled = [...allTasks].sort((a, b) => hash(a.id) - hash(b.id));
const trainTasks = shuffled.slice(0, Number(args.tasks));
const evalTasks = Array.from(
  { length: Number(args["eval-rollouts"]) },
  (_, i) => trainTasks[i % trainTasks.length],
);
const dataDir = await writeToyDataset(`${outDir}/data`, allTasks);

const config: LoopConfigInput = {
  name,
  out_dir: outDir,
  tasks: toyLoopTasks(trainTasks),
  harness: toyHarness(dataDir),
  model: toyModel(tokenizer, { d_model: 64, n_layers: 2, max_seq_len: 512 }),
  // One batch = each demonstration once (a larger one only repeats identical rows).
  sft: { steps: Number(args["sft-steps"]), batch_size: 2 * Number(args.tasks), lr: 3e-3 },
  // Small steps, four PPO epochs per batch inside the clip's trust region, and a warmup for the
  // fresh AdamW: larger single steps wreck this tiny policy (docs/loop.md has the sweep).
  optimizer: { lr: 3e-4, grad_clip: 1, warmup_steps: 12 },
  ppo_epochs: 4,
  loss: { kind: "ppo", clip_low: 0.2, clip_high: 0.28 },
  // Short rows: CPU attention cost grows with the row length squared.
  micro_token_budget: 1024,
  group_size: 8,
  groups_per_step: 3,
  steps: Number(args.steps),
  schedule: {
    mode: args.mode as ScheduleMode,
    max_staleness: 2,
    stale_policy: "tis",
    poll_ms: 100,
  },
  checkpoint_every: 2,
  seed: 0,
};

console.log(
  `reins demo: run "${name}" in ${outDir} — ${trainTasks.length} arithmetic task(s) ` +
    `(${trainTasks.map((t) => JSON.stringify(t.question)).join(", ")}), ` +
    `built-in harness + calculator, ${config.schedule?.mode}`,
);
const stack = await startEmbedded({
  outDir,
  tokenizer,
  concurrency: Number(args.concurrency),
  threads: 2,
  registry: { dataDir },
});
let before: EvalResult | null = null;
let after: EvalResult;
let result;
try {
  console.log(
    `gateway ${stack.gateway.url} (SQLite ${outDir}/gateway.db), worker ${stack.worker.url}`,
  );
  result = await runLoop(config, stack.services, {
    resume: args.resume,
    // Half the demonstrations guess without the calculator (and are wrong): RL has to learn
    // from reward alone that the tool pays.
    sftRows: toySftRows(tokenizer, trainTasks, { guesses: 1 }),
    beforeSteps: async (ctx: LoopContext) => {
      if (ctx.state.rewardBefore !== null) return;
      before = await evaluatePolicy(ctx.gateway, ctx.config, "before", toyLoopTasks(evalTasks), {
        onStatus: (s) => ctx.progress.status(s),
      });
      ctx.state.rewardBefore = before.reward_mean;
      ctx.progress.log(
        `eval before RL (policy v${ctx.state.version}): reward ${before.reward_mean.toFixed(3)} ` +
          `over ${before.rollouts} eval rollouts`,
      );
    },
  });
  const ctx = result.context;
  after = await evaluatePolicy(ctx.gateway, ctx.config, "after", toyLoopTasks(evalTasks), {
    onStatus: (s) => ctx.progress.status(s),
  });
  ctx.progress.log(
    `eval after RL (policy v${ctx.state.version}): reward ${after.reward_mean.toFixed(3)}`,
  );

  // Samples per rollout over every training rollout of the run.
  const perRollout: number[] = [];
  let cursor: string | undefined;
  while (true) {
    const page = await stack.client.listRollouts({
      labels: { run: name },
      mode: "train",
      limit: 500,
      ...(cursor ? { after: cursor } : {}),
    });
    for (const r of page.items) {
      if (r.status !== "succeeded") continue;
      const events = await stack.client.listEvents(r.rollout_id, { type: "model_request" });
      perRollout.push(assembleRollout(events, { tokenizer }).samples.length);
    }
    if (!page.next_cursor) break;
    cursor = page.next_cursor;
  }
  await writeFigures(result.metrics, perRollout, before, after);

  const rewardBefore = ctx.state.rewardBefore ?? 0;
  const m = result.metrics;
  const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
  const aligned = m.filter((x) => x.alignment_corr !== null).map((x) => x.alignment_corr!);
  const spr = mean(perRollout);
  console.log(
    "\n" + table([
      { metric: "eval reward", before: rewardBefore, after: after.reward_mean },
      {
        metric: "train reward (first/last 3 steps)",
        before: mean(m.slice(0, 3).map((x) => x.reward_mean)),
        after: mean(m.slice(-3).map((x) => x.reward_mean)),
      },
      { metric: "policy version", before: result.base_version, after: result.policy_version },
      { metric: "samples per rollout", before: spr, after: spr },
      {
        metric: "single-sample rollouts (share)",
        before: perRollout.filter((n) => n === 1).length / Math.max(1, perRollout.length),
        after: perRollout.filter((n) => n === 1).length / Math.max(1, perRollout.length),
      },
      {
        metric: "alignment corr (same-version, min)",
        before: aligned.length ? Math.min(...aligned) : NaN,
        after: aligned.length ? aligned.at(-1)! : NaN,
      },
      {
        metric: "held LLM calls (all updates)",
        before: 0,
        after: m.reduce((a, x) => a + x.held_calls, 0),
      },
    ], { digits: 4 }).text(),
  );
  console.log(`\nwall time: ${((performance.now() - started) / 1000).toFixed(1)}s`);
  console.log(`figures: ${outDir}/reward_curve.svg, ${outDir}/samples_per_rollout.svg`);
  console.log(`reward_before: ${rewardBefore.toFixed(4)}`);
  console.log(`reward_after: ${after.reward_mean.toFixed(4)}`);
} finally {
  await stack.close();
}

function hash(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619) >>> 0;
  return h;
}

async function writeFigures(
  metrics: { step: number; reward_mean: number; pass_rate: number }[],
  perRollout: number[],
  before: EvalResult | null,
  after: EvalResult,
): Promise<void> {
  const points = metrics.map((m) => ({ step: m.step + 1, reward: m.reward_mean, series: "train" }));
  const evals = [
    ...(before ? [{ step: 0, reward: before.reward_mean, series: "eval" }] : []),
    { step: metrics.length, reward: after.reward_mean, series: "eval" },
  ];
  const curve = plot({
    title: "Toy arithmetic: reward per RL step",
    x: { label: "RL step" },
    y: { label: "mean reward", domain: [0, 1] },
    color: { legend: true },
    marks: [
      Plot.lineY(points, { x: "step", y: "reward", stroke: "series" }),
      Plot.dot(evals, { x: "step", y: "reward", fill: "series", r: 5 }),
      Plot.ruleY([0]),
    ],
  });
  const counts = new Map<number, number>();
  for (const n of perRollout) counts.set(n, (counts.get(n) ?? 0) + 1);
  const bars = [...counts].sort((a, b) => a[0] - b[0]).map(([samples, rollouts]) => ({
    samples,
    rollouts,
  }));
  const dist = plot({
    title: "Samples per rollout (prefix_merge)",
    x: { label: "samples in the rollout", type: "band" },
    y: { label: "rollouts" },
    marks: [Plot.barY(bars, { x: "samples", y: "rollouts" }), Plot.ruleY([0])],
  });
  const png = !args["no-png"];
  await saveFigure(curve, "reward_curve", { dir: outDir, png }).catch(async (error) => {
    console.error(`demo: PNG export failed (${(error as Error).message}); SVG only`);
    await saveFigure(curve, "reward_curve", { dir: outDir });
  });
  await saveFigure(dist, "samples_per_rollout", { dir: outDir, png }).catch(async () => {
    await saveFigure(dist, "samples_per_rollout", { dir: outDir });
  });
}
