/**
 * Executes every notebook in `notebooks/` headless and fails on any cell error or any figure
 * cell that comes back without its figure (`deno task notebooks`; CI runs it).
 *
 * Steps: install the Deno Jupyter kernel (`deno jupyter --install --force`, idempotent), then run
 * each notebook with `jupyter nbconvert --to notebook --execute` on the `deno` kernel. Executed
 * copies go to a temporary directory that is removed afterwards, so the repo stays clean; the
 * notebooks' own side effects (figures under `experiments/figures/`) stay. Prints the time of
 * each notebook.
 *
 * Usage: `deno run -A scripts/run_notebooks.ts [--write | --check] [--out DIR] [--timeout S]
 * [name...]`
 * - `name...`: only notebooks whose file name contains one of the names;
 * - `--write`: write the outputs into the notebooks themselves, stamped with the sources' hash
 *   and the code fingerprint (see `scripts/notebook_meta.ts`), to commit executed notebooks
 *   (`--in-place` is the old name);
 * - `--check`: execute nothing; fail when a committed notebook's sources changed since `--write`,
 *   a figure cell lacks its image or a result set it reads fails its canary (a change of the
 *   code it imports is a note: see `scripts/notebook_meta.ts`);
 * - without `--write`, each executed notebook's text outputs are compared with the committed
 *   ones (cells tagged `measured` aside) and the lines the rerun prints that they lack are
 *   printed as a note (not a failure: the kernel can drop lines headless);
 * - `--out DIR`: keep the executed copies in DIR instead of a temporary directory;
 * - `--timeout S`: per-cell time limit in seconds (default 600).
 *
 * Needs Jupyter with nbconvert/nbclient/ipykernel (Debian: `jupyter-nbconvert python3-nbclient
 * python3-ipykernel`).
 *
 * @module
 */

import { parseArgs as parseNodeArgs } from "node:util";
import {
  checkNotebook,
  missingFigures,
  outputDrift,
  readNotebook,
  stampFor,
  writeNotebook,
} from "./notebook_meta.ts";

const ROOT = decodeURIComponent(new URL("../", import.meta.url).pathname).replace(/\/$/, "");
const NOTEBOOKS = `${ROOT}/notebooks`;

const USAGE = `usage: deno task notebooks [--write | --check] [--out DIR] [--timeout S] [name...]
  name...      only notebooks whose file name contains one of the names
  --write      write the outputs into the notebooks, stamped (to commit executed notebooks)
  --check      execute nothing; fail unless each committed notebook is current
  --out DIR    keep the executed copies in DIR
  --timeout S  per-cell time limit in seconds (600)`;

interface Options {
  help?: boolean;
  write: boolean;
  check: boolean;
  out: string | undefined;
  timeout: number;
  names: string[];
}

function parseArgs(args: string[]): Options {
  const { values, positionals } = parseNodeArgs({
    args,
    options: {
      write: { type: "boolean", default: false },
      "in-place": { type: "boolean", default: false },
      check: { type: "boolean", default: false },
      out: { type: "string" },
      timeout: { type: "string", default: "600" },
      help: { type: "boolean", default: false },
    },
    strict: true,
    allowPositionals: true,
  });
  const timeout = Number(values.timeout);
  if (!Number.isFinite(timeout) || timeout <= 0) {
    throw new Error("--timeout: expected a positive number of seconds");
  }
  if (values.out === "") throw new Error("--out: expected a directory");
  const write = values.write || values["in-place"];
  if (write && values.check) throw new Error("--write and --check: choose one");
  return {
    help: values.help,
    write,
    check: values.check,
    out: values.out,
    timeout,
    names: positionals,
  };
}

async function run(cmd: string, args: string[]): Promise<{ ok: boolean; output: string }> {
  try {
    const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped" }).output();
    const decoder = new TextDecoder();
    return { ok: out.success, output: decoder.decode(out.stdout) + decoder.decode(out.stderr) };
  } catch (error) {
    return { ok: false, output: (error as Error).message };
  }
}

async function findJupyter(): Promise<string> {
  for (const candidate of [Deno.env.get("REINS_JUPYTER"), "jupyter", "/usr/bin/jupyter"]) {
    if (!candidate) continue;
    if ((await run(candidate, ["nbconvert", "--version"])).ok) return candidate;
  }
  throw new Error(
    "jupyter nbconvert not found: install Debian jupyter-nbconvert python3-nbclient " +
      "python3-ipykernel (or set REINS_JUPYTER to a jupyter executable)",
  );
}

async function listNotebooks(names: string[]): Promise<string[]> {
  const out: string[] = [];
  for await (const entry of Deno.readDir(NOTEBOOKS)) {
    if (!entry.isFile || !entry.name.endsWith(".ipynb")) continue;
    if (names.length > 0 && !names.some((name) => entry.name.includes(name))) continue;
    out.push(`${NOTEBOOKS}/${entry.name}`);
  }
  return out.sort();
}

/** The last lines of nbconvert's output: where the cell error is. */
function tail(text: string, lines = 40): string {
  return text.trimEnd().split("\n").slice(-lines).join("\n");
}

async function check(notebooks: string[]): Promise<number> {
  let stale = 0;
  for (const path of notebooks) {
    const name = path.slice(path.lastIndexOf("/") + 1);
    const { failures, notes } = await checkNotebook(await readNotebook(path), path);
    const tag = failures.length ? "STALE" : notes.length ? "ok*  " : "ok   ";
    console.log(`${tag} ${name}${failures.length || notes.length ? ":" : ""}`);
    for (const r of failures) console.log(`      ${r}`);
    for (const n of notes) console.log(`      note: ${n}`);
    if (failures.length) stale++;
  }
  console.log(`${notebooks.length - stale}/${notebooks.length} notebooks current`);
  return stale === 0 ? 0 : 1;
}

async function main(): Promise<number> {
  const options = parseArgs(Deno.args);
  if (options.help) {
    console.log(USAGE);
    return 0;
  }
  if (options.check) {
    const notebooks = await listNotebooks(options.names);
    if (notebooks.length === 0) {
      console.error(`no notebook matched in ${NOTEBOOKS}`);
      return 1;
    }
    return await check(notebooks);
  }
  const jupyter = await findJupyter();
  // `--force` makes it idempotent and points the kernel at the deno running this script.
  const install = await run(Deno.execPath(), ["jupyter", "--install", "--force"]);
  if (!install.ok) {
    console.error(`deno jupyter --install failed:\n${tail(install.output)}`);
    return 1;
  }
  const notebooks = await listNotebooks(options.names);
  if (notebooks.length === 0) {
    console.error(`no notebook matched in ${NOTEBOOKS}`);
    return 1;
  }
  const temp = options.out ? undefined : await Deno.makeTempDir();
  const outDir = options.out ?? temp!;
  if (options.out) await Deno.mkdir(options.out, { recursive: true });
  const results: { name: string; seconds: number; ok: boolean }[] = [];
  const started = performance.now();
  try {
    for (const [k, path] of notebooks.entries()) {
      const name = path.slice(path.lastIndexOf("/") + 1);
      // Progress before each notebook (they run minutes, silently): the ETA is the mean time
      // per notebook so far times the ones left.
      const elapsed = (performance.now() - started) / 1000;
      const eta = k ? ` · ETA ${fmtSeconds(elapsed / k * (notebooks.length - k))}` : "";
      console.log(
        `notebook ${k + 1}/${notebooks.length}: ${name} (${fmtSeconds(elapsed)} so far${eta})`,
      );
      const args = [
        "nbconvert",
        "--to",
        "notebook",
        "--execute",
        "--ExecutePreprocessor.kernel_name=deno",
        `--ExecutePreprocessor.timeout=${options.timeout}`,
        "--output-dir",
        outDir,
        path,
      ];
      const start = performance.now();
      const result = await run(jupyter, args);
      const seconds = (performance.now() - start) / 1000;
      let ok = result.ok;
      let why = result.ok ? "" : tail(result.output);
      if (ok) {
        const executed = await readNotebook(`${outDir}/${name}`);
        const missing = missingFigures(executed);
        const drift = options.write ? [] : outputDrift(await readNotebook(path), executed);
        if (drift.length) {
          // Reported, not failed: the Deno kernel can drop a printed line in headless runs (in
          // the committed run as well as in this one), so a line missing on either side is no
          // evidence that the numbers moved.
          console.log(
            `note ${name}: ${drift.length} printed line(s) differ from the committed outputs ` +
              `(\`deno task notebooks --write ${name.replace(/\.ipynb$/, "")}\` refreshes them)\n` +
              drift.slice(0, 5).map((d) => `  cell ${d.cell}: ${d.line}`).join("\n"),
          );
        }
        if (missing.length) {
          ok = false;
          why = `figure cell(s) ${missing.join(", ")} came back without an image`;
        } else if (options.write) {
          executed.metadata.reins = await stampFor(executed, path);
          await writeNotebook(path, executed);
        }
      }
      results.push({ name, seconds, ok });
      console.log(
        `${ok ? "ok  " : "FAIL"} ${name} ${seconds.toFixed(1)}s${
          ok && options.write ? " (written)" : ""
        }`,
      );
      if (!ok) console.error(why);
    }
  } finally {
    if (temp) await Deno.remove(temp, { recursive: true });
  }
  const failed = results.filter((r) => !r.ok);
  const total = results.reduce((sum, r) => sum + r.seconds, 0);
  console.log(
    `${results.length - failed.length}/${results.length} notebooks ran clean in ${
      total.toFixed(1)
    }s`,
  );
  return failed.length === 0 ? 0 : 1;
}

function fmtSeconds(s: number): string {
  return s < 90 ? `${s.toFixed(0)} s` : `${(s / 60).toFixed(1)} min`;
}

if (import.meta.main) {
  try {
    Deno.exit(await main());
  } catch (error) {
    // One line naming the flag; the usage is a `--help` away.
    console.error(`notebooks: ${(error as Error).message.split(". ")[0]} (see --help)`);
    Deno.exit(2);
  }
}
