/**
 * Finding and reading trajectory files: the data root, format detection, loading.
 *
 * @module
 */
import type { Trajectory, TrajectorySource } from "./schema.ts";
import { parseJson } from "./common.ts";
import { type JsonlFile, parseClaudeCode } from "./claude_code.ts";
import { parseMiniSweAgent } from "./mini_swe_agent.ts";
import { parseSweAgent } from "./swe_agent.ts";
import { parseTauBench } from "./tau_bench.ts";

/**
 * The trajectories directory: `$REINS_TRAJECTORIES`, else the project's own
 * `data/trajectories` (resolved from this module, not the cwd, so any checkout location works).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { trajectoriesRoot } from "./load.ts";
 * // Unless $REINS_TRAJECTORIES overrides it:
 * assert.ok(trajectoriesRoot().endsWith("data/trajectories"));
 * ```
 */
export function trajectoriesRoot(): string {
  const env = Deno.env.get("REINS_TRAJECTORIES");
  if (env) return env.replace(/\/+$/, "");
  const url = new URL("../../data/trajectories", import.meta.url);
  return decodeURIComponent(url.pathname);
}

/**
 * Guesses the format of a file from its name and parsed content.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { detectTrajectoryFormat } from "./load.ts";
 * assert.equal(detectTrajectoryFormat("a/b.traj", { history: [] }), "swe-agent");
 * assert.equal(
 *   detectTrajectoryFormat("x.json", [{ task_id: 1, reward: 0, traj: [] }]),
 *   "tau-bench",
 * );
 * ```
 */
export function detectTrajectoryFormat(file: string, data: unknown): TrajectorySource {
  if (file.endsWith(".jsonl")) return "claude-code";
  if (Array.isArray(data)) {
    const first = data[0] as Record<string, unknown> | undefined;
    if (first && typeof first === "object" && "traj" in first) return "tau-bench";
    if (first === undefined || (typeof first === "object" && "role" in first)) {
      return "mini-swe-agent";
    }
  } else if (data && typeof data === "object") {
    if ("history" in data) return "swe-agent";
    if ("messages" in data) return "mini-swe-agent";
  }
  throw new Error(
    `${file}: unknown trajectory format (expected SWE-agent {history}, tau-bench [{traj}], ` +
      `mini-swe-agent [messages] or {messages}, or Claude Code .jsonl)`,
  );
}

async function listSubagentFiles(sessionFile: string): Promise<string[]> {
  const dir = `${sessionFile.replace(/\.jsonl$/, "")}/subagents`;
  const out: string[] = [];
  try {
    for await (const entry of Deno.readDir(dir)) {
      if (entry.isFile && entry.name.endsWith(".jsonl")) out.push(`${dir}/${entry.name}`);
    }
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
  return out.sort();
}

/**
 * Reads one trajectory file (any supported format) into trajectories. `root` only shortens the
 * recorded `file` names (and so the ids); Claude Code sessions pick up
 * `<session>/subagents/*.jsonl` next to them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { importTrajectoryFile, trajectoriesRoot } from "./load.ts";
 * const root = trajectoriesRoot();
 * const [t] = await importTrajectoryFile(`${root}/claude-code/short.jsonl`, { root });
 * assert.equal(t.source, "claude-code");
 * ```
 */
export async function importTrajectoryFile(
  path: string,
  options: { root?: string } = {},
): Promise<Trajectory[]> {
  const root = options.root?.replace(/\/+$/, "");
  const rel = (p: string) => (root && p.startsWith(`${root}/`) ? p.slice(root.length + 1) : p);
  const text = await Deno.readTextFile(path);
  if (path.endsWith(".jsonl")) {
    const subagents: JsonlFile[] = [];
    for (const file of await listSubagentFiles(path)) {
      subagents.push({ file: rel(file), text: await Deno.readTextFile(file) });
    }
    return [parseClaudeCode({ file: rel(path), text }, subagents)];
  }
  const data = parseJson(text, rel(path));
  switch (detectTrajectoryFormat(path, data)) {
    case "swe-agent":
      return [parseSweAgent(data, rel(path))];
    case "tau-bench":
      return parseTauBench(data, rel(path));
    case "mini-swe-agent":
      return [parseMiniSweAgent(data, rel(path))];
    case "claude-code":
      throw new Error(`${rel(path)}: Claude Code logs must be .jsonl files`);
  }
}

/** True for files the loader reads: trajectories, not licences, READMEs or sub-agent parts. */
function isTrajectoryFile(path: string): boolean {
  if (/\/subagents\//.test(path)) return false;
  return /\.(traj|traj\.json|jsonl)$/.test(path) ||
    (path.endsWith(".json") && !/(^|\/)(package|tsconfig)\.json$/.test(path));
}

async function walk(dir: string, out: string[]): Promise<void> {
  const entries: Deno.DirEntry[] = [];
  for await (const entry of Deno.readDir(dir)) entries.push(entry);
  entries.sort((a, b) => a.name.localeCompare(b.name));
  for (const entry of entries) {
    const path = `${dir}/${entry.name}`;
    if (entry.isDirectory) await walk(path, out);
    else if (entry.isFile && isTrajectoryFile(path)) out.push(path);
  }
}

/**
 * Every trajectory file under `root` (default {@link trajectoriesRoot}), sorted by path.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { listTrajectoryFiles } from "./load.ts";
 * assert.equal((await listTrajectoryFiles()).length, 28); // on the project's data
 * ```
 */
export async function listTrajectoryFiles(root = trajectoriesRoot()): Promise<string[]> {
  const out: string[] = [];
  try {
    await walk(root.replace(/\/+$/, ""), out);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) {
      throw new Error(
        `trajectories root not found: ${root} (set REINS_TRAJECTORIES to the ` +
          `data/trajectories directory)`,
      );
    }
    throw error;
  }
  return out;
}

/**
 * Loads every trajectory under `root` (default: the project's `data/trajectories`), optionally only some sources.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadTrajectories } from "./load.ts";
 * const runs = await loadTrajectories({ sources: ["mini-swe-agent"] });
 * assert.equal(runs.length, 2); // on the project's data
 * ```
 */
export async function loadTrajectories(
  options: { root?: string; sources?: TrajectorySource[] } = {},
): Promise<Trajectory[]> {
  const root = (options.root ?? trajectoriesRoot()).replace(/\/+$/, "");
  const out: Trajectory[] = [];
  for (const file of await listTrajectoryFiles(root)) {
    const trajectories = await importTrajectoryFile(file, { root });
    for (const t of trajectories) {
      if (!options.sources || options.sources.includes(t.source)) out.push(t);
    }
  }
  return out;
}
