/**
 * The rule stages of the curation pipeline, each a named, configurable step that keeps some
 * tasks and drops the others with a reason: empty or trivial statements, a missing
 * environment or branch, too many tests, duplicate statements, statements that leak the fix,
 * and two that run the tests in the sandbox (FAIL_TO_PASS tests that already pass without the
 * fix; tasks whose tests fail with the gold patch).
 *
 * @module
 */
import { runRepoTests } from "../harness/envs/coding.ts";
import {
  addedLines,
  applyPatchToDir,
  invertPatch,
  PatchError,
  readTree,
  treeHash,
} from "../harness/envs/coding_tasks.ts";
import type { CurationConfig, SweTask } from "../schema.ts";
import { applyPatchToFiles } from "../harness/envs/coding_tasks.ts";

/** A task a stage dropped, with why. */
export interface Drop {
  task: SweTask;
  /** Short machine key (`empty`, `duplicate`, `gold_fails`, ...). */
  reason: string;
  /** What exactly was found. */
  detail: string;
}

/** What a stage returns. */
export interface StageResult {
  kept: SweTask[];
  dropped: Drop[];
}

/** What every stage may use. */
export interface StageContext {
  config: CurationConfig;
  /** The environment: a directory of repositories (`image_name`s resolve here). */
  reposDir: string;
  /** Progress lines. */
  log?: (line: string) => void;
}

/** A named pipeline stage. */
export interface Stage {
  name: string;
  /** One line for the funnel table. */
  description: string;
  /** True for stages that run the tests (the expensive ones). */
  executes?: boolean;
  enabled(config: CurationConfig): boolean;
  run(tasks: SweTask[], ctx: StageContext): Promise<StageResult>;
}

/** A stage that judges each task on its own. */
function perTask(
  name: string,
  description: string,
  enabled: (c: CurationConfig) => boolean,
  judge: (task: SweTask, ctx: StageContext) => { reason: string; detail: string } | null,
): Stage {
  return {
    name,
    description,
    enabled,
    run: (tasks, ctx) => {
      const kept: SweTask[] = [];
      const dropped: Drop[] = [];
      for (const task of tasks) {
        const verdict = judge(task, ctx);
        if (verdict) dropped.push({ task, ...verdict });
        else kept.push(task);
      }
      return Promise.resolve({ kept, dropped });
    },
  };
}

/** Empty (or whitespace) and trivially short problem statements. */
export const statementStage: Stage = perTask(
  "statement",
  "problem statement empty or trivial",
  (c) => c.statement.enabled,
  (task, { config }) => {
    const text = task.problem_statement.trim();
    if (text === "") return { reason: "empty", detail: "empty problem statement" };
    const words = text.split(/\s+/).length;
    if (text.length < config.statement.min_chars || words < config.statement.min_words) {
      return {
        reason: "trivial",
        detail: `${text.length} characters, ${words} words (min ${config.statement.min_chars}, ` +
          `${config.statement.min_words})`,
      };
    }
    return null;
  },
);

/**
 * The environment holds the repository at the task's base commit, and the task's branch (the
 * base tree with its patch) can be made.
 */
export function environmentStage(): Stage {
  const trees = new Map<string, { files: Record<string, string>; hash: string } | null>();
  const tree = (dir: string) => {
    if (!trees.has(dir)) {
      try {
        trees.set(
          dir,
          Deno.statSync(dir).isDirectory ? { files: readTree(dir), hash: treeHash(dir) } : null,
        );
      } catch {
        trees.set(dir, null);
      }
    }
    return trees.get(dir)!;
  };
  return perTask(
    "environment",
    "environment or branch missing",
    (c) => c.environment.enabled,
    (task, { reposDir }) => {
      const env = tree(`${reposDir}/${task.repo}`);
      if (!env) {
        return {
          reason: "no_environment",
          detail: `${task.image_name ?? task.repo}: no repository ${task.repo} in ${reposDir}`,
        };
      }
      if (task.base_commit && task.base_commit !== env.hash) {
        return {
          reason: "base_mismatch",
          detail: `base ${task.base_commit.slice(0, 12)} is not the environment's ` +
            env.hash.slice(0, 12),
        };
      }
      try {
        applyPatchToFiles(env.files, task.patch);
      } catch (error) {
        if (!(error instanceof PatchError)) throw error;
        return {
          reason: "branch_missing",
          detail: `${task.branch ?? task.instance_id}: ${error.message}`,
        };
      }
      return null;
    },
  );
}

/** Tasks with no FAIL_TO_PASS test, or more tests than the configured maximum. */
export const maxTestsStage: Stage = perTask(
  "max_tests",
  "no FAIL_TO_PASS test, or more than N tests",
  (c) => c.max_tests.enabled,
  (task, { config }) => {
    const n = task.FAIL_TO_PASS.length + task.PASS_TO_PASS.length;
    if (task.FAIL_TO_PASS.length === 0) {
      return { reason: "no_fail_to_pass", detail: "FAIL_TO_PASS is empty" };
    }
    if (n > config.max_tests.max) {
      return { reason: "too_many_tests", detail: `${n} tests > ${config.max_tests.max}` };
    }
    return null;
  },
);

const normalize = (text: string) => text.toLowerCase().replace(/\s+/g, " ").trim();

/** Repeated problem statements (after case and whitespace folding): the first one stays. */
export const duplicatesStage: Stage = {
  name: "duplicates",
  description: "problem statement repeats an earlier one",
  enabled: (c) => c.duplicates.enabled,
  run: (tasks) => {
    const first = new Map<string, string>();
    const kept: SweTask[] = [];
    const dropped: Drop[] = [];
    for (const task of tasks) {
      const key = normalize(task.problem_statement);
      const seen = first.get(key);
      if (seen) {
        dropped.push({ task, reason: "duplicate", detail: `same statement as ${seen}` });
      } else {
        first.set(key, task.instance_id);
        kept.push(task);
      }
    }
    return Promise.resolve({ kept, dropped });
  },
};

/** The lines a task's fix adds: the gold patch's, or the inverse of the bug patch's. */
export function fixLines(task: SweTask): string[] {
  const gold = task.gold_patch ?? (task.patch.trim() === "" ? "" : invertPatch(task.patch));
  return gold.trim() === "" ? [] : addedLines(gold);
}

/** A statement that contains a line the fix adds (whitespace-folded, long enough to count). */
export const leakStage: Stage = perTask(
  "leak",
  "problem statement contains a line of the fix",
  (c) => c.leak.enabled,
  (task, { config }) => {
    const statement = normalize(task.problem_statement);
    for (const line of fixLines(task)) {
      const needle = normalize(line);
      if (needle.length >= config.leak.min_chars && statement.includes(needle)) {
        return {
          reason: "leaks_fix",
          detail: `statement contains the fix line ${JSON.stringify(line.trim())}`,
        };
      }
    }
    return null;
  },
);

async function pool<T, R>(items: T[], size: number, fn: (item: T) => Promise<R>): Promise<R[]> {
  const out: R[] = new Array(items.length);
  let next = 0;
  const worker = async () => {
    while (next < items.length) {
      const i = next++;
      out[i] = await fn(items[i]);
    }
  };
  await Promise.all(Array.from({ length: Math.min(size, items.length) }, worker));
  return out;
}

/** Runs `fn` on a fresh copy of the task's branch (base tree + patch) in a temporary dir. */
async function onBranch<R>(task: SweTask, reposDir: string, fn: (dir: string) => Promise<R>) {
  const dir = await Deno.makeTempDir({ prefix: "reins-curate-" });
  try {
    const cp = await new Deno.Command("cp", { args: ["-a", `${reposDir}/${task.repo}/.`, dir] })
      .output();
    if (!cp.success) throw new Error(`cannot copy ${reposDir}/${task.repo}`);
    applyPatchToDir(dir, task.patch);
    return await fn(dir);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
}

function executionStage(
  name: string,
  description: string,
  enabled: (c: CurationConfig) => boolean,
  judge: (task: SweTask, dir: string, ctx: StageContext) => Promise<
    { reason: string; detail: string } | null
  >,
): Stage {
  return {
    name,
    description,
    executes: true,
    enabled,
    run: async (tasks, ctx) => {
      let done = 0;
      const verdicts = await pool(tasks, ctx.config.test_concurrency, async (task) => {
        const verdict = await onBranch(task, ctx.reposDir, (dir) => judge(task, dir, ctx));
        if (++done % 20 === 0) ctx.log?.(`${name}: ${done}/${tasks.length} tasks run`);
        return verdict;
      });
      const kept: SweTask[] = [];
      const dropped: Drop[] = [];
      tasks.forEach((task, i) => {
        const v = verdicts[i];
        if (v) dropped.push({ task, ...v });
        else kept.push(task);
      });
      return { kept, dropped };
    },
  };
}

function runListed(task: SweTask, dir: string, ctx: StageContext) {
  return runRepoTests(
    { test_dir: task.test_dir, hidden_tests: task.hidden_tests },
    dir,
    ctx.config.test_timeout_ms,
    { ids: [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS] },
  );
}

/** Runs the tests on the buggy branch (sandboxed): a FAIL_TO_PASS test that passes drops it. */
export const alreadySolvedStage: Stage = executionStage(
  "already_solved",
  "FAIL_TO_PASS tests pass without the fix (sandboxed run)",
  (c) => c.already_solved.enabled,
  async (task, dir, ctx) => {
    const run = await runListed(task, dir, ctx);
    if (run.timed_out) return { reason: "timeout", detail: "the tests timed out without the fix" };
    const passing = task.FAIL_TO_PASS.filter((id) => run.tests[id]?.status === "ok");
    if (passing.length === 0) return null;
    return {
      reason: "fail_to_pass_passes",
      detail: `passes without the fix: ${passing.slice(0, 3).join(", ")}` +
        (passing.length > 3 ? ` and ${passing.length - 3} more` : ""),
    };
  },
);

/** Applies the gold patch on the branch and runs the tests (sandboxed): any failure drops it. */
export const brokenStage: Stage = executionStage(
  "broken",
  "tests fail with the gold patch (sandboxed run)",
  (c) => c.broken.enabled,
  async (task, dir, ctx) => {
    const gold = task.gold_patch ?? (task.patch.trim() === "" ? null : invertPatch(task.patch));
    if (gold === null) return { reason: "no_gold_patch", detail: "no gold patch to check" };
    try {
      applyPatchToDir(dir, gold);
    } catch (error) {
      if (!(error instanceof PatchError)) throw error;
      return { reason: "gold_does_not_apply", detail: error.message };
    }
    const run = await runListed(task, dir, ctx);
    if (run.timed_out) return { reason: "timeout", detail: "the tests timed out with the fix" };
    const failing = [...task.FAIL_TO_PASS, ...task.PASS_TO_PASS].filter((id) =>
      run.tests[id]?.status !== "ok"
    );
    if (failing.length === 0) return null;
    return {
      reason: "gold_fails",
      detail: `fails with the gold patch: ${failing.slice(0, 3).join(", ")}` +
        (failing.length > 3 ? ` and ${failing.length - 3} more` : ""),
    };
  },
);

/** The rule stages in pipeline order. */
export function ruleStages(): Stage[] {
  return [
    statementStage,
    environmentStage(),
    maxTestsStage,
    duplicatesStage,
    leakStage,
    alreadySolvedStage,
    brokenStage,
  ];
}
