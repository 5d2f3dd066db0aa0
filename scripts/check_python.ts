/**
 * Holds reins' Python to the bar of its TypeScript: ruff (its WebAssembly build, so no PyPI is
 * needed) over every `.py` file git tracks, and pyright over the trainer worker, both configured
 * by the repository's `pyproject.toml`. Exits 1 listing every finding.
 *
 * Usage: `deno task check:python` (part of `deno task check`).
 *
 * ruff's wasm build checks one source text at a time and knows no file names, so this script
 * applies `per-file-ignores` itself (patterns `dir/**` and exact paths only); pyright runs as its
 * npm CLI with the worker's Python (`REINS_PYTHON`, else /usr/bin/python3) so that it resolves
 * torch.
 *
 * @module
 */
import { cliMain, parseFlags } from "../lib/flags.ts";
import { PositionEncoding, Workspace } from "@astral-sh/ruff-wasm-nodejs";
import { parse } from "smol-toml";
import { resolvePython } from "../lib/trainer/mod.ts";

const ROOT = new URL("../", import.meta.url).pathname;

interface RuffFinding {
  code: string | null;
  message: string;
  start_location: { row: number; column: number };
}

// deno-lint-ignore no-explicit-any
type Toml = Record<string, any>;

async function trackedPythonFiles(): Promise<string[]> {
  const out = await new Deno.Command("git", { args: ["ls-files", "*.py"], cwd: ROOT }).output();
  if (!out.success) throw new Error("git ls-files failed: run from a reins checkout");
  return new TextDecoder().decode(out.stdout).split("\n").filter(Boolean);
}

function ignoredCodes(path: string, perFile: Record<string, string[]>): string[] {
  const out: string[] = [];
  for (const [pattern, codes] of Object.entries(perFile)) {
    const hit = pattern.endsWith("/**") ? path.startsWith(pattern.slice(0, -2)) : path === pattern;
    if (hit) out.push(...codes);
  }
  return out;
}

/** A Python source to lint: its repository path (for per-file ignores) and text. */
export interface PythonSource {
  path: string;
  text: string;
}

/** Runs ruff over `sources` with the `[tool.ruff]` settings of `config`; one line per finding. */
export function ruffFindings(sources: PythonSource[], config: Toml): string[] {
  const ruff = config.tool?.ruff ?? {};
  const { "per-file-ignores": perFile = {}, ...lint } = ruff.lint ?? {};
  const workspace = new Workspace({ ...ruff, lint }, PositionEncoding.Utf16);
  const lines: string[] = [];
  for (const { path, text } of sources) {
    const ignored = ignoredCodes(path, perFile);
    const findings = workspace.check(text) as RuffFinding[];
    for (const f of findings) {
      const code = f.code ?? "syntax";
      if (ignored.some((prefix) => code.startsWith(prefix))) continue;
      lines.push(
        `${path}:${f.start_location.row}:${f.start_location.column}: ${code} ${f.message}`,
      );
    }
  }
  return lines;
}

/** Runs pyright with the repository's settings; returns its report and whether it passed. */
async function pyright(): Promise<{ ok: boolean; report: string }> {
  let python = "/usr/bin/python3";
  try {
    python = (await resolvePython()).python;
  } catch {
    // pyright then reports the unresolved imports (torch): the finding names the fix.
  }
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "npm:pyright@1.1.414", "--pythonpath", python, "--project", ROOT],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const report = new TextDecoder().decode(out.stdout) + new TextDecoder().decode(out.stderr);
  return { ok: out.success, report };
}

const USAGE =
  "usage: deno task check:python\n  ruff (wasm) over every tracked .py, pyright over the worker";

if (import.meta.main) {
  await cliMain("check:python", async () => {
    if (!parseFlags(Deno.args, {}, USAGE)) Deno.exit(0);
    await checkPython();
  });
}

async function checkPython(): Promise<void> {
  const config = parse(await Deno.readTextFile(`${ROOT}pyproject.toml`)) as Toml;
  const files = await trackedPythonFiles();
  const sources = files.map((path) => ({ path, text: Deno.readTextFileSync(`${ROOT}${path}`) }));
  const ruff = ruffFindings(sources, config);
  for (const line of ruff) console.log(line);
  console.log(`ruff: ${files.length} files, ${ruff.length} findings`);
  const typed = await pyright();
  if (!typed.ok) console.log(typed.report.trim());
  const summary = /(\d+) errors?, (\d+) warnings?/.exec(typed.report)?.[0] ?? "no summary";
  console.log(`pyright: ${summary}`);
  if (ruff.length > 0 || !typed.ok) Deno.exit(1);
}
