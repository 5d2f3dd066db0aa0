/**
 * Environment 4: coding. Small Python repositories with a planted bug, a problem statement,
 * visible tests and hidden tests. Reward 1 iff every test (visible, restored from the pristine
 * copy, plus hidden) passes after the agent's edit. Runs in the controller's sandbox (no git
 * history, proxy-only network, the dataset with the hidden tests masked); an agent that edits the tests gets reward 0 and the
 * `edited_tests` flag (the reward hook's `restore`).
 *
 * @module
 */
import { probeSandbox, READONLY_ROOT_ARGS } from "../../controller/sandbox.ts";
import { SweTaskSchema } from "../../schema.ts";
import { type CodingTask, CodingTaskSchema } from "../schema.ts";
import { DEFAULT_DATA_DIR, type HarnessEnv, hiddenDataPaths, readJsonl } from "./common.ts";
import {
  defaultCodingWorkspaceRoot,
  materializeCodingWorkspace,
  sweToCodingTask,
} from "./coding_tasks.ts";
import { defineEnv } from "./define.ts";
import { bashTool, fileTools, workspacePath } from "./workspace_tools.ts";

/** The Python the verifier uses: Debian's (`/usr/bin/python3`) when present. */
export function pythonBinary(): string {
  try {
    if (Deno.statSync("/usr/bin/python3").isFile) return "/usr/bin/python3";
  } catch { /* fall back to PATH */ }
  return "python3";
}

/** One test's outcome in a {@link TestRun}. */
export interface TestOutcome {
  status: "ok" | "fail" | "error" | "skip";
  /** For a failure: the test's source line that failed. */
  line?: string;
  /** For a failure: the exception's last line (`AssertionError: 60 != 61`). */
  error?: string;
}

/** The outcome of {@link runRepoTests}. */
export interface TestRun {
  /** True when every test passed (and, when the task names FAIL_TO_PASS tests, those ran). */
  passed: boolean;
  /** Exit status of the test run (124: timed out). */
  exit_code: number;
  /** Tail of its output. */
  output: string;
  /** Whether the tests ran without network (bubblewrap) or directly. */
  isolated: boolean;
  /** Every test's outcome by id (`tests.test_x.Class.test_y`); empty when the run died. */
  tests: Record<string, TestOutcome>;
  /** True when the run was killed at its timeout. */
  timed_out: boolean;
}

/** Options of {@link runRepoTests}. */
export interface RunTestsOptions {
  /** Run only these test ids (default: discover the whole test directory). */
  ids?: string[];
  /** Run under bubblewrap when it works here (default true). */
  isolate?: boolean;
}

const REPORT_MARKER = "@@reins-unittest-report@@";
let runnerCode: string | null = null;

/** The test runner (`unittest_report.py`), passed to `python3 -c`. */
function runner(): string {
  runnerCode ??= Deno.readTextFileSync(new URL("./unittest_report.py", import.meta.url));
  return runnerCode;
}

function parseReport(stdout: string): Record<string, TestOutcome> {
  const at = stdout.lastIndexOf(REPORT_MARKER);
  if (at < 0) return {};
  try {
    const line = stdout.slice(at + REPORT_MARKER.length).split("\n")[0];
    return JSON.parse(line) as Record<string, TestOutcome>;
  } catch {
    return {};
  }
}

/**
 * Runs the repository's unittest suite in `dir` (with the task's hidden tests added to its
 * test directory) and reports each test's outcome. Under bubblewrap (when it works here) the
 * tests get no network and only `dir` writable, since the verifier runs code the agent wrote.
 * `passed` needs a clean exit, and every FAIL_TO_PASS test of the task reported `ok` (a
 * test that vanished does not count as passing).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { codingEnv, runRepoTests } from "./coding.ts";
 * const task = codingEnv().task("coding-textstats");
 * const dir = await Deno.makeTempDir();
 * // The task's repository as the agent got it (its bug not fixed yet).
 * const repo = `${codingEnv().dataDir}/coding/repos/${task.repo}`;
 * await new Deno.Command("cp", { args: ["-r", `${repo}/.`, dir] }).output();
 * assert.equal((await runRepoTests(task, dir)).passed, false); // until the fix is right
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function runRepoTests(
  task: Pick<CodingTask, "test_dir" | "hidden_tests"> & Partial<Pick<CodingTask, "fail_to_pass">>,
  dir: string,
  timeoutMs = 60_000,
  options: RunTestsOptions = {},
): Promise<TestRun> {
  const testDir = workspacePath(dir, task.test_dir, "test_dir");
  await Deno.mkdir(testDir, { recursive: true });
  for (const [name, content] of Object.entries(task.hidden_tests)) {
    await Deno.writeTextFile(`${testDir}/${name}`, content);
  }
  const python = pythonBinary();
  const command = [python, "-c", runner(), task.test_dir, ...options.ids ?? []];
  const support = await probeSandbox();
  const argv = (options.isolate ?? true) && support.bwrap && support.net
    ? [
      "bwrap",
      "--die-with-parent",
      "--unshare-pid",
      "--unshare-net",
      ...READONLY_ROOT_ARGS,
      "--bind",
      dir,
      dir,
      "--chdir",
      dir,
      "--",
      ...command,
    ]
    : command;
  const child = new Deno.Command(argv[0], {
    args: argv.slice(1),
    cwd: dir,
    env: { PYTHONDONTWRITEBYTECODE: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    // Its own process group, so that a timeout takes down whatever the tests started.
    detached: true,
  }).spawn();
  let timedOut = false;
  const timer = setTimeout(() => {
    timedOut = true;
    try {
      Deno.kill(-child.pid, "SIGKILL");
    } catch { /* already gone */ }
  }, timeoutMs);
  const out = await child.output().finally(() => clearTimeout(timer));
  const dec = new TextDecoder();
  const stdout = dec.decode(out.stdout);
  const tests = timedOut ? {} : parseReport(stdout);
  const visible = stdout.slice(0, Math.max(0, stdout.lastIndexOf(REPORT_MARKER))) || stdout;
  const failToPass = task.fail_to_pass ?? [];
  const exitCode = timedOut ? 124 : out.code;
  return {
    passed: exitCode === 0 && failToPass.every((id) => tests[id]?.status === "ok"),
    exit_code: exitCode,
    output: ((timedOut ? "timed out\n" : "") + visible + dec.decode(out.stderr)).slice(-4000),
    isolated: argv[0] === "bwrap",
    tests,
    timed_out: timedOut,
  };
}

const SYSTEM = "You are a software engineer fixing a bug in a small Python repository (your " +
  "working directory). Use the tools to read the code, edit it, and run the tests with " +
  "`python3 -m unittest discover -s tests -t .`. Do not edit the tests. When the fix is done, " +
  "reply with a one-line summary inside <answer></answer>.";

/** Options of {@link codingEnv}. */
export interface CodingEnvOptions {
  /** Dataset directory (default `data/envs`). */
  dataDir?: string;
  /** Default directory of the repositories (`dataDir/coding/repos`). */
  reposDir?: string;
  /** Where buggy workspaces of SWE-smith tasks are materialised (`$TMPDIR/reins-envs/coding`). */
  workspaceRoot?: string;
}

/** The SWE-smith task file of the coding dataset (generated by `deno task make-tasks`). */
export const SWE_TASKS_FILE = "swesmith.jsonl";

/**
 * The coding environment over `dataDir/coding/tasks.jsonl` (hand-written tasks whose
 * repository holds the bug) and `dataDir/coding/swesmith.jsonl` (SWE-smith records: a
 * pristine repository plus a patch that plants the bug), and their repositories.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { codingEnv } from "./coding.ts";
 * const tasks = codingEnv().loadTasks();
 * assert.deepEqual(tasks.slice(0, 3).map((t) => t.repo), ["textstats", "intervals", "roman"]);
 * assert.ok(tasks.length >= 100); // the generated SWE-smith-style tasks follow
 * ```
 */
export function codingEnv(options: CodingEnvOptions = {}): HarnessEnv<CodingTask> {
  const dataDir = options.dataDir ?? DEFAULT_DATA_DIR;
  const reposDir = options.reposDir ?? `${dataDir}/coding/repos`;
  const workspaceRoot = options.workspaceRoot ?? defaultCodingWorkspaceRoot();
  const load = (): CodingTask[] => {
    const own = readJsonl(`${dataDir}/coding/tasks.jsonl`, CodingTaskSchema);
    const swePath = `${dataDir}/coding/${SWE_TASKS_FILE}`;
    let exists = false;
    try {
      exists = Deno.statSync(swePath).isFile;
    } catch { /* no generated tasks */ }
    if (!exists) return own;
    return [...own, ...readJsonl(swePath, SweTaskSchema).map(sweToCodingTask)];
  };
  return defineEnv({
    name: "coding",
    description: "Python repositories with a planted bug; reward = the tests pass",
    systemPrompt: SYSTEM,
    dataDir,
    load,
    show: (task) => ({ prompt: task.problem, extra: { repo: task.repo } }),
    tools: (ctx) => [...fileTools(ctx), bashTool(ctx)],
    score: async (task, ctx) => {
      if (ctx.edited.length > 0) return 0;
      return (await runRepoTests(task, ctx.dir)).passed ? 1 : 0;
    },
    // The hidden tests (tasks.jsonl), the pristine repositories and every materialised buggy
    // copy (together they would reveal the fix) stay out of the agent's sight.
    sandbox: { enabled: true, hide: [...hiddenDataPaths(dataDir), workspaceRoot] },
    prepare: (task, spec) => {
      const repos = spec.repos_dir ?? reposDir;
      return {
        workspace: materializeCodingWorkspace(task, repos, workspaceRoot),
        restore: [task.test_dir],
        edited_restore_reward: 0,
        // A pristine repository is the fix of every task planted into it.
        ...(task.patch.trim() !== "" ? { hide: [repos] } : {}),
      };
    },
  });
}
