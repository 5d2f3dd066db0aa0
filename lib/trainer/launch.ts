/**
 * Notebook helper: start a trainer worker on a GPU host with a command (an `ssh` line, a
 * `kubectl exec`, a local `python3 …`), or connect to one already running, and wait until it
 * is healthy.
 *
 * @module
 */
import type { WorkerHealth } from "../schema/trainer.ts";
import { TrainerClient, type TrainerClientOptions } from "./client.ts";
import {
  processHandle,
  readyUrl,
  spawnWorkerProcess,
  waitForHealth,
  type WorkerProcess,
} from "./process.ts";

/** Options of {@link launch}. */
export interface LaunchOptions extends TrainerClientOptions {
  /**
   * Command that runs the worker, e.g.
   * `ssh gpu-box 'cd reins/lib/trainer/worker && python3 -m reins_worker --host 0.0.0.0 --port 8300'`.
   * A string runs through `sh -c`; an array is `[program, ...args]`.
   */
  command?: string | string[];
  /**
   * Where the worker will answer. Without it, the URL comes from the worker's
   * `REINS_WORKER_READY {"host","port"}` line (right for local commands and ssh port forwards).
   */
  url?: string;
  /** Extra environment for the command. */
  env?: Record<string, string>;
  /** Working directory of the command. */
  cwd?: string;
  /** How long to wait for health (default 15 minutes: GPU hosts can be slow to come up). */
  healthTimeoutMs?: number;
  /** Receives every output line of the command. */
  onLog?: (line: string) => void;
}

/** A launched (or connected) worker. */
export interface LaunchedWorker {
  readonly url: string;
  readonly client: TrainerClient;
  /** `/health` once the worker answered (its device, CPU matmul rate and BLAS). */
  readonly health: WorkerHealth;
  /** Recent output of the command ("" when only connected). */
  logs(): string;
  /** Stops the command (if this call started one). The remote worker goes with its ssh. */
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
}

/**
 * Starts a worker with `command` and/or connects to `url`, then waits for `/health`.
 *
 * @example
 * ```ts ignore
 * import { launch } from "./launch.ts";
 * const worker = await launch({
 *   command:
 *     "ssh -L 8300:localhost:8300 gpu-box 'cd reins/lib/trainer/worker && python3 -m reins_worker --port 8300'",
 *   url: "http://127.0.0.1:8300",
 * });
 * await worker.client.state();
 * await worker.close();
 * ```
 */
export async function launch(options: LaunchOptions): Promise<LaunchedWorker> {
  const timeoutMs = options.healthTimeoutMs ?? 15 * 60_000;
  if (!options.command) {
    if (!options.url) throw new Error("launch: give `command`, `url`, or both");
    const url = options.url.replace(/\/+$/, "");
    await waitForHealth(url, timeoutMs);
    const client = new TrainerClient(url, options);
    return { url, client, health: await client.health(), ...processHandle(null) };
  }
  const shell = typeof options.command === "string";
  // Shell commands run in their own session (setsid, where present) so close() can stop the
  // whole process group they spawn.
  const group = shell && await hasSetsid();
  const [program, ...args] = shell
    ? [...(group ? ["setsid"] : []), "sh", "-c", options.command as string]
    : options.command as string[];
  if (!program) throw new Error("launch: `command` is empty");
  const proc: WorkerProcess = spawnWorkerProcess(
    new Deno.Command(program, {
      args,
      env: options.env,
      cwd: options.cwd,
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }),
    options.onLog,
    { processGroup: group },
  );
  try {
    const url = options.url?.replace(/\/+$/, "") ||
      await readyUrl(proc, timeoutMs, () => `no REINS_WORKER_READY line within ${timeoutMs} ms`);
    await waitForHealth(url, timeoutMs, proc.exited);
    const client = new TrainerClient(url, options);
    return { url, client, health: await client.health(), ...processHandle(proc) };
  } catch (error) {
    const tail = proc.tail();
    await proc.stop();
    const message = error instanceof Error ? error.message : String(error);
    throw new Error(`launch failed: ${message}${tail ? `\ncommand output:\n${tail}` : ""}`);
  }
}

async function hasSetsid(): Promise<boolean> {
  try {
    const out = await new Deno.Command("setsid", {
      args: ["--version"],
      stdout: "null",
      stderr: "null",
      stdin: "null",
    }).output();
    return out.success;
  } catch {
    return false;
  }
}
