/**
 * The CLI runner without a real CLI: a fake adapter whose "CLI" is a shell script shows what
 * every real CLI gets — its config in a fresh HOME, a clean environment, the task, the workdir
 * — and that exit status, output, timeouts and unavailability come back as specified.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  type CliAdapter,
  CliUnavailableError,
  ensureCli,
  installPrefix,
  runCli,
  RUNNER_PATH,
  runtimeProblem,
} from "../lib/harness/cli/mod.ts";

const SCRIPT = `#!/bin/sh
echo "task=$1"
echo "home=$HOME"
echo "cwd=$(pwd)"
echo "config=$(cat "$HOME/fake/config.json")"
echo "secret=\${REINS_TEST_SECRET:-unset}"
echo "xdg=$XDG_CONFIG_HOME"
echo "key=$FAKE_KEY"
echo "to stderr" >&2
case "$1" in
  fail) exit 7 ;;
  sleep) sleep 30 ;;
esac
`;

/** A cache holding an "installed" fake CLI (no npm involved). */
async function fakeCache(): Promise<{ cacheDir: string; adapter: CliAdapter }> {
  const cacheDir = await Deno.makeTempDir({ prefix: "reins-fake-cli-" });
  const adapter: CliAdapter = {
    name: "codex",
    package: "@reins/fake-cli",
    version: "0.0.1",
    bin: "bin/fake",
    defaultModel: "fake-model",
    nodeMajor: null,
    wire: "openai_chat",
    prepare: (ctx) => ({
      argv: [ctx.bin, ctx.task],
      env: { FAKE_KEY: ctx.apiKey },
      files: { [`${ctx.home}/fake/config.json`]: JSON.stringify({ url: ctx.openaiBaseUrl }) },
    }),
  };
  const prefix = installPrefix(adapter, cacheDir);
  await Deno.mkdir(`${prefix}/bin`, { recursive: true });
  await Deno.writeTextFile(`${prefix}/bin/fake`, SCRIPT, { mode: 0o755 });
  return { cacheDir, adapter };
}

const URLS = {
  openaiBaseUrl: "http://127.0.0.1:1/proxy/r/a/v1",
  anthropicBaseUrl: "http://127.0.0.1:1/proxy/r/a",
  apiKey: "rk_fake",
};

Deno.test("runCli writes the config into a fresh HOME and passes a clean environment", async () => {
  const { cacheDir, adapter } = await fakeCache();
  const workdir = await Deno.makeTempDir();
  Deno.env.set("REINS_TEST_SECRET", "leak");
  try {
    const result = await runCli({ cli: adapter, task: "hello", workdir, cacheDir, ...URLS });
    assert.equal(result.exit_code, 0);
    const out = Object.fromEntries(
      result.stdout.trim().split("\n").map((line) => [
        line.slice(0, line.indexOf("=")),
        line.slice(line.indexOf("=") + 1),
      ]),
    );
    assert.equal(out.task, "hello");
    assert.equal(out.home, result.home);
    assert.notEqual(out.home, Deno.env.get("HOME"));
    assert.equal(out.cwd, await Deno.realPath(workdir));
    assert.deepEqual(JSON.parse(out.config), { url: URLS.openaiBaseUrl });
    assert.equal(out.secret, "unset", "the caller's environment does not leak in");
    assert.equal(out.xdg, `${result.home}/.config`);
    assert.equal(out.key, URLS.apiKey);
    assert.equal(result.stderr.trim(), "to stderr");
    await assert.rejects(Deno.stat(result.home), Deno.errors.NotFound, "temp HOME removed");
  } finally {
    Deno.env.delete("REINS_TEST_SECRET");
    await Deno.remove(cacheDir, { recursive: true });
    await Deno.remove(workdir, { recursive: true });
  }
});

Deno.test("runCli returns the CLI's exit status, and 124 after a timeout", async () => {
  const { cacheDir, adapter } = await fakeCache();
  const workdir = await Deno.makeTempDir();
  const home = `${workdir}-home`;
  try {
    const failed = await runCli({ cli: adapter, task: "fail", workdir, home, cacheDir, ...URLS });
    assert.equal(failed.exit_code, 7);
    const slow = await runCli({
      cli: adapter,
      task: "sleep",
      workdir,
      home,
      cacheDir,
      timeoutMs: 300,
      ...URLS,
    });
    assert.equal(slow.exit_code, 124);
    assert.match(slow.stderr, /killed after 300 ms/);
  } finally {
    await Deno.remove(cacheDir, { recursive: true });
    await Deno.remove(workdir, { recursive: true });
    await Deno.remove(home, { recursive: true }).catch(() => {});
  }
});

Deno.test("runCli refuses bad input, naming the field", async () => {
  const { cacheDir, adapter } = await fakeCache();
  try {
    await assert.rejects(
      runCli({ cli: adapter, task: " ", workdir: "/tmp", cacheDir, ...URLS }),
      /task: must not be empty/,
    );
    await assert.rejects(
      runCli({
        cli: adapter,
        task: "x",
        workdir: "/tmp",
        cacheDir,
        home: Deno.env.get("HOME")!,
        ...URLS,
      }),
      /home: must be a fresh directory/,
    );
    await assert.rejects(
      runCli({ cli: "nope" as "codex", task: "x", workdir: "/tmp", cacheDir, ...URLS }),
      /unknown harness CLI "nope" \(known: opencode, claude_code, codex, qwen_code\)/,
    );
  } finally {
    await Deno.remove(cacheDir, { recursive: true });
  }
});

Deno.test("runCli asks each CLI only for the variables of the wire it speaks", async () => {
  const { cacheDir, adapter } = await fakeCache();
  const workdir = await Deno.makeTempDir();
  const saved = ["OPENAI_BASE_URL", "ANTHROPIC_BASE_URL", "OPENAI_API_KEY", "ANTHROPIC_API_KEY"]
    .map((k) => [k, Deno.env.get(k)] as const);
  for (const [k] of saved) Deno.env.delete(k);
  try {
    // An OpenAI-wire CLI (OpenCode, Codex, Qwen Code) runs without ANTHROPIC_BASE_URL.
    const openai = await runCli({
      cli: adapter,
      task: "hello",
      workdir,
      cacheDir,
      openaiBaseUrl: URLS.openaiBaseUrl,
      apiKey: "rk_fake",
    });
    assert.equal(openai.exit_code, 0, openai.stderr);
    await assert.rejects(
      runCli({
        cli: adapter,
        task: "x",
        workdir,
        cacheDir,
        anthropicBaseUrl: URLS.anthropicBaseUrl,
      }),
      /openaiBaseUrl \(OPENAI_BASE_URL\): is required/,
    );
    // Claude Code's wire needs ANTHROPIC_BASE_URL and its key, and nothing of OpenAI's.
    const claude: CliAdapter = {
      ...adapter,
      wire: "anthropic_messages",
      prepare: (ctx) => ({
        argv: [ctx.bin, ctx.task],
        env: { FAKE_KEY: ctx.apiKey },
        files: { [`${ctx.home}/fake/config.json`]: JSON.stringify({ url: ctx.anthropicBaseUrl }) },
      }),
    };
    await assert.rejects(
      runCli({ cli: claude, task: "x", workdir, cacheDir, openaiBaseUrl: URLS.openaiBaseUrl }),
      /anthropicBaseUrl \(ANTHROPIC_BASE_URL\): is required/,
    );
    Deno.env.set("ANTHROPIC_BASE_URL", URLS.anthropicBaseUrl);
    Deno.env.set("ANTHROPIC_API_KEY", "rk_anthropic");
    const result = await runCli({ cli: claude, task: "hello", workdir, cacheDir });
    assert.equal(result.exit_code, 0, result.stderr);
    assert.match(result.stdout, /key=rk_anthropic/);
    assert.match(result.stdout, new RegExp(`"url":"${URLS.anthropicBaseUrl}"`));
  } finally {
    for (const [k, v] of saved) v === undefined ? Deno.env.delete(k) : Deno.env.set(k, v);
    await Deno.remove(cacheDir, { recursive: true });
    await Deno.remove(workdir, { recursive: true });
  }
});

Deno.test("a CLI that cannot run here says exactly why", async () => {
  const { cacheDir, adapter } = await fakeCache();
  try {
    const missing = { ...adapter, version: "9.9.9" };
    await assert.rejects(
      ensureCli(missing, { cacheDir, install: false }),
      (error: unknown) =>
        error instanceof CliUnavailableError &&
        /@reins\/fake-cli@9\.9\.9 is not installed in .* \(install disabled\)/.test(error.reason),
    );
    const futureNode = { ...adapter, nodeMajor: 999 };
    assert.match((await runtimeProblem(futureNode)) ?? "", /needs Node\.js >= 999, found v\d+/);
    await assert.rejects(ensureCli(futureNode, { cacheDir }), CliUnavailableError);
  } finally {
    await Deno.remove(cacheDir, { recursive: true });
  }
});

Deno.test("the runner entry point reports bad arguments and a bad task with exit status 2", async () => {
  const run = async (args: string[], env: Record<string, string> = {}) => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "--no-config", "--no-lock", RUNNER_PATH, ...args],
      env,
      stdout: "piped",
      stderr: "piped",
    }).output();
    return { code: out.code, stderr: new TextDecoder().decode(out.stderr) };
  };
  const noCli = await run([]);
  assert.equal(noCli.code, 2);
  assert.match(noCli.stderr, /--cli: is required/);
  const unknown = await run(["--cli", "vim", "--task", "x"]);
  assert.equal(unknown.code, 2);
  assert.match(unknown.stderr, /unknown harness CLI "vim"/);
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(`${dir}/input.json`, JSON.stringify({ question: "2+2" }));
    const noTask = await run(["--cli", "codex"], { REINS_INPUT_FILE: `${dir}/input.json` });
    assert.equal(noTask.code, 2);
    assert.match(noTask.stderr, /input\.task: must be a non-empty string/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
