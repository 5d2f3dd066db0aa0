/**
 * `deno task curate` — the curation pipeline (Agent Lightning's SWE-smith recipe) over a task
 * set: rule stages, sandboxed test stages, the difficulty probe on the embedded stack, a
 * stratified train / validation split, and the report. Prints one `curate_<stage>: N` line per
 * stage (tasks remaining after it), then `curate_probe_rollouts: N`, the split, the hash and
 * `curate_output: PATH`.
 *
 * Flags: `--input FILE` (`.jsonl` or `.parquet` of SWE-smith records; default: the coding
 * environment's tasks, hand-written and generated), `--quick` (an 8-task sample before the test stages, k=2),
 * `--probe-k N` (4), `--probe-sample N` (a sample right before the probe), `--policy scripted|worker` (scripted), `--checkpoint
 * PATH` (worker policy: a saved model), `--name NAME`, `--out DIR`, `--repos DIR`, `--seed N`,
 * `--config FILE` (JSON of the pipeline's config; flags win).
 *
 * @module
 */
import { cliMain, existingPath, intFlag, parseFlags, UsageError } from "../lib/flags.ts";
import { DEFAULT_DATA_DIR } from "../lib/harness/envs/common.ts";
import type { CurationConfigInput } from "../lib/schema.ts";

const USAGE = `usage: deno task curate [--quick] [--input FILE] [--probe-k N] [--probe-sample N]
  [--policy scripted|worker] [--checkpoint FILE] [--name NAME] [--out DIR] [--repos DIR]
  [--seed N] [--config FILE]
  --input FILE       .jsonl or .parquet of SWE-smith records (default: the coding tasks)
  --quick            an 8-task sample before the test stages, 2 probe rollouts per task
  --probe-k N        rollouts per task in the difficulty probe (4)
  --probe-sample N   a sample of N tasks right before the probe
  --policy P         scripted (default) or worker (the trained policy on the embedded stack)
  --checkpoint FILE  worker policy: a saved model
  --name NAME        run name (quick or full); output under --out (runs/curate/NAME)
  --repos DIR        the task repositories (data/envs/coding/repos)
  --config FILE      JSON of the pipeline's config; flags win
Every file and value is checked before the first stage runs.`;

await cliMain("curate", async () => {
  const values = parseFlags(Deno.args, {
    input: { type: "string" },
    quick: { type: "boolean", default: false },
    "probe-k": { type: "string" },
    "probe-sample": { type: "string" },
    policy: { type: "string" },
    checkpoint: { type: "string" },
    name: { type: "string" },
    out: { type: "string" },
    repos: { type: "string", default: `${DEFAULT_DATA_DIR}/coding/repos` },
    seed: { type: "string" },
    config: { type: "string" },
  }, USAGE);
  if (!values) return;
  // Inputs first: a missing checkpoint must not surface after the sandboxed test stages.
  await existingPath("input", values.input);
  await existingPath("checkpoint", values.checkpoint);
  await existingPath("config", values.config);
  await existingPath("repos", values.repos, "directory");
  if (values.policy && values.policy !== "scripted" && values.policy !== "worker") {
    throw new UsageError(`--policy: expected scripted or worker, got '${values.policy}'`);
  }
  const k = intFlag("probe-k", values["probe-k"], 1);
  const sample = intFlag("probe-sample", values["probe-sample"], 1);
  const seed = intFlag("seed", values.seed, 0);
  let fromFile: CurationConfigInput = {};
  if (values.config) {
    try {
      fromFile = JSON.parse(await Deno.readTextFile(values.config));
    } catch (error) {
      throw new UsageError(`--config: ${values.config}: ${(error as Error).message}`);
    }
  }

  const config: CurationConfigInput & { probe: Record<string, unknown> } = {
    probe: {},
    ...fromFile,
  };
  config.probe ??= {};
  if (values.quick) {
    // A seeded 8-task sample taken before the test stages, and 2 rollouts per task.
    config.sample ??= { size: 8, before: "tests" };
    config.probe.k ??= 2;
  }
  if (k !== undefined) config.probe.k = k;
  if (sample !== undefined) config.sample = { size: sample, before: "probe" };
  if (seed !== undefined) config.seed = seed;
  if (values.policy) config.probe.policy = values.policy as "scripted" | "worker";

  const name = values.name ?? (values.quick ? "quick" : "full");
  // The pipeline's modules (the stack, the sandbox, polars: ~1 s to load) are imported once the
  // flags are known to be good, so `--help` and a bad flag answer at once.
  const { codingDatasetTasks, readTaskSet } = await import("../lib/curation/io.ts");
  const { runCuration } = await import("../lib/curation/pipeline.ts");
  let input;
  try {
    input = values.input ? readTaskSet(values.input) : codingDatasetTasks(DEFAULT_DATA_DIR);
  } catch (error) {
    throw new UsageError(`--input: ${values.input}: ${(error as Error).message.split("\n")[0]}`);
  }
  const started = performance.now();
  const result = await runCuration(input, {
    name,
    config,
    reposDir: values.repos!,
    outDir: values.out ?? `runs/curate/${name}`,
    inputPath: values.input ?? "data/envs/coding (tasks.jsonl + swesmith.jsonl)",
    ...(values.checkpoint
      ? { probe: { model: { kind: "checkpoint", path: values.checkpoint } } }
      : {}),
    log: (line) => console.error(`curate: ${withEta(line, started)}`),
  });

  console.log(`curate_input: ${input.length}`);
  for (const row of result.funnel) console.log(`curate_${row.stage}: ${row.out}`);
  console.log(`curate_probe_rollouts: ${result.probe?.rollouts ?? 0}`);
  if (result.probe?.reused) console.log(`curate_probe_reused: ${result.probe.reused}`);
  console.log(
    `curate_split: train=${result.report.splits.train} validation=${result.report.splits.validation}`,
  );
  console.log(`curate_hash: ${result.report.hash}`);
  console.log(`curate_wall_s: ${result.report.wall_s.toFixed(1)}`);
  console.log(`curate_output: ${result.report.outputs.parquet}`);
});

/**
 * A progress line with an ETA: the test stages' `k/n tasks run` and the probe's `k/n rollouts
 * final` get the time the rest takes at the rate so far, measured from the stage's start (the
 * previous other line).
 */
function withEta(line: string, started: number): string {
  const m = line.match(/(\d+)\/(\d+) (tasks run|rollouts final)/);
  if (!m) {
    stageStart = performance.now();
    return line;
  }
  const [done, total] = [Number(m[1]), Number(m[2])];
  if (!(done > 0 && total > done)) return line;
  const elapsed = (performance.now() - (stageStart ?? started)) / 1000;
  const eta = elapsed / done * (total - done);
  return `${line} (ETA ${eta < 90 ? `${eta.toFixed(0)} s` : `${(eta / 60).toFixed(1)} min`})`;
}
let stageStart: number | undefined;
