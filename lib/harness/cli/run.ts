/**
 * Runner entry point: what a CLI harness's command runs inside an attempt.
 *
 * ```sh
 * deno run -A lib/harness/cli/run.ts --cli codex [--model m] [--task-field task]
 *   [--task "…"] [--home DIR] [--cache-dir DIR] [--no-install] [--env-json '{…}'] [-- extra args]
 * ```
 *
 * The task comes from `--task`, else from field `--task-field` of the JSON in
 * `$REINS_INPUT_FILE`; the proxy URL and key from the variables of the wire the CLI speaks:
 * `OPENAI_BASE_URL`/`OPENAI_API_KEY` for OpenCode, Codex and Qwen Code, `ANTHROPIC_BASE_URL`/
 * `ANTHROPIC_API_KEY` for Claude Code (the controller sets all four); the working directory is `$REINS_WORKDIR` (else
 * the cwd). HOME is a fresh `harness_home/` in the attempt's directory (the parent of the
 * workdir, named `$REINS_ATTEMPT_ID` by the local backend) when it is writable, else a temp dir. The CLI's output is passed through; the exit
 * status is the CLI's (2 for bad arguments, 3 when the CLI cannot run here).
 *
 * It imports nothing from npm, so it needs no import map.
 *
 * @module
 */
import { parseArgs as parseNodeArgs } from "node:util";
import { CliUnavailableError } from "./install.ts";
import { cliAdapter } from "./registry.ts";
import { runCli } from "./runner.ts";
import type { CliAdapter } from "./types.ts";

interface Args {
  cli: string;
  model?: string;
  taskField: string;
  task?: string;
  home?: string;
  cacheDir?: string;
  install: boolean;
  env: Record<string, string>;
  extra: string[];
  json: boolean;
}

function parseArgs(argv: string[]): Args {
  const { values, positionals } = parseNodeArgs({
    args: argv,
    options: {
      cli: { type: "string", default: "" },
      model: { type: "string" },
      "task-field": { type: "string", default: "task" },
      task: { type: "string" },
      home: { type: "string" },
      "cache-dir": { type: "string" },
      "no-install": { type: "boolean", default: false },
      json: { type: "boolean", default: false },
      "env-json": { type: "string" },
    },
    strict: true,
    allowPositionals: true,
  });
  const dashDash = argv.indexOf("--");
  if (positionals.length && dashDash < 0) {
    throw new Error(`${positionals[0]}: unknown argument (harness arguments go after --)`);
  }
  const env: Record<string, string> = {};
  if (values["env-json"] !== undefined) {
    const parsed: unknown = JSON.parse(values["env-json"]);
    if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) {
      throw new Error("--env-json: must be a JSON object of strings");
    }
    for (const [k, v] of Object.entries(parsed)) {
      if (typeof v !== "string") throw new Error(`--env-json: ${k} must be a string`);
      env[k] = v;
    }
  }
  if (!values.cli) throw new Error("--cli: is required (opencode, claude_code, codex, qwen_code)");
  return {
    cli: values.cli,
    ...(values.model === undefined ? {} : { model: values.model }),
    taskField: values["task-field"],
    ...(values.task === undefined ? {} : { task: values.task }),
    ...(values.home === undefined ? {} : { home: values.home }),
    ...(values["cache-dir"] === undefined ? {} : { cacheDir: values["cache-dir"] }),
    install: !values["no-install"],
    env,
    extra: dashDash < 0 ? [] : argv.slice(dashDash + 1),
    json: values.json,
  };
}

function readTask(field: string): string {
  const file = Deno.env.get("REINS_INPUT_FILE");
  if (!file) throw new Error("--task or $REINS_INPUT_FILE: one is required");
  const input: unknown = JSON.parse(Deno.readTextFileSync(file));
  const task = input && typeof input === "object" && !Array.isArray(input)
    ? (input as Record<string, unknown>)[field]
    : undefined;
  if (typeof task !== "string" || !task.trim()) {
    throw new Error(`input.${field}: must be a non-empty string (the task prompt)`);
  }
  return task;
}

function attemptHome(workdir: string): string | undefined {
  // Only inside the local backend's layout (`<root>/attempts/<attempt_id>/work`): elsewhere the
  // parent of the workdir is somebody's directory, not ours to write into.
  const attemptId = Deno.env.get("REINS_ATTEMPT_ID");
  const parent = workdir.replace(/\/+$/, "").replace(/\/[^/]*$/, "");
  if (!attemptId || !parent || parent.slice(parent.lastIndexOf("/") + 1) !== attemptId) {
    return undefined;
  }
  const home = `${parent}/harness_home`;
  try {
    Deno.removeSync(home, { recursive: true });
  } catch { /* fresh */ }
  try {
    Deno.mkdirSync(home, { recursive: true });
    return home;
  } catch {
    return undefined; // e.g. the attempt dir is read-only inside the sandbox
  }
}

async function main(argv: string[]): Promise<number> {
  let args: Args;
  let task: string;
  let adapter: CliAdapter;
  try {
    args = parseArgs(argv);
    adapter = cliAdapter(args.cli);
    task = args.task ?? readTask(args.taskField);
  } catch (error) {
    console.error(`reins cli runner: ${(error as Error).message}`);
    return 2;
  }
  const workdir = Deno.env.get("REINS_WORKDIR") ?? Deno.cwd();
  try {
    const result = await runCli({
      cli: adapter,
      task,
      workdir,
      home: args.home ?? attemptHome(workdir),
      ...(args.model ? { model: args.model } : {}),
      ...(args.cacheDir ? { cacheDir: args.cacheDir } : {}),
      install: args.install,
      env: args.env,
      extraArgs: args.extra,
      echo: !args.json,
    });
    if (args.json) console.log(JSON.stringify(result));
    else console.error(`reins cli runner: ${result.cli} exited with ${result.exit_code}`);
    return result.exit_code;
  } catch (error) {
    const unavailable = error instanceof CliUnavailableError;
    console.error(
      `reins cli runner: ${unavailable ? "unavailable: " : ""}${(error as Error).message}`,
    );
    return unavailable ? 3 : 1;
  }
}

if (import.meta.main) Deno.exit(await main(Deno.args));
