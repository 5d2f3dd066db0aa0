/**
 * A SWE-smith-style task generator (its "procedural modification" method): plant bugs into
 * pristine Python repositories with AST-level mutations (`mutate.py`: operator swaps,
 * off-by-one literals, inverted conditions, removed statements, wrong return values), keep a
 * bug only if it makes at least one test fail (FAIL_TO_PASS) while at least one other keeps
 * passing (PASS_TO_PASS), write the problem statement from the failing tests' output, and
 * validate each kept task by running its tests with and without the gold patch (the inverse
 * diff).
 *
 * @module
 */
import { createHash } from "node:crypto";
import {
  applyPatchToDir,
  invertPatch,
  makePatch,
  readTree,
  treeHash,
} from "../harness/envs/coding_tasks.ts";
import { pythonBinary, runRepoTests, type TestOutcome } from "../harness/envs/coding.ts";
import { mulberry32 } from "../util/random.ts";
import type { SweTask } from "../schema.ts";

/** The repositories of `data/envs/coding/repos` written as pristine trees for the generator. */
export const GENERATOR_REPOS: readonly string[] = [
  "cartkit",
  "datekit",
  "graphkit",
  "matrixlib",
  "rpncalc",
  "statkit",
  "strkit",
];

/** One mutation `mutate.py` proposes. */
export interface MutationCandidate {
  kind: string;
  line: number;
  start: number;
  end: number;
  replacement: string;
  function: string;
  what: string;
}

/** Why a tried mutation was not kept. */
export type RejectReason =
  | "no_fail_to_pass"
  | "no_pass_to_pass"
  | "timeout"
  | "unstable";

/** What the generator did. */
export interface GenerationReport {
  seed: number;
  max_per_repo: number;
  repos: string[];
  tried: number;
  valid: number;
  rejected: Record<RejectReason, number>;
  by_kind: Record<string, { tried: number; valid: number }>;
  by_repo: Record<string, { tried: number; valid: number; tests: number }>;
}

/** Options of {@link generateTasks}. */
export interface GenerateOptions {
  /** Directory holding the repositories (`data/envs/coding/repos`). */
  reposDir: string;
  repos?: readonly string[];
  seed?: number;
  /** Mutations tried per repository (a seeded sample of every candidate). */
  maxPerRepo?: number;
  /** Per test run (a mutation can loop forever). */
  timeoutMs?: number;
  /** Repositories processed at once (default 2). */
  concurrency?: number;
  /** Receives one line per repository. */
  log?: (line: string) => void;
}

const MUTATE_PY = new URL("./mutate.py", import.meta.url).pathname;

/**
 * Candidate mutations of one Python file (`mutate.py`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { mutationCandidates } from "./generate.ts";
 * const dir = await Deno.makeTempDir();
 * await Deno.writeTextFile(`${dir}/m.py`, "def f(x):\n    return x + 1\n");
 * const kinds = (await mutationCandidates(`${dir}/m.py`)).map((c) => c.kind);
 * assert.deepEqual(kinds.sort(), ["off_by_one", "off_by_one", "op_swap", "wrong_return"]);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function mutationCandidates(path: string): Promise<MutationCandidate[]> {
  const out = await new Deno.Command(pythonBinary(), {
    args: [MUTATE_PY, path],
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    throw new Error(`mutate.py ${path}: ${new TextDecoder().decode(out.stderr).slice(-500)}`);
  }
  return JSON.parse(new TextDecoder().decode(out.stdout)) as MutationCandidate[];
}

function shuffle<T>(rng: () => number, items: T[]): T[] {
  for (let i = items.length - 1; i > 0; i--) {
    const j = Math.floor(rng() * (i + 1));
    [items[i], items[j]] = [items[j], items[i]];
  }
  return items;
}

function seedOf(seed: number, text: string): number {
  return createHash("sha256").update(`${seed}\0${text}`).digest().readUInt32LE(0);
}

const failing = (o: TestOutcome | undefined) => o?.status !== "ok" && o?.status !== "skip";

/**
 * A problem statement written from the failing tests' output only: each failing test's id,
 * the assertion line that failed and the error (no word about the code that changed).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { problemStatement } from "./generate.ts";
 * const text = problemStatement("datekit", 28, {
 *   "tests.test_c.OrdinalTest.test_after_february": {
 *     status: "fail",
 *     line: "self.assertEqual(day_of_year(2024, 3, 1), 61)",
 *     error: "AssertionError: 60 != 61",
 *   },
 * });
 * assert.match(text, /^In datekit, 1 of 28 tests fails:/);
 * assert.match(text, /AssertionError: 60 != 61/);
 * ```
 */
export function problemStatement(
  repo: string,
  total: number,
  failures: Record<string, TestOutcome>,
  shown = 4,
): string {
  const ids = Object.keys(failures).sort();
  const verb = ids.length === 1 ? "fails" : "fail";
  const lines = [`In ${repo}, ${ids.length} of ${total} tests ${verb}:`, ""];
  for (const id of ids.slice(0, shown)) {
    const o = failures[id];
    lines.push(`${o.status === "error" ? "ERROR" : "FAIL"}: ${id}`);
    if (o.line) lines.push(`    ${o.line}`);
    lines.push(`  ${o.error ?? "failed"}`, "");
  }
  if (ids.length > shown) lines.push(`... and ${ids.length - shown} more.`, "");
  lines.push(
    "The tests are right; the library code is not. Fix the library so that these tests pass " +
      "and the other tests keep passing.",
  );
  return lines.join("\n");
}

async function copyTree(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  const out = await new Deno.Command("cp", { args: ["-a", `${from}/.`, to] }).output();
  if (!out.success) throw new Error(`cannot copy ${from}`);
}

/**
 * Validates a task the way SWE-smith's harness does, in a fresh copy of the pristine tree:
 * with the bug patch every FAIL_TO_PASS test fails and every PASS_TO_PASS test passes; with
 * the gold patch (the inverse, unless the task names one) on top, every test passes. Returns
 * the problems found (empty: valid).
 */
export async function validateTask(
  task: SweTask,
  reposDir: string,
  options: { timeoutMs?: number; isolate?: boolean } = {},
): Promise<string[]> {
  const dir = await Deno.makeTempDir({ prefix: "reins-validate-" });
  const problems: string[] = [];
  try {
    await copyTree(`${reposDir}/${task.repo}`, dir);
    const ids = [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS];
    const run = (where: string) =>
      runRepoTests(
        { test_dir: task.test_dir, hidden_tests: task.hidden_tests },
        where,
        options.timeoutMs ?? 30_000,
        { ids, isolate: options.isolate ?? true },
      );
    applyPatchToDir(dir, task.patch);
    const before = await run(dir);
    for (const id of task.FAIL_TO_PASS) {
      if (!failing(before.tests[id])) problems.push(`${id} passes without the fix`);
    }
    for (const id of task.PASS_TO_PASS) {
      if (before.tests[id]?.status !== "ok") problems.push(`${id} fails with the bug`);
    }
    applyPatchToDir(dir, task.gold_patch ?? invertPatch(task.patch));
    const after = await run(dir);
    for (const id of ids) {
      if (after.tests[id]?.status !== "ok") problems.push(`${id} fails with the gold patch`);
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  return problems;
}

/**
 * Generates validated SWE-smith tasks from the pristine repositories.
 *
 * @example
 * ```ts ignore
 * const { tasks, report } = await generateTasks({ reposDir: "data/envs/coding/repos" });
 * report.valid / report.tried; // the yield
 * ```
 */
export async function generateTasks(
  options: GenerateOptions,
): Promise<{ tasks: SweTask[]; report: GenerationReport }> {
  const seed = options.seed ?? 0;
  const maxPerRepo = options.maxPerRepo ?? 20;
  const repos = [...options.repos ?? GENERATOR_REPOS].sort();
  const report: GenerationReport = {
    seed,
    max_per_repo: maxPerRepo,
    repos,
    tried: 0,
    valid: 0,
    rejected: { no_fail_to_pass: 0, no_pass_to_pass: 0, timeout: 0, unstable: 0 },
    by_kind: {},
    by_repo: {},
  };
  const perRepo = new Map<string, SweTask[]>();
  const one = async (repo: string) => {
    const tasks: SweTask[] = [];
    perRepo.set(repo, tasks);
    const pristine = `${options.reposDir}/${repo}`;
    const files = readTree(pristine);
    const base = treeHash(pristine);
    const work = await Deno.makeTempDir({ prefix: `reins-gen-${repo}-` });
    try {
      await copyTree(pristine, work);
      const run = () =>
        runRepoTests({ test_dir: "tests", hidden_tests: {} }, work, options.timeoutMs ?? 10_000, {
          isolate: false,
        });
      const baseline = await run();
      const all = Object.keys(baseline.tests).sort();
      if (!baseline.passed || all.length === 0) {
        throw new Error(`repo ${repo}: its test suite does not pass on the pristine tree`);
      }
      const pool: { path: string; candidate: MutationCandidate }[] = [];
      const modules = Object.keys(files).filter((p) =>
        p.endsWith(".py") && !p.startsWith("tests/") && !p.endsWith("__init__.py")
      );
      for (const path of modules) {
        for (const candidate of await mutationCandidates(`${pristine}/${path}`)) {
          pool.push({ path, candidate });
        }
      }
      const picked = shuffle(mulberry32(seedOf(seed, repo)), pool).slice(0, maxPerRepo);
      const stats = { tried: 0, valid: 0, tests: all.length };
      for (const { path, candidate } of picked) {
        stats.tried++;
        report.tried++;
        const kind = (report.by_kind[candidate.kind] ??= { tried: 0, valid: 0 });
        kind.tried++;
        const original = files[path];
        const mutated = original.slice(0, candidate.start) + candidate.replacement +
          original.slice(candidate.end);
        await Deno.writeTextFile(`${work}/${path}`, mutated);
        const result = await run();
        await Deno.writeTextFile(`${work}/${path}`, original);
        if (result.timed_out) {
          report.rejected.timeout++;
          continue;
        }
        const f2p = all.filter((id) => failing(result.tests[id]));
        const p2p = all.filter((id) => !failing(result.tests[id]));
        if (f2p.length === 0) {
          report.rejected.no_fail_to_pass++;
          continue;
        }
        if (p2p.length === 0) {
          report.rejected.no_pass_to_pass++;
          continue;
        }
        const patch = makePatch(path, original, mutated);
        const failures = Object.fromEntries(
          Object.entries(result.tests).filter(([id, o]) => failing(o) && !p2p.includes(id)),
        );
        const id = `${repo}__${candidate.kind}__${
          createHash("sha256").update(patch).digest("hex").slice(0, 8)
        }`;
        const task: SweTask = {
          instance_id: id,
          repo,
          base_commit: base,
          branch: id,
          patch,
          gold_patch: null,
          problem_statement: problemStatement(repo, all.length, failures),
          FAIL_TO_PASS: f2p,
          PASS_TO_PASS: p2p,
          image_name: `reins.coding.${repo}`,
          test_dir: "tests",
          hidden_tests: {},
          created_at: null,
          source: `procedural:${candidate.kind}`,
        };
        const problems = await validateTask(task, options.reposDir, { isolate: false });
        if (problems.length > 0) {
          report.rejected.unstable++;
          continue;
        }
        tasks.push(task);
        stats.valid++;
        report.valid++;
        kind.valid++;
      }
      report.by_repo[repo] = stats;
      options.log?.(`${repo}: ${stats.valid}/${stats.tried} valid (${all.length} tests)`);
    } finally {
      await Deno.remove(work, { recursive: true });
    }
  };
  let next = 0;
  const worker = async () => {
    while (next < repos.length) await one(repos[next++]);
  };
  await Promise.all(Array.from({ length: Math.max(1, options.concurrency ?? 2) }, worker));
  const tasks = repos.flatMap((repo) => perRepo.get(repo) ?? []);
  // Workers finish in any order: sort what they counted so the report's bytes are stable.
  const sorted = <T>(record: Record<string, T>) =>
    Object.fromEntries(Object.entries(record).sort(([a], [b]) => a.localeCompare(b)));
  report.by_kind = sorted(report.by_kind);
  report.by_repo = sorted(report.by_repo);
  return { tasks, report };
}
