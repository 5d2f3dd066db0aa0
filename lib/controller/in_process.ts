/**
 * In-process attempts of the local backend: a registered runner (a function) runs the harness
 * inside the controller's process instead of a process per attempt, which saves the start of a
 * runtime (~0.45 CPU-s for a Deno harness) on every rollout.
 *
 * The semantics are a process's: the runner's resolved number is the exit status (a throw is
 * status 1, its stack on stderr), written to `exit_code` in the attempt's directory; its
 * output goes to `stdout.log`/`stderr.log` there (tailed like a process's); a kill or timeout
 * aborts its signal and the attempt ends at once, whatever the runner still does (its later
 * output and status are dropped). What no process boundary gives: the runner shares the
 * controller's memory, credentials and fate. An in-process attempt of a controller that dies is
 * lost with it (a restarted controller reports it `lost`, and the rollout is retried), and the
 * backend refuses `in_process` with the sandbox (see `local_harness.ts`).
 *
 * @module
 */
import type { JsonObject, JsonValue } from "../schema.ts";
import { writeExitCode } from "./local_process.ts";

/** What an in-process runner gets: everything a harness process would find in its environment. */
export interface InProcessAttempt {
  /** `in_process.options` of the resolved harness (the runner validates them). */
  options: JsonObject;
  /** The rollout's input (what `$REINS_INPUT_FILE` holds for a process). */
  input: JsonValue;
  /**
   * The variables a process would get besides the inherited ones: the harness spec's `env`, and
   * `OPENAI_BASE_URL`, `OPENAI_API_KEY` (the attempt's capability token), `ANTHROPIC_*`,
   * `REINS_GATEWAY_URL`, `REINS_ROLLOUT_ID`, `REINS_ATTEMPT_ID`, `REINS_INPUT_FILE`,
   * `REINS_WORKDIR`.
   */
  env: Record<string, string>;
  /** The attempt's working directory (the process's cwd). */
  workdir: string;
  /** Aborted when the attempt is killed or times out: stop making calls. */
  signal: AbortSignal;
  /** Output sinks (kept per attempt, like a process's stdout and stderr). */
  stdout: (text: string) => void;
  stderr: (text: string) => void;
}

/** Runs one attempt in this process; resolves to its exit status (0 = success). */
export type InProcessRunner = (attempt: InProcessAttempt) => Promise<number>;

/** A running in-process attempt. */
export interface LiveRun {
  /** Settles when the runner returned (status written) or the attempt was stopped. */
  exited: Promise<void>;
  /** Aborts the runner; `exited` settles at once. */
  stop: (reason: string) => void;
}

/**
 * In-process attempts alive in this process, by attempt directory: a backend created later in
 * the same process (a controller restarted without a new process) re-adopts them from here.
 */
const LIVE = new Map<string, LiveRun>();

/** The live in-process attempt whose directory is `dir`, if this process runs one. */
export function liveRun(dir: string): LiveRun | undefined {
  return LIVE.get(dir);
}

/** Appends to one of the attempt's output files; drops everything once closed. */
class Sink {
  readonly #file: Deno.FsFile;
  readonly #encoder = new TextEncoder();
  #closed = false;

  constructor(path: string) {
    this.#file = Deno.openSync(path, { append: true, create: true });
  }

  write(text: string): void {
    if (this.#closed || text === "") return;
    const bytes = this.#encoder.encode(text);
    let written = 0;
    while (written < bytes.length) written += this.#file.writeSync(bytes.subarray(written));
  }

  close(): void {
    if (this.#closed) return;
    this.#closed = true;
    this.#file.close();
  }
}

/**
 * Starts `runner` on an attempt whose directory `dir` is prepared (`work/`, empty logs).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { startInProcess } from "./in_process.ts";
 * const dir = await Deno.makeTempDir();
 * const run = startInProcess(dir, async (a) => {
 *   a.stdout("hi\n");
 *   return await Promise.resolve(3);
 * }, { options: {}, input: null, env: {}, workdir: dir });
 * await run.exited;
 * assert.equal(await Deno.readTextFile(`${dir}/stdout.log`), "hi\n");
 * assert.equal((await Deno.readTextFile(`${dir}/exit_code`)).trim(), "3");
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export function startInProcess(
  dir: string,
  runner: InProcessRunner,
  attempt: Omit<InProcessAttempt, "signal" | "stdout" | "stderr">,
): LiveRun {
  const abort = new AbortController();
  const stdout = new Sink(`${dir}/stdout.log`);
  const stderr = new Sink(`${dir}/stderr.log`);
  let settle!: () => void;
  const exited = new Promise<void>((resolve) => settle = resolve);
  const end = () => {
    stdout.close();
    stderr.close();
    LIVE.delete(dir);
    settle();
  };
  const run: LiveRun = {
    exited,
    stop: (reason) => {
      if (abort.signal.aborted) return;
      abort.abort(new DOMException(reason, "AbortError"));
      end();
    },
  };
  LIVE.set(dir, run);
  (async () => {
    let code: number;
    try {
      code = await runner({
        ...attempt,
        signal: abort.signal,
        stdout: (text) => stdout.write(text),
        stderr: (text) => stderr.write(text),
      });
      if (!Number.isInteger(code) || code < 0 || code > 255) {
        stderr.write(`in-process runner returned ${code}, not an exit status\n`);
        code = 1;
      }
    } catch (error) {
      stderr.write(`${error instanceof Error ? error.stack ?? error.message : String(error)}\n`);
      code = 1;
    }
    // Stopped: the attempt already ended as the controller decided (like a killed process).
    if (abort.signal.aborted) return;
    try {
      writeExitCode(dir, code);
    } catch { /* the directory was removed: nobody waits for this status */ }
    end();
  })();
  return run;
}
