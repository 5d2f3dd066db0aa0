/**
 * What `deno task train` (and the demo and chaos presets) run: resolve a config file into the
 * loop's config, tokenizer, SFT rows and the train / held-out split; print the plan; start the
 * stack (embedded by default, or one the caller supervises); run the loop with a held-out
 * evaluation before RL, every `eval.every` steps and after the last step (written into the
 * step's metrics as `eval/heldout_*`); then the summary, its figures and `name: value` lines.
 *
 * @module
 */
import { dirname, isAbsolute, resolve } from "node:path";
import { assembleRollout } from "../lib/samples/mod.ts";
import { Plot, plot, saveFigure, table } from "../lib/plot/mod.ts";
import type { HarnessSpec, TrainingRow } from "../lib/schema.ts";
import type { LoopConfig, LoopConfigInput, LoopStepMetrics, LoopTask } from "../lib/loop/schema.ts";
import { CHAR_TOKENIZER_DIR, loadCharTokenizer } from "../lib/tokens/mod.ts";
import { mismatchLine, mismatchSummary } from "../lib/loop/mismatch_report.ts";
import type { ChatTokenizer } from "../lib/tokens/types.ts";
import { loadHfTokenizerFromDir } from "../lib/tokens/hf.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { connect } from "../lib/trainer/mod.ts";
import type { GatewayClient } from "../lib/gateway/client.ts";
import {
  compareEvals,
  type EvalResult,
  evaluatePolicy,
  formatCi,
  type LoopContext,
  type LoopServices,
  parseLoopConfig,
  runLoop,
  startEmbedded,
  terminalProgress,
  toyArithmeticTasks,
  toyHarness,
  toyLoopTasks,
  toySftRows,
  writeToyDataset,
} from "../lib/loop/mod.ts";
import {
  harnessSpecOf,
  loopConfigOf,
  readTaskFile,
  type RunConfig,
  RunConfigError,
  splitTasks,
  workerModelOf,
} from "../lib/loop/run_config.ts";
import { splitHarness, splitSftRows } from "../experiments/split_env.ts";
import { meanCi } from "../lib/util/stats.ts";
import { runLoopSupervised, Supervisor } from "../lib/loop/supervisor.ts";
import type { RunLoopOptions } from "../lib/loop/run.ts";

/** A config file resolved into what the run needs. */
export interface ResolvedRun {
  run: RunConfig;
  loop: LoopConfig;
  tokenizer: ChatTokenizer;
  outDir: string;
  /** Data directory of the harness registry (toy environments: written into the run). */
  dataDir: string | null;
  train: LoopTask[];
  heldout: LoopTask[];
  sftRows: TrainingRow[];
}

const TOY_HARNESSES = new Set(["arithmetic", "split"]);

async function loadTokenizer(run: RunConfig, base: string): Promise<ChatTokenizer> {
  const name = run.tokenizer ?? (run.model.kind === "hf" ? run.model.path : "char");
  if (name === "char") return await loadCharTokenizer();
  if (name === "qwen3") return await loadQwen3Tokenizer();
  return await loadHfTokenizerFromDir(isAbsolute(name) ? name : resolve(base, name));
}

/**
 * Resolves a parsed config; `configPath` anchors relative paths. Touches the disk only to
 * read (the toy dataset is written later, by {@link executeRun}).
 */
export async function resolveRun(run: RunConfig, configPath: string): Promise<ResolvedRun> {
  const base = dirname(resolve(configPath));
  if (run.engine.kind === "llama_cpp" && run.engine.url) {
    throw new RunConfigError(configPath, [
      "engine.url: llama_cpp runs in this process (lib/engine); leave engine.url out",
    ]);
  }
  if (run.supervise && run.engine.url) {
    throw new RunConfigError(configPath, [
      "supervise: a supervisor restarts a local worker; with engine.url the worker is not ours",
    ]);
  }
  const tokenizer = await loadTokenizer(run, base);
  const outDir = run.out_dir ?? `runs/${run.name}`;
  const toyEnv = run.environment.tasks === "toy-arithmetic";
  const arithmetic = toyArithmeticTasks();
  const all: LoopTask[] = toyEnv ? toyLoopTasks(arithmetic) : await readTaskFile(
    isAbsolute(run.environment.tasks)
      ? run.environment.tasks
      : resolve(base, run.environment.tasks),
  );
  const split = splitTasks(all, run.split, run.environment.train);
  const toyHarnessName = run.harness.builtin && TOY_HARNESSES.has(run.harness.builtin)
    ? run.harness.builtin
    : null;
  if (toyHarnessName && !toyEnv) {
    throw new RunConfigError(configPath, [
      `harness.builtin: ${toyHarnessName} runs the toy-arithmetic tasks only`,
    ]);
  }
  const dataDir = toyEnv
    ? resolve(`${outDir}/data`)
    : run.environment.data_dir
    ? resolve(base, run.environment.data_dir)
    : null;
  let harness: HarnessSpec;
  if (toyHarnessName === "split") {
    const spec = splitHarness(dataDir!);
    harness = { name: spec.name, options: { ...spec.options, ...run.harness.options } };
  } else if (toyHarnessName === "arithmetic") {
    const spec = toyHarness(dataDir!);
    harness = { name: spec.name, options: { ...spec.options, ...run.harness.options } };
  } else {
    harness = harnessSpecOf(run.harness);
  }
  let sftRows: TrainingRow[] = [];
  if (run.sft.steps > 0) {
    if (!toyHarnessName) {
      throw new RunConfigError(configPath, [
        "sft.steps: the SFT warm start has scripted demonstrations for the toy harnesses " +
        "(arithmetic, split) only; start from a trained checkpoint instead",
      ]);
    }
    const byId = new Map(arithmetic.map((t) => [t.id, t]));
    const trainToy = split.train.map((t) => byId.get(t.id)!);
    sftRows = toyHarnessName === "split"
      ? splitSftRows(tokenizer, trainToy, { guesses: run.sft.guesses })
      : toySftRows(tokenizer, trainToy, { guesses: run.sft.guesses });
  }
  const loop = parseLoopConfig(
    {
      ...loopConfigOf(run, {
        tasks: split.train,
        harness,
        model: workerModelOf(run.model, tokenizer.vocabSize),
        ...(sftRows.length ? { sftBatchSize: sftRows.length } : {}),
      }),
      out_dir: outDir,
    } satisfies LoopConfigInput,
  );
  return {
    run,
    loop,
    tokenizer,
    outDir,
    dataDir,
    train: split.train,
    heldout: split.heldout,
    sftRows,
  };
}

/** The plan, as `--dry-run` prints it. */
export function planText(r: ResolvedRun): string {
  const { run, loop } = r;
  const ids = (ts: LoopTask[]) =>
    ts.length <= 6
      ? ts.map((t) => t.id).join(", ")
      : `${ts.slice(0, 5).map((t) => t.id).join(", ")}, …`;
  const model = run.model.kind === "builtin"
    ? `built-in decoder d_model ${run.model.d_model}, ${run.model.n_layers} layers (seed ${run.model.seed})`
    : `${run.model.kind} ${run.model.path}`;
  const evalEvery = run.eval.every > 0 ? `every ${run.eval.every} steps, ` : "";
  return [
    `run "${loop.name}" in ${r.outDir}${run.resume ? " (resume from its last checkpoint)" : ""}`,
    `model: ${model}; engine ${run.engine.kind}${
      run.engine.url ? ` at ${run.engine.url}` : " (local)"
    }`,
    `harness: ${loop.harness.name}; tasks: ${r.train.length} train (${ids(r.train)}), ` +
    `${r.heldout.length} held out (${ids(r.heldout)})`,
    `SFT: ${
      r.sftRows.length ? `${loop.sft.steps} steps × ${r.sftRows.length} demonstrations` : "none"
    }`,
    `RL: ${loop.steps} steps × ${loop.groups_per_step} groups × ${loop.group_size} rollouts, ` +
    `${loop.schedule.mode} (max staleness ${loop.schedule.max_staleness}, ${loop.schedule.stale_policy}), ` +
    `${loop.loss.kind} clip [${loop.loss.clip_low}, ${loop.loss.clip_high}], ` +
    `kl ${loop.loss.kl_coef}, ${loop.ppo_epochs} epoch(s), lr ${loop.optimizer.lr}`,
    `evaluation: ${run.eval.rollouts} held-out rollouts before RL, ${evalEvery}after the last step` +
    (run.eval.train_tasks ? "; the same on the training tasks" : ""),
    `checkpoints: every ${loop.checkpoint_every} steps, keep the last ${loop.checkpoint_keep_last} ` +
    `and the best by held-out reward`,
  ].join("\n");
}

/** A stack a run can use (the embedded one, or a supervised one of separate processes). */
export interface RunStack {
  services: LoopServices;
  gateway: GatewayClient;
  close(): Promise<void>;
}

/** Options of {@link executeRun}. */
export interface ExecuteOptions {
  /** Starts the stack (default: {@link startEmbedded} with a local or connected worker). */
  startStack?: (r: ResolvedRun) => Promise<RunStack>;
  /** Write SVG figures only. */
  pngOff?: boolean;
  /** Skip figures and the samples-per-rollout census (chaos). */
  quiet?: boolean;
  /** Receives the worker's `/health` once the stack is up (its CPU, BLAS, device). */
  onWorker?: (health: Awaited<ReturnType<LoopServices["worker"]["health"]>>) => void;
}

/** What a finished run reports. */
export interface RunSummary {
  metrics: LoopStepMetrics[];
  heldoutBefore: EvalResult;
  heldoutAfter: EvalResult;
  trainBefore: EvalResult | null;
  trainAfter: EvalResult | null;
  policyVersion: number;
  wallS: number;
}

function evalTasks(tasks: LoopTask[], n: number): LoopTask[] {
  return Array.from({ length: n }, (_, i) => tasks[i % tasks.length]);
}

function evalFields(prefix: "heldout" | "train", e: EvalResult): Partial<LoopStepMetrics> {
  return {
    [`eval/${prefix}_reward_mean`]: e.reward_mean,
    [`eval/${prefix}_reward_ci95`]: Number.isFinite(e.reward_ci95) ? e.reward_ci95 : 0,
    [`eval/${prefix}_pass_rate`]: e.pass_rate,
    [`eval/${prefix}_rollouts`]: e.rollouts,
  } as Partial<LoopStepMetrics>;
}

/** The directory whose tokenizer.json becomes the GGUF's vocabulary. */
function ggufTokenizerDir(run: RunConfig, base: string): string {
  const name = run.tokenizer ?? (run.model.kind === "hf" ? run.model.path : "char");
  if (name === "char") return decodeURIComponent(CHAR_TOKENIZER_DIR.pathname);
  if (name === "qwen3") {
    throw new Error("engine.kind llama_cpp: give the Qwen3 tokenizer as a directory (tokenizer)");
  }
  return isAbsolute(name) ? name : resolve(base, name);
}

async function embeddedStack(r: ResolvedRun): Promise<RunStack> {
  const url = r.run.engine.url;
  const stack = await startEmbedded({
    outDir: r.outDir,
    tokenizer: r.tokenizer,
    concurrency: r.run.batch.concurrency,
    // One torch/BLAS thread by default: the toy model's matmuls are too small to gain from a
    // second, and the harness processes need the other core.
    threads: r.run.engine.threads ?? 1,
    ...(r.run.engine.python ? { python: r.run.engine.python } : {}),
    ...(url
      ? {
        worker: async () => {
          const client = await connect(url);
          return { url, client, logs: () => "", close: async () => {} };
        },
      }
      : {}),
    ...(r.dataDir ? { registry: { dataDir: r.dataDir } } : {}),
    // llama.cpp samples; every version is synced to it (f32 GGUF from the worker's memory).
    ...(r.run.engine.kind === "llama_cpp"
      ? {
        engine: {
          kind: "llama_cpp" as const,
          tokenizerDir: ggufTokenizerDir(r.run, dirname(resolve(r.outDir))),
          threads: r.run.engine.threads ?? 1,
        },
      }
      : {}),
  });
  return { services: stack.services, gateway: stack.client, close: () => stack.close() };
}

/**
 * Runs a resolved config to its end and prints the summary.
 *
 * @example
 * ```ts ignore
 * const r = await resolveRun(await readRunConfig("configs/demo.yaml"), "configs/demo.yaml");
 * await executeRun(r);
 * ```
 */
export async function executeRun(
  r: ResolvedRun,
  options: ExecuteOptions = {},
): Promise<RunSummary> {
  const started = performance.now();
  const { run, loop } = r;
  await Deno.mkdir(r.outDir, { recursive: true });
  if (r.dataDir && run.environment.tasks === "toy-arithmetic") {
    await writeToyDataset(r.dataDir, toyArithmeticTasks());
  }
  await Deno.writeTextFile(`${r.outDir}/run_config.json`, JSON.stringify(run, null, 2));
  let supervisor: Supervisor | null = null;
  const startStack = options.startStack ?? (run.supervise
    ? async (): Promise<RunStack> => {
      supervisor = new Supervisor({
        outDir: r.outDir,
        ...(r.dataDir ? { dataDir: r.dataDir } : {}),
        tokenizer: run.tokenizer ?? (run.model.kind === "hf" ? run.model.path : "char"),
        controllerId: `${loop.name}-controller`,
        concurrency: run.batch.concurrency,
        threads: run.engine.threads ?? 1,
        ...(run.engine.python ? { python: run.engine.python } : {}),
        log: (line) => console.log(line),
      });
      await supervisor.start();
      const { client } = supervisor.trainerClient();
      const sup = supervisor;
      return {
        services: { gateway: sup.gatewayClient(), worker: client, workerUrl: sup.forwarderUrl },
        gateway: sup.gatewayClient(),
        close: () => sup.close(),
      };
    }
    : embeddedStack);
  const stack = await startStack(r);
  const heldoutTasks = evalTasks(r.heldout, run.eval.rollouts);
  const trainTasks = evalTasks(r.train, run.eval.rollouts);
  const evals: { step: number; heldout: EvalResult; train: EvalResult | null }[] = [];
  const progress = terminalProgress();
  let signal: AbortSignal | undefined;
  const evaluate = async (
    ctx: Pick<LoopContext, "gateway" | "config" | "progress">,
    step: number,
  ) => {
    const onStatus = (text: string, count: Parameters<LoopContext["progress"]["status"]>[1]) =>
      ctx.progress.status(text, count);
    // Labels are a pure function of the step, so a resumed run finds finished evals again.
    const heldout = await evaluatePolicy(
      ctx.gateway,
      ctx.config,
      `heldout-s${step}`,
      heldoutTasks,
      { onStatus, step, ...(signal ? { signal } : {}) },
    );
    const train = run.eval.train_tasks
      ? await evaluatePolicy(
        ctx.gateway,
        ctx.config,
        step === 0 ? "before" : step === loop.steps ? "after" : `train-s${step}`,
        trainTasks,
        { onStatus, step, ...(signal ? { signal } : {}) },
      )
      : null;
    evals.push({ step, heldout, train });
    ctx.progress.log(
      `eval after ${step} step(s): held-out reward ${formatCi(meanCi(heldout.rewards))} ` +
        `(95% CI, ${heldout.rollouts} rollouts)` +
        (train ? `; training tasks ${formatCi(meanCi(train.rewards))}` : ""),
    );
    return { heldout, train };
  };
  let result;
  try {
    if (options.onWorker) options.onWorker(await stack.services.worker.health());
    const loopOptions = {
      resume: run.resume,
      progress,
      sftRows: r.sftRows,
      beforeSteps: async (ctx) => {
        const { heldout, train } = await evaluate(ctx, 0);
        ctx.state.rewardBefore ??= (train ?? heldout).reward_mean;
      },
      hooks: {
        // The engine–trainer mismatch of every step, as the field measures it.
        afterStep: (m) => progress.log(mismatchLine(m)),
        evaluate: async (step) => {
          const done = step + 1;
          const due = done === loop.steps || (run.eval.every > 0 && done % run.eval.every === 0);
          if (!due) return null;
          const { heldout, train } = await evaluate(
            { gateway: stack.gateway, config: loop, progress },
            done,
          );
          return {
            ...evalFields("heldout", heldout),
            ...(train ? evalFields("train", train) : {}),
          };
        },
      },
    } satisfies RunLoopOptions;
    const sup = supervisor as Supervisor | null;
    result = sup
      ? (await runLoopSupervised(sup, loop, {
        ...loopOptions,
        tokenizer: r.tokenizer,
        onSignal: (s) => (signal = s),
      })).result
      : await runLoop(loop, stack.services, loopOptions);
    // A run resumed after its last step has no after-evaluation in this process yet.
    if (!evals.some((e) => e.step === loop.steps)) {
      await evaluate({ gateway: stack.gateway, config: loop, progress }, loop.steps);
    }
    const first = evals.find((e) => e.step === 0)!;
    const last = evals.find((e) => e.step === loop.steps)!;
    const summary: RunSummary = {
      metrics: result.metrics,
      heldoutBefore: first.heldout,
      heldoutAfter: last.heldout,
      trainBefore: first.train,
      trainAfter: last.train,
      policyVersion: result.policy_version,
      wallS: (performance.now() - started) / 1000,
    };
    if (!options.quiet) await report(r, stack.gateway, summary, evals, options.pngOff ?? false);
    return summary;
  } finally {
    await stack.close();
  }
}

const mean = (xs: number[]) => xs.reduce((a, x) => a + x, 0) / Math.max(1, xs.length);

async function report(
  r: ResolvedRun,
  gateway: GatewayClient,
  s: RunSummary,
  evals: { step: number; heldout: EvalResult; train: EvalResult | null }[],
  pngOff: boolean,
): Promise<void> {
  const m = s.metrics;
  // Samples per rollout over every training rollout of the run, and why rollouts split.
  const perRollout: number[] = [];
  let cursor: string | undefined;
  while (true) {
    const page = await gateway.listRollouts({
      labels: { run: r.loop.name },
      mode: "train",
      limit: 500,
      ...(cursor ? { after: cursor } : {}),
    });
    for (const ro of page.items) {
      if (ro.status !== "succeeded") continue;
      const events = await gateway.listEvents(ro.rollout_id, { type: "model_request" });
      perRollout.push(assembleRollout(events, { tokenizer: r.tokenizer }).samples.length);
    }
    if (!page.next_cursor) break;
    cursor = page.next_cursor;
  }
  const reasons: Record<string, number> = {};
  for (const x of m) {
    for (const [k, v] of Object.entries(x.break_reasons)) reasons[k] = (reasons[k] ?? 0) + v;
  }
  console.log(
    "\n" + table(
      evals.sort((a, b) => a.step - b.step).map((e) => ({
        "after step": e.step,
        "held-out reward (95% CI)": formatCi(meanCi(e.heldout.rewards)),
        "held-out pass": e.heldout.pass_rate,
        ...(e.train ? { "train-task reward (95% CI)": formatCi(meanCi(e.train.rewards)) } : {}),
      })),
      { digits: 3 },
    ).text(),
  );
  const gain = compareEvals(s.heldoutBefore, s.heldoutAfter);
  console.log(
    `\nheld-out after − before: ${gain.diff.mean >= 0 ? "+" : ""}${formatCi(gain.diff)} ` +
      `(95% CI, ${gain.paired ? "paired" : "unpaired"}) — ` +
      (gain.separated ? "the interval excludes 0" : "not separated from 0 at this size"),
  );
  const reasonText = Object.entries(reasons).filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1])
    .map(([k, v]) => `${k} ${v}`).join(", ") || "none";
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
      { "run-wide": "why samples split (breaks, all steps)", value: reasonText },
      {
        "run-wide": "held LLM calls (all updates)",
        value: m.reduce((a, x) => a + x.held_calls, 0),
      },
      {
        "run-wide": "attempts retried for the infrastructure (not counted)",
        value: m.reduce((a, x) => a + (x.attempts_infra_retried ?? 0), 0),
      },
    ], { digits: 4 }).text(),
  );
  await writeFigures(r.outDir, m, perRollout, evals, pngOff);
  console.log(`figures: ${r.outDir}/reward_curve.svg, ${r.outDir}/samples_per_rollout.svg`);
  console.log(`wall time: ${s.wallS.toFixed(1)}s`);
  console.log(`heldout_before: ${s.heldoutBefore.reward_mean.toFixed(4)}`);
  console.log(`heldout_after: ${s.heldoutAfter.reward_mean.toFixed(4)}`);
  console.log(`samples_per_rollout: ${mean(perRollout).toFixed(4)}`);
  // The sampler–trainer mismatch over the run (per step above): the engine's numerical
  // mismatch, or for the worker a self-check that must stay at rounding.
  for (const line of mismatchSummary(m, r.run.engine.kind)) console.log(line);
  if (s.trainBefore && s.trainAfter) {
    const trainGain = compareEvals(s.trainBefore, s.trainAfter);
    console.log(`reward_before: ${s.trainBefore.reward_mean.toFixed(4)}`);
    console.log(`reward_before_ci95: ${s.trainBefore.reward_ci95.toFixed(4)}`);
    console.log(`reward_after: ${s.trainAfter.reward_mean.toFixed(4)}`);
    console.log(`reward_after_ci95: ${s.trainAfter.reward_ci95.toFixed(4)}`);
    console.log(`reward_gain: ${trainGain.diff.mean.toFixed(4)}`);
    console.log(`reward_gain_ci95: ${trainGain.diff.ci95.toFixed(4)}`);
  }
  console.log(`train_wall_s: ${s.wallS.toFixed(1)}`);
}

async function writeFigures(
  outDir: string,
  metrics: LoopStepMetrics[],
  perRollout: number[],
  evals: { step: number; heldout: EvalResult; train: EvalResult | null }[],
  pngOff: boolean,
): Promise<void> {
  const points = metrics.map((m) => ({ step: m.step + 1, reward: m.reward_mean, series: "train" }));
  const evalPoints = evals.flatMap((e) =>
    [["held-out eval (95% CI)", e.heldout], ["train-task eval (95% CI)", e.train]]
      .filter(([, x]) => x !== null)
      .map(([series, x]) => {
        const r = x as EvalResult;
        const ci = Number.isFinite(r.reward_ci95) ? r.reward_ci95 : 0;
        return {
          step: e.step,
          reward: r.reward_mean,
          lo: r.reward_mean - ci,
          hi: r.reward_mean + ci,
          series: series as string,
        };
      })
  );
  const curve = plot({
    title: "Reward per RL step, with held-out evaluations",
    x: { label: "RL step" },
    y: { label: "mean reward", domain: [0, 1] },
    color: { legend: true },
    marks: [
      Plot.lineY(points, { x: "step", y: "reward", stroke: "series" }),
      Plot.ruleX(evalPoints, { x: "step", y1: "lo", y2: "hi", stroke: "series" }),
      Plot.dot(evalPoints, { x: "step", y: "reward", fill: "series", r: 5 }),
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
    title: "Samples per rollout (every training rollout of the run)",
    x: { label: "samples in the rollout", type: "band" },
    y: { label: "rollouts" },
    marks: [Plot.barY(bars, { x: "samples", y: "rollouts" }), Plot.ruleY([0])],
  });
  for (const [fig, name] of [[curve, "reward_curve"], [dist, "samples_per_rollout"]] as const) {
    await saveFigure(fig, name, { dir: outDir, png: !pngOff }).catch(async (error) => {
      console.error(`train: PNG export failed (${(error as Error).message}); SVG only`);
      await saveFigure(fig, name, { dir: outDir });
    });
  }
}
