/**
 * Runs one real harness CLI on one task: installs it if needed, writes its own config into a
 * fresh HOME, builds a clean environment (nothing of the caller's HOME, XDG dirs or API keys
 * leaks in), runs it non-interactively in the agent's working directory, and returns its exit
 * status and output.
 *
 * @module
 */
import type { CliName, CliRunResult } from "./schema.ts";
import { ensureCli, type EnsureCliOptions } from "./install.ts";
import { cliAdapter } from "./registry.ts";
import type { CliAdapter } from "./types.ts";

/** Options of {@link runCli}. */
export interface RunCliOptions extends EnsureCliOptions {
  cli: CliName | CliAdapter;
  task: string;
  /** The agent's working directory. */
  workdir: string;
  /**
   * HOME for the CLI: created if missing; must not be the user's home. Default: a temp dir,
   * removed after the run unless `keepHome`.
   */
  home?: string;
  keepHome?: boolean;
  /** Model name (default: the adapter's). */
  model?: string;
  /**
   * OpenAI-style base URL (…/v1); default `$OPENAI_BASE_URL`. Required for the CLIs that speak
   * OpenAI's APIs (OpenCode, Codex, Qwen Code); else derived from the Anthropic one.
   */
  openaiBaseUrl?: string;
  /**
   * Anthropic-style base URL; default `$ANTHROPIC_BASE_URL`. Required for Claude Code only;
   * else derived from the OpenAI one (without `/v1`).
   */
  anthropicBaseUrl?: string;
  /** API key; default the CLI's own variable (`$ANTHROPIC_API_KEY` for Claude Code, else `$OPENAI_API_KEY`), then the other. */
  apiKey?: string;
  extraArgs?: string[];
  /** Extra environment for the CLI (HOME and the adapter's config variables win). */
  env?: Record<string, string>;
  /** Kill the CLI after this long (exit code 124). */
  timeoutMs?: number;
  /** Also copy the CLI's output to this process's stdout/stderr as it arrives. */
  echo?: boolean;
}

/** Inherited variables that are safe and useful for a CLI (everything else is dropped). */
const PASSED = ["PATH", "LANG", "LC_ALL", "TZ", "USER", "LOGNAME", "SHELL"];

/** Reads a stream to its end (optionally copying it to `sink`); `cancel` stops it early. */
function pump(
  stream: ReadableStream<Uint8Array>,
  sink: { writeSync(p: Uint8Array): number } | null,
): { text: Promise<string>; cancel: () => void } {
  const reader = stream.getReader();
  const chunks: Uint8Array[] = [];
  const text = (async () => {
    try {
      while (true) {
        const { done, value } = await reader.read();
        if (done) break;
        chunks.push(value);
        if (sink) {
          let off = 0;
          while (off < value.length) off += sink.writeSync(value.subarray(off));
        }
      }
    } catch { /* cancelled */ }
    const all = new Uint8Array(chunks.reduce((n, c) => n + c.length, 0));
    let at = 0;
    for (const c of chunks) {
      all.set(c, at);
      at += c.length;
    }
    return new TextDecoder().decode(all);
  })();
  return { text, cancel: () => void reader.cancel().catch(() => {}) };
}

/** Pids of every live descendant of `pid` (Linux `/proc`; empty elsewhere). */
function descendants(pid: number): number[] {
  const out: number[] = [];
  const visit = (p: number) => {
    let tasks: Deno.DirEntry[] = [];
    try {
      tasks = [...Deno.readDirSync(`/proc/${p}/task`)];
    } catch {
      return;
    }
    for (const task of tasks) {
      let children = "";
      try {
        children = Deno.readTextFileSync(`/proc/${p}/task/${task.name}/children`);
      } catch {
        continue;
      }
      for (const child of children.split(" ").filter(Boolean).map(Number)) {
        out.push(child);
        visit(child);
      }
    }
  };
  visit(pid);
  return out;
}

/** How long output may keep flowing after the CLI exited (daemons it left holding the pipes). */
const DRAIN_MS = 2_000;

function required(value: string | undefined, field: string): string {
  if (!value) throw new Error(`${field}: is required (pass it or set the environment variable)`);
  return value;
}

/**
 * Runs a CLI harness once.
 *
 * @example
 * ```ts ignore
 * import { runCli } from "./runner.ts";
 * const result = await runCli({
 *   cli: "codex",
 *   task: "Fix the bug in calc.py",
 *   workdir: "/tmp/work",
 *   openaiBaseUrl: "http://127.0.0.1:8420/proxy/r1/a1/v1",
 *   anthropicBaseUrl: "http://127.0.0.1:8420/proxy/r1/a1",
 *   apiKey: "rk_…",
 * });
 * result.exit_code; // 0
 * ```
 */
export async function runCli(options: RunCliOptions): Promise<CliRunResult> {
  const adapter = typeof options.cli === "string" ? cliAdapter(options.cli) : options.cli;
  if (!options.task.trim()) throw new Error("task: must not be empty");
  const workdir = required(options.workdir, "workdir");
  // Each CLI needs only the variables of the wire it speaks; the other URL is derived (the
  // proxy serves both under one prefix: `<prefix>/v1/...` and `<prefix>/v1/messages`).
  const anthropic = adapter.wire === "anthropic_messages";
  const openaiGiven = options.openaiBaseUrl ?? Deno.env.get("OPENAI_BASE_URL");
  const anthropicGiven = options.anthropicBaseUrl ?? Deno.env.get("ANTHROPIC_BASE_URL");
  const openaiBaseUrl = (anthropic
    ? openaiGiven ??
      `${required(anthropicGiven, "anthropicBaseUrl (ANTHROPIC_BASE_URL)").replace(/\/$/, "")}/v1`
    : required(openaiGiven, "openaiBaseUrl (OPENAI_BASE_URL)")).replace(/\/$/, "");
  const anthropicBaseUrl =
    (anthropic
      ? required(anthropicGiven, "anthropicBaseUrl (ANTHROPIC_BASE_URL)")
      : anthropicGiven ?? openaiBaseUrl.replace(/\/v1$/, "")).replace(/\/$/, "");
  const keyVar = anthropic ? "ANTHROPIC_API_KEY" : "OPENAI_API_KEY";
  const apiKey = required(
    options.apiKey ?? Deno.env.get(keyVar) ??
      Deno.env.get(anthropic ? "OPENAI_API_KEY" : "ANTHROPIC_API_KEY"),
    `apiKey (${keyVar})`,
  );
  const userHome = Deno.env.get("HOME");
  if (userHome && options.home?.replace(/\/$/, "") === userHome.replace(/\/$/, "")) {
    throw new Error("home: must be a fresh directory, not the user's HOME");
  }
  const { bin } = await ensureCli(adapter, options);
  const ownHome = options.home === undefined && !options.keepHome;
  const home = options.home ?? await Deno.makeTempDir({ prefix: `reins-${adapter.name}-home-` });
  const invocation = adapter.prepare({
    task: options.task,
    workdir,
    home,
    model: options.model ?? adapter.defaultModel,
    openaiBaseUrl,
    anthropicBaseUrl,
    apiKey,
    bin,
  });
  for (const dir of ["", "/.config", "/.cache", "/.local/share", "/.local/state", "/tmp"]) {
    await Deno.mkdir(`${home}${dir}`, { recursive: true });
  }
  for (const [path, content] of Object.entries(invocation.files)) {
    await Deno.mkdir(path.slice(0, path.lastIndexOf("/")) || "/", { recursive: true });
    await Deno.writeTextFile(path, content);
  }
  const inherited: Record<string, string> = {};
  for (const key of PASSED) {
    const value = Deno.env.get(key);
    if (value !== undefined) inherited[key] = value;
  }
  const env: Record<string, string> = {
    LANG: "C.UTF-8",
    ...inherited,
    ...options.env,
    ...invocation.env,
    HOME: home,
    XDG_CONFIG_HOME: `${home}/.config`,
    XDG_CACHE_HOME: `${home}/.cache`,
    XDG_DATA_HOME: `${home}/.local/share`,
    XDG_STATE_HOME: `${home}/.local/state`,
    TMPDIR: `${home}/tmp`,
    TERM: "dumb",
    NO_COLOR: "1",
  };
  const started = performance.now();
  const child = new Deno.Command(invocation.argv[0], {
    args: [...invocation.argv.slice(1), ...(options.extraArgs ?? [])],
    cwd: workdir,
    env,
    clearEnv: true,
    stdin: "null",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const stdout = pump(child.stdout, options.echo ? Deno.stdout : null);
  const stderr = pump(child.stderr, options.echo ? Deno.stderr : null);
  let timedOut = false;
  const timer = options.timeoutMs
    ? setTimeout(() => {
      timedOut = true;
      // The CLI's own children (shells, tools) go too; they would keep the pipes open.
      for (const pid of [child.pid, ...descendants(child.pid)]) {
        try {
          Deno.kill(pid, "SIGKILL");
        } catch { /* already gone */ }
      }
    }, options.timeoutMs)
    : undefined;
  try {
    const status = await child.status;
    let drainTimer: ReturnType<typeof setTimeout> | undefined;
    await Promise.race([
      Promise.all([stdout.text, stderr.text]),
      new Promise<void>((resolve) => drainTimer = setTimeout(resolve, DRAIN_MS)),
    ]);
    clearTimeout(drainTimer);
    stdout.cancel();
    stderr.cancel();
    const [out, err] = await Promise.all([stdout.text, stderr.text]);
    return {
      cli: adapter.name,
      exit_code: timedOut ? 124 : status.code,
      stdout: out,
      stderr: timedOut ? `${err}\nreins: killed after ${options.timeoutMs} ms` : err,
      duration_ms: performance.now() - started,
      home,
    };
  } finally {
    clearTimeout(timer);
    if (ownHome) await Deno.remove(home, { recursive: true }).catch(() => {});
  }
}
