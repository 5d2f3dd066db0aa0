/**
 * What SWE-smith-style coding tasks need besides the environment itself: unified diffs (make,
 * apply, invert), a content hash of a repository tree (the "base commit" of a repository that
 * is not a git checkout), the buggy workspace of a task (the pristine repository with the
 * task's patch applied, materialised once per task), and the mapping from a SWE-smith record
 * to the coding environment's task.
 *
 * @module
 */
import { createHash } from "node:crypto";
import { applyPatch, formatPatch, parsePatch, reversePatch, structuredPatch } from "diff";
import type { SweTask } from "../../schema.ts";
import type { CodingTask } from "../schema.ts";
import { workspacePath } from "./workspace_tools.ts";

/** Raised when a patch does not parse or does not apply; names the file. */
export class PatchError extends Error {
  /** The file the patch failed on (null: the patch itself). */
  readonly file: string | null;
  constructor(message: string, file: string | null = null) {
    super(message);
    this.name = "PatchError";
    this.file = file;
  }
}

/**
 * A git-style unified diff of one file (`a/` and `b/` prefixes, 3 lines of context).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { makePatch } from "./coding_tasks.ts";
 * const patch = makePatch("pkg/m.py", "a = 1\nb = 2\n", "a = 1\nb = 3\n");
 * assert.ok(patch.startsWith("diff --git a/pkg/m.py b/pkg/m.py\n--- a/pkg/m.py\n+++ b/pkg/m.py\n"));
 * assert.ok(patch.includes("-b = 2\n+b = 3\n"));
 * ```
 */
export function makePatch(path: string, before: string, after: string): string {
  const patch = structuredPatch(`a/${path}`, `b/${path}`, before, after, undefined, undefined, {
    context: 3,
  });
  return `diff --git a/${path} b/${path}\n` + stripBanner(formatPatch(patch));
}

function stripBanner(text: string): string {
  return text.replace(/^Index: .*\n/, "").replace(/^=+\n/, "");
}

function parse(patch: string) {
  try {
    return parsePatch(patch).filter((p) => p.hunks.length > 0);
  } catch (error) {
    throw new PatchError(`patch: does not parse (${(error as Error).message})`);
  }
}

function targetPath(name: string | undefined): string {
  if (!name) throw new PatchError("patch: a file diff has no file name");
  return name.replace(/^[ab]\//, "");
}

/**
 * The paths a patch touches.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { makePatch, patchFiles } from "./coding_tasks.ts";
 * assert.deepEqual(patchFiles(makePatch("m.py", "x\n", "y\n")), ["m.py"]);
 * ```
 */
export function patchFiles(patch: string): string[] {
  return parse(patch).map((p) => targetPath(p.newFileName ?? p.oldFileName));
}

/**
 * Lines a patch adds (without the leading `+`), in order.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { addedLines, makePatch } from "./coding_tasks.ts";
 * assert.deepEqual(addedLines(makePatch("m.py", "x = 1\n", "x = 2\n")), ["x = 2"]);
 * ```
 */
export function addedLines(patch: string): string[] {
  const out: string[] = [];
  for (const file of parse(patch)) {
    for (const hunk of file.hunks) {
      for (const line of hunk.lines) if (line.startsWith("+")) out.push(line.slice(1));
    }
  }
  return out;
}

/**
 * The inverse patch (applied after `patch`, it restores the original tree).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { applyPatchToFiles, invertPatch, makePatch } from "./coding_tasks.ts";
 * const bug = makePatch("m.py", "x = 1\n", "x = 2\n");
 * const buggy = applyPatchToFiles({ "m.py": "x = 1\n" }, bug);
 * assert.deepEqual(applyPatchToFiles(buggy, invertPatch(bug)), { "m.py": "x = 1\n" });
 * ```
 */
export function invertPatch(patch: string): string {
  return parse(patch).map((file) => {
    const path = targetPath(file.newFileName ?? file.oldFileName);
    const reversed = reversePatch(file);
    reversed.oldFileName = `a/${path}`;
    reversed.newFileName = `b/${path}`;
    return `diff --git a/${path} b/${path}\n` + stripBanner(formatPatch(reversed));
  }).join("");
}

/**
 * Applies a patch to in-memory files (path → content); throws a {@link PatchError} naming the
 * file when a hunk does not match (a missing "branch").
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { applyPatchToFiles, makePatch } from "./coding_tasks.ts";
 * const patch = makePatch("m.py", "x = 1\n", "x = 2\n");
 * assert.deepEqual(applyPatchToFiles({ "m.py": "x = 1\n" }, patch), { "m.py": "x = 2\n" });
 * assert.throws(() => applyPatchToFiles({ "m.py": "y = 1\n" }, patch), /does not apply/);
 * ```
 */
export function applyPatchToFiles(
  files: Record<string, string>,
  patch: string,
): Record<string, string> {
  const out = { ...files };
  for (const file of parse(patch)) {
    const path = targetPath(file.newFileName ?? file.oldFileName);
    const before = out[path];
    if (before === undefined) throw new PatchError(`patch: ${path} does not exist`, path);
    const after = applyPatch(before, file);
    if (after === false) throw new PatchError(`patch: does not apply to ${path}`, path);
    out[path] = after;
  }
  return out;
}

/** Applies a patch to the files of a directory in place (errors as {@link applyPatchToFiles}). */
export function applyPatchToDir(dir: string, patch: string): void {
  if (patch.trim() === "") return;
  const paths = patchFiles(patch);
  const files: Record<string, string> = {};
  for (const path of paths) {
    try {
      files[path] = Deno.readTextFileSync(workspacePath(dir, path, "patch"));
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) {
        throw new PatchError(`patch: ${path} does not exist`, path);
      }
      throw error;
    }
  }
  const patched = applyPatchToFiles(files, patch);
  for (const path of paths) {
    Deno.writeTextFileSync(workspacePath(dir, path, "patch"), patched[path]);
  }
}

function walkFiles(root: string, dir: string, out: string[]): void {
  for (const entry of Deno.readDirSync(dir)) {
    if (entry.name === "__pycache__" || entry.name === ".git") continue;
    const full = `${dir}/${entry.name}`;
    if (entry.isDirectory) walkFiles(root, full, out);
    else if (entry.isFile) out.push(full.slice(root.length + 1));
  }
}

/**
 * The files of a repository tree (relative path → content; `__pycache__` and `.git` skipped).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DEFAULT_DATA_DIR } from "./common.ts";
 * import { readTree } from "./coding_tasks.ts";
 * const files = readTree(`${DEFAULT_DATA_DIR}/coding/repos/datekit`);
 * assert.ok("datekit/calendar_math.py" in files);
 * ```
 */
export function readTree(dir: string): Record<string, string> {
  const paths: string[] = [];
  walkFiles(dir, dir, paths);
  paths.sort();
  return Object.fromEntries(paths.map((p) => [p, Deno.readTextFileSync(`${dir}/${p}`)]));
}

/**
 * A content hash of a repository tree (40 hex digits: the "base commit" of a repository that
 * is not a git checkout). Any edited, added or removed file changes it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DEFAULT_DATA_DIR } from "./common.ts";
 * import { treeHash } from "./coding_tasks.ts";
 * assert.match(treeHash(`${DEFAULT_DATA_DIR}/coding/repos/datekit`), /^[0-9a-f]{40}$/);
 * ```
 */
export function treeHash(dir: string): string {
  const hash = createHash("sha256");
  for (const [path, content] of Object.entries(readTree(dir))) {
    hash.update(`${path}\0${content.length}\0`).update(content);
  }
  return hash.digest("hex").slice(0, 40);
}

function fnv(text: string): string {
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  return (h >>> 0).toString(16);
}

/** Where buggy workspaces are materialised by default (`$TMPDIR/reins-envs/coding`). */
export function defaultCodingWorkspaceRoot(): string {
  return `${Deno.env.get("TMPDIR") ?? "/tmp"}/reins-envs/coding`;
}

/**
 * The directory the agent starts from: the repository itself when the task has no patch,
 * else a copy of it with the patch applied, written once under `root` (the name carries a
 * hash of the patch, so an edited task gets a fresh copy; a rename makes it atomic).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DEFAULT_DATA_DIR } from "./common.ts";
 * import { makePatch, materializeCodingWorkspace, readTree } from "./coding_tasks.ts";
 * const repos = `${DEFAULT_DATA_DIR}/coding/repos`;
 * const path = "datekit/formatting.py";
 * const before = readTree(`${repos}/datekit`)[path];
 * const patch = makePatch(path, before, before.replace("{day:02d}", "{day:03d}"));
 * const root = await Deno.makeTempDir();
 * const dir = materializeCodingWorkspace({ id: "t1", repo: "datekit", patch }, repos, root);
 * assert.ok(Deno.readTextFileSync(`${dir}/${path}`).includes("{day:03d}"));
 * await Deno.remove(root, { recursive: true });
 * ```
 */
export function materializeCodingWorkspace(
  task: Pick<CodingTask, "id" | "repo" | "patch">,
  reposDir: string,
  root: string,
): string {
  const repo = `${reposDir}/${task.repo}`;
  if (task.patch.trim() === "") return repo;
  const dir = `${root}/${task.id}-${fnv(`${task.repo}\0${task.patch}`)}`;
  try {
    if (Deno.statSync(dir).isDirectory) return dir;
  } catch { /* not yet written */ }
  Deno.mkdirSync(root, { recursive: true });
  const tmp = Deno.makeTempDirSync({ dir: root, prefix: ".partial-" });
  try {
    const cp = new Deno.Command("cp", { args: ["-a", `${repo}/.`, tmp], stderr: "piped" })
      .outputSync();
    if (!cp.success) {
      throw new Error(`repo: cannot copy ${repo}: ${new TextDecoder().decode(cp.stderr)}`);
    }
    applyPatchToDir(tmp, task.patch);
    try {
      Deno.renameSync(tmp, dir);
    } catch (error) {
      // Another process materialised it first: theirs is identical.
      if (!Deno.statSync(dir).isDirectory) throw error;
      Deno.removeSync(tmp, { recursive: true });
    }
  } catch (error) {
    Deno.removeSync(tmp, { recursive: true });
    throw error;
  }
  return dir;
}

/**
 * The coding environment's task for a SWE-smith record.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { SweTaskSchema } from "../../schema.ts";
 * import { sweToCodingTask } from "./coding_tasks.ts";
 * const task = sweToCodingTask(SweTaskSchema.parse({
 *   instance_id: "x__op_swap__1", repo: "x", patch: "", problem_statement: "It breaks.",
 *   FAIL_TO_PASS: ["tests.test_a.T.test_a"], PASS_TO_PASS: [],
 * }));
 * assert.equal(task.id, "x__op_swap__1");
 * assert.deepEqual(task.fail_to_pass, ["tests.test_a.T.test_a"]);
 * ```
 */
export function sweToCodingTask(record: SweTask): CodingTask {
  return {
    id: record.instance_id,
    repo: record.repo,
    problem: record.problem_statement,
    test_dir: record.test_dir,
    hidden_tests: record.hidden_tests,
    patch: record.patch,
    fail_to_pass: record.FAIL_TO_PASS,
  };
}
