/**
 * `deno task run-cli` runs one real harness CLI (installed from npm on first use) against a
 * gateway, as one rollout, and prints where its calls are in the Live UI:
 *
 * ```sh
 * deno task policy --scripted bugfix:opencode &                 # the policy (prints its URL)
 * deno task gateway --db runs/cli/gateway.db --upstream http://127.0.0.1:8300 &
 * deno task run-cli opencode --task "The unit test test_calc.py fails. Fix the bug in calc.py."
 * ```
 *
 * The CLI is `opencode`, `claude` (Claude Code), `codex` or `qwen` (Qwen Code). It gets the
 * proxy URL of a fresh rollout's attempt and the attempt's capability token in the variables
 * its own wire reads (`OPENAI_BASE_URL`/`OPENAI_API_KEY`, or `ANTHROPIC_BASE_URL`/
 * `ANTHROPIC_API_KEY` for Claude Code), a fresh HOME, and `--workdir` as its working directory
 * (default `runs/cli/<cli>/work`, filled with the `calc.py` bug-fix task unless `--fixture none`).
 * After the CLI exits, `--verify CMD` (default for the bug-fix task: its unit test) runs in the
 * workdir and its exit status becomes the reward (0 → 1, else 0). The admin key comes from
 * `$REINS_ADMIN_KEY`, else `--admin-key-file` (default `runs/cli/gateway.db.key`, the file the
 * gateway command above creates).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { GatewayClient } from "../lib/gateway/client.ts";
import { cliAdapter } from "../lib/harness/cli/registry.ts";
import { runCli } from "../lib/harness/cli/runner.ts";
import type { CliAdapter } from "../lib/harness/cli/types.ts";

const USAGE = `usage: deno task run-cli <opencode|claude|codex|qwen> [--task TEXT]
  [--gateway URL] [--admin-key-file FILE] [--workdir DIR] [--fixture bugfix|none]
  [--verify CMD] [--model NAME] [--no-install] [-- extra CLI args]`;

/** Short names accepted on the command line. */
export const CLI_NAMES: Record<string, string> = {
  opencode: "opencode",
  claude: "claude_code",
  claude_code: "claude_code",
  codex: "codex",
  qwen: "qwen_code",
  qwen_code: "qwen_code",
};

const FIXTURE = decodeURIComponent(
  new URL("../tests/fixtures/harness_cli/bugfix", import.meta.url).pathname,
);
const BUGFIX_TASK =
  "The unit test test_calc.py fails. Fix the bug in calc.py (do not edit the tests).";
const BUGFIX_VERIFY = "python3 -m unittest -q test_calc";

async function copyDir(from: string, to: string): Promise<void> {
  await Deno.mkdir(to, { recursive: true });
  for await (const e of Deno.readDir(from)) {
    if (e.isFile) await Deno.copyFile(`${from}/${e.name}`, `${to}/${e.name}`);
  }
}

async function main(argv: string[]): Promise<number> {
  let parsed;
  try {
    parsed = parseArgs({
      args: argv,
      options: {
        task: { type: "string" },
        gateway: { type: "string", default: "http://127.0.0.1:8420" },
        "admin-key-file": { type: "string", default: "runs/cli/gateway.db.key" },
        workdir: { type: "string" },
        fixture: { type: "string", default: "bugfix" },
        verify: { type: "string" },
        model: { type: "string" },
        "no-install": { type: "boolean", default: false },
        help: { type: "boolean", default: false },
      },
      strict: true,
      allowPositionals: true,
    });
  } catch (error) {
    console.error(`run-cli: ${(error as Error).message.split(". ")[0]} (see --help)`);
    return 2;
  }
  const { values, positionals } = parsed;
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const dashDash = argv.indexOf("--");
  const extra = dashDash < 0 ? [] : argv.slice(dashDash + 1);
  const name = positionals[0];
  if (!name || !(name in CLI_NAMES) || (positionals.length > 1 && dashDash < 0)) {
    console.error("run-cli: expected one of opencode, claude, codex, qwen (see --help)");
    return 2;
  }
  if (values.fixture !== "bugfix" && values.fixture !== "none") {
    console.error(`--fixture: expected bugfix or none, got '${values.fixture}'`);
    return 2;
  }
  const adapter: CliAdapter = cliAdapter(CLI_NAMES[name]);
  const bugfix = values.fixture === "bugfix";
  const task = values.task ?? (bugfix ? BUGFIX_TASK : undefined);
  if (!task?.trim()) {
    console.error("--task: is required (the prompt given to the CLI)");
    return 2;
  }
  let adminKey = Deno.env.get("REINS_ADMIN_KEY");
  if (!adminKey) {
    try {
      adminKey = (await Deno.readTextFile(values["admin-key-file"])).trim();
    } catch {
      console.error(
        `admin key: set $REINS_ADMIN_KEY or pass --admin-key-file (no ${
          values["admin-key-file"]
        }; the gateway creates <db>.key)`,
      );
      return 2;
    }
  }
  const workdir = resolve(values.workdir ?? `runs/cli/${adapter.name}/work`);
  if (bugfix) {
    await Deno.remove(workdir, { recursive: true }).catch(() => undefined);
    await copyDir(FIXTURE, workdir);
  } else await Deno.mkdir(workdir, { recursive: true });

  const base = values.gateway.replace(/\/+$/, "");
  const gw = new GatewayClient(base, { apiKey: adminKey });
  const rolloutId = `cli-${adapter.name}-${new Date().toISOString().replace(/[:.]/g, "-")}`;
  await gw.createRollouts([{
    rollout_id: rolloutId,
    input: { task },
    labels: { harness: adapter.name, run_cli: rolloutId },
  }]);
  const [claimed] = await gw.claim({
    worker: "run-cli",
    limit: 1,
    lease_ms: 3_600_000,
    labels: { run_cli: rolloutId },
  });
  if (!claimed) throw new Error(`gateway: could not claim rollout ${rolloutId}`);
  const attemptId = claimed.attempt.attempt_id;
  const proxy = `${base}/proxy/${encodeURIComponent(rolloutId)}/${encodeURIComponent(attemptId)}`;
  console.log(`rollout ${rolloutId}: ${adapter.name} ${adapter.version} in ${workdir}`);

  let exitCode = 1;
  let error: string | null = null;
  try {
    const result = await runCli({
      cli: adapter,
      task,
      workdir,
      ...(adapter.wire === "anthropic_messages"
        ? { anthropicBaseUrl: proxy }
        : { openaiBaseUrl: `${proxy}/v1` }),
      apiKey: claimed.token,
      ...(values.model ? { model: values.model } : {}),
      install: !values["no-install"],
      extraArgs: extra,
      echo: true,
    });
    exitCode = result.exit_code;
  } catch (e) {
    error = (e as Error).message;
    console.error(`run-cli: ${error}`);
  }
  const verify = values.verify ?? (bugfix ? BUGFIX_VERIFY : undefined);
  let reward: number | null = null;
  if (verify && error === null) {
    const out = await new Deno.Command("sh", {
      args: ["-c", verify],
      cwd: workdir,
      stdout: "null",
      stderr: "null",
    }).output();
    reward = out.success ? 1 : 0;
    await gw.postEvents(rolloutId, attemptId, [{ type: "reward", payload: { value: reward } }]);
  }
  await gw.transition(rolloutId, {
    to: exitCode === 0 && error === null ? "succeeded" : "failed",
    attempt_id: attemptId,
    ...(error ? { reason: error } : exitCode ? { reason: `exit ${exitCode}` } : {}),
  });
  const calls = await gw.listEvents(rolloutId, { type: "model_request" });
  const conversations = new Map<string, number>();
  for (const e of calls) {
    if (e.type !== "model_request") continue;
    const c = e.payload.segment?.conversation ?? "?";
    conversations.set(c, (conversations.get(c) ?? 0) + 1);
  }
  console.log(
    `${adapter.name} exited ${exitCode}; ${calls.length} model call(s) (${
      [...conversations].map(([c, n]) => `${c} ${n}`).join(", ") || "none"
    })${reward === null ? "" : `; reward ${reward} (${verify})`}`,
  );
  console.log(`calls in the UI: ${base}/ui/rollouts/${encodeURIComponent(rolloutId)}`);
  return error !== null ? 1 : exitCode;
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (error) {
    console.error(`run-cli: ${(error as Error).message}`);
    Deno.exit(1);
  }
}
