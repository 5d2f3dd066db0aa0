/**
 * `deno task demo` — the main job of reins on embedded defaults: a SQLite gateway with the
 * proxy, a local controller running the built-in harness on the toy arithmetic environment
 * (calculator tool), a local CPU PyTorch worker with a tiny char-level model, an SFT warm start
 * on mixed demonstrations (per question, one calls the calculator, one guesses a wrong number
 * without it), then collocated-async RL, which has to discover from reward alone that the
 * calculator pays, on several questions.
 *
 * It evaluates the policy before and after RL on the same prompts and the same sampling seeds
 * and reports mean reward ± 95% CI and the paired difference; prints every phase's progress with
 * an ETA (a line every ~10 s when stdout is not a terminal); ends with the lines
 * `reward_before:`, `reward_after:`, their `_ci95`, `reward_gain:` and `demo_wall_s:`, and
 * figures under `runs/<name>/`. Flags: `--help` (scripts/demo_args.ts); they are validated
 * before anything on disk is touched, and an existing run is never deleted without
 * `--overwrite`.
 *
 * @module
 */
import { assembleRollout } from "../lib/samples/mod.ts";
import { Plot, plot, saveFigure, table } from "../lib/plot/mod.ts";
import type { LoopConfigInput, LoopStepMetrics } from "../lib/loop/schema.ts";
import { mismatchBreaches } from "../lib/algo/alignment.ts";
import { CHAR_TOKENIZER_DIR, loadCharTokenizer } from "../lib/tokens/mod.ts";
import { describeCpu } from "../lib/trainer/mod.ts";
import { meanCi } from "../lib/util/stats.ts";
import {
  compareEvals,
  type EvalResult,
  evaluatePolicy,
  formatCi,
  type LoopContext,
  runLoop,
  startEmbedded,
  terminalProgress,
  toyArithmeticTasks,
  toyHarness,
  toyLoopTasks,
  toyModel,
  toySftRows,
  writeToyDataset,
} from "../lib/loop/mod.ts";
import {
  chooseRunDir,
  DEMO_USAGE,
  type DemoArgs,
  DemoArgsError,
  parseDemoArgs,
} from "./demo_args.ts";
import { ensureSystemDeps } from "./ensure_deps.ts";

let args: DemoArgs;
try {
  args = parseDemoArgs(Deno.args);
} catch (error) {
  if (!(error instanceof DemoArgsError)) throw error;
  console.error(`demo: ${error.message}\n${DEMO_USAGE}`);
  Deno.exit(2);
}
if (args.help) {
  console.log(DEMO_USAGE);
  Deno.exit(0);
}

/** torch for the worker: Debian's python3-torch (+ OpenBLAS) via apt, else pip. */
async function ensureTorch(): Promise<void> {
  const missing = await ensureSystemDeps({ only: ["torch", "blas", "fonts"] });
  if (!missing.includes("torch")) return;
  console.log("demo: torch not found; trying pip install torch (CPU wheels)");
  const pip = await new Deno.Command("python3", {
    args: ["-m", "pip", "install", "--quiet", "torch"],
    stdout: "inherit",
    stderr: "inherit",
  }).output().catch(() => null);
  if (!pip?.success) {
    throw new Error(
      "demo: torch is missing; install it with `apt-get install -y python3-torch " +
        "libopenblas0-pthread` (Debian) or `pip install torch`",
    );
  }
}

function loadAverage(): string {
  try {
    return Deno.readTextFileSync("/proc/loadavg").split(" ")[0];
  } catch {
    return "?";
  }
}

const started = performance.now();
const loadAtStart = loadAverage();
const run = chooseRunDir(args, "runs");
await ensureTorch();
if (run.note) console.log(`demo: ${run.note}`);
if (run.replace) {
  console.log(`demo: --overwrite: deleting ${run.dir}`);
  await Deno.remove(run.dir, { recursive: true });
}
const name = run.name;
const outDir = run.dir;
await Deno.mkdir(outDir, { recursive: true });

const tokenizer = await loadCharTokenizer();
const allTasks = toyArithmeticTasks();
// A fixed, seeded choice of `--tasks` questions (see docs/loop.md for why the CPU demo uses few).
const shuffled = [...allTasks].sort((a, b) => hash(a.id) - hash(b.id));
const trainTasks = shuffled.slice(0, args.tasks);
// The evaluation: rollout i asks question i mod k with its own fixed sampling seed, before and
// after RL alike.
const evalTasks = Array.from(
  { length: args.evalRollouts },
  (_, i) => trainTasks[i % trainTasks.length],
);
const dataDir = await writeToyDataset(`${outDir}/data`, allTasks);
const groupSize = 8;
const groupsPerStep = 3;

const config: LoopConfigInput = {
  name,
  out_dir: outDir,
  tasks: toyLoopTasks(trainTasks),
  harness: toyHarness(dataDir),
  model: toyModel(tokenizer, { d_model: 64, n_layers: 2, max_seq_len: 512 }),
  // One batch = each demonstration once (a larger one only repeats identical rows).
  sft: { steps: args.sftSteps, batch_size: 2 * args.tasks, lr: 3e-3 },
  // Small steps, four PPO epochs per batch inside the clip's trust region, and a warmup for the
  // fresh AdamW: larger single steps wreck this tiny policy (docs/loop.md has the sweep).
  optimizer: { lr: 3e-4, grad_clip: 1, warmup_steps: 12 },
  ppo_epochs: 4,
  loss: { kind: "ppo", clip_low: 0.2, clip_high: 0.28 },
  // Short rows: CPU attention cost grows with the row length squared.
  micro_token_budget: 1024,
  group_size: groupSize,
  groups_per_step: groupsPerStep,
  steps: args.steps,
  schedule: { mode: args.mode, max_staleness: 2, stale_policy: "tis", poll_ms: 100 },
  checkpoint_every: 2,
  seed: 0,
};

console.log(
  `reins demo: run "${name}" in ${outDir} — ${trainTasks.length} arithmetic question(s) ` +
    `(${trainTasks.map((t) => JSON.stringify(t.question)).join(", ")}), ` +
    `built-in harness + calculator, ${args.mode}`,
);
console.log(
  `plan: SFT ${args.sftSteps} steps × ${2 * args.tasks} demonstrations; evaluation ` +
    `${args.evalRollouts} rollouts before and after RL (same prompts and sampling seeds); ` +
    `${args.steps} RL steps × ${groupsPerStep} groups × ${groupSize} rollouts`,
);
console.log(`machine: ${navigator.hardwareConcurrency} CPUs, load average ${loadAtStart}`);
const progress = terminalProgress();
const stack = await startEmbedded({
  outDir,
  tokenizer,
  concurrency: args.concurrency,
  // One torch/BLAS thread: this model's matmuls are too small to gain from a second, and the
  // harness processes need the other core (measured under load: SFT steps 2× faster than with 2).
  threads: 1,
  registry: { dataDir },
  // --engine llama_cpp: llama.cpp samples (one thread: the harnesses need the other core),
  // synced with an f32 GGUF export of every new version.
  ...(args.engine === "llama_cpp"
    ? {
      engine: {
        kind: "llama_cpp" as const,
        tokenizerDir: decodeURIComponent(CHAR_TOKENIZER_DIR.pathname),
        threads: 1,
      },
    }
    : {}),
});
let before: EvalResult | null = null;
let after: EvalResult;
try {
  const health = await stack.worker.client.health();
  // A slow BLAS is also warned about (with the fix) by the worker's start on stderr.
  console.log(
    `worker: ${describeCpu(health)}${health.cpu_warning ? " — SLOW, see the warning above" : ""}`,
  );
  console.log(
    `gateway ${stack.gateway.url} (SQLite ${outDir}/gateway.db), worker ${stack.worker.url}` +
      (stack.engine ? `, sampler: llama.cpp engine ${stack.engine.url}` : ""),
  );
  const evaluate = (ctx: LoopContext, label: string) =>
    evaluatePolicy(ctx.gateway, ctx.config, label, toyLoopTasks(evalTasks), {
      onStatus: (text, count) => ctx.progress.status(text, count),
    });
  const result = await runLoop(config, stack.services, {
    resume: args.resume,
    progress,
    // Half the demonstrations guess without the calculator (and are wrong): RL has to learn
    // from reward alone that the tool pays.
    sftRows: toySftRows(tokenizer, trainTasks, { guesses: 1 }),
    // The engine–trainer mismatch of every step, as the field measures it.
    hooks: {
      afterStep: (m) => progress.log(mismatchLine(m)),
    },
    beforeSteps: async (ctx: LoopContext) => {
      // Idempotent: a resumed run finds its finished evaluation rollouts again.
      before = await evaluate(ctx, "before");
      ctx.state.rewardBefore ??= before.reward_mean;
      ctx.progress.log(
        `eval before RL (policy v${ctx.state.version}): reward ${
          formatCi(meanCi(before.rewards))
        } ` +
          `(95% CI) over ${before.rollouts} rollouts in ${(before.wall_ms / 1000).toFixed(1)}s`,
      );
    },
  });
  const ctx = result.context;
  after = await evaluate(ctx, "after");
  ctx.progress.log(
    `eval after RL (policy v${ctx.state.version}): reward ${formatCi(meanCi(after.rewards))} ` +
      `(95% CI) over ${after.rollouts} rollouts in ${(after.wall_ms / 1000).toFixed(1)}s`,
  );
  const b = before as EvalResult | null;
  if (!b) throw new Error("the evaluation before RL did not run");

  // Samples per rollout over every training rollout of the run (a run-wide value).
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
  await writeFigures(result.metrics, perRollout, b, after);

  const m = result.metrics;
  const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / Math.max(1, xs.length);
  const aligned = m.filter((x) => x.alignment_corr !== null).map((x) => x.alignment_corr!);
  const gain = compareEvals(b, after);
  const n = after.rollouts;
  console.log(
    "\n" + table([
      {
        "": `eval reward (mean ± 95% CI, n=${n})`,
        "before RL": formatCi(meanCi(b.rewards)),
        "after RL": formatCi(meanCi(after.rewards)),
      },
      { "": "eval pass rate", "before RL": b.pass_rate, "after RL": after.pass_rate },
      {
        "": "policy version",
        "before RL": `v${result.base_version}`,
        "after RL": `v${result.policy_version}`,
      },
    ], { digits: 3 }).text(),
  );
  console.log(
    `\nafter − before: ${gain.diff.mean >= 0 ? "+" : ""}${formatCi(gain.diff)} (95% CI, ` +
      `${gain.paired ? `paired: the same ${n} prompts and sampling seeds` : "unpaired"}) — ` +
      (gain.separated ? "the interval excludes 0" : "not separated from 0 at this size"),
  );
  console.log(
    "\n" + table([
      {
        "run-wide": "train reward, first 3 RL steps",
        value: mean(m.slice(0, 3).map((x) => x.reward_mean)),
      },
      {
        "run-wide": "train reward, last 3 RL steps",
        value: mean(m.slice(-3).map((x) => x.reward_mean)),
      },
      {
        "run-wide": `samples per rollout (${perRollout.length} training rollouts)`,
        value: mean(perRollout),
      },
      {
        "run-wide": "single-sample rollouts (share)",
        value: perRollout.filter((x) => x === 1).length / Math.max(1, perRollout.length),
      },
      {
        "run-wide": "alignment corr (same version, min over steps)",
        value: aligned.length ? Math.min(...aligned) : "-",
      },
      {
        "run-wide": "held LLM calls (all updates)",
        value: m.reduce((a, x) => a + x.held_calls, 0),
      },
    ], { digits: 4 }).text(),
  );
  const wall = (performance.now() - started) / 1000;
  console.log(
    `\nwall time: ${wall.toFixed(1)}s (load average ${loadAtStart} at start, ` +
      `${loadAverage()} at end, ${navigator.hardwareConcurrency} CPUs)`,
  );
  console.log(`figures: ${outDir}/reward_curve.svg, ${outDir}/samples_per_rollout.svg`);
  console.log(`reward_before: ${b.reward_mean.toFixed(4)}`);
  console.log(`reward_before_ci95: ${b.reward_ci95.toFixed(4)}`);
  console.log(`reward_after: ${after.reward_mean.toFixed(4)}`);
  console.log(`reward_after_ci95: ${after.reward_ci95.toFixed(4)}`);
  console.log(`reward_gain: ${gain.diff.mean.toFixed(4)}`);
  console.log(`reward_gain_ci95: ${gain.diff.ci95.toFixed(4)}`);
  const measured = m.filter((x) => x.alignment_tokens > 0);
  const worst = (f: (x: LoopStepMetrics) => number, pick: (...xs: number[]) => number) =>
    measured.length ? pick(...measured.map(f)) : NaN;
  console.log(`sampler: ${args.engine}`);
  console.log(`mismatch_pearson_min: ${worst((x) => x.alignment_corr ?? 1, Math.min)}`);
  console.log(`mismatch_mean_abs_dp_max: ${worst((x) => x.alignment_mean_abs_dp, Math.max)}`);
  console.log(
    `mismatch_max_abs_dlogprob_max: ${worst((x) => x.alignment_max_abs_dlogprob, Math.max)}`,
  );
  console.log(`mismatch_k3_kl_max: ${worst((x) => x.alignment_k3_kl, Math.max)}`);
  console.log(`mismatch_ess_min: ${worst((x) => x.alignment_ess, Math.min)}`);
  console.log(`demo_wall_s: ${wall.toFixed(1)}`);
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
  before: EvalResult,
  after: EvalResult,
): Promise<void> {
  const points = metrics.map((m) => ({ step: m.step + 1, reward: m.reward_mean, series: "train" }));
  const evals = [[0, before], [metrics.length, after]].map(([step, e]) => {
    const r = e as EvalResult;
    return {
      step: step as number,
      reward: r.reward_mean,
      lo: r.reward_mean - r.reward_ci95,
      hi: r.reward_mean + r.reward_ci95,
      series: "eval (95% CI)",
    };
  });
  const curve = plot({
    title: "Toy arithmetic: reward per RL step",
    x: { label: "RL step" },
    y: { label: "mean reward", domain: [0, 1] },
    color: { legend: true },
    marks: [
      Plot.lineY(points, { x: "step", y: "reward", stroke: "series" }),
      Plot.ruleX(evals, { x: "step", y1: "lo", y2: "hi", stroke: "series" }),
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
    title: "Samples per rollout (prefix_merge, every training rollout of the run)",
    x: { label: "samples in the rollout", type: "band" },
    y: { label: "rollouts" },
    marks: [Plot.barY(bars, { x: "samples", y: "rollouts" }), Plot.ruleY([0])],
  });
  await saveFigure(curve, "reward_curve", { dir: outDir, png: args.png }).catch(async (error) => {
    console.error(`demo: PNG export failed (${(error as Error).message}); SVG only`);
    await saveFigure(curve, "reward_curve", { dir: outDir });
  });
  await saveFigure(dist, "samples_per_rollout", { dir: outDir, png: args.png }).catch(async () => {
    await saveFigure(dist, "samples_per_rollout", { dir: outDir });
  });
}

/** One step's engine–trainer mismatch, with the thresholds it is judged by. */
function mismatchLine(m: LoopStepMetrics): string {
  if (m.alignment_tokens === 0) return `step ${m.step + 1} mismatch: no same-version tokens`;
  const e = (x: number) => x.toExponential(2);
  const breaches = mismatchBreaches({
    tokens: m.alignment_tokens,
    pearson_prob: m.alignment_corr,
    mean_abs_dp: m.alignment_mean_abs_dp,
    max_abs_dlogprob: m.alignment_max_abs_dlogprob,
    k3_kl: m.alignment_k3_kl,
    ess: m.alignment_ess,
  });
  return `step ${m.step + 1} mismatch (${m.alignment_tokens} tokens): Pearson(p) ` +
    `${(m.alignment_corr ?? NaN).toFixed(6)} mean|Δp| ${e(m.alignment_mean_abs_dp)} ` +
    `max|Δlogprob| ${e(m.alignment_max_abs_dlogprob)} k1 ${e(m.alignment_k1_kl)} ` +
    `k3 ${e(m.alignment_k3_kl)} ESS ${m.alignment_ess.toFixed(6)}` +
    (breaches.length ? ` — BEYOND: ${breaches.join("; ")}` : " — healthy") +
    (m.timings_ms.sync !== undefined ? `; sync ${m.timings_ms.sync.toFixed(0)} ms` : "");
}
