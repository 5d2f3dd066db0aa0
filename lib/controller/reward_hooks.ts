/**
 * Reward hooks: after the agent exits, outside its reach, compute the outcome reward on a
 * verification tree (the agent's tree with tests and `.git` restored from the pristine copy, and
 * without links that lead outside it: {@link removeEscapingLinks}).
 *
 * A hook is either a command (its last non-empty stdout line is the reward: a number, or JSON
 * `{"value": n}`; with no such line, exit code 0 means 1 and anything else 0) or a function
 * registered with the local backend.
 *
 * @module
 */
import type { JsonObject, Rollout } from "../schema.ts";
import type { RewardHook } from "./schema.ts";
import { pathExists } from "./host_paths.ts";

/** What a reward function receives. */
export interface RewardContext {
  rollout: Rollout;
  attempt_id: string;
  /** The verification tree (or the agent's tree when no workspace was given). */
  dir: string;
  /** The harness's exit code. */
  exit_code: number;
  /** Paths of `restore` the agent had edited (they were restored before this runs). */
  edited: string[];
}

/** An in-process reward function. */
export type RewardFunction = (ctx: RewardContext) => number | Promise<number>;

/** The hook's result. */
export interface RewardResult {
  value: number;
  info: JsonObject;
}

/**
 * Reads the reward out of a verifier's stdout and exit code.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseRewardOutput } from "./reward_hooks.ts";
 * assert.equal(parseRewardOutput("running tests\n0.75\n", 0), 0.75);
 * assert.equal(parseRewardOutput('{"value": 1}', 0), 1);
 * assert.equal(parseRewardOutput("3 failed", 1), 0);
 * ```
 */
export function parseRewardOutput(stdout: string, exitCode: number): number {
  const lines = stdout.split("\n").map((line) => line.trim()).filter((line) => line.length > 0);
  const last = lines.at(-1);
  if (last !== undefined) {
    const direct = Number(last);
    if (last !== "" && Number.isFinite(direct)) return direct;
    try {
      const parsed: unknown = JSON.parse(last);
      if (typeof parsed === "number" && Number.isFinite(parsed)) return parsed;
      if (parsed && typeof parsed === "object" && "value" in parsed) {
        const value = (parsed as { value: unknown }).value;
        if (typeof value === "number" && Number.isFinite(value)) return value;
      }
    } catch { /* not JSON: fall back to the exit code */ }
  }
  return exitCode === 0 ? 1 : 0;
}

async function copyTree(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  const out = await new Deno.Command("cp", { args: ["-a", `${from}/.`, to], stderr: "piped" })
    .output();
  if (!out.success) {
    throw new Error(`copy ${from} → ${to} failed: ${new TextDecoder().decode(out.stderr)}`);
  }
}

async function differs(a: string, b: string): Promise<boolean> {
  const out = await new Deno.Command("diff", {
    args: ["-rq", "--no-dereference", a, b],
    stdout: "null",
    stderr: "null",
  }).output();
  return out.code !== 0;
}

/** Whether `path` exists, a link counting as itself (one the agent planted, even dangling). */
function exists(path: string): boolean {
  return pathExists(path, { followLinks: false });
}

/**
 * Builds the verification tree: a copy of the agent's tree with each `restore` path and `.git`
 * put back from the pristine workspace. Returns which restored paths the agent had edited.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { buildVerifyTree } from "./reward_hooks.ts";
 * const root = await Deno.makeTempDir();
 * // The pristine repository and the agent's copy of it, whose test the agent weakened.
 * for (const tree of ["repo", "work"]) {
 *   await Deno.mkdir(`${root}/${tree}/tests`, { recursive: true });
 *   await Deno.writeTextFile(`${root}/${tree}/tests/test_calc.py`, "assert add(1, 2) == 3\n");
 * }
 * await Deno.writeTextFile(`${root}/work/tests/test_calc.py`, "pass\n");
 * const { edited } = await buildVerifyTree(`${root}/work`, `${root}/repo`, `${root}/verify`, [
 *   "tests",
 * ]);
 * assert.deepEqual(edited, ["tests"]);
 * assert.equal(
 *   await Deno.readTextFile(`${root}/verify/tests/test_calc.py`),
 *   "assert add(1, 2) == 3\n",
 * );
 * await Deno.remove(root, { recursive: true });
 * ```
 */
export async function buildVerifyTree(
  workDir: string,
  pristine: string,
  verifyDir: string,
  restore: string[],
): Promise<{ edited: string[]; restored: string[] }> {
  await Deno.remove(verifyDir, { recursive: true }).catch(() => {});
  await copyTree(workDir, verifyDir);
  const edited: string[] = [];
  const restored: string[] = [];
  for (const path of [...restore, ".git"]) {
    const source = `${pristine}/${path}`;
    const target = `${verifyDir}/${path}`;
    const agentCopy = `${workDir}/${path}`;
    if (!exists(source)) {
      if (path !== ".git" && exists(agentCopy)) edited.push(path);
      await Deno.remove(target, { recursive: true }).catch(() => {});
      continue;
    }
    if (path !== ".git" && (!exists(agentCopy) || await differs(source, agentCopy))) {
      edited.push(path);
    }
    await Deno.remove(target, { recursive: true }).catch(() => {});
    const parent = target.slice(0, target.lastIndexOf("/"));
    await Deno.mkdir(parent, { recursive: true });
    const out = await new Deno.Command("cp", { args: ["-a", source, target], stderr: "piped" })
      .output();
    if (!out.success) throw new Error(`restore ${path}: ${new TextDecoder().decode(out.stderr)}`);
    restored.push(path);
  }
  return { edited, restored };
}

/**
 * Removes every symbolic link of the tree that leads outside it (or nowhere): the verifier runs
 * where the agent cannot reach (the host outside the sandbox, the Kubernetes verify container,
 * where the answers are mounted), so a planted `answer.txt -> /reins/answers/expected` would
 * resolve there and be paid. Links inside the tree stay. Returns the removed links (relative
 * paths); their targets are untouched.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { removeEscapingLinks } from "./reward_hooks.ts";
 * const tree = await Deno.makeTempDir();
 * await Deno.writeTextFile(`${tree}/solution.txt`, "3");
 * await Deno.symlink("solution.txt", `${tree}/inside.txt`);
 * await Deno.symlink("/etc/hostname", `${tree}/answer.txt`);
 * assert.deepEqual(await removeEscapingLinks(tree), ["answer.txt"]);
 * await Deno.remove(tree, { recursive: true });
 * ```
 */
export async function removeEscapingLinks(tree: string): Promise<string[]> {
  const removed: string[] = [];
  const root = await Deno.realPath(tree);
  const walk = async (dir: string, rel: string) => {
    for await (const entry of Deno.readDir(dir)) {
      const full = `${dir}/${entry.name}`;
      const relPath = rel ? `${rel}/${entry.name}` : entry.name;
      if (entry.isSymlink) {
        const target = await Deno.realPath(full).catch(() => null);
        if (target === null || (target !== root && !target.startsWith(`${root}/`))) {
          await Deno.remove(full);
          removed.push(relPath);
        }
      } else if (entry.isDirectory) {
        await walk(full, relPath);
      }
    }
  };
  await walk(root, "");
  return removed.sort();
}

/**
 * Runs a reward hook in `dir` and returns the reward. Throws when the command cannot run or
 * times out (the attempt then fails with that message).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "../gateway/sqlite_store.ts";
 * import { parseOrThrow } from "../schema.ts";
 * import { RewardHookSchema } from "./schema.ts";
 * import { runRewardHook } from "./reward_hooks.ts";
 * const store = openSqliteStore(":memory:");
 * const { rollouts: [rollout] } = await store.createRollouts([{ input: "task" }]);
 * const hook = parseOrThrow(RewardHookSchema, {
 *   command: ["sh", "-c", "echo 3 of 4 passed; echo 0.75"],
 * });
 * const dir = await Deno.makeTempDir();
 * const ctx = { rollout, attempt_id: "a1", dir, exit_code: 0, edited: [] };
 * assert.equal((await runRewardHook(hook, ctx, {})).value, 0.75); // the last line of stdout
 * await Deno.remove(dir);
 * await store.close();
 * ```
 */
export async function runRewardHook(
  hook: RewardHook,
  ctx: RewardContext,
  functions: Record<string, RewardFunction>,
  env: Record<string, string> = {},
): Promise<RewardResult> {
  if (hook.function) {
    const fn = functions[hook.function];
    if (!fn) {
      const known = Object.keys(functions).join(", ") || "none";
      throw new Error(`reward function "${hook.function}" is not registered (known: ${known})`);
    }
    const value = await fn(ctx);
    if (!Number.isFinite(value)) throw new Error(`reward function returned ${value}`);
    return { value, info: { kind: "function", name: hook.function } };
  }
  const argv = hook.command!;
  const controller = new AbortController();
  const timer = setTimeout(() => controller.abort(), hook.timeout_s * 1000);
  try {
    const out = await new Deno.Command(argv[0], {
      args: argv.slice(1),
      cwd: ctx.dir,
      env: { ...env, ...hook.env },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
      signal: controller.signal,
    }).output();
    if (controller.signal.aborted) {
      throw new Error(`reward command timed out after ${hook.timeout_s}s`);
    }
    const stdout = new TextDecoder().decode(out.stdout);
    const value = parseRewardOutput(stdout, out.code);
    return {
      value,
      info: {
        kind: "command",
        exit_code: out.code,
        stdout_tail: stdout.slice(-2000),
        stderr_tail: new TextDecoder().decode(out.stderr).slice(-2000),
      },
    };
  } catch (error) {
    if (controller.signal.aborted) {
      throw new Error(`reward command timed out after ${hook.timeout_s}s`);
    }
    throw new Error(
      `reward command ${JSON.stringify(argv[0])} failed: ${
        error instanceof Error ? error.message : String(error)
      }`,
    );
  } finally {
    clearTimeout(timer);
  }
}
