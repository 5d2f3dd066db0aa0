/**
 * `deno task train --config <file>` — a training run of one's own from a config file (YAML or
 * JSON; `lib/loop/run_config.ts` has the schema, `configs/` the presets). It validates the file
 * (a bad or unknown key exits 2 naming its path), prints the resolved config and the plan,
 * writes both into the run directory, and runs: SFT warm start (toy environments), RL with
 * held-out evaluation, checkpoints, and a summary ending in `name: value` lines.
 *
 * ```sh
 * deno task train --config configs/demo.yaml --dry-run   # validate and print the plan
 * deno task train --config configs/split.yaml            # rollouts that split into samples
 * deno task train --config my.yaml --resume              # continue from the last checkpoint
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { nonEmptyDir } from "./demo_args.ts";

const USAGE = `usage: deno task train --config FILE [flags]
  --config FILE    the run's config (YAML or JSON; see configs/demo.yaml, configs/split.yaml)
  --dry-run        validate, print the resolved config and the plan; start nothing
  --resume         continue the run in its directory from its last checkpoint
  --overwrite      delete the run directory first (never done without this flag)
  --no-png         SVG figures only
  -h, --help       this text`;

function fail(message: string): never {
  console.error(`train: ${message} (see --help)`);
  Deno.exit(2);
}

let values;
try {
  ({ values } = parseArgs({
    args: Deno.args,
    strict: true,
    allowPositionals: false,
    options: {
      config: { type: "string" },
      "dry-run": { type: "boolean", default: false },
      resume: { type: "boolean", default: false },
      overwrite: { type: "boolean", default: false },
      "no-png": { type: "boolean", default: false },
      help: { type: "boolean", short: "h", default: false },
    },
  }));
} catch (error) {
  fail((error as Error).message);
}
if (values.help) {
  console.log(USAGE);
  Deno.exit(0);
}
if (!values.config) fail("--config: required");
if (values.resume && values.overwrite) fail("--resume and --overwrite: choose one");

// The run's modules (the loop, the trainer client, the figures: ~1 s to load) are imported once
// the flags are known to be good, so `--help` and a bad flag answer at once.
const { parseConfigText, RunConfigError, validateRunConfig } = await import(
  "../lib/loop/run_config.ts"
);
const { executeRun, planText, resolveRun } = await import("./train_run.ts");
const path = values.config;
let resolved;
try {
  const text = await Deno.readTextFile(path).catch((error) => {
    throw new RunConfigError(path, [`cannot read: ${error.message}`]);
  });
  const raw = parseConfigText(text, path) as Record<string, unknown>;
  if (values.resume && raw && typeof raw === "object") raw.resume = true;
  resolved = await resolveRun(validateRunConfig(raw, path), path);
} catch (error) {
  if (error instanceof RunConfigError) {
    console.error(`train: ${error.message}`);
    Deno.exit(2);
  }
  throw error;
}
const resolvedText = JSON.stringify(resolved.run, null, 2);
console.log(`resolved config (${path}):\n${resolvedText}\n\nplan:\n${planText(resolved)}`);
if (values["dry-run"]) {
  console.log("\n--dry-run: nothing started");
  Deno.exit(0);
}
if (!resolved.run.resume && nonEmptyDir(resolved.outDir)) {
  if (!values.overwrite) {
    fail(
      `${resolved.outDir} holds an earlier run; --resume continues it, --overwrite replaces it, ` +
        `or change name / out_dir`,
    );
  }
  console.log(`train: --overwrite: deleting ${resolved.outDir}`);
  await Deno.remove(resolved.outDir, { recursive: true });
}
await Deno.mkdir(resolved.outDir, { recursive: true });
await Deno.writeTextFile(`${resolved.outDir}/plan.txt`, planText(resolved) + "\n");
await executeRun(resolved, { pngOff: values["no-png"] });
