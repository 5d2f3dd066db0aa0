/**
 * `deno task chaos` — fault injection: a short training run (`configs/chaos.yaml`) on a
 * supervised stack of separate processes (worker, gateway with its SQLite store, rollout
 * controller; `lib/loop/supervisor.ts`), first undisturbed, then again while it SIGKILLs the
 * worker, the gateway and the controller at seeded random points. Prints:
 *
 * - `chaos_kills`: SIGKILLs delivered; `chaos_restarts_*` what the supervisor restarted;
 * - `chaos_steps_planned` / `chaos_steps_completed`: steps in the metrics at the end;
 * - `chaos_rollouts_lost`: rollouts of the run that ended `failed`;
 * - `chaos_attempts_burned_by_infra`: attempts that did not succeed and counted against their
 *   rollout's `max_attempts` (in this run only the injected faults can fail an attempt);
 * - `chaos_attempts_retried_for_infra`: attempts the infrastructure ended, retried for free;
 * - `chaos_wall_overhead`: the disturbed run's wall time over the undisturbed one's.
 *
 * @module
 */
import { parseArgs } from "node:util";
import type { LoopContext } from "../lib/loop/mod.ts";
import type { SupervisedRole, Supervisor } from "../lib/loop/supervisor.ts";
import type { Rollout } from "../lib/schema.ts";
import type { ResolvedRun } from "./train_run.ts";

const USAGE = `usage: deno task chaos [--quick] [--seed N] [--kills N] [--config FILE]
  --quick        fewer steps (the ≤ 10 minute check): 3 kills, one of each process
  --seed N       seed of the kill schedule (default 0)
  --kills N      SIGKILLs to deliver (default 3 with --quick, else 6)
  --config FILE  the run's config (default configs/chaos.yaml)
  -h, --help     this text`;

let values;
try {
  ({ values } = parseArgs({
    args: Deno.args,
    strict: true,
    options: {
      quick: { type: "boolean", default: false },
      seed: { type: "string", default: "0" },
      kills: { type: "string" },
      config: { type: "string" },
      help: { type: "boolean", short: "h", default: false },
    },
  }));
} catch (error) {
  console.error(`chaos: ${(error as Error).message} (see --help)`);
  Deno.exit(2);
}
if (values.help) {
  console.log(USAGE);
  Deno.exit(0);
}
const quick = values.quick;
const seed = Number(values.seed);
const kills = Number(values.kills ?? (values.quick ? 3 : 6));
if (!Number.isInteger(seed) || !Number.isInteger(kills) || kills < 0) {
  console.error("chaos: --seed and --kills take whole numbers (see --help)");
  Deno.exit(2);
}

// The loop's modules (~1 s to load) are imported once the flags are known to be good, so
// `--help` and a bad flag answer at once.
const { evaluatePolicy, readMetrics, terminalProgress, writeToyDataset } = await import(
  "../lib/loop/mod.ts"
);
const { mulberry32 } = await import("../lib/util/random.ts");
const { runLoopSupervised, Supervisor: SupervisorClass } = await import(
  "../lib/loop/supervisor.ts"
);
const { parseConfigText, validateRunConfig } = await import("../lib/loop/run_config.ts");
const { toyArithmeticTasks } = await import("../lib/loop/toy.ts");
const { resolveRun } = await import("./train_run.ts");

const configPath = values.config ?? new URL("../configs/chaos.yaml", import.meta.url).pathname;
const root = await Deno.makeTempDir({ prefix: "reins-chaos-" });
const preset = parseConfigText(await Deno.readTextFile(configPath), configPath) as Record<
  string,
  unknown
>;

async function resolved(name: string): Promise<ResolvedRun> {
  return await resolveRun(
    validateRunConfig({
      ...preset,
      name,
      out_dir: `${root}/${name}`,
      ...(quick ? { steps: 5 } : {}),
    }, configPath),
    configPath,
  );
}

const log = (line: string) => console.log(line);

// Interrupted: stop the supervised processes too (they would outlive this one).
let active: Supervisor | null = null;
for (const sig of ["SIGINT", "SIGTERM"] as const) {
  Deno.addSignalListener(sig, () => {
    (active?.close() ?? Promise.resolve()).finally(() => Deno.exit(130));
  });
}

/** One SIGKILL of the schedule. */
interface Kill {
  role: SupervisedRole;
  /** Steps in the metrics before it (the loop's progress, not wall time). */
  afterSteps: number;
  delayS: number;
}

interface Outcome {
  wallS: number;
  loopRestarts: number;
  kills: number;
}

/** Runs the loop on a supervised stack, resuming it after every worker restart. */
async function supervisedRun(r: ResolvedRun, schedule: Kill[]) {
  await Deno.mkdir(r.outDir, { recursive: true });
  await writeToyDataset(r.dataDir!, toyArithmeticTasks());
  const sup = new SupervisorClass({
    outDir: r.outDir,
    dataDir: r.dataDir!,
    tokenizer: "char",
    controllerId: `${r.loop.name}-controller`,
    concurrency: r.run.batch.concurrency,
    threads: 1,
    log,
  });
  active = sup;
  await sup.start();
  const gateway = sup.gatewayClient();
  const progress = terminalProgress();
  const heldout = Array.from(
    { length: r.run.eval.rollouts },
    (_, i) => r.heldout[i % r.heldout.length],
  );
  let signal: AbortSignal | undefined;
  const evaluate = (ctx: Pick<LoopContext, "gateway" | "config">, step: number) =>
    evaluatePolicy(ctx.gateway, ctx.config, `heldout-s${step}`, heldout, {
      step,
      ...(signal ? { signal } : {}),
    });
  const t0 = performance.now();
  let delivered = 0;
  let done = false;
  // The kill schedule runs beside the loop: kill k waits until `afterSteps` steps are in the
  // metrics, then `delayS` more (so kills land inside rollouts, updates and checkpoints), then
  // until every process is up.
  const stepsDone = async () =>
    (await Deno.readTextFile(`${r.outDir}/metrics.jsonl`).catch(() => "")).split("\n")
      .filter((l) => l.trim()).length;
  const killer = (async () => {
    for (const k of schedule) {
      while (!done && await stepsDone() < k.afterSteps) {
        await new Promise((res) => setTimeout(res, 100));
      }
      const at = performance.now() + k.delayS * 1000;
      while (!done && (performance.now() < at || !sup.healthy)) {
        await new Promise((res) => setTimeout(res, 100));
      }
      if (done) return;
      if (sup.kill(k.role)) delivered++;
    }
  })();
  let loopRestarts = 0;
  try {
    const { resumes } = await runLoopSupervised(sup, r.loop, {
      tokenizer: r.tokenizer,
      progress,
      onSignal: (s) => (signal = s),
      beforeSteps: async (ctx) => {
        const e = await evaluate(ctx, 0);
        ctx.state.rewardBefore ??= e.reward_mean;
      },
      hooks: {
        evaluate: async (step) => {
          if (step + 1 !== r.loop.steps) return null;
          const e = await evaluate({ gateway, config: r.loop }, step + 1);
          return {
            "eval/heldout_reward_mean": e.reward_mean,
            "eval/heldout_reward_ci95": Number.isFinite(e.reward_ci95) ? e.reward_ci95 : 0,
            "eval/heldout_pass_rate": e.pass_rate,
            "eval/heldout_rollouts": e.rollouts,
          };
        },
      },
    });
    loopRestarts = resumes;
  } finally {
    done = true;
    await killer;
  }
  const wallS = (performance.now() - t0) / 1000;
  const rollouts: Rollout[] = [];
  for await (const ro of gateway.iterateRollouts({ labels: { run: r.loop.name }, limit: 500 })) {
    rollouts.push(ro);
  }
  const restarts = { ...sup.restarts };
  await sup.close();
  const attempts = rollouts.flatMap((ro) => ro.attempts);
  const infra = attempts.filter((a) => a.info.infra_failure === true).length;
  const burned =
    attempts.filter((a) =>
      a.status !== "succeeded" && a.status !== "running" && a.status !== "cancelled" &&
      a.info.infra_failure !== true
    ).length;
  const metrics = await readMetrics(`${r.outDir}/metrics.jsonl`);
  return {
    wallS,
    loopRestarts,
    kills: delivered,
    restarts,
    stepsCompleted: new Set(metrics.map((m) => m.step)).size,
    lost: rollouts.filter((ro) => ro.status === "failed").length,
    burned,
    infra,
    heldout: metrics.at(-1)?.["eval/heldout_reward_mean"] ?? null,
  } satisfies Outcome & Record<string, unknown>;
}

log(`chaos: runs under ${root} (config ${configPath}${quick ? ", --quick" : ""})`);
const baseline = await supervisedRun(await resolved("chaos-baseline"), []);
log(
  `[chaos] undisturbed: ${baseline.stepsCompleted} steps in ${baseline.wallS.toFixed(1)}s, ` +
    `${baseline.lost} rollouts lost, ${baseline.burned} failed attempts`,
);
// Seeded schedule: the first three kills hit each process once (shuffled), later ones any; each
// after a random number of completed steps (in order) plus a random delay of up to 4 s.
const random = mulberry32(seed);
const roles: SupervisedRole[] = ["worker", "gateway", "controller"];
for (let i = roles.length - 1; i > 0; i--) {
  const j = Math.floor(random() * (i + 1));
  [roles[i], roles[j]] = [roles[j], roles[i]];
}
const steps = (await resolved("chaos-run")).loop.steps;
const schedule: Kill[] = Array.from({ length: kills }, (_, i) => ({
  role: i < roles.length ? roles[i] : roles[Math.floor(random() * roles.length)],
  afterSteps: Math.floor(random() * steps),
  delayS: 4 * random(),
})).sort((a, b) => a.afterSteps - b.afterSteps);
log(
  `[chaos] schedule: ${
    schedule.map((k) => `${k.role} after step ${k.afterSteps} + ${k.delayS.toFixed(1)}s`).join(", ")
  }`,
);
const chaos = await supervisedRun(await resolved("chaos-run"), schedule);
const planned = steps;
console.log(`chaos_kills: ${chaos.kills}`);
console.log(`chaos_restarts_worker: ${chaos.restarts.worker}`);
console.log(`chaos_restarts_gateway: ${chaos.restarts.gateway}`);
console.log(`chaos_restarts_controller: ${chaos.restarts.controller}`);
console.log(`chaos_loop_resumes: ${chaos.loopRestarts}`);
console.log(`chaos_steps_planned: ${planned}`);
console.log(`chaos_steps_completed: ${chaos.stepsCompleted}`);
console.log(`chaos_rollouts_lost: ${chaos.lost}`);
console.log(`chaos_attempts_burned_by_infra: ${chaos.burned}`);
console.log(`chaos_attempts_retried_for_infra: ${chaos.infra}`);
console.log(`chaos_wall_overhead: ${(chaos.wallS / baseline.wallS).toFixed(2)}`);
console.log(`chaos_wall_s: ${chaos.wallS.toFixed(1)} (undisturbed ${baseline.wallS.toFixed(1)})`);
await Deno.remove(root, { recursive: true }).catch(() => undefined);
