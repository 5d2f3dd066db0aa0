/**
 * `deno task demo` — the preset `configs/demo.yaml` run by `deno task train`'s runner: a SQLite
 * gateway with the proxy, a local controller running the built-in harness on the toy
 * arithmetic environment (calculator tool), a local CPU PyTorch worker with a tiny char-level
 * model, an SFT warm start on mixed demonstrations (per question, one calls the calculator, one
 * guesses a wrong number without it), then collocated-async RL, which has to discover from
 * reward alone that the calculator pays.
 *
 * It evaluates the policy before and after RL on the same prompts and sampling seeds, on the
 * training questions and on held-out ones, and reports mean reward ± 95% CI and the paired
 * difference; ends with the lines `reward_before:`, `reward_after:`, their `_ci95`,
 * `reward_gain:`, `heldout_before:`, `heldout_after:` and `demo_wall_s:`, and figures under
 * `runs/<name>/`. Flags (`--help`, scripts/demo_args.ts) override the preset; they are
 * validated before anything on disk is touched, and an existing run is never deleted without
 * `--overwrite`.
 *
 * @module
 */
import { parseConfigText, validateRunConfig } from "../lib/loop/run_config.ts";
import { describeCpu } from "../lib/trainer/mod.ts";
import {
  chooseRunDir,
  DEMO_USAGE,
  type DemoArgs,
  DemoArgsError,
  parseDemoArgs,
} from "./demo_args.ts";
import { ensureSystemDeps } from "./ensure_deps.ts";
<<<<<<< HEAD
import { readOrCreateKey } from "../lib/http/credentials.ts";
import { loginLink } from "../lib/ui/mod.ts";
=======
import { executeRun, planText, resolveRun } from "./train_run.ts";
>>>>>>> main

let args: DemoArgs;
try {
  args = parseDemoArgs(Deno.args);
} catch (error) {
  if (!(error instanceof DemoArgsError)) throw error;
  console.error(`demo: ${error.message} (see --help)`);
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

const presetPath = new URL("../configs/demo.yaml", import.meta.url).pathname;
const preset = parseConfigText(await Deno.readTextFile(presetPath), presetPath) as {
  [k: string]: Record<string, unknown>;
};
// The flags override the preset (`--help` lists them).
const config = validateRunConfig({
  ...preset,
  name: run.name,
  out_dir: run.dir,
  resume: args.resume,
  steps: args.steps,
  sft: { ...preset.sft, steps: args.sftSteps },
  environment: { ...preset.environment, train: args.tasks },
  async: { ...preset.async, mode: args.mode },
  batch: { ...preset.batch, concurrency: args.concurrency },
  eval: { ...preset.eval, rollouts: args.evalRollouts },
}, presetPath);
const resolved = await resolveRun(config, presetPath);
console.log(`reins demo (configs/demo.yaml):\n${planText(resolved)}`);
console.log(`machine: ${navigator.hardwareConcurrency} CPUs, load average ${loadAtStart}`);
await Deno.mkdir(resolved.outDir, { recursive: true });
await executeRun(resolved, {
  pngOff: !args.png,
  onWorker: (health) => console.log(`worker: ${describeCpu(health)}`),
});
<<<<<<< HEAD
let before: EvalResult | null = null;
let after: EvalResult;
try {
  const health = await stack.worker.client.health();
  // A slow BLAS is also warned about (with the fix) by the worker's start on stderr.
  console.log(
    `worker: ${describeCpu(health)}${health.cpu_warning ? " — SLOW, see the warning above" : ""}`,
  );
  console.log(
    `gateway ${stack.gateway.url} (SQLite ${outDir}/gateway.db), worker ${stack.worker.url}`,
  );
  // `step`: the training steps done, so the Live UI draws the two evaluations on its charts.
  const evaluate = (ctx: LoopContext, label: string) =>
    evaluatePolicy(ctx.gateway, ctx.config, label, toyLoopTasks(evalTasks), {
      onStatus: (text, count) => ctx.progress.status(text, count),
      step: ctx.state.nextStep,
    });
  const result = await runLoop(config, stack.services, {
    resume: args.resume,
    progress,
    // Half the demonstrations guess without the calculator (and are wrong): RL has to learn
    // from reward alone that the tool pays.
    sftRows: toySftRows(tokenizer, trainTasks, { guesses: 1 }),
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
  console.log(`demo_wall_s: ${wall.toFixed(1)}`);
} finally {
  await stack.close();
}
// The run stays inspectable: the UI reads its store, metrics and tokenizer from the run dir.
const uiKey = await readOrCreateKey(`${outDir}/gateway.db.key`);
console.log(`\nsee the run in the Live UI: deno task ui --db ${outDir}/gateway.db`);
console.log(`then open (one click, logs in): ${loginLink("http://127.0.0.1:8421", uiKey)}`);

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
=======
const wall = (performance.now() - started) / 1000;
console.log(`load average ${loadAtStart} at start, ${loadAverage()} at end`);
console.log(`demo_wall_s: ${wall.toFixed(1)}`);
>>>>>>> main
