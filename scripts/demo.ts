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
  console.error(`demo: ${error.message} (see --help)`);
  Deno.exit(2);
}
if (args.help) {
  console.log(DEMO_USAGE);
  Deno.exit(0);
}

// The run's modules (the loop, the trainer client, the figures, the UI's login link: ~1 s to
// load) are imported once the flags are known to be good, so `--help` and a bad flag answer at
// once.
const { parseConfigText, validateRunConfig } = await import("../lib/loop/run_config.ts");
const { describeCpu } = await import("../lib/trainer/mod.ts");
const { executeRun, planText, resolveRun } = await import("./train_run.ts");
const { readOrCreateKey } = await import("../lib/http/credentials.ts");
const { loginLink } = await import("../lib/ui/mod.ts");

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
  // --engine llama_cpp: llama.cpp samples, synced each step (lib/engine).
  engine: { ...preset.engine, kind: args.engine === "llama_cpp" ? "llama_cpp" : "torch_worker" },
}, presetPath);
const resolved = await resolveRun(config, presetPath);
console.log(`reins demo (configs/demo.yaml):\n${planText(resolved)}`);
console.log(`machine: ${navigator.hardwareConcurrency} CPUs, load average ${loadAtStart}`);
await Deno.mkdir(resolved.outDir, { recursive: true });
await executeRun(resolved, {
  pngOff: !args.png,
  onWorker: (health) => console.log(`worker: ${describeCpu(health)}`),
});
const wall = (performance.now() - started) / 1000;
console.log(`load average ${loadAtStart} at start, ${loadAverage()} at end`);
console.log(`demo_wall_s: ${wall.toFixed(1)}`);
// The run stays inspectable: the UI reads its store, metrics and tokenizer from the run dir.
const uiKey = await readOrCreateKey(`${resolved.outDir}/gateway.db.key`);
console.log(`\nsee the run in the Live UI: deno task ui --db ${resolved.outDir}/gateway.db`);
console.log(`then open (one click, logs in): ${loginLink("http://127.0.0.1:8421", uiKey)}`);
