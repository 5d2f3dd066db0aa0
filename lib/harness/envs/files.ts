/**
 * Environment 3: instruction-following file tasks in a workspace, checked by a verifier
 * (exact contents, required text, deleted files, files that must stay untouched).
 *
 * @module
 */
import { type FileCheck, type FileTask, FileTaskSchema } from "../schema.ts";
import { DEFAULT_DATA_DIR, type HarnessEnv, hiddenDataPaths, readJsonl } from "./common.ts";
import { defineEnv } from "./define.ts";
import { fileTools, workspacePath } from "./workspace_tools.ts";

function read(path: string): string | null {
  try {
    return Deno.readTextFileSync(path);
  } catch {
    return null;
  }
}

/** One trailing newline is not significant (editors and models disagree about it). */
function sameText(a: string, b: string): boolean {
  return a.replace(/\n$/, "") === b.replace(/\n$/, "");
}

/**
 * Runs a task's checks in `dir`; returns the failed ones (empty: the task is done).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { filesEnv, verifyFileTask } from "./files.ts";
 * const [task] = filesEnv().loadTasks();
 * const dir = await Deno.makeTempDir(); // an agent that did nothing
 * assert.ok(verifyFileTask(task, dir).length > 0); // [] when every check passes
 * await Deno.remove(dir);
 * ```
 */
export function verifyFileTask(task: FileTask, dir: string): { check: FileCheck; why: string }[] {
  const failed: { check: FileCheck; why: string }[] = [];
  for (const check of task.checks) {
    const content = read(workspacePath(dir, check.path));
    let why: string | null = null;
    switch (check.kind) {
      case "equals":
        if (content === null) why = "missing";
        else if (!sameText(content, check.content)) why = "content differs";
        break;
      case "contains":
        if (content === null) why = "missing";
        else if (!content.includes(check.text)) why = `does not contain ${check.text}`;
        break;
      case "absent":
        if (content !== null) why = "still exists";
        break;
      case "unchanged": {
        const original = task.files[check.path];
        if (content === null) why = "missing";
        else if (original === undefined || content !== original) why = "changed";
        break;
      }
    }
    if (why) failed.push({ check, why });
  }
  return failed;
}

/**
 * Writes a task's starting files into a directory (once; the directory name carries a hash
 * of the files, so an edited dataset gets a fresh workspace).
 */
export function materializeWorkspace(task: FileTask, root: string): string {
  const text = JSON.stringify(task.files);
  let h = 2166136261;
  for (let i = 0; i < text.length; i++) h = Math.imul(h ^ text.charCodeAt(i), 16777619);
  const dir = `${root}/${task.id}-${(h >>> 0).toString(16)}`;
  try {
    if (Deno.statSync(`${dir}.complete`).isFile) return dir;
  } catch { /* not yet written */ }
  Deno.mkdirSync(dir, { recursive: true });
  for (const [path, content] of Object.entries(task.files)) {
    const full = workspacePath(dir, path);
    Deno.mkdirSync(full.slice(0, full.lastIndexOf("/")), { recursive: true });
    Deno.writeTextFileSync(full, content);
  }
  // The marker lives next to (not inside) the workspace copy the agent gets.
  Deno.writeTextFileSync(`${dir}.complete`, "");
  return dir;
}

const SYSTEM = "You carry out file tasks in a workspace with your file tools. Do exactly what " +
  "the instruction says and nothing else. When you are done, reply with a one-line summary " +
  "inside <answer></answer>.";

/** Options of {@link filesEnv}. */
export interface FilesEnvOptions {
  /** Dataset directory (default `data/envs`). */
  dataDir?: string;
  /** Where task workspaces are materialised (default `$TMPDIR/reins-envs/files`). */
  workspaceRoot?: string;
}

/**
 * The file-task environment over `dataDir/files/tasks.jsonl`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { filesEnv } from "./files.ts";
 * assert.equal(filesEnv().loadTasks().length > 0, true);
 * ```
 */
export function filesEnv(options: FilesEnvOptions = {}): HarnessEnv<FileTask> {
  const dataDir = options.dataDir ?? DEFAULT_DATA_DIR;
  const root = () =>
    options.workspaceRoot ?? `${Deno.env.get("TMPDIR") ?? "/tmp"}/reins-envs/files`;
  return defineEnv({
    name: "files",
    description: "instruction-following file tasks checked by a verifier",
    systemPrompt: SYSTEM,
    dataDir,
    load: () => readJsonl(`${dataDir}/files/tasks.jsonl`, FileTaskSchema),
    show: (task) => ({ prompt: task.instruction, extra: { files: Object.keys(task.files) } }),
    tools: (ctx) => fileTools(ctx),
    score: (task, ctx) => verifyFileTask(task, ctx.dir).length === 0 ? 1 : 0,
    // When the sandbox is on, the checks (tasks.jsonl) are masked.
    sandbox: { hide: hiddenDataPaths(dataDir) },
    prepare: (task) => ({ workspace: materializeWorkspace(task, root()) }),
  });
}
