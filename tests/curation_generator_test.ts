/**
 * The SWE-smith-style generator: every shipped task is valid (its FAIL_TO_PASS tests fail on
 * its branch and pass with the gold patch, its PASS_TO_PASS tests pass on both, all in the
 * sandbox), the generator reproduces the shipped tasks from their seed, and the mutation
 * engine proposes only code that compiles.
 */
import assert from "node:assert/strict";
import {
  generateTasks,
  GENERATOR_REPOS,
  mutationCandidates,
  problemStatement,
  validateTask,
} from "../lib/curation/generate.ts";
import { readTaskSet } from "../lib/curation/io.ts";
import { fixLines } from "../lib/curation/stages.ts";
import { DEFAULT_DATA_DIR } from "../lib/harness/envs/common.ts";
import { makePatch, treeHash } from "../lib/harness/envs/coding_tasks.ts";

const REPOS = `${DEFAULT_DATA_DIR}/coding/repos`;
const SHIPPED = readTaskSet(`${DEFAULT_DATA_DIR}/coding/swesmith.jsonl`);

Deno.test("generated tasks: at least 100, from at least 7 repositories, each well formed", () => {
  assert.ok(SHIPPED.length >= 100, `${SHIPPED.length} tasks`);
  const repos = new Set(SHIPPED.map((t) => t.repo));
  assert.ok(repos.size >= 7);
  assert.equal(new Set(SHIPPED.map((t) => t.instance_id)).size, SHIPPED.length, "unique ids");
  const kinds = new Set(SHIPPED.map((t) => t.source));
  for (
    const kind of ["op_swap", "off_by_one", "invert_condition", "remove_statement", "wrong_return"]
  ) {
    assert.ok(kinds.has(`procedural:${kind}`), kind);
  }
  const bases = Object.fromEntries([...repos].map((r) => [r, treeHash(`${REPOS}/${r}`)]));
  for (const t of SHIPPED) {
    assert.ok(t.FAIL_TO_PASS.length >= 1 && t.PASS_TO_PASS.length >= 1, t.instance_id);
    assert.equal(t.base_commit, bases[t.repo], `${t.instance_id}: base is the shipped tree`);
    // The statement is written from test output: no line of the fix appears in it.
    for (const line of fixLines(t)) {
      if (line.trim().length >= 12) {
        assert.ok(!t.problem_statement.includes(line.trim()), t.instance_id);
      }
    }
  }
});

Deno.test("every generated task: FAIL_TO_PASS fails without the fix, everything passes with the gold patch (sandboxed)", async () => {
  const failures: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < SHIPPED.length) {
      const task = SHIPPED[next++];
      for (const problem of await validateTask(task, REPOS)) {
        failures.push(`${task.instance_id}: ${problem}`);
      }
    }
  };
  await Promise.all([worker(), worker()]);
  assert.deepEqual(failures, []);
});

Deno.test("validation catches a task whose gold patch does not fix it and one whose tests already pass", async () => {
  const task = SHIPPED[0];
  // A "fix" that only adds a comment: with it, FAIL_TO_PASS still fails.
  const noFix = await validateTask({ ...task, gold_patch: commentPatch(task) }, REPOS);
  assert.ok(noFix.some((p) => p.endsWith("fails with the gold patch")), noFix.join("; "));
  // A "bug" that only adds a comment: its FAIL_TO_PASS tests pass without any fix.
  const harmless = await validateTask(
    { ...task, patch: commentPatch(task), gold_patch: null },
    REPOS,
  );
  assert.ok(harmless.some((p) => p.endsWith("passes without the fix")), harmless.join("; "));
  assert.ok(!harmless.some((p) => p.includes("gold")), "its inverse restores the tree");
});

/** A patch that only adds a comment line to the file the task's patch touches. */
function commentPatch(task: (typeof SHIPPED)[number]): string {
  const path = task.patch.match(/^diff --git a\/(\S+)/)![1];
  const text = Deno.readTextFileSync(`${REPOS}/${task.repo}/${path}`);
  return makePatch(path, text, `# a comment\n${text}`);
}

Deno.test("the generator reproduces the shipped tasks of a repository from the seed", async () => {
  const repo = "graphkit";
  const { tasks, report } = await generateTasks({ reposDir: REPOS, repos: [repo], seed: 0 });
  const shipped = SHIPPED.filter((t) => t.repo === repo);
  assert.deepEqual(tasks.map((t) => JSON.stringify(t)), shipped.map((t) => JSON.stringify(t)));
  const generation = JSON.parse(
    await Deno.readTextFile(`${DEFAULT_DATA_DIR}/coding/generation.json`),
  );
  assert.deepEqual(report.by_repo[repo], generation.by_repo[repo]);
  assert.ok(GENERATOR_REPOS.includes(repo));
});

Deno.test("mutation engine: every kind on a small function, each candidate compiles and changes the code", async () => {
  const dir = await Deno.makeTempDir();
  const source = [
    "def clamp(x, lo, hi):",
    '    """Clamp."""',
    "    if x < lo:",
    "        return lo",
    "    total = x + 1",
    "    if x > hi and lo >= 0:",
    "        return True",
    "    return total - 1",
    "",
  ].join("\n");
  await Deno.writeTextFile(`${dir}/m.py`, source);
  const candidates = await mutationCandidates(`${dir}/m.py`);
  await Deno.remove(dir, { recursive: true });
  const kinds = new Set(candidates.map((c) => c.kind));
  assert.deepEqual([...kinds].sort(), [
    "invert_condition",
    "off_by_one",
    "op_swap",
    "remove_statement",
    "wrong_return",
  ]);
  const mutants = candidates.map((c) =>
    source.slice(0, c.start) + c.replacement + source.slice(c.end)
  );
  assert.equal(new Set(mutants).size, mutants.length, "no two candidates give the same code");
  assert.ok(mutants.every((m) => m !== source));
  assert.ok(mutants.includes(source.replace("x < lo", "x <= lo")));
  assert.ok(mutants.includes(source.replace("x + 1", "x - 1")));
  assert.ok(mutants.includes(source.replace("return True", "return False")));
  assert.ok(mutants.includes(source.replace("    total = x + 1\n", "")));
  // The docstring is never removed; a block never loses its last statement.
  assert.ok(!mutants.includes(source.replace('    """Clamp."""\n', "")));
  assert.ok(!mutants.includes(source.replace("        return lo\n", "")));
});

Deno.test("problem statement: failing tests, their assertion lines and errors; capped list", () => {
  const failures = Object.fromEntries(
    Array.from({ length: 6 }, (_, i) => [
      `tests.test_a.T.test_${i}`,
      {
        status: "fail" as const,
        line: `self.assertEqual(f(${i}), ${i})`,
        error: "AssertionError: 1 != 0",
      },
    ]),
  );
  const text = problemStatement("pkg", 9, failures);
  assert.match(text, /^In pkg, 6 of 9 tests fail:/);
  assert.match(
    text,
    /FAIL: tests\.test_a\.T\.test_0\n {4}self\.assertEqual\(f\(0\), 0\)\n {2}AssertionError/,
  );
  assert.match(text, /\.\.\. and 2 more\./);
  assert.doesNotMatch(text, /test_5/);
});
