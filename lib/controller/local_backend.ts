/**
 * The local backend: a process pool on this machine.
 *
 * Each attempt runs in its own session (`setsid`), so a timeout kills the whole process group.
 * A tiny `sh` wrapper (the group leader) redirects stdout/stderr to files in the attempt's
 * directory and writes the exit code to a file, so that output and exit status survive a
 * controller crash; a per-attempt `state.json` (pid + the kernel's start time of that pid) lets
 * a restarted controller re-adopt the still-running process, or report the one that ended.
 *
 * Layout under `root`: `attempts/<attempt_id>/{state.json, input.json, stdout.log, stderr.log,
 * exit_code, work/, private/, verify/}`.
 *
 * @module
 */
import {
  type JsonObject,
  type LocalHarness,
  LocalHarnessSchema,
  type Rollout,
  type SandboxStages,
  ValidationError,
} from "../schema.ts";
import { parseOrThrow } from "../schema.ts";
import type {
  AttemptHandle,
  AttemptOutcome,
  AttemptSpec,
  ExecutionBackend,
  LogChunk,
} from "./backend.ts";
import { SpecError } from "./backend.ts";
import { buildVerifyTree, type RewardFunction, runRewardHook } from "./reward_hooks.ts";
import {
  openRelays,
  prepareSandbox,
  type Relays,
  type RelaySpec,
  SandboxUnavailableError,
} from "./sandbox.ts";

/** Turns a harness spec with another name than `command` into a runnable local harness. */
export type HarnessResolver = (options: JsonObject, rollout: Rollout) => unknown;

/** Options of {@link LocalBackend}. */
export interface LocalBackendOptions {
  /** Directory for attempt state and workdirs (kept across controller restarts). */
  root: string;
  /** Harness names besides the built-in `command`. */
  harnesses?: Record<string, HarnessResolver>;
  /** Reward functions a harness's `reward.function` may name. */
  rewardFunctions?: Record<string, RewardFunction>;
  /** Keep each attempt's directory after it is released (debugging). */
  keepWorkdirs?: boolean;
  /** How often output files are read and adopted processes are checked (default 100 ms). */
  pollMs?: number;
  /** The bubblewrap binary for sandboxed harnesses (default `bwrap` on PATH). */
  bwrap?: string;
}

interface AttemptState {
  rollout_id: string;
  attempt_id: string;
  pid: number;
  /** Field 22 of /proc/<pid>/stat: distinguishes our process from a later one with its pid. */
  proc_start: string;
  started_at: number;
  deadline_at: number;
  harness: LocalHarness;
  stages: SandboxStages | null;
  relays: RelaySpec[];
  socket_dir: string | null;
  command_log: string | null;
}

interface Running {
  state: AttemptState;
  dir: string;
  killed: { status: "cancelled" | "lost" | "timeout"; reason: string } | null;
  exited: Promise<void>;
  handle: AttemptHandle;
  /** Stops this process's watchers of the attempt (it keeps running: detach). */
  detach: () => void;
}

/**
 * The attempt's session leader. Its watchdog enforces the deadline even when no controller is
 * alive (the controller's own timer normally fires first), and the final `kill 0` takes down
 * whatever the harness left running in its group, watchdog included.
 */
const WRAPPER = "o=$1; e=$2; x=$3; t=$4; shift 4; " +
  '( sleep "$t"; echo timeout >"$x.timeout"; kill -KILL 0 ) & ' +
  '"$@" >"$o" 2>"$e" </dev/null; ' +
  'echo $? >"$x.tmp" && mv "$x.tmp" "$x"; kill -KILL 0';

/** Inherited variables that must not leak from the controller into a harness. */
const SCRUBBED = /^(REINS_|OPENAI_|ANTHROPIC_|GATEWAY_)/;

function procStart(pid: number): string | null {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    // The command name (field 2) may hold spaces; fields restart after the last ')'.
    const rest = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    if (rest[0] === "Z" || rest[0] === "X") return null;
    return rest[19] ?? null;
  } catch {
    return null;
  }
}

function isSameProcess(pid: number, start: string): boolean {
  return procStart(pid) === start;
}

function killGroup(pid: number): void {
  try {
    Deno.kill(-pid, "SIGKILL");
  } catch { /* already gone */ }
}

function readExitCode(dir: string): number | null {
  try {
    const text = Deno.readTextFileSync(`${dir}/exit_code`).trim();
    return /^\d+$/.test(text) ? Number(text) : null;
  } catch {
    return null;
  }
}

/**
 * Resolves a rollout's harness spec into a runnable local harness or throws a {@link SpecError}
 * naming the field.
 *
 * @example
 * ```ts
 * import { resolveLocalHarness } from "./local_backend.ts";
 * const rollout = { config: { harness: { name: "command", options: { command: ["true"] } } } };
 * // deno-lint-ignore no-explicit-any
 * resolveLocalHarness(rollout as any, {}).command; // ["true"]
 * ```
 */
export function resolveLocalHarness(
  rollout: Rollout,
  harnesses: Record<string, HarnessResolver>,
): LocalHarness {
  const spec = rollout.config.harness;
  if (!spec) throw new SpecError("config.harness", "is required by the local backend");
  let raw: unknown = spec.options;
  if (spec.name !== "command") {
    const resolver = harnesses[spec.name];
    if (!resolver) {
      const known = ["command", ...Object.keys(harnesses)].join(", ");
      throw new SpecError(
        "config.harness.name",
        `unknown harness "${spec.name}" (known: ${known})`,
      );
    }
    try {
      raw = resolver(spec.options ?? {}, rollout);
    } catch (error) {
      throw new SpecError(
        "config.harness.options",
        error instanceof Error ? error.message : String(error),
      );
    }
  }
  try {
    return parseOrThrow(LocalHarnessSchema, raw, "config.harness.options");
  } catch (error) {
    if (error instanceof ValidationError) throw new SpecError(error.field, error.message);
    throw error;
  }
}

/**
 * Runs attempts as local process groups.
 *
 * @example
 * ```ts
 * import { LocalBackend } from "./local_backend.ts";
 * const backend = new LocalBackend({ root: "/var/lib/reins/controller" }); // touches no file yet
 * backend.name; // "local"
 * ```
 */
export class LocalBackend implements ExecutionBackend {
  readonly name = "local";
  readonly #root: string;
  readonly #harnesses: Record<string, HarnessResolver>;
  readonly #rewardFunctions: Record<string, RewardFunction>;
  readonly #keep: boolean;
  readonly #pollMs: number;
  readonly #bwrap: string;
  readonly #running = new Map<string, Running>();

  constructor(options: LocalBackendOptions) {
    this.#root = options.root;
    this.#harnesses = options.harnesses ?? {};
    this.#rewardFunctions = options.rewardFunctions ?? {};
    this.#keep = options.keepWorkdirs ?? false;
    this.#pollMs = options.pollMs ?? 100;
    this.#bwrap = options.bwrap ?? "bwrap";
  }

  #dir(attemptId: string): string {
    return `${this.#root}/attempts/${attemptId}`;
  }

  async start(spec: AttemptSpec): Promise<AttemptHandle> {
    const { rollout, attempt } = spec;
    const harness = resolveLocalHarness(rollout, this.#harnesses);
    if (harness.workspace) {
      try {
        if (!Deno.statSync(harness.workspace).isDirectory) throw new Error("not a directory");
      } catch (error) {
        throw new SpecError(
          "config.harness.options.workspace",
          `${harness.workspace} is not a readable directory (${(error as Error).message})`,
        );
      }
    }
    const dir = this.#dir(attempt.attempt_id);
    const work = `${dir}/work`;
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    await Deno.mkdir(work, { recursive: true });
    if (harness.workspace) {
      const out = await new Deno.Command("cp", {
        args: ["-a", `${harness.workspace}/.`, work],
        stderr: "piped",
      }).output();
      if (!out.success) {
        throw new SpecError(
          "config.harness.options.workspace",
          `copy failed: ${new TextDecoder().decode(out.stderr).trim()}`,
        );
      }
    }
    const inputFile = `${dir}/input.json`;
    await Deno.writeTextFile(inputFile, JSON.stringify(rollout.input));
    for (const name of ["stdout.log", "stderr.log"]) await Deno.writeTextFile(`${dir}/${name}`, "");

    const inherited = Object.fromEntries(
      Object.entries(Deno.env.toObject()).filter(([key]) => !SCRUBBED.test(key)),
    );
    let env: Record<string, string> = { ...inherited, ...harness.env };
    let argv = harness.command;
    let gatewayUrl = spec.gatewayUrl.replace(/\/$/, "");
    let stages: SandboxStages | null = null;
    let relays: RelaySpec[] = [];
    let socketDir: string | null = null;
    let commandLog: string | null = null;
    if (harness.sandbox.enabled) {
      // Unix socket paths are limited to 108 bytes: keep them short, under the temp dir.
      if (harness.sandbox.network === "proxy_only") {
        socketDir = await Deno.makeTempDir({ prefix: "rs-" });
      }
      try {
        const box = await prepareSandbox({
          options: harness.sandbox,
          workDir: work,
          privateDir: `${dir}/private`,
          socketDir: socketDir ?? `${dir}/private/sockets`,
          hide: [this.#root, ...(harness.workspace ? [harness.workspace] : [])],
          gatewayUrl,
          argv,
          env,
          bwrap: this.#bwrap,
          inputFile,
        });
        argv = box.argv;
        env = box.env;
        gatewayUrl = box.gatewayUrl;
        stages = box.stages;
        relays = box.relays;
        commandLog = box.commandLog;
      } catch (error) {
        if (socketDir) await Deno.remove(socketDir, { recursive: true }).catch(() => {});
        if (error instanceof SandboxUnavailableError) {
          throw new SpecError("config.harness.options.sandbox", error.message);
        }
        throw error;
      }
    }
    const proxy = `${gatewayUrl}/proxy/${rollout.rollout_id}/${attempt.attempt_id}`;
    Object.assign(env, {
      OPENAI_BASE_URL: `${proxy}/v1`,
      ANTHROPIC_BASE_URL: proxy,
      OPENAI_API_KEY: spec.token,
      ANTHROPIC_API_KEY: spec.token,
      REINS_ROLLOUT_ID: rollout.rollout_id,
      REINS_ATTEMPT_ID: attempt.attempt_id,
      REINS_GATEWAY_URL: gatewayUrl,
      REINS_INPUT_FILE: env.REINS_INPUT_FILE ?? inputFile,
      REINS_WORKDIR: work,
    });
    const opened = relays.length > 0 ? openRelays(relays) : null;
    let child: Deno.ChildProcess;
    try {
      child = new Deno.Command("setsid", {
        args: [
          "sh",
          "-c",
          WRAPPER,
          "reins-attempt",
          `${dir}/stdout.log`,
          `${dir}/stderr.log`,
          `${dir}/exit_code`,
          String(rollout.config.timeout_s),
          ...argv,
        ],
        cwd: work,
        env,
        clearEnv: true,
        stdin: "null",
        stdout: "null",
        stderr: "null",
      }).spawn();
    } catch (error) {
      await opened?.close();
      throw new SpecError("config.harness.options.command", (error as Error).message);
    }
    const state: AttemptState = {
      rollout_id: rollout.rollout_id,
      attempt_id: attempt.attempt_id,
      pid: child.pid,
      proc_start: procStart(child.pid) ?? "",
      started_at: Date.now(),
      deadline_at: Date.now() + rollout.config.timeout_s * 1000,
      harness,
      stages,
      relays,
      socket_dir: socketDir,
      command_log: commandLog,
    };
    await Deno.writeTextFile(`${dir}/state.tmp`, JSON.stringify(state));
    await Deno.rename(`${dir}/state.tmp`, `${dir}/state.json`);
    const exited = child.status.then(() => {});
    const handle = this.#watch(spec, state, dir, exited, opened);
    const running = this.#running.get(attempt.attempt_id)!;
    const detachWatchers = running.detach;
    running.detach = () => {
      detachWatchers();
      child.unref();
    };
    return handle;
  }

  async adopt(spec: AttemptSpec): Promise<AttemptHandle | AttemptOutcome | null> {
    const dir = this.#dir(spec.attempt.attempt_id);
    const current = this.#running.get(spec.attempt.attempt_id);
    if (current) return current.handle;
    let state: AttemptState;
    try {
      state = JSON.parse(await Deno.readTextFile(`${dir}/state.json`));
    } catch {
      return null;
    }
    if (
      readExitCode(dir) === null && state.proc_start && isSameProcess(state.pid, state.proc_start)
    ) {
      const opened = state.relays.length > 0 ? openRelays(state.relays) : null;
      const poll = this.#pollExit(state);
      const handle = this.#watch(spec, state, dir, poll.exited, opened);
      handle.info.adopted = true;
      const running = this.#running.get(state.attempt_id)!;
      const detachWatchers = running.detach;
      running.detach = () => {
        detachWatchers();
        poll.stop();
      };
      return handle;
    }
    const offsets = { stdout: spec.resume?.stdout ?? 0, stderr: spec.resume?.stderr ?? 0 };
    this.#streamLogs(dir, spec.log, offsets, true);
    return await this.#finish(spec.rollout, state, dir, null, spec.log);
  }

  async kill(attemptId: string, status: "cancelled" | "lost" | "timeout", reason: string) {
    const running = this.#running.get(attemptId);
    if (running) {
      running.killed ??= { status, reason };
      killGroup(running.state.pid);
      await running.exited;
      return;
    }
    // An orphan from before a restart: kill it only if the pid is still that process.
    try {
      const state: AttemptState = JSON.parse(
        await Deno.readTextFile(`${this.#dir(attemptId)}/state.json`),
      );
      if (state.proc_start && isSameProcess(state.pid, state.proc_start)) killGroup(state.pid);
    } catch { /* nothing known */ }
  }

  async known(): Promise<Array<{ rollout_id: string; attempt_id: string }>> {
    const out: Array<{ rollout_id: string; attempt_id: string }> = [];
    try {
      for await (const entry of Deno.readDir(`${this.#root}/attempts`)) {
        try {
          const state: AttemptState = JSON.parse(
            await Deno.readTextFile(`${this.#root}/attempts/${entry.name}/state.json`),
          );
          out.push({ rollout_id: state.rollout_id, attempt_id: state.attempt_id });
        } catch { /* half-written attempt dir: released below by the reconciler */ }
      }
    } catch { /* no attempts yet */ }
    return out;
  }

  async release(attemptId: string): Promise<void> {
    const dir = this.#dir(attemptId);
    try {
      const state: AttemptState = JSON.parse(await Deno.readTextFile(`${dir}/state.json`));
      if (state.socket_dir) {
        await Deno.remove(state.socket_dir, { recursive: true }).catch(() => {});
      }
    } catch { /* no state */ }
    if (this.#keep) {
      await Deno.rename(`${dir}/state.json`, `${dir}/state.released.json`).catch(() => {});
    } else {
      await Deno.remove(dir, { recursive: true }).catch(() => {});
    }
  }

  close(): Promise<void> {
    // Running attempts keep running (a restarted controller adopts them); only watchers stop.
    for (const running of this.#running.values()) running.detach();
    return Promise.resolve();
  }

  /** Waits for a process that is not our child (adopted after a restart). */
  #pollExit(state: AttemptState): { exited: Promise<void>; stop: () => void } {
    let timer: ReturnType<typeof setInterval> | undefined;
    const exited = new Promise<void>((resolve) => {
      timer = setInterval(() => {
        if (!isSameProcess(state.pid, state.proc_start)) {
          clearInterval(timer);
          resolve();
        }
      }, this.#pollMs);
    });
    return { exited, stop: () => clearInterval(timer) };
  }

  #streamLogs(
    dir: string,
    sink: (chunk: LogChunk) => void,
    offsets: { stdout: number; stderr: number },
    final: boolean,
    decoders?: { stdout: TextDecoder; stderr: TextDecoder },
  ): void {
    const dec = decoders ?? { stdout: new TextDecoder(), stderr: new TextDecoder() };
    for (const stream of ["stdout", "stderr"] as const) {
      let file: Deno.FsFile;
      try {
        file = Deno.openSync(`${dir}/${stream}.log`, { read: true });
      } catch {
        continue;
      }
      try {
        file.seekSync(offsets[stream], Deno.SeekMode.Start);
        const buffer = new Uint8Array(64 * 1024);
        while (true) {
          const n = file.readSync(buffer);
          if (n === null || n === 0) break;
          const text = dec[stream].decode(buffer.subarray(0, n), { stream: true });
          if (text) sink({ stream, offset: offsets[stream], end: offsets[stream] + n, text });
          offsets[stream] += n;
        }
        if (final) {
          const rest = dec[stream].decode();
          if (rest) sink({ stream, offset: offsets[stream], end: offsets[stream], text: rest });
        }
      } finally {
        file.close();
      }
    }
  }

  #watch(
    spec: AttemptSpec,
    state: AttemptState,
    dir: string,
    exited: Promise<void>,
    relays: Relays | null,
  ): AttemptHandle {
    const offsets = { stdout: spec.resume?.stdout ?? 0, stderr: spec.resume?.stderr ?? 0 };
    const decoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    const tail = setInterval(
      () => this.#streamLogs(dir, spec.log, offsets, false, decoders),
      this.#pollMs,
    );
    const running: Running = {
      state,
      dir,
      killed: null,
      exited,
      handle: undefined as unknown as AttemptHandle,
      detach: () => {},
    };
    const deadline = setTimeout(() => {
      running.killed ??= {
        status: "timeout",
        reason: `timed out after ${spec.rollout.config.timeout_s}s`,
      };
      killGroup(state.pid);
    }, Math.max(0, state.deadline_at - Date.now()));
    let stopPolling: () => void = () => {};
    const detached = new Promise<"detached">((resolve) => stopPolling = () => resolve("detached"));
    running.detach = () => {
      clearTimeout(deadline);
      clearInterval(tail);
      stopPolling();
      void relays?.close();
    };
    const done = (async () => {
      if (await Promise.race([exited.then(() => "exited" as const), detached]) === "detached") {
        // Never settles: the attempt now belongs to whichever controller adopts it.
        return await new Promise<AttemptOutcome>(() => {});
      }
      clearTimeout(deadline);
      clearInterval(tail);
      this.#streamLogs(dir, spec.log, offsets, true, decoders);
      await relays?.close();
      if (state.socket_dir) {
        await Deno.remove(state.socket_dir, { recursive: true }).catch(() => {});
      }
      // Children the harness left behind must not outlive the attempt.
      killGroup(state.pid);
      const outcome = await this.#finish(spec.rollout, state, dir, running.killed, spec.log);
      this.#running.delete(state.attempt_id);
      return outcome;
    })();
    running.handle = {
      rollout_id: state.rollout_id,
      attempt_id: state.attempt_id,
      info: { backend: "local", pid: state.pid, workdir: `${dir}/work` },
      done,
    };
    this.#running.set(state.attempt_id, running);
    return running.handle;
  }

  async #finish(
    rollout: Rollout,
    state: AttemptState,
    dir: string,
    killed: Running["killed"],
    log?: (chunk: LogChunk) => void,
  ): Promise<AttemptOutcome> {
    const info: JsonObject = { backend: "local", pid: state.pid, workdir: `${dir}/work` };
    const stages: SandboxStages = state.stages
      ? structuredClone(state.stages)
      : { requested: [], applied: [], skipped: {} };
    if (state.command_log) {
      try {
        const commands = (await Deno.readTextFile(`${dir}/private/commands.log`)).split("\n")
          .filter((line) => line.length > 0).map((line) => line.slice(line.indexOf("\t") + 1));
        info.commands = commands.slice(-500);
        const flags: string[] = [];
        if (commands.some((c) => /(^|[\s;&|(])git(\s|$)/.test(c))) flags.push("git_attempt");
        if (commands.some((c) => /\b(curl|wget|nc|ssh)\b/.test(c))) flags.push("network_attempt");
        info.flags = flags;
        if (commands.length > 0 && log) {
          const text = commands.map((c) => `$ ${c}`).join("\n");
          log({ stream: "system", offset: 0, end: 0, text });
        }
      } catch { /* no commands logged */ }
    }
    const outcome = (
      status: AttemptOutcome["status"],
      exit: number | null,
      error: string | null,
    ) => {
      if (state.stages || state.harness.reward) info.sandbox_stages = stages;
      return { status, exit_code: exit, error, reward: null, info } satisfies AttemptOutcome;
    };
    if (killed) return outcome(killed.status, null, killed.reason);
    const code = readExitCode(dir);
    if (code === null) {
      try {
        Deno.statSync(`${dir}/exit_code.timeout`);
        return outcome("timeout", null, `timed out after ${rollout.config.timeout_s}s (watchdog)`);
      } catch { /* no watchdog verdict either */ }
      return outcome("lost", null, "the attempt's process ended without an exit status");
    }
    if (code !== 0) {
      const error = code > 128
        ? `harness killed by signal ${code - 128} (exit status ${code})`
        : code === 127
        ? `harness command not found: ${JSON.stringify(state.harness.command[0])} (exit code 127)`
        : `harness exited with code ${code}`;
      return outcome("failed", code, error);
    }
    const hook = state.harness.reward;
    if (!hook) return outcome("succeeded", 0, null);
    let verifyDir = `${dir}/work`;
    let edited: string[] = [];
    try {
      stages.requested.push("after:verify_outside_sandbox");
      if (state.harness.workspace) {
        stages.requested.push("after:verify_restored");
        verifyDir = `${dir}/verify`;
        const tree = await buildVerifyTree(
          `${dir}/work`,
          state.harness.workspace,
          verifyDir,
          hook.restore,
        );
        edited = tree.edited;
        info.verification = { restored: tree.restored, edited };
        stages.applied.push("after:verify_restored");
      } else if (hook.restore.length > 0) {
        stages.skipped["after:verify_restored"] = "no workspace to restore from";
      }
      const result = await runRewardHook(
        hook,
        { rollout, attempt_id: state.attempt_id, dir: verifyDir, exit_code: 0, edited },
        this.#rewardFunctions,
        {
          ...Object.fromEntries(
            Object.entries(Deno.env.toObject()).filter(([key]) => !SCRUBBED.test(key)),
          ),
          REINS_ROLLOUT_ID: rollout.rollout_id,
          REINS_ATTEMPT_ID: state.attempt_id,
          REINS_INPUT_FILE: `${dir}/input.json`,
          REINS_WORKDIR: verifyDir,
        },
      );
      stages.applied.push("after:verify_outside_sandbox");
      let value = result.value;
      if (edited.length > 0) {
        info.flags = [...((info.flags as string[] | undefined) ?? []), "edited_tests"];
        if (hook.edited_restore_reward !== null) value = hook.edited_restore_reward;
      }
      info.reward_hook = result.info;
      const done = outcome("succeeded", 0, null);
      return { ...done, reward: value };
    } catch (error) {
      return outcome("failed", 0, `reward hook: ${(error as Error).message}`);
    }
  }
}
