/**
 * Installs what reins' tests, notebooks and demo need when it is missing, and says what it did.
 *
 * The npm side is Deno's own: `deno install` fills `node_modules` from the lockfile (every task
 * runs it first; `nodeModulesDir` is `manual` because `auto` re-checked all ~600 installed
 * packages at every process start, ~0.4–0.9 s each). This script covers the system side:
 * PyTorch for the trainer worker with an optimised BLAS (Debian's python3-torch otherwise
 * runs its matmuls on the reference BLAS, ~50x slower), PostgreSQL for the second store backend, bubblewrap for the
 * sandbox, Chromium for the UI tests, Jupyter for the notebooks and a font for PNG figures.
 * On Debian as root it runs `apt-get install`; elsewhere it prints the command to run.
 *
 * Usage: `deno run -A scripts/ensure_deps.ts [--only torch,postgres,...] [--check]`
 *
 * @module
 */
import { parseArgs } from "node:util";

/** One system dependency: how to detect it and which Debian package provides it. */
interface SystemDependency {
  name: string;
  debian: string[];
  /** Returns true when the dependency is usable. */
  present(): Promise<boolean>;
  /** What to tell a user who is not on Debian or not root. */
  hint: string;
}

async function succeeds(cmd: string, args: string[]): Promise<boolean> {
  try {
    const out = await new Deno.Command(cmd, { args, stdout: "null", stderr: "null" }).output();
    return out.success;
  } catch {
    return false;
  }
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

async function torchPython(): Promise<string | null> {
  for (const python of [Deno.env.get("REINS_PYTHON"), "/usr/bin/python3", "python3"]) {
    if (python && await succeeds(python, ["-c", "import torch"])) return python;
  }
  return null;
}

const WORKER_DIR = new URL("../lib/trainer/worker", import.meta.url).pathname;

/**
 * Which BLAS the worker's torch uses (the worker's own probe, `tools.cpu_probe.blas_library`): pip
 * wheels bundle MKL/OpenBLAS; Debian's python3-torch uses the `libblas.so.3` alternative, which
 * is the reference BLAS (~50x slower matmuls) unless an optimised one is installed.
 */
export async function torchBlas(env: Record<string, string> = {}): Promise<string | null> {
  const python = await torchPython();
  if (!python) return null;
  const code = "from reins_worker.tools.cpu_probe import blas_library; print(blas_library())";
  try {
    const out = await new Deno.Command(python, {
      args: ["-c", code],
      stdout: "piped",
      stderr: "null",
      env: { PYTHONDONTWRITEBYTECODE: "1", PYTHONPATH: WORKER_DIR, ...env },
    }).output();
    return out.success ? new TextDecoder().decode(out.stdout).trim() : null;
  } catch {
    return null;
  }
}

const DEPENDENCIES: SystemDependency[] = [
  {
    name: "torch",
    debian: ["python3-torch", "libopenblas0-pthread"],
    present: async () => (await torchPython()) !== null,
    hint: "pip install torch (or set REINS_PYTHON to a python that has it)",
  },
  {
    // Without it Debian's torch runs on the reference BLAS: every CPU experiment ~10x slower.
    name: "blas",
    debian: ["libopenblas0-pthread"],
    present: async () => (await torchBlas()) !== "reference",
    hint: "pip's torch bundles an optimised BLAS; for Debian's python3-torch install " +
      "libopenblas0-pthread",
  },
  {
    name: "postgres",
    debian: ["postgresql"],
    present: () => Promise.resolve(exists("/usr/lib/postgresql") || exists("/usr/bin/initdb")),
    hint: "install PostgreSQL server binaries (initdb, pg_ctl)",
  },
  {
    name: "bwrap",
    debian: ["bubblewrap"],
    present: () => succeeds("bwrap", ["--version"]),
    hint: "install bubblewrap",
  },
  {
    name: "chromium",
    debian: ["chromium"],
    present: () => Promise.resolve(exists("/usr/bin/chromium")),
    hint: "install chromium (UI browser tests)",
  },
  {
    name: "jupyter",
    debian: ["jupyter-nbconvert", "python3-nbclient", "python3-ipykernel"],
    present: () => succeeds("jupyter", ["nbconvert", "--version"]),
    hint: "install jupyter nbconvert + nbclient + ipykernel",
  },
  {
    name: "git",
    debian: ["git"],
    present: () => succeeds("git", ["--version"]),
    hint: "install git (sandbox tests build real repositories)",
  },
  {
    name: "fonts",
    debian: ["fonts-dejavu-core"],
    present: () => Promise.resolve(exists("/usr/share/fonts/truetype/dejavu/DejaVuSans.ttf")),
    hint: "install the DejaVu fonts (PNG figures)",
  },
];

async function isRootOnDebian(): Promise<boolean> {
  return Deno.uid() === 0 && exists("/etc/debian_version") && await succeeds("apt-get", ["-v"]);
}

async function aptInstall(packages: string[]): Promise<void> {
  const env = { DEBIAN_FRONTEND: "noninteractive" };
  const update = await new Deno.Command("apt-get", { args: ["update", "-qq"], env }).output();
  if (!update.success) throw new Error("apt-get update failed");
  const install = await new Deno.Command("apt-get", {
    args: ["install", "-y", "-qq", "--no-install-recommends", ...packages],
    env,
    stdout: "inherit",
    stderr: "inherit",
  }).output();
  if (!install.success) throw new Error(`apt-get install ${packages.join(" ")} failed`);
}

/**
 * Checks (and on Debian as root, installs) the system dependencies named in `only`
 * (all when omitted). Returns the names still missing afterwards.
 *
 * @example
 * ```ts
 * import { ensureSystemDeps } from "./ensure_deps.ts";
 * const missing = await ensureSystemDeps({ only: ["torch"], install: false });
 * if (missing.length) console.log("missing:", missing);
 * ```
 */
export async function ensureSystemDeps(
  options: { only?: string[]; install?: boolean } = {},
): Promise<string[]> {
  const wanted = DEPENDENCIES.filter((d) => !options.only || options.only.includes(d.name));
  const missing: SystemDependency[] = [];
  for (const dep of wanted) if (!await dep.present()) missing.push(dep);
  if (missing.length === 0) return [];
  if (options.install !== false && await isRootOnDebian()) {
    console.error(`ensure_deps: installing ${missing.map((d) => d.name).join(", ")} via apt-get`);
    await aptInstall(missing.flatMap((d) => d.debian));
    if (missing.some((d) => d.name === "jupyter")) {
      await new Deno.Command(Deno.execPath(), { args: ["jupyter", "--install"] }).output();
    }
    const still: string[] = [];
    for (const dep of missing) if (!await dep.present()) still.push(dep.name);
    return still;
  }
  for (const dep of missing) {
    console.error(`ensure_deps: ${dep.name} is missing: ${dep.hint} (Debian: ${dep.debian})`);
  }
  return missing.map((d) => d.name);
}

/**
 * The script's flags, parsed with `node:util` `parseArgs`: `--only a,b` (names of
 * dependencies; an unknown one is refused naming it) and `--check` (report, install nothing).
 * Errors name the flag.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseEnsureDepsArgs } from "./ensure_deps.ts";
 * assert.deepEqual(parseEnsureDepsArgs(["--only", "torch,git", "--check"]), {
 *   only: ["torch", "git"],
 *   install: false,
 * });
 * assert.deepEqual(parseEnsureDepsArgs([]), { only: undefined, install: true });
 * assert.throws(() => parseEnsureDepsArgs(["--only", "torch,cuda"]), /--only: unknown .*'cuda'/);
 * assert.throws(() => parseEnsureDepsArgs(["--check", "--bogus"]), /--bogus/);
 * ```
 */
export function parseEnsureDepsArgs(args: string[]): { only?: string[]; install: boolean } {
  const { values } = parseArgs({
    args,
    options: { only: { type: "string" }, check: { type: "boolean", default: false } },
    strict: true,
  });
  const only = values.only?.split(",").map((name) => name.trim()).filter((name) => name !== "");
  const known = DEPENDENCIES.map((d) => d.name);
  const unknown = only?.filter((name) => !known.includes(name)) ?? [];
  if (unknown.length) {
    throw new Error(
      `--only: unknown dependency '${unknown.join("', '")}' (known: ${known.join(", ")})`,
    );
  }
  return { only, install: !values.check };
}

if (import.meta.main) {
  const { cliMain } = await import("../lib/flags.ts");
  await cliMain("ensure_deps", async () => {
    if (Deno.args.includes("--help")) {
      console.log(
        "usage: deno run -A scripts/ensure_deps.ts [--only a,b] [--check]\n" +
          `  --only a,b  only these (${DEPENDENCIES.map((d) => d.name).join(", ")})\n` +
          "  --check     report what is missing, install nothing",
      );
      return;
    }
    const missing = await ensureSystemDeps(parseEnsureDepsArgs(Deno.args));
    if (missing.length) {
      console.error(`ensure_deps: still missing: ${missing.join(", ")}`);
      Deno.exit(1);
    }
  });
}
