/**
 * The demo's command line: parsed with `node:util` `parseArgs`, every value validated (errors
 * name the flag) before anything on disk is touched, and the run directory chosen so that an
 * existing run is never deleted unless `--overwrite` says so.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { intFlag } from "../lib/flags.ts";

/** A bad command line; the message names the flag. */
export class DemoArgsError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "DemoArgsError";
  }
}

/** The demo's settings. */
export interface DemoArgs {
  name: string;
  resume: boolean;
  overwrite: boolean;
  steps: number;
  sftSteps: number;
  tasks: number;
  mode: "sync" | "collocated_async";
  concurrency: number;
  evalRollouts: number;
  png: boolean;
  /** Who samples: the torch worker itself, or llama.cpp synced each step. */
  engine: "worker" | "llama_cpp";
  help: boolean;
}

/**
 * Evaluation rollouts before and after RL when `--eval-rollouts` is not given, per sampler. The
 * worker's demo separates its gain at the preset's 48. On llama.cpp the gain was smaller and
 * noisier across runs (training rollouts are unseeded and the async schedule follows timing):
 * at 48, +0.167 ± 0.173; at 96, +0.219 ± 0.122 in one run and +0.115 ± 0.124 in the next (not
 * separated); that run's two policies on 192, +0.135 ± 0.088. With the paired differences' SD
 * ≈ 0.6 the 95% half-width is ≈ 0.12 at 96 rollouts and ≈ 0.09 at 192 (README, engine figures).
 */
export const DEMO_EVAL_ROLLOUTS = { worker: 48, llama_cpp: 192 } as const;

/** What `--help` prints. */
export const DEMO_USAGE = `usage: deno task demo [flags]
  --name NAME          run name; files go to runs/NAME (default demo; a new name is picked
                       when runs/NAME exists, unless --resume or --overwrite)
  --resume             continue the run in runs/NAME from its last checkpoint
  --overwrite          delete runs/NAME first (never done without this flag)
  --steps N            RL steps (default 16)
  --sft-steps N        SFT warm-start steps (default 300)
  --tasks K            arithmetic questions to learn (default 4, at most 243)
  --mode M             collocated_async (default) or sync
  --concurrency N      harness processes at once (default 8)
  --eval-rollouts N    evaluation rollouts before and after RL (default 48, with
                       --engine llama_cpp 192; at least 2)
  --engine E           who samples: worker (default; the torch worker that trains) or
                       llama_cpp (a llama.cpp engine synced with a GGUF export each step)
  --no-png             SVG figures only`;

function integer(flag: string, raw: string, min: number, max: number): number {
  try {
    return intFlag(flag, raw, min, max)!;
  } catch (error) {
    throw new DemoArgsError((error as Error).message);
  }
}

/**
 * Parses and validates the demo's flags; throws {@link DemoArgsError} naming the flag.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseDemoArgs } from "./demo_args.ts";
 * assert.equal(parseDemoArgs(["--steps", "4"]).steps, 4);
 * assert.throws(() => parseDemoArgs(["--steps", "abc"]), /--steps: expected a whole number/);
 * ```
 */
export function parseDemoArgs(argv: string[]): DemoArgs {
  let values;
  try {
    ({ values } = parseArgs({
      args: argv,
      strict: true,
      allowPositionals: false,
      options: {
        name: { type: "string", default: "demo" },
        resume: { type: "boolean", default: false },
        overwrite: { type: "boolean", default: false },
        steps: { type: "string", default: "16" },
        "sft-steps": { type: "string", default: "300" },
        tasks: { type: "string", default: "4" },
        mode: { type: "string", default: "collocated_async" },
        concurrency: { type: "string", default: "8" },
        "eval-rollouts": { type: "string" },
        "no-png": { type: "boolean", default: false },
        engine: { type: "string", default: "worker" },
        help: { type: "boolean", short: "h", default: false },
      },
    }));
  } catch (error) {
    // parseArgs names the flag ("Unknown option '--stpes'", "Option '--steps <value>' argument
    // missing"); keep its words.
    throw new DemoArgsError((error as Error).message);
  }
  const name = values.name;
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/.test(name)) {
    throw new DemoArgsError(
      `--name: use 1–64 letters, digits, '.', '_' or '-' (it names runs/<name>), got '${name}'`,
    );
  }
  if (values.mode !== "sync" && values.mode !== "collocated_async") {
    throw new DemoArgsError(`--mode: expected sync or collocated_async, got '${values.mode}'`);
  }
  if (values.engine !== "worker" && values.engine !== "llama_cpp") {
    throw new DemoArgsError(`--engine: expected worker or llama_cpp, got '${values.engine}'`);
  }
  if (values.resume && values.overwrite) {
    throw new DemoArgsError("--resume and --overwrite: choose one");
  }
  return {
    name,
    resume: values.resume,
    overwrite: values.overwrite,
    steps: integer("steps", values.steps, 1, 10_000),
    sftSteps: integer("sft-steps", values["sft-steps"], 0, 100_000),
    tasks: integer("tasks", values.tasks, 1, 243),
    mode: values.mode,
    concurrency: integer("concurrency", values.concurrency, 1, 256),
    evalRollouts: values["eval-rollouts"] === undefined
      ? DEMO_EVAL_ROLLOUTS[values.engine]
      : integer("eval-rollouts", values["eval-rollouts"], 2, 10_000),
    png: !values["no-png"],
    engine: values.engine,
    help: values.help,
  };
}

/** Where the run goes and what happens to what is there. */
export interface RunDirChoice {
  name: string;
  dir: string;
  /** `runs/<name>` is deleted first (only with `--overwrite`). */
  replace: boolean;
  /** Why the name differs from the one asked for (an existing run was kept), or null. */
  note: string | null;
}

/**
 * Picks the run directory under `root`: `--resume` continues `<root>/<name>`; `--overwrite`
 * replaces it; otherwise an existing, non-empty `<root>/<name>` is kept and the run goes to the
 * first free `<name>-2`, `<name>-3`, …
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { chooseRunDir, parseDemoArgs } from "./demo_args.ts";
 * const taken = new Set(["runs/demo", "runs/demo-2"]);
 * const choice = chooseRunDir(parseDemoArgs([]), "runs", (dir) => taken.has(dir));
 * assert.equal(choice.dir, "runs/demo-3");
 * assert.equal(choice.replace, false);
 * ```
 */
export function chooseRunDir(
  args: Pick<DemoArgs, "name" | "resume" | "overwrite">,
  root: string,
  occupied: (dir: string) => boolean = nonEmptyDir,
): RunDirChoice {
  const dir = `${root}/${args.name}`;
  if (args.resume || !occupied(dir)) return { name: args.name, dir, replace: false, note: null };
  if (args.overwrite) return { name: args.name, dir, replace: true, note: null };
  for (let k = 2;; k++) {
    const name = `${args.name}-${k}`;
    if (!occupied(`${root}/${name}`)) {
      return {
        name,
        dir: `${root}/${name}`,
        replace: false,
        note: `${dir} holds an earlier run (kept); this run is ${root}/${name} ` +
          `(--resume continues ${dir}, --overwrite replaces it)`,
      };
    }
  }
}

/** Whether `dir` exists and holds anything. */
export function nonEmptyDir(dir: string): boolean {
  try {
    for (const _ of Deno.readDirSync(dir)) return true;
    return false;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    if (error instanceof Deno.errors.NotADirectory) return true;
    throw error;
  }
}
