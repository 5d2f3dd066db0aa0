/**
 * The demo's command line earns trust: every flag is validated before anything on disk is
 * touched (the error names the flag), an existing run is never deleted without `--overwrite`,
 * and its progress lines reach a log that is not a terminal, with an ETA.
 */
import assert from "node:assert/strict";
import {
  chooseRunDir,
  DEMO_EVAL_ROLLOUTS,
  DemoArgsError,
  nonEmptyDir,
  parseDemoArgs,
} from "../scripts/demo_args.ts";
import { parseConfigText } from "../lib/loop/run_config.ts";
import { terminalProgress } from "../lib/loop/progress.ts";
import { emptyFiltered } from "../lib/loop/select.ts";
import type { LoopStepMetrics } from "../lib/loop/schema.ts";

const DEMO = new URL("../scripts/demo.ts", import.meta.url).pathname;
const CONFIG = new URL("../deno.json", import.meta.url).pathname;

Deno.test("demo flags: bad values are refused naming the flag", () => {
  const bad: [string[], RegExp][] = [
    [["--steps", "abc"], /^--steps: expected a whole number, got 'abc'/],
    [["--steps", "0"], /^--steps: must be between 1 and/],
    [["--steps", "2.5"], /^--steps: expected a whole number/],
    [["--sft-steps=-1"], /^--sft-steps: expected a whole number/],
    [["--sft-steps", "-1"], /'--sft-steps' argument is ambiguous/],
    [["--tasks", "244"], /^--tasks: must be between 1 and 243/],
    [["--eval-rollouts", "1"], /^--eval-rollouts: must be between 2/],
    [["--concurrency", ""], /^--concurrency: expected a whole number/],
    [["--mode", "fast"], /^--mode: expected sync or collocated_async/],
    [["--engine", "vllm"], /^--engine: expected worker or llama_cpp, got 'vllm'/],
    [["--name", "../etc"], /^--name: use 1–64 letters/],
    [["--name", ""], /^--name: use 1–64 letters/],
    [["--resume", "--overwrite"], /^--resume and --overwrite: choose one/],
    [["--stpes", "4"], /Unknown option '--stpes'/],
    [["--steps"], /Option '--steps <value>' argument missing/],
    [["extra"], /extra/],
  ];
  for (const [argv, message] of bad) {
    assert.throws(
      () => parseDemoArgs(argv),
      (e: Error) => e instanceof DemoArgsError && message.test(e.message),
      argv.join(" "),
    );
  }
  const ok = parseDemoArgs(["--steps", "3", "--tasks", "2", "--mode", "sync", "--no-png"]);
  assert.equal(ok.steps, 3);
  assert.equal(ok.tasks, 2);
  assert.equal(ok.mode, "sync");
  assert.equal(ok.png, false);
  assert.equal(parseDemoArgs([]).name, "demo");
  assert.equal(parseDemoArgs([]).engine, "worker");
  assert.equal(parseDemoArgs(["--engine", "llama_cpp"]).engine, "llama_cpp");
});

Deno.test("eval rollouts: the preset's 48 for the worker, 192 on llama.cpp, a flag wins", async () => {
  const preset = parseConfigText(
    await Deno.readTextFile(new URL("../configs/demo.yaml", import.meta.url)),
    "configs/demo.yaml",
  ) as { eval: { rollouts: number } };
  // `deno task demo` with no flags evaluates exactly as configs/demo.yaml says.
  assert.equal(parseDemoArgs([]).evalRollouts, preset.eval.rollouts);
  assert.equal(DEMO_EVAL_ROLLOUTS.worker, preset.eval.rollouts);
  // The llama.cpp demo's gain did not separate from 0 at 48, nor in one run of two at 96.
  assert.equal(parseDemoArgs(["--engine", "llama_cpp"]).evalRollouts, 192);
  assert.equal(parseDemoArgs(["--engine", "llama_cpp", "--eval-rollouts", "48"]).evalRollouts, 48);
  assert.equal(parseDemoArgs(["--eval-rollouts", "64"]).evalRollouts, 64);
});

Deno.test("demo run dir: an existing run is kept (new name), --overwrite replaces, --resume continues", async () => {
  const root = await Deno.makeTempDir();
  const args = parseDemoArgs([]);
  assert.deepEqual(chooseRunDir(args, root), {
    name: "demo",
    dir: `${root}/demo`,
    replace: false,
    note: null,
  });
  await Deno.mkdir(`${root}/demo`);
  assert.equal(nonEmptyDir(`${root}/demo`), false, "an empty directory holds no run");
  await Deno.writeTextFile(`${root}/demo/metrics.jsonl`, "{}\n");
  const kept = chooseRunDir(args, root);
  assert.equal(kept.dir, `${root}/demo-2`);
  assert.equal(kept.replace, false);
  assert.match(kept.note!, /holds an earlier run \(kept\)/);
  assert.equal(chooseRunDir(parseDemoArgs(["--overwrite"]), root).replace, true);
  const resumed = chooseRunDir(parseDemoArgs(["--resume"]), root);
  assert.deepEqual([resumed.dir, resumed.replace], [`${root}/demo`, false]);
  await Deno.remove(root, { recursive: true });
});

Deno.test("deno task demo --steps abc: exits non-zero naming --steps, touches nothing on disk", async () => {
  const cwd = await Deno.makeTempDir();
  await Deno.mkdir(`${cwd}/runs/demo/checkpoints`, { recursive: true });
  await Deno.writeTextFile(`${cwd}/runs/demo/metrics.jsonl`, '{"step":0}\n');
  await Deno.writeTextFile(`${cwd}/runs/demo/checkpoints/state.json`, "{}");
  const listing = async () => {
    const out: string[] = [];
    const walk = async (dir: string) => {
      for await (const e of Deno.readDir(dir)) {
        const path = `${dir}/${e.name}`;
        const stat = await Deno.stat(path);
        out.push(`${path} ${stat.size} ${stat.mtime?.getTime()}`);
        if (e.isDirectory) await walk(path);
      }
    };
    await walk(cwd);
    return out.sort();
  };
  const before = await listing();
  for (const argv of [["--steps", "abc"], ["--overwrite", "--eval-rollouts", "x"]]) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", `--config=${CONFIG}`, DEMO, ...argv],
      cwd,
      stdout: "piped",
      stderr: "piped",
    }).output();
    const stderr = new TextDecoder().decode(out.stderr);
    assert.equal(out.code, 2, stderr);
    assert.match(stderr, new RegExp(`demo: ${argv.at(-2)}: expected a whole number`));
  }
  assert.deepEqual(await listing(), before, "nothing created, changed or deleted");
  await Deno.remove(cwd, { recursive: true });
});

const step = (i: number, ms: number): LoopStepMetrics => ({
  step: i,
  policy_version: 4 * (i + 1),
  time: 0,
  mode: "collocated_async",
  rollouts: 24,
  reward_mean: 0.5,
  reward_std: 0.5,
  pass_rate: 0.5,
  samples: 24,
  samples_per_rollout: 1,
  trained_rollouts: 24,
  trained_samples: 24,
  trained_tokens: 1000,
  advantage_mean: 0,
  advantage_std: 1,
  advantage_abs_max: 1,
  break_reasons: {},
  tis_samples: 0,
  filtered: emptyFiltered(),
  staleness_max: 0,
  staleness_mean: 0,
  alignment_corr: 1,
  alignment_logprob_corr: 1,
  alignment_tokens: 100,
  alignment_max_abs_dp: 0,
  alignment_mean_abs_dp: 0,
  alignment_max_abs_dlogprob: 0,
  alignment_k1_kl: 0,
  alignment_k3_kl: 0,
  alignment_ess: 1,
  loss: 0,
  entropy: 1,
  clip_fraction: 0,
  clip_fraction_last_epoch: 0,
  kl_ref_mean: 0,
  singleton_groups: 0,
  grad_norm: 1,
  held_calls: 0,
  in_flight_at_update: 0,
  timings_ms: { step: ms },
});

Deno.test("progress without a terminal: a line when a phase starts, then every ~10 s, with an ETA", () => {
  const lines: string[] = [];
  let t = 0;
  const progress = terminalProgress({ tty: false, now: () => t, write: (l) => lines.push(l) });
  // SFT: 300 steps, one status per step every 100 ms (30 s in all).
  for (let s = 1; s <= 300; s++) {
    progress.status(`SFT ${s}/300`, { phase: "SFT", done: s, total: 300 });
    t += 100;
  }
  assert.equal(lines.length, 3, lines.join("\n")); // at 0 s, 10 s, 20 s
  assert.equal(lines[0], "SFT 1/300 · 0% · 0s elapsed");
  assert.equal(lines[1], "SFT 101/300 · 33% · 10s elapsed · eta 20s");
  assert.match(lines[2], /^SFT 201\/300 · 67% · 20s elapsed · eta 10s$/);
  progress.log("SFT done");
  // Evaluation: a new phase prints at once.
  progress.status("eval before: 0/48 rollouts final", { phase: "eval before", done: 0, total: 48 });
  assert.match(lines.at(-1)!, /^eval before: 0\/48 rollouts final · 0% · 0s elapsed$/);
  t += 12_000;
  progress.status("eval before: 24/48", { phase: "eval before", done: 24, total: 48 });
  assert.match(lines.at(-1)!, /· 50% · 12s elapsed · eta 12s$/);
  // RL steps: every step line carries the ETA of the remaining steps; waits in between print
  // every ~10 s with that ETA counting down.
  progress.step(step(0, 8000), 10);
  assert.match(lines.at(-1)!, /^step {2}1\/10 .* · eta 1m12s$/);
  const n = lines.length;
  t += 4000;
  progress.status("step 2: 1/3 groups complete");
  assert.equal(lines.length, n, "no line within 10 s of the last one");
  t += 7000;
  progress.status("step 2: 2/3 groups complete");
  assert.equal(lines.at(-1), "step 2: 2/3 groups complete · RL eta 1m01s");
  progress.step(step(9, 8000), 10);
  assert.doesNotMatch(lines.at(-1)!, /eta/, "no ETA after the last step");
  // quiet prints nothing.
  const silent: string[] = [];
  const quiet = terminalProgress({ quiet: true, tty: false, write: (l) => silent.push(l) });
  quiet.status("x", { phase: "p", done: 1, total: 2 });
  quiet.log("y");
  assert.deepEqual(silent, []);
});
