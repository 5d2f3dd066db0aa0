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
import { type CodingTask, CodingTaskSchema } from "../../schema.ts";
import { builtinResolver } from "../builtin/resolver.ts";
import {
  DEFAULT_DATA_DIR,
  findTask,
  type HarnessEnv,
  hiddenDataPaths,
  parseEnvInput,
  readJsonl,
} from "./common.ts";
import { bashTool, fileTools, workspacePath } from "./workspace_tools.ts";

/** The Python the verifier uses: Debian's (`/usr/bin/python3`) when present. */
export function pythonBinary(): string {
  try {
    if (Deno.statSync("/usr/bin/python3").isFile) return "/usr/bin/python3";
  } catch { /* fall back to PATH */ }
  return "python3";
}

/** The outcome of {@link runRepoTests}. */
export interface TestRun {
  /** True when every test passed. */
  passed: boolean;
  /** Exit status of the test run. */
  exit_code: number;
  /** Tail of its output. */
  output: string;
  /** Whether the tests ran without network (bubblewrap) or directly. */
  isolated: boolean;
}

/**
 * Runs `python3 -m unittest discover` in `dir` with the task's hidden tests added to its test
 * directory. Under bubblewrap (when it works here) the tests get no network and only `dir`
 * writable, since the verifier runs code the agent wrote.
 *
 * @example
 * ```ts
 * import { codingEnv, runRepoTests } from "./coding.ts";
 * import { DEFAULT_DATA_DIR } from "./common.ts";
 * const [task] = codingEnv().loadTasks();
 * const dir = await Deno.makeTempDir();
 * // The task's repository as the agent got it (its bug not fixed yet).
 * const repo = `${DEFAULT_DATA_DIR}/coding/repos/${task.repo}`;
 * await new Deno.Command("cp", { args: ["-r", `${repo}/.`, dir] }).output();
 * (await runRepoTests(task, dir)).passed; // false until the fix is right
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function runRepoTests(
  task: CodingTask,
  dir: string,
  timeoutMs = 60_000,
): Promise<TestRun> {
  const testDir = workspacePath(dir, task.test_dir, "test_dir");
  await Deno.mkdir(testDir, { recursive: true });
  for (const [name, content] of Object.entries(task.hidden_tests)) {
    await Deno.writeTextFile(`${testDir}/${name}`, content);
  }
  const python = pythonBinary();
  const unittest = [python, "-m", "unittest", "discover", "-s", task.test_dir, "-t", "."];
  const support = await probeSandbox();
  const argv = support.bwrap && support.net
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
      ...unittest,
    ]
    : unittest;
  const out = await new Deno.Command(argv[0], {
    args: argv.slice(1),
    cwd: dir,
    env: { PYTHONDONTWRITEBYTECODE: "1" },
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
    signal: AbortSignal.timeout(timeoutMs),
  }).output();
  const dec = new TextDecoder();
  return {
    passed: out.code === 0,
    exit_code: out.code,
    output: (dec.decode(out.stdout) + dec.decode(out.stderr)).slice(-4000),
    isolated: argv[0] === "bwrap",
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
}

/**
 * The coding environment over `dataDir/coding/tasks.jsonl` and its repositories.
 *
 * @example
 * ```ts
 * import { codingEnv } from "./coding.ts";
 * codingEnv().loadTasks().map((t) => t.repo); // ["textstats", "intervals", "roman"]
 * ```
 */
export function codingEnv(options: CodingEnvOptions = {}): HarnessEnv<CodingTask> {
  const dataDir = options.dataDir ?? DEFAULT_DATA_DIR;
  const reposDir = options.reposDir ?? `${dataDir}/coding/repos`;
  const load = () => readJsonl(`${dataDir}/coding/tasks.jsonl`, CodingTaskSchema);
  return {
    name: "coding",
    description: "Python repositories with a planted bug; reward = hidden tests pass",
    systemPrompt: SYSTEM,
    dataDir,
    loadTasks: load,
    task: (id) => findTask(load(), id, "coding"),
    taskInput: (task) => ({
      env: "coding",
      id: task.id,
      prompt: task.problem,
      extra: { repo: task.repo },
    }),
    tools: (ctx) => [...fileTools(ctx), bashTool(ctx)],
    reward: async (ctx) => {
      const input = parseEnvInput(ctx.rollout.input, "coding");
      const task = findTask(load(), input.id, "coding");
      if (ctx.edited.length > 0) return 0;
      return (await runRepoTests(task, ctx.dir)).passed ? 1 : 0;
    },
    resolver: builtinResolver({
      env: "coding",
      // The hidden tests (tasks.jsonl) stay out of the agent's sight; the reward reads them.
      sandbox: { enabled: true, hide: hiddenDataPaths(dataDir) },
      prepare: (input, spec) => {
        const task = findTask(load(), input.id, "coding");
        return {
          workspace: `${spec.repos_dir ?? reposDir}/${task.repo}`,
          restore: [task.test_dir],
          edited_restore_reward: 0,
        };
      },
    }),
  };
}
