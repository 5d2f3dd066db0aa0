/**
 * The on-disk record of a local attempt and the process-group primitives of the local backend.
 *
 * Each process attempt runs in its own session (`setsid`), so a timeout kills the whole
 * process group. A tiny `sh` wrapper (the group leader) redirects stdout/stderr to files in the
 * attempt's directory and writes the exit code to a file, so that output and exit status
 * survive a controller crash; `state.json` (pid + the kernel's start time of that pid) lets a
 * restarted controller re-adopt the still-running process, or report the one that ended.
 *
 * @module
 */
import type { LocalHarness, SandboxStages } from "./schema.ts";
import type { RelaySpec } from "./sandbox.ts";

/** What `state.json` of an attempt holds. */
export interface AttemptState {
  rollout_id: string;
  attempt_id: string;
  /**
   * `process`: `pid` is the attempt's group leader. `in_process`: `pid` is the controller
   * process the attempt ran inside (it lives and dies with it). Absent in older files: process.
   */
  runner?: "process" | "in_process";
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
export const SCRUBBED: RegExp = /^(REINS_|OPENAI_|ANTHROPIC_|GATEWAY_)/;

/** The controller's environment without what must not leak into a harness or verifier. */
export function scrubbedEnv(): Record<string, string> {
  return Object.fromEntries(
    Object.entries(Deno.env.toObject()).filter(([key]) => !SCRUBBED.test(key)),
  );
}

/** The kernel's start time of `pid` (field 22 of its stat), or null when it is gone. */
export function procStart(pid: number): string | null {
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

/** Whether `pid` is still the process that started at `start`. */
export function isSameProcess(pid: number, start: string): boolean {
  return procStart(pid) === start;
}

/** Kills a process group (a process attempt's session). */
export function killGroup(pid: number): void {
  try {
    Deno.kill(-pid, "SIGKILL");
  } catch { /* already gone */ }
}

/** The exit code written to `<dir>/exit_code`, or null when there is none yet. */
export function readExitCode(dir: string): number | null {
  try {
    const text = Deno.readTextFileSync(`${dir}/exit_code`).trim();
    return /^\d+$/.test(text) ? Number(text) : null;
  } catch {
    return null;
  }
}

/** Writes `<dir>/exit_code` atomically (as the wrapper does). */
export function writeExitCode(dir: string, code: number): void {
  Deno.writeTextFileSync(`${dir}/exit_code.tmp`, `${code}\n`);
  Deno.renameSync(`${dir}/exit_code.tmp`, `${dir}/exit_code`);
}

/** Reads an attempt's `state.json` (throws when there is none). */
export async function readState(dir: string): Promise<AttemptState> {
  return JSON.parse(await Deno.readTextFile(`${dir}/state.json`));
}

/** Writes an attempt's `state.json` atomically. */
export async function writeState(dir: string, state: AttemptState): Promise<void> {
  await Deno.writeTextFile(`${dir}/state.tmp`, JSON.stringify(state));
  await Deno.rename(`${dir}/state.tmp`, `${dir}/state.json`);
}

/** Spawns `argv` as the attempt's process group under the wrapper (output to `dir`'s files). */
export function spawnAttempt(
  dir: string,
  argv: string[],
  options: { cwd: string; env: Record<string, string>; timeoutS: number },
): Deno.ChildProcess {
  return new Deno.Command("setsid", {
    args: [
      "sh",
      "-c",
      WRAPPER,
      "reins-attempt",
      `${dir}/stdout.log`,
      `${dir}/stderr.log`,
      `${dir}/exit_code`,
      String(options.timeoutS),
      ...argv,
    ],
    cwd: options.cwd,
    env: options.env,
    clearEnv: true,
    stdin: "null",
    stdout: "null",
    stderr: "null",
  }).spawn();
}

/**
 * Waits until `ended()` holds, checked every `pollMs` (a process that is not our child: one
 * adopted after a restart).
 */
export function pollUntil(
  ended: () => boolean,
  pollMs: number,
): { exited: Promise<void>; stop: () => void } {
  let timer: ReturnType<typeof setInterval> | undefined;
  const exited = new Promise<void>((resolve) => {
    timer = setInterval(() => {
      if (ended()) {
        clearInterval(timer);
        resolve();
      }
    }, pollMs);
  });
  return { exited, stop: () => clearInterval(timer) };
}
