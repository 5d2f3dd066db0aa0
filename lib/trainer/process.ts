/**
 * A worker child process: waits for its `REINS_WORKER_READY {...}` line, keeps draining its
 * output (a full pipe would stall the worker) and remembers the tail for error messages.
 *
 * @module
 */
import { sleep } from "../util/time.ts";
import { LineSplitter } from "../http/lines.ts";

/** Marker line the worker prints once it listens. */
export const READY_MARKER = "REINS_WORKER_READY ";

/** Where a worker said it listens. */
export interface ReadyInfo {
  host: string;
  port: number;
}

/** A spawned worker process. */
export interface WorkerProcess {
  readonly child: Deno.ChildProcess;
  /** Resolves with the ready line's host/port, or rejects if the process exits first. */
  readonly ready: Promise<ReadyInfo>;
  /** Last few KB of stdout+stderr. */
  tail(): string;
  /** True once the process exited. */
  exited(): boolean;
  /** SIGTERM (then SIGKILL after `graceMs`), and waits for the output to drain. */
  stop(graceMs?: number): Promise<void>;
}

const TAIL_CHARS = 8_000;

/**
 * Spawns `command` and watches its output.
 *
 * @example
 * ```ts ignore
 * import { spawnWorkerProcess } from "./process.ts";
 * const proc = spawnWorkerProcess(
 *   new Deno.Command("python3", { args: ["-m", "reins_worker"], cwd: "lib/trainer/worker" }),
 *   (l) => {},
 * );
 * const { port } = await proc.ready;
 * await proc.stop();
 * ```
 */
export function spawnWorkerProcess(
  command: Deno.Command,
  onLine?: (line: string) => void,
  options: { processGroup?: boolean } = {},
): WorkerProcess {
  const child = command.spawn();
  // A command started under `setsid` leads its own process group: signal the whole group,
  // so that `sh -c "cd x && ssh …"` does not leave its children behind.
  const signal = (sig: Deno.Signal) => {
    if (options.processGroup) {
      try {
        Deno.kill(-child.pid, sig);
        return;
      } catch {
        // fall back to the direct child
      }
    }
    child.kill(sig);
  };
  let tail = "";
  let exited = false;
  let resolveReady!: (info: ReadyInfo) => void;
  let rejectReady!: (error: Error) => void;
  let readySettled = false;
  const ready = new Promise<ReadyInfo>((resolve, reject) => {
    resolveReady = resolve;
    rejectReady = reject;
  });
  // Callers that never await `ready` must not see an unhandled rejection.
  ready.catch(() => {});

  const handleLine = (line: string) => {
    tail = (tail + line + "\n").slice(-TAIL_CHARS);
    onLine?.(line);
    const at = line.indexOf(READY_MARKER);
    if (!readySettled && at >= 0) {
      try {
        const info = JSON.parse(line.slice(at + READY_MARKER.length)) as ReadyInfo;
        readySettled = true;
        resolveReady(info);
      } catch {
        // not our marker after all
      }
    }
  };

  const readers: ReadableStreamDefaultReader<Uint8Array>[] = [];
  const drain = async (stream: ReadableStream<Uint8Array>) => {
    const reader = stream.getReader();
    readers.push(reader);
    const lines = new LineSplitter();
    try {
      while (true) {
        const { value, done } = await reader.read();
        if (done) break;
        for (const line of lines.push(value)) handleLine(line);
      }
    } catch {
      // cancelled by stop(): a grandchild still holds the pipe
    }
    if (lines.rest) handleLine(lines.rest);
  };
  const drained = Promise.all([drain(child.stdout), drain(child.stderr)]);
  // A grandchild that outlives the command can keep the pipes open: stop reading after a
  // grace period instead of waiting for it forever.
  const finishDrain = async () => {
    let timer: ReturnType<typeof setTimeout> | undefined;
    const late = new Promise<"late">((resolve) => {
      timer = setTimeout(() => resolve("late"), 2_000);
    });
    const outcome = await Promise.race([drained.then(() => "done" as const), late]);
    clearTimeout(timer);
    if (outcome === "late") {
      await Promise.all(readers.map((r) => r.cancel().catch(() => {})));
      await drained;
    }
  };
  const status = child.status.then(async (s) => {
    exited = true;
    await finishDrain();
    if (!readySettled) {
      readySettled = true;
      rejectReady(
        new Error(`worker process exited with code ${s.code} before it was ready:\n${tail}`),
      );
    }
    return s;
  });

  return {
    child,
    ready,
    tail: () => tail,
    exited: () => exited,
    async stop(graceMs = 5_000) {
      if (!exited) {
        try {
          signal("SIGTERM");
        } catch {
          // already gone
        }
        const timer = setTimeout(() => {
          try {
            if (!exited) signal("SIGKILL");
          } catch {
            // already gone
          }
        }, graceMs);
        await status;
        clearTimeout(timer);
      } else {
        await status;
      }
    },
  };
}

/**
 * Polls `GET {url}/health` until it answers 200 or `timeoutMs` passes.
 *
 * @example
 * ```ts ignore
 * import { waitForHealth } from "./process.ts";
 * await waitForHealth("http://127.0.0.1:8300", 60_000);
 * ```
 */
export async function waitForHealth(
  url: string,
  timeoutMs: number,
  isDead: () => boolean = () => false,
): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    if (isDead()) throw new Error(`worker process exited while waiting for ${url}/health`);
    try {
      const response = await fetch(`${url}/health`);
      await response.body?.cancel();
      if (response.ok) return;
      last = `HTTP ${response.status}`;
    } catch (error) {
      last = error instanceof Error ? error.message : String(error);
    }
    await sleep(250);
  }
  throw new Error(`no healthy reins worker at ${url} after ${timeoutMs} ms (last: ${last})`);
}

/**
 * The URL a worker's ready line names (`0.0.0.0` as loopback), or an error with `message` once
 * `timeoutMs` passes without one.
 *
 * @example
 * ```ts ignore
 * import { readyUrl, spawnWorkerProcess } from "./process.ts";
 * const proc = spawnWorkerProcess(new Deno.Command("python3", { args: ["-m", "reins_worker"] }));
 * const url = await readyUrl(proc, 60_000, () => "no ready line");
 * ```
 */
export async function readyUrl(
  proc: WorkerProcess,
  timeoutMs: number,
  message: () => string,
): Promise<string> {
  let timer: ReturnType<typeof setTimeout> | undefined;
  const ready = await Promise.race([
    proc.ready,
    new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new Error(message())), timeoutMs);
    }),
  ]).finally(() => clearTimeout(timer));
  const host = ready.host === "0.0.0.0" ? "127.0.0.1" : ready.host;
  return `http://${host}:${ready.port}`;
}

/**
 * The parts of a started worker's handle that belong to its process: its output's tail and a
 * `close` (also `await using`) that stops it once; without a process (a worker only connected
 * to) there is no output and nothing to stop.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { processHandle } from "./process.ts";
 * const handle = processHandle(null);
 * assert.equal(handle.logs(), "");
 * await handle.close();
 * ```
 */
export function processHandle(proc: WorkerProcess | null): {
  logs(): string;
  close(): Promise<void>;
  [Symbol.asyncDispose](): Promise<void>;
} {
  let closed: Promise<void> | undefined;
  const close = () => closed ??= proc ? proc.stop() : Promise.resolve();
  return { logs: () => proc?.tail() ?? "", close, [Symbol.asyncDispose]: close };
}
