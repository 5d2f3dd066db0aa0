/**
 * Installs the pinned CLIs on demand into a cache outside the repository
 * (`$REINS_HOME/harnesses`, else `$XDG_CACHE_HOME/reins/harnesses`, else
 * `~/.cache/reins/harnesses`), one npm prefix per `<package>@<version>`.
 *
 * Each install goes to a temporary prefix that is renamed into place when complete, so a
 * crash never leaves a half-installed CLI and concurrent installers do not need a lock.
 *
 * @module
 */
import type { CliAdapter } from "./types.ts";

/** The CLI cannot run here; `reason` says exactly why (shown as `skip <reason>`). */
export class CliUnavailableError extends Error {
  readonly reason: string;
  constructor(reason: string) {
    super(reason);
    this.name = "CliUnavailableError";
    this.reason = reason;
  }
}

/**
 * The default install cache.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { defaultCacheDir } from "./install.ts";
 * assert.equal(defaultCacheDir().endsWith("harnesses"), true);
 * ```
 */
export function defaultCacheDir(): string {
  const reinsHome = Deno.env.get("REINS_HOME");
  if (reinsHome) return `${reinsHome}/harnesses`;
  const xdg = Deno.env.get("XDG_CACHE_HOME");
  if (xdg) return `${xdg}/reins/harnesses`;
  const home = Deno.env.get("HOME");
  if (!home) throw new CliUnavailableError("no cache dir: set REINS_HOME or HOME");
  return `${home}/.cache/reins/harnesses`;
}

/**
 * The npm prefix of one pinned CLI inside `cacheDir`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { installPrefix } from "./install.ts";
 * import { codex } from "./codex.ts";
 * assert.equal(installPrefix(codex, "/c"), "/c/@openai+codex@0.171.0");
 * ```
 */
export function installPrefix(adapter: CliAdapter, cacheDir: string): string {
  return `${cacheDir}/${adapter.package.replace("/", "+")}@${adapter.version}`;
}

function isFile(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

async function capture(cmd: string, args: string[], env?: Record<string, string>) {
  const out = await new Deno.Command(cmd, { args, stdout: "piped", stderr: "piped", env })
    .output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

/**
 * Says why `adapter` cannot run on this machine (a missing or too old Node.js), or null.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runtimeProblem } from "./install.ts";
 * import { qwenCode } from "./qwen_code.ts";
 * // null where Node.js is new enough, else e.g. "needs Node.js >= 20, found v18.19.0"
 * const problem = await runtimeProblem(qwenCode);
 * assert.ok(problem === null || problem.startsWith("needs Node.js >= 20"), problem ?? "");
 * ```
 */
export async function runtimeProblem(adapter: CliAdapter): Promise<string | null> {
  if (adapter.nodeMajor === null) return null;
  let version: string;
  try {
    version = (await capture("node", ["--version"])).stdout.trim();
  } catch {
    return `needs Node.js >= ${adapter.nodeMajor} on PATH (no 'node' found)`;
  }
  const major = Number(/^v(\d+)/.exec(version)?.[1] ?? "0");
  if (major < adapter.nodeMajor) {
    return `needs Node.js >= ${adapter.nodeMajor}, found ${version || "none"}`;
  }
  return null;
}

/** Options of {@link ensureCli}. */
export interface EnsureCliOptions {
  /** Install cache (default {@link defaultCacheDir}). */
  cacheDir?: string;
  /** Install when missing (default true); false makes a missing CLI a {@link CliUnavailableError}. */
  install?: boolean;
  /** npm executable (default `npm` on PATH). */
  npm?: string;
}

/** A CLI ready to run. */
export interface InstalledCli {
  prefix: string;
  /** Absolute path of its executable. */
  bin: string;
  /** True when this call installed it. */
  installed: boolean;
}

/**
 * Returns the pinned CLI from the cache, installing it with `npm install --prefix` first when
 * it is missing. Throws {@link CliUnavailableError} (with the exact reason) when it cannot.
 *
 * @example
 * ```ts ignore
 * import { ensureCli } from "./install.ts";
 * import { codex } from "./codex.ts";
 * const { bin } = await ensureCli(codex); // ~/.cache/reins/harnesses/@openai+codex@0.171.0/…
 * ```
 */
export async function ensureCli(
  adapter: CliAdapter,
  options: EnsureCliOptions = {},
): Promise<InstalledCli> {
  const cacheDir = options.cacheDir ?? defaultCacheDir();
  const prefix = installPrefix(adapter, cacheDir);
  const bin = `${prefix}/${adapter.bin}`;
  const problem = await runtimeProblem(adapter);
  if (problem) throw new CliUnavailableError(problem);
  if (isFile(bin)) return { prefix, bin, installed: false };
  const spec = `${adapter.package}@${adapter.version}`;
  if (options.install === false) {
    throw new CliUnavailableError(`${spec} is not installed in ${cacheDir} (install disabled)`);
  }
  await Deno.mkdir(cacheDir, { recursive: true });
  const staging = await Deno.makeTempDir({ dir: cacheDir, prefix: ".install-" });
  try {
    let result;
    try {
      result = await capture(options.npm ?? "npm", [
        "install",
        "--prefix",
        staging,
        "--no-audit",
        "--no-fund",
        "--no-update-notifier",
        "--loglevel=error",
        spec,
      ], { ...Deno.env.toObject(), npm_config_update_notifier: "false" });
    } catch (error) {
      throw new CliUnavailableError(
        `cannot run npm to install ${spec}: ${(error as Error).message}`,
      );
    }
    if (result.code !== 0) {
      // npm's most telling lines: the error code, then the message (not its stack or log path).
      const lines = result.stderr.split("\n").map((line) =>
        line.replace(/^npm error\s*/, "").trim()
      )
        .filter((line) =>
          line && !/^at |complete log of this run|^\{|^\}|^(syscall|errno) /.test(line)
        );
      const why = lines.slice(0, 2).join(": ").slice(0, 300);
      throw new CliUnavailableError(`npm install ${spec} failed (exit ${result.code}): ${why}`);
    }
    if (!isFile(`${staging}/${adapter.bin}`)) {
      throw new CliUnavailableError(
        `npm install ${spec} left no ${adapter.bin} (no build for ${Deno.build.os}-${Deno.build.arch}?)`,
      );
    }
    await adapter.postInstall?.(staging);
    try {
      await Deno.rename(staging, prefix);
    } catch (error) {
      // Another installer finished first: use theirs.
      if (!isFile(bin)) throw error;
      return { prefix, bin, installed: false };
    }
    return { prefix, bin, installed: true };
  } finally {
    await Deno.remove(staging, { recursive: true }).catch(() => {});
  }
}

// `deno run -A lib/harness/cli/install.ts [name…]`: warm the cache (all four by default), e.g.
// before sandboxed runs, where npm is out of reach.
if (import.meta.main) {
  const { parseArgs } = await import("node:util");
  const { CLI_ADAPTERS, cliAdapter } = await import("./registry.ts");
  let adapters: CliAdapter[];
  try {
    // No flags: a mistyped flag or name is refused before anything is installed.
    const { positionals } = parseArgs({ args: Deno.args, allowPositionals: true, strict: true });
    adapters = (positionals.length ? positionals : Object.keys(CLI_ADAPTERS)).map(cliAdapter);
  } catch (error) {
    console.error(`install: ${(error as Error).message}`);
    Deno.exit(2);
  }
  let failed = false;
  await Promise.all(adapters.map(async (adapter) => {
    const name = adapter.name;
    try {
      const started = performance.now();
      const cli = await ensureCli(adapter);
      const took = ((performance.now() - started) / 1000).toFixed(1);
      console.log(`${name}: ${cli.installed ? `installed in ${took} s` : "cached"} ${cli.bin}`);
    } catch (error) {
      failed = true;
      console.log(`${name}: ${(error as Error).message}`);
    }
  }));
  Deno.exit(failed ? 1 : 0);
}
