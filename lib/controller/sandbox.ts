/**
 * Stage-wise sandbox for the local backend, built on bubblewrap (`bwrap`).
 *
 * Before the agent runs:
 * - `before:hide_git`: an empty tmpfs is mounted over the workspace's `.git`, and the
 *   controller's state directory and the pristine workspace copy are hidden behind tmpfs too, so
 *   no history or answer is readable;
 * - `before:disable_git`: every `git` binary is replaced by `/dev/null` (not executable), the
 *   `git-core` helpers are hidden, a `git` shim that fails loudly comes first on `PATH`, and
 *   `GIT_DIR=/nonexistent`, `GIT_CEILING_DIRECTORIES=/`;
 * - `before:hide_paths`: every path of `options.hide` (datasets holding answers or hidden tests)
 *   is masked: an empty tmpfs over a directory, `/dev/null` over a file (on a `nodev` mount, so
 *   reading it fails with "permission denied");
 * - `before:network_proxy_only`: `--unshare-net` leaves the agent only its own loopback; the
 *   first process inside ({@link ./sandbox_entry.ts}) listens on `127.0.0.1:<gateway port>`
 *   (and on each allow-listed port) and relays to a Unix socket bind-mounted from the
 *   controller, which relays to the real gateway.
 *
 * During: `during:command_log` sets `BASH_ENV` to a DEBUG trap so every command a non-interactive
 * `bash` runs is appended to a log outside the agent's tree (commands run by `sh`/dash or exec'd
 * directly are not seen; that is recorded as a limit, not hidden).
 *
 * After: verification (restore the pristine tests and `.git`, run the reward command outside the
 * sandbox) lives in the local backend, which records `after:verify_restored`.
 *
 * @module
 */
import { resolve } from "node:path";
import { fileURLToPath } from "node:url";
import type { SandboxOptions, SandboxStages } from "./schema.ts";
import { pathExists } from "./host_paths.ts";
import { bindArgs, invisibleBecause, probeVisible, sourceMounts } from "./sandbox_mounts.ts";
import type { RelaySpec } from "./sandbox_relays.ts";

export { openRelays, type Relays, type RelaySpec } from "./sandbox_relays.ts";
export { REINS_SOURCE_ROOT } from "./sandbox_mounts.ts";

/** What the host can do, probed once. */
export interface SandboxSupport {
  bwrap: boolean;
  /** Whether a network namespace can be created (`--unshare-net`). */
  net: boolean;
  /** Why something is unavailable. */
  reason: string | null;
}

const probed = new Map<string, Promise<SandboxSupport>>();

async function runs(cmd: string, args: string[]): Promise<{ ok: boolean; err: string }> {
  try {
    const out = await new Deno.Command(cmd, { args, stdout: "null", stderr: "piped" }).output();
    return { ok: out.success, err: new TextDecoder().decode(out.stderr).trim() };
  } catch (error) {
    return { ok: false, err: error instanceof Error ? error.message : String(error) };
  }
}

/**
 * Finds out whether bubblewrap runs here and may create a network namespace (cached).
 *
 * @example
 * ```ts
 * import { probeSandbox } from "./sandbox.ts";
 * const support = await probeSandbox();
 * if (!support.bwrap) console.log(support.reason);
 * ```
 */
export function probeSandbox(bwrap = "bwrap"): Promise<SandboxSupport> {
  const cached = probed.get(bwrap);
  if (cached) return cached;
  const probe = (async (): Promise<SandboxSupport> => {
    const base = ["--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--unshare-pid"];
    const plain = await runs(bwrap, [...base, "true"]);
    if (!plain.ok) return { bwrap: false, net: false, reason: `bwrap unusable: ${plain.err}` };
    const net = await runs(bwrap, [...base, "--unshare-net", "true"]);
    return {
      bwrap: true,
      net: net.ok,
      reason: net.ok ? null : `bwrap --unshare-net failed: ${net.err}`,
    };
  })();
  probed.set(bwrap, probe);
  return probe;
}

/** Raised when `strict` is set and a requested stage cannot be applied. */
export class SandboxUnavailableError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "SandboxUnavailableError";
  }
}

/** What the local backend hands the sandbox. */
export interface SandboxRequest {
  options: SandboxOptions;
  /** The agent's tree: the only writable place inside (besides a private /tmp). */
  workDir: string;
  /** A private directory of this attempt outside the agent's tree (shim, command log). */
  privateDir: string;
  /** A short directory for Unix sockets (paths are limited to 108 bytes). */
  socketDir: string;
  /** Host paths the agent must not see (controller state, pristine workspace). */
  hide: string[];
  gatewayUrl: string;
  argv: string[];
  env: Record<string, string>;
  /** The bubblewrap binary (default `bwrap` on PATH). */
  bwrap?: string;
  /** The task input file; bound read-only at `/tmp/.reins-input.json` inside. */
  inputFile?: string;
}

/** A sandbox ready to run: the argv to spawn, its env, and the relays to stop afterwards. */
export interface PreparedSandbox {
  /** The host paths masked by `before:hide_paths` (resolved; missing ones left out). */
  hidden: string[];
  argv: string[];
  env: Record<string, string>;
  /** The gateway URL as seen from inside (the forwarder's address). */
  gatewayUrl: string;
  stages: SandboxStages;
  /** Where the command log is written, when that stage applied. */
  commandLog: string | null;
  /** Forwards to serve with {@link openRelays} while the attempt runs. */
  relays: RelaySpec[];
}

const GIT_SHIM = `#!/bin/sh
echo "git is disabled in the reins sandbox" >&2
exit 128
`;

const BASH_TRAP = `# reins command log (BASH_ENV): one line per simple command.
if [ -n "$REINS_COMMAND_LOG" ]; then
  trap 'printf "%s\\t%s\\n" "$$" "$BASH_COMMAND" >> "$REINS_COMMAND_LOG" 2>/dev/null' DEBUG
fi
`;

async function gitBinaries(): Promise<string[]> {
  const found = new Set<string>();
  for (const dir of ["/usr/local/bin", "/usr/bin", "/bin", "/usr/local/sbin", "/usr/sbin"]) {
    try {
      found.add(await Deno.realPath(`${dir}/git`));
    } catch { /* not there */ }
  }
  return [...found];
}

/** The `hide` paths sorted by how they are masked (see {@link resolveHidden}). */
export interface HiddenPaths {
  /** Directories (an empty tmpfs over each). */
  dirs: string[];
  /** Files and other non-directories (`/dev/null` bound over each). */
  files: string[];
  /** Requested paths that do not exist (nothing to hide). */
  missing: string[];
  /** Why the stage cannot be applied, or null. */
  error: string | null;
}

/**
 * Resolves `options.hide`: relative paths against the controller's working directory, symlinks
 * to their targets (masking the target hides the link too). A missing path is not an error
 * (there is nothing to read); `/` and the agent's own tree cannot be hidden (a directory that
 * holds the tree can: the tree is bound back on top of the mask).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { resolveHidden } from "./sandbox.ts";
 * const hidden = resolveHidden(["data/envs/coding", "/etc/hostname"], "/tmp/a/work");
 * assert.deepEqual(hidden.files, ["/etc/hostname"]);
 * // Relative paths resolve from the working directory.
 * assert.deepEqual(hidden.dirs, [`${Deno.cwd()}/data/envs/coding`]);
 * ```
 */
export function resolveHidden(paths: string[], workDir: string): HiddenPaths {
  const out: HiddenPaths = { dirs: [], files: [], missing: [], error: null };
  let work = resolve(workDir);
  try {
    work = Deno.realPathSync(work);
  } catch { /* not created yet: compare as given */ }
  for (const path of paths) {
    const absolute = resolve(path);
    let real: string;
    let isDir: boolean;
    try {
      real = Deno.realPathSync(absolute);
      isDir = Deno.statSync(real).isDirectory;
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) {
        out.missing.push(absolute);
        continue;
      }
      out.error = `cannot resolve ${absolute}: ${(error as Error).message}`;
      return out;
    }
    if (real === "/") {
      out.error = `refusing to hide ${absolute}: it is the root directory`;
      return out;
    }
    if (real === work) {
      out.error = `refusing to hide ${absolute}: it is the agent's working directory`;
      return out;
    }
    (isDir ? out.dirs : out.files).push(real);
  }
  return out;
}

function defaultPort(url: URL): number {
  if (url.port) return Number(url.port);
  return url.protocol === "https:" ? 443 : 80;
}

/**
 * The bubblewrap arguments of the filesystem every sandboxed process sees: the host's root
 * read-only, with a fresh `/dev`, `/proc` and an empty `/tmp`.
 */
export const READONLY_ROOT_ARGS: readonly string[] = [
  "--ro-bind",
  "/",
  "/",
  "--dev",
  "/dev",
  "--proc",
  "/proc",
  "--tmpfs",
  "/tmp",
];

/** The sandbox's first process when network forwards are needed ({@link ./sandbox_entry.ts}). */
const SANDBOX_ENTRY = fileURLToPath(new URL("./sandbox_entry.ts", import.meta.url));

/**
 * The start-up probe: every host path the command needs must be readable inside, else the
 * attempt is refused with the path and the reason (instead of a `Module not found` from inside).
 */
async function checkVisible(
  bwrap: string,
  args: string[],
  needed: string[],
  hidden: string[],
): Promise<void> {
  if (needed.length === 0) return;
  const { missing, error } = await probeVisible(bwrap, args, needed);
  if (error) {
    throw new SandboxUnavailableError(`sandbox start-up probe failed (bwrap: ${error})`);
  }
  if (missing.length > 0) {
    const why = missing.map((p) => `${p}: ${invisibleBecause(p, hidden)}`).join("; ");
    throw new SandboxUnavailableError(
      `the sandboxed command needs host paths it cannot read inside the sandbox: ${why}`,
    );
  }
}

/**
 * Wraps a harness command in bubblewrap with the requested stages. Stages that cannot be
 * applied are listed in `stages.skipped` with the reason; with `options.strict` that throws
 * {@link SandboxUnavailableError} instead.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openRelays, prepareSandbox } from "./sandbox.ts";
 * const root = await Deno.makeTempDir();
 * const box = await prepareSandbox({
 *   options: { enabled: true, strict: false, hide_git: true, network: "proxy_only", allow: [],
 *     command_log: true, hide: ["data/envs/coding/tasks.jsonl"] },
 *   workDir: `${root}/work`, privateDir: `${root}/private`, socketDir: root, hide: [],
 *   gatewayUrl: "http://127.0.0.1:8080", argv: ["bash", "-c", "git log"], env: {},
 * });
 * // Stages that cannot be applied here are listed in box.stages.skipped.
 * assert.equal(box.stages.requested.length, 5);
 * const relays = openRelays(box.relays);
 * // spawn box.argv with box.env, wait, then:
 * await relays.close();
 * await Deno.remove(root, { recursive: true });
 * ```
 */
export async function prepareSandbox(req: SandboxRequest): Promise<PreparedSandbox> {
  const { options } = req;
  const requested: string[] = [];
  if (options.hide_git) requested.push("before:hide_git", "before:disable_git");
  if (options.hide.length > 0) requested.push("before:hide_paths");
  if (options.network === "proxy_only") requested.push("before:network_proxy_only");
  if (options.command_log) requested.push("during:command_log");
  const applied: string[] = [];
  const skipped: Record<string, string> = {};
  const bwrap = req.bwrap ?? "bwrap";
  const support = await probeSandbox(bwrap);
  const refuse = (stage: string, reason: string) => {
    skipped[stage] = reason;
    if (options.strict) {
      throw new SandboxUnavailableError(`sandbox stage ${stage} cannot be applied: ${reason}`);
    }
  };
  if (!support.bwrap) {
    for (const stage of requested) refuse(stage, support.reason ?? "bwrap unavailable");
    return {
      hidden: [],
      argv: req.argv,
      env: req.env,
      gatewayUrl: req.gatewayUrl,
      stages: { requested, applied, skipped },
      commandLog: null,
      relays: [],
    };
  }

  await Deno.mkdir(req.privateDir, { recursive: true });
  const args = [
    "--die-with-parent",
    "--unshare-pid",
    "--unshare-ipc",
    "--unshare-uts",
    ...READONLY_ROOT_ARGS,
  ];
  // What the process reads from the host (the reins source, Deno, its command line's files) is
  // bound back when it lies under the private /tmp; masks below still cover what must be hidden.
  const forwarding = options.network === "proxy_only" && support.net;
  const own = [
    req.workDir,
    req.privateDir,
    req.socketDir,
    ...(req.inputFile ? [req.inputFile] : []),
  ];
  const mounts = sourceMounts({
    argv: req.argv,
    env: req.env,
    own,
    extra: forwarding ? [Deno.execPath(), SANDBOX_ENTRY] : [],
  });
  args.push(...bindArgs(mounts.binds));
  for (const path of req.hide) if (pathExists(path)) args.push("--tmpfs", path);
  // Masks go on before the agent's tree is bound (a hidden directory holding the tree gets it
  // back on top), except masks inside the tree, which must come after to cover it.
  const hidden = options.hide.length > 0 ? resolveHidden(options.hide, req.workDir) : null;
  let work = req.workDir;
  try {
    work = Deno.realPathSync(req.workDir);
  } catch { /* compare as given */ }
  const inside = (p: string) => p.startsWith(`${work}/`);
  const mask = (keep: (p: string) => boolean) => {
    for (const dir of hidden?.dirs ?? []) if (keep(dir)) args.push("--tmpfs", dir);
    for (const file of hidden?.files ?? []) {
      if (keep(file)) args.push("--ro-bind", "/dev/null", file);
    }
  };
  if (hidden?.error) refuse("before:hide_paths", hidden.error);
  else if (hidden) mask((p) => !inside(p));
  // The mounts up to here decide what the command sees of the host (the probe checks them once).
  const layout = [...args];
  args.push("--bind", req.workDir, req.workDir);
  if (hidden && !hidden.error) mask(inside);
  // Harness CLIs write config under HOME; the root is read-only, so each attempt gets its own.
  const home = `${req.privateDir}/home`;
  await Deno.mkdir(home, { recursive: true });
  args.push("--bind", home, home);
  const env: Record<string, string> = { ...req.env, HOME: home, TMPDIR: "/tmp" };
  let path = env.PATH ?? Deno.env.get("PATH") ?? "/usr/bin:/bin";
  let gatewayUrl = req.gatewayUrl;
  const relays: RelaySpec[] = [];
  const forwards: string[] = [];

  if (options.hide_git) {
    const dotGit = `${req.workDir}/.git`;
    if (pathExists(dotGit)) args.push("--tmpfs", dotGit);
    applied.push("before:hide_git");
    const shimDir = `${req.privateDir}/shim`;
    await Deno.mkdir(shimDir, { recursive: true });
    await Deno.writeTextFile(`${shimDir}/git`, GIT_SHIM, { mode: 0o755 });
    for (const binary of await gitBinaries()) args.push("--ro-bind", "/dev/null", binary);
    if (pathExists("/usr/lib/git-core")) args.push("--tmpfs", "/usr/lib/git-core");
    args.push("--ro-bind", shimDir, "/tmp/.reins-shim");
    path = `/tmp/.reins-shim:${path}`;
    env.GIT_DIR = "/nonexistent";
    env.GIT_CEILING_DIRECTORIES = "/";
    applied.push("before:disable_git");
  }
  if (hidden && !hidden.error) applied.push("before:hide_paths");

  if (options.network === "proxy_only") {
    if (!support.net) {
      refuse("before:network_proxy_only", support.reason ?? "no network namespace");
    } else {
      args.push("--unshare-net");
      await Deno.mkdir(req.socketDir, { recursive: true });
      args.push("--bind", req.socketDir, req.socketDir);
      const targets = [req.gatewayUrl, ...options.allow.map((hp) => `tcp://${hp}`)];
      for (const [index, target] of targets.entries()) {
        const url = new URL(target);
        const port = defaultPort(url);
        const hostname = url.hostname.replace(/^\[|\]$/g, "");
        const socket = `${req.socketDir}/f${index}.sock`;
        relays.push({ socket, hostname, port });
        forwards.push("--forward", `${port}=${socket}`);
        if (index === 0) {
          const inside = new URL(req.gatewayUrl);
          inside.hostname = "127.0.0.1";
          gatewayUrl = inside.toString().replace(/\/$/, "");
        }
      }
      applied.push("before:network_proxy_only");
    }
  }

  let commandLog: string | null = null;
  if (options.command_log) {
    const trap = `${req.privateDir}/bash_env.sh`;
    await Deno.writeTextFile(trap, BASH_TRAP);
    commandLog = `${req.privateDir}/commands.log`;
    await Deno.writeTextFile(commandLog, "");
    // The log must be writable from inside but live outside the agent's tree.
    args.push("--ro-bind", trap, "/tmp/.reins-bash-env");
    args.push("--bind", commandLog, "/tmp/.reins-commands.log");
    env.BASH_ENV = "/tmp/.reins-bash-env";
    env.REINS_COMMAND_LOG = "/tmp/.reins-commands.log";
    applied.push("during:command_log");
  }

  env.PATH = path;
  if (req.inputFile) {
    args.push("--ro-bind", req.inputFile, "/tmp/.reins-input.json");
    env.REINS_INPUT_FILE = "/tmp/.reins-input.json";
  }
  args.push("--chdir", req.workDir);
  await checkVisible(bwrap, layout, mounts.needed, [
    ...req.hide,
    ...(hidden && !hidden.error ? [...hidden.dirs, ...hidden.files] : []),
  ]);
  const inner = forwards.length > 0
    ? [
      Deno.execPath(),
      "run",
      "--quiet",
      "--no-lock",
      "--no-config",
      "--allow-net",
      "--allow-read",
      "--allow-write",
      "--allow-run",
      "--allow-env",
      SANDBOX_ENTRY,
      ...forwards,
      "--",
      ...req.argv,
    ]
    : req.argv;
  return {
    hidden: hidden && !hidden.error ? [...hidden.dirs, ...hidden.files] : [],
    argv: [bwrap, ...args, "--", ...inner],
    env,
    gatewayUrl,
    stages: { requested, applied, skipped },
    commandLog,
    relays,
  };
}
