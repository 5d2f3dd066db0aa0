/**
 * The local backend: attempts on this machine, each a process group (optionally in the
 * bubblewrap sandbox) or, for a harness whose runner is `in_process`, a registered function
 * run inside the controller's process (`in_process.ts`).
 *
 * Layout under `root`: `attempts/<attempt_id>/{state.json, input.json, stdout.log, stderr.log,
 * exit_code, work/, private/, verify/}`. The files are the truth a restarted controller reads:
 * it re-adopts a still-running process, reports one that ended, and reports an in-process
 * attempt of a dead controller process `lost`.
 *
 * @module
 */
import type { Rollout } from "../schema.ts";
import type { LocalHarness, SandboxStages } from "./schema.ts";
import type { AttemptHandle, AttemptOutcome, AttemptSpec, ExecutionBackend } from "./backend.ts";
import { attemptEnv, SpecError } from "./backend.ts";
import { type InProcessRunner, type LiveRun, liveRun, startInProcess } from "./in_process.ts";
import { checkRunner, type HarnessResolver, resolveLocalHarness } from "./local_harness.ts";
import { type LogDecoders, type LogOffsets, streamLogs } from "./local_logs.ts";
import { finishAttempt, type KillVerdict } from "./local_outcome.ts";
import {
  type AttemptState,
  isSameProcess,
  killGroup,
  pollUntil,
  procStart,
  readExitCode,
  readState,
  scrubbedEnv,
  spawnAttempt,
  writeState,
} from "./local_process.ts";
import type { RewardFunction } from "./reward_hooks.ts";
import { openRelays, prepareSandbox, type Relays, SandboxUnavailableError } from "./sandbox.ts";

export { type HarnessResolver, resolveLocalHarness } from "./local_harness.ts";
export type { InProcessAttempt, InProcessRunner } from "./in_process.ts";

/** Options of {@link LocalBackend}. */
export interface LocalBackendOptions {
  /** Directory for attempt state and workdirs (kept across controller restarts). */
  root: string;
  /** Harness names besides the built-in `command`. */
  harnesses?: Record<string, HarnessResolver>;
  /** Reward functions a harness's `reward.function` may name. */
  rewardFunctions?: Record<string, RewardFunction>;
  /**
   * Runners a harness with `runner: "in_process"` may name (`in_process.name`), e.g.
   * `{ builtin: runBuiltinInProcess }` from `lib/harness/builtin/in_process.ts`.
   */
  inProcess?: Record<string, InProcessRunner>;
  /** Keep each attempt's directory after it is released (debugging). */
  keepWorkdirs?: boolean;
  /** How often output files are read and adopted processes are checked (default 100 ms). */
  pollMs?: number;
  /** The bubblewrap binary for sandboxed harnesses (default `bwrap` on PATH). */
  bwrap?: string;
}

interface Running {
  state: AttemptState;
  dir: string;
  killed: KillVerdict | null;
  exited: Promise<void>;
  handle: AttemptHandle;
  /** Ends the attempt (its process group, or the in-process runner). */
  stop: (reason: string) => void;
  /** Stops this backend's watchers of the attempt (it keeps running: detach). */
  detach: () => void;
}

/** What starts the attempt once its directory is ready. */
interface Launch {
  argv: string[];
  env: Record<string, string>;
  gatewayUrl: string;
  stages: SandboxStages | null;
  relays: AttemptState["relays"];
  socketDir: string | null;
  commandLog: string | null;
}

/**
 * Runs attempts as local process groups, or in-process through registered runners.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { LocalBackend } from "./local_backend.ts";
 * const backend = new LocalBackend({ root: "/var/lib/reins/controller" }); // touches no file yet
 * assert.equal(backend.name, "local");
 * ```
 */
export class LocalBackend implements ExecutionBackend {
  readonly name = "local";
  readonly #root: string;
  readonly #harnesses: Record<string, HarnessResolver>;
  readonly #rewardFunctions: Record<string, RewardFunction>;
  readonly #inProcess: Record<string, InProcessRunner>;
  readonly #keep: boolean;
  readonly #pollMs: number;
  readonly #bwrap: string;
  readonly #running = new Map<string, Running>();

  constructor(options: LocalBackendOptions) {
    this.#root = options.root;
    this.#harnesses = options.harnesses ?? {};
    this.#rewardFunctions = options.rewardFunctions ?? {};
    this.#inProcess = options.inProcess ?? {};
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
    const runnerName = checkRunner(harness, Object.keys(this.#inProcess));
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

    // An in-process runner gets what the harness spec sets, not the controller's environment.
    const base = runnerName ? { ...harness.env } : { ...scrubbedEnv(), ...harness.env };
    const launch = await this.#prepare(harness, dir, base, spec.gatewayUrl.replace(/\/$/, ""));
    const env = launch.env;
    Object.assign(env, {
      ...attemptEnv(launch.gatewayUrl, rollout.rollout_id, attempt.attempt_id, spec.token),
      REINS_INPUT_FILE: env.REINS_INPUT_FILE ?? inputFile,
      REINS_WORKDIR: work,
    });
    const state: AttemptState = {
      rollout_id: rollout.rollout_id,
      attempt_id: attempt.attempt_id,
      runner: runnerName ? "in_process" : "process",
      pid: 0,
      proc_start: "",
      started_at: Date.now(),
      deadline_at: Date.now() + rollout.config.timeout_s * 1000,
      harness,
      stages: launch.stages,
      relays: launch.relays,
      socket_dir: launch.socketDir,
      command_log: launch.commandLog,
    };
    if (runnerName) {
      state.pid = Deno.pid;
      state.proc_start = procStart(Deno.pid) ?? "";
      // The record comes first: a controller that dies now leaves an attempt it reports lost.
      await writeState(dir, state);
      const live = startInProcess(dir, this.#inProcess[runnerName], {
        options: harness.in_process!.options,
        input: rollout.input,
        env,
        workdir: work,
      });
      return this.#watch(spec, state, dir, live.exited, null, live.stop).handle;
    }
    const opened = launch.relays.length > 0 ? openRelays(launch.relays) : null;
    let child: Deno.ChildProcess;
    try {
      child = spawnAttempt(dir, launch.argv, {
        cwd: work,
        env,
        timeoutS: rollout.config.timeout_s,
      });
    } catch (error) {
      await opened?.close();
      throw new SpecError("config.harness.options.command", (error as Error).message);
    }
    state.pid = child.pid;
    state.proc_start = procStart(child.pid) ?? "";
    await writeState(dir, state);
    const exited = child.status.then(() => {});
    const running = this.#watch(spec, state, dir, exited, opened, () => killGroup(child.pid));
    const detachWatchers = running.detach;
    running.detach = () => {
      detachWatchers();
      child.unref();
    };
    return running.handle;
  }

  /** The sandbox (when enabled) wraps the command and rewrites env and gateway URL. */
  async #prepare(
    harness: LocalHarness,
    dir: string,
    env: Record<string, string>,
    gatewayUrl: string,
  ): Promise<Launch> {
    const launch: Launch = {
      argv: harness.command,
      env,
      gatewayUrl,
      stages: null,
      relays: [],
      socketDir: null,
      commandLog: null,
    };
    if (!harness.sandbox.enabled) return launch;
    // Unix socket paths are limited to 108 bytes: keep them short, under the temp dir.
    if (harness.sandbox.network === "proxy_only") {
      launch.socketDir = await Deno.makeTempDir({ prefix: "rs-" });
    }
    try {
      const box = await prepareSandbox({
        options: harness.sandbox,
        workDir: `${dir}/work`,
        privateDir: `${dir}/private`,
        socketDir: launch.socketDir ?? `${dir}/private/sockets`,
        hide: [this.#root, ...(harness.workspace ? [harness.workspace] : [])],
        gatewayUrl,
        argv: harness.command,
        env,
        bwrap: this.#bwrap,
        inputFile: `${dir}/input.json`,
      });
      return {
        ...launch,
        argv: box.argv,
        env: box.env,
        gatewayUrl: box.gatewayUrl,
        stages: box.stages,
        relays: box.relays,
        commandLog: box.commandLog,
      };
    } catch (error) {
      if (launch.socketDir) {
        await Deno.remove(launch.socketDir, { recursive: true }).catch(() => {});
      }
      if (error instanceof SandboxUnavailableError) {
        throw new SpecError("config.harness.options.sandbox", error.message);
      }
      throw error;
    }
  }

  async adopt(spec: AttemptSpec): Promise<AttemptHandle | AttemptOutcome | null> {
    const dir = this.#dir(spec.attempt.attempt_id);
    const current = this.#running.get(spec.attempt.attempt_id);
    if (current) return current.handle;
    let state: AttemptState;
    try {
      state = await readState(dir);
    } catch {
      return null;
    }
    const inProcess = state.runner === "in_process";
    // In this process, an in-process attempt is alive only while its runner is registered.
    const live: LiveRun | undefined = inProcess && state.pid === Deno.pid
      ? liveRun(dir)
      : undefined;
    const alive = readExitCode(dir) === null && state.proc_start !== "" &&
      isSameProcess(state.pid, state.proc_start) &&
      (!inProcess || state.pid !== Deno.pid || live !== undefined);
    if (alive) {
      let exited: Promise<void>;
      let stop: (reason: string) => void;
      let stopPolling = () => {};
      if (live) {
        // This process still runs it (an earlier backend of this process was closed).
        ({ exited, stop } = live);
      } else if (inProcess) {
        // Another live controller process runs it: wait for its status or its end.
        const poll = pollUntil(
          () => readExitCode(dir) !== null || !isSameProcess(state.pid, state.proc_start),
          this.#pollMs,
        );
        ({ exited, stop: stopPolling } = poll);
        stop = () => {}; // not ours to end: the verdict is recorded, the watcher stops
      } else {
        const poll = pollUntil(() => !isSameProcess(state.pid, state.proc_start), this.#pollMs);
        ({ exited, stop: stopPolling } = poll);
        stop = () => killGroup(state.pid);
      }
      const opened = state.relays.length > 0 ? openRelays(state.relays) : null;
      const running = this.#watch(spec, state, dir, exited, opened, stop);
      running.handle.info.adopted = true;
      const detachWatchers = running.detach;
      running.detach = () => {
        detachWatchers();
        stopPolling();
      };
      return running.handle;
    }
    const offsets = { stdout: spec.resume?.stdout ?? 0, stderr: spec.resume?.stderr ?? 0 };
    streamLogs(dir, spec.log, offsets, true);
    return await this.#finish(spec.rollout, state, dir, null, spec);
  }

  async kill(attemptId: string, status: "cancelled" | "lost" | "timeout", reason: string) {
    const running = this.#running.get(attemptId);
    if (running) {
      running.killed ??= { status, reason };
      running.stop(reason);
      await running.exited;
      return;
    }
    // An orphan from before a restart: end it only if it is still that process (or, in
    // process, still this process's in-process attempt).
    const dir = this.#dir(attemptId);
    try {
      const state = await readState(dir);
      if (state.runner === "in_process") liveRun(dir)?.stop(reason);
      else if (state.proc_start && isSameProcess(state.pid, state.proc_start)) {
        killGroup(state.pid);
      }
    } catch { /* nothing known */ }
  }

  async known(): Promise<Array<{ rollout_id: string; attempt_id: string }>> {
    const out: Array<{ rollout_id: string; attempt_id: string }> = [];
    try {
      for await (const entry of Deno.readDir(`${this.#root}/attempts`)) {
        try {
          const state = await readState(`${this.#root}/attempts/${entry.name}`);
          out.push({ rollout_id: state.rollout_id, attempt_id: state.attempt_id });
        } catch { /* half-written attempt dir: released below by the reconciler */ }
      }
    } catch { /* no attempts yet */ }
    return out;
  }

  async release(attemptId: string): Promise<void> {
    const dir = this.#dir(attemptId);
    try {
      const state = await readState(dir);
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

  #watch(
    spec: AttemptSpec,
    state: AttemptState,
    dir: string,
    exited: Promise<void>,
    relays: Relays | null,
    stop: (reason: string) => void,
  ): Running {
    const offsets: LogOffsets = {
      stdout: spec.resume?.stdout ?? 0,
      stderr: spec.resume?.stderr ?? 0,
    };
    const decoders: LogDecoders = { stdout: new TextDecoder(), stderr: new TextDecoder() };
    const tail = setInterval(
      () => streamLogs(dir, spec.log, offsets, false, decoders),
      this.#pollMs,
    );
    const running: Running = {
      state,
      dir,
      killed: null,
      exited,
      handle: undefined as unknown as AttemptHandle,
      stop,
      detach: () => {},
    };
    const deadline = setTimeout(() => {
      const reason = `timed out after ${spec.rollout.config.timeout_s}s`;
      running.killed ??= { status: "timeout", reason };
      stop(reason);
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
      streamLogs(dir, spec.log, offsets, true, decoders);
      await relays?.close();
      if (state.socket_dir) {
        await Deno.remove(state.socket_dir, { recursive: true }).catch(() => {});
      }
      // Children a process harness left behind must not outlive the attempt.
      if (state.runner !== "in_process") killGroup(state.pid);
      const outcome = await this.#finish(spec.rollout, state, dir, running.killed, spec);
      this.#running.delete(state.attempt_id);
      return outcome;
    })();
    running.handle = {
      rollout_id: state.rollout_id,
      attempt_id: state.attempt_id,
      info: {
        backend: "local",
        pid: state.pid,
        workdir: `${dir}/work`,
        ...(state.runner === "in_process" ? { runner: "in_process" } : {}),
      },
      done,
    };
    this.#running.set(state.attempt_id, running);
    return running;
  }

  #finish(
    rollout: Rollout,
    state: AttemptState,
    dir: string,
    killed: KillVerdict | null,
    spec: AttemptSpec,
  ): Promise<AttemptOutcome> {
    return finishAttempt({
      rollout,
      state,
      dir,
      killed,
      rewardFunctions: this.#rewardFunctions,
      log: spec.log,
    });
  }
}
