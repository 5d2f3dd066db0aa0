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
import { parseArgs } from "node:util";
import { intFlag } from "../lib/flags.ts";
import { codingDatasetTasks, readTaskSet } from "../lib/curation/io.ts";
import { runCuration } from "../lib/curation/pipeline.ts";
import { DEFAULT_DATA_DIR } from "../lib/harness/envs/common.ts";
import type { CurationConfigInput } from "../lib/schema.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
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
  },
});

const int = (flag: string, text: string | undefined): number | undefined => {
  try {
    return intFlag(flag, text, 0);
  } catch (error) {
    console.error(`curate: ${(error as Error).message}`);
    Deno.exit(2);
  }
};

const config: CurationConfigInput & { probe: Record<string, unknown> } = {
  probe: {},
  ...(values.config ? JSON.parse(await Deno.readTextFile(values.config)) : {}),
};
config.probe ??= {};
if (values.quick) {
  // A seeded 8-task sample taken before the test stages, and 2 rollouts per task.
  config.sample ??= { size: 8, before: "tests" };
  config.probe.k ??= 2;
}
const k = int("probe-k", values["probe-k"]);
if (k !== undefined) config.probe.k = k;
const sample = int("probe-sample", values["probe-sample"]);
if (sample !== undefined) config.sample = { size: sample, before: "probe" };
const seed = int("seed", values.seed);
if (seed !== undefined) config.seed = seed;
if (values.policy) {
  if (values.policy !== "scripted" && values.policy !== "worker") {
    console.error(
      `curate: --policy: expected scripted or worker, got ${JSON.stringify(values.policy)}`,
    );
    Deno.exit(2);
  }
  config.probe.policy = values.policy;
}

const name = values.name ?? (values.quick ? "quick" : "full");
const input = values.input ? readTaskSet(values.input) : codingDatasetTasks(DEFAULT_DATA_DIR);
const result = await runCuration(input, {
  name,
  config,
  reposDir: values.repos!,
  outDir: values.out ?? `runs/curate/${name}`,
  inputPath: values.input ?? "data/envs/coding (tasks.jsonl + swesmith.jsonl)",
  ...(values.checkpoint
    ? { probe: { model: { kind: "checkpoint", path: values.checkpoint } } }
    : {}),
  log: (line) => console.error(`curate: ${line}`),
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
