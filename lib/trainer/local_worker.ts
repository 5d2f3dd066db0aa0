/**
 * Starts a trainer worker on this machine (CPU, or the local GPU) and connects to it.
 *
 * @module
 */
import type { WorkerHealth } from "../schema/trainer.ts";
import { TrainerClient, type TrainerClientOptions } from "./client.ts";
import type { LaunchedWorker } from "./launch.ts";
import { processHandle, readyUrl, spawnWorkerProcess } from "./process.ts";

/** How to get a Python with PyTorch. */
export const TORCH_INSTALL_HINT =
  "install PyTorch with `apt-get install -y python3-torch` (Debian/Ubuntu) or " +
  "`pip install torch`, or point REINS_PYTHON at a Python that has it";

/** Python or PyTorch is missing on this machine. */
export class MissingPythonError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "MissingPythonError";
  }
}

/** What the Python probe found. */
export interface PythonInfo {
  python: string;
  version: string;
  torch: string;
  cuda: boolean;
}

const PROBE = "import json, sys, torch; print(json.dumps({'version': sys.version.split()[0], " +
  "'torch': torch.__version__, 'cuda': bool(torch.cuda.is_available())}))";

/**
 * Checks that `python` runs and imports torch.
 *
 * @example
 * ```ts ignore
 * import { probePython } from "./local_worker.ts";
 * (await probePython("/usr/bin/python3")).torch; // "1.13.0a0"
 * ```
 */
export function probePython(python: string): Promise<PythonInfo> {
  // Importing torch takes seconds; a process asks once per interpreter.
  let probe = probes.get(python);
  if (!probe) {
    probe = runProbe(python);
    probes.set(python, probe);
    probe.catch(() => probes.delete(python));
  }
  return probe;
}

const probes = new Map<string, Promise<PythonInfo>>();

async function runProbe(python: string): Promise<PythonInfo> {
  let output: Deno.CommandOutput;
  try {
    output = await new Deno.Command(python, {
      args: ["-c", PROBE],
      stdout: "piped",
      stderr: "piped",
      stdin: "null",
    }).output();
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new MissingPythonError(
      `cannot run Python \`${python}\` for the reins trainer worker (${reason}); ` +
        `install Python 3 and ${TORCH_INSTALL_HINT}`,
    );
  }
  const stderr = new TextDecoder().decode(output.stderr);
  if (!output.success) {
    const noTorch = /No module named '?torch'?/.test(stderr);
    throw new MissingPythonError(
      noTorch
        ? `Python \`${python}\` has no PyTorch (\`import torch\` failed); ${TORCH_INSTALL_HINT}`
        : `Python \`${python}\` failed the torch check: ${stderr.trim().slice(-500)}; ` +
          TORCH_INSTALL_HINT,
    );
  }
  const info = JSON.parse(new TextDecoder().decode(output.stdout).trim());
  return { python, ...info };
}

/**
 * Picks the Python that runs the worker: `explicit`, else `$REINS_PYTHON`, else
 * `/usr/bin/python3` when it has torch (Debian's python3-torch), else `python3` on PATH.
 *
 * @example
 * ```ts ignore
 * import { resolvePython } from "./local_worker.ts";
 * const { python, torch } = await resolvePython(); // e.g. "/usr/bin/python3", "1.13.0a0"
 * ```
 */
export async function resolvePython(explicit?: string): Promise<PythonInfo> {
  const chosen = explicit ?? Deno.env.get("REINS_PYTHON");
  if (chosen) return await probePython(chosen);
  try {
    return await probePython("/usr/bin/python3");
  } catch {
    return await probePython("python3");
  }
}

/**
 * Directory that holds the worker's Python package `reins_worker`: run the worker with
 * `python3 -m reins_worker` from there, or with it on `PYTHONPATH` (see {@link workerEnv}).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { workerPackageDir } from "./local_worker.ts";
 * assert.ok(workerPackageDir().endsWith("/lib/trainer/worker"));
 * ```
 */
export function workerPackageDir(): string {
  const url = new URL("./worker", import.meta.url);
  if (url.protocol !== "file:") {
    throw new Error(
      `the worker package is at ${url.href}; startLocalWorker needs reins checked out locally`,
    );
  }
  return decodeURIComponent(url.pathname);
}

/**
 * Environment that makes `python -m reins_worker` importable: `PYTHONPATH` with the worker's
 * directory first (an existing `PYTHONPATH` from `base` or this process is kept after it).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { workerEnv, workerPackageDir } from "./local_worker.ts";
 * const env = workerEnv({ PYTHONPATH: "/opt/x" });
 * assert.equal(env.PYTHONPATH, `${workerPackageDir()}:/opt/x`);
 * ```
 */
export function workerEnv(base: Record<string, string> = {}): Record<string, string> {
  const existing = base.PYTHONPATH ?? Deno.env.get("PYTHONPATH");
  return {
    ...base,
    PYTHONPATH: existing ? `${workerPackageDir()}:${existing}` : workerPackageDir(),
  };
}

/** Options of {@link startLocalWorker}. */
export interface LocalWorkerOptions extends TrainerClientOptions {
  /** Python executable (default: see {@link resolvePython}). */
  python?: string;
  /** Port to listen on (default 0: any free port). */
  port?: number;
  /** Interface to bind (default 127.0.0.1). */
  host?: string;
  /** Extra environment variables for the worker (e.g. CUDA_VISIBLE_DEVICES). */
  env?: Record<string, string>;
  /**
   * torch intra-op threads per rank (default: torch's own choice). Also caps OpenBLAS's and
   * OpenMP's own thread pools (`OPENBLAS_NUM_THREADS`, `OMP_NUM_THREADS`, unless `env` sets
   * them): Debian's torch does not pass its thread count to the system BLAS, whose extra threads
   * only spin against the others on a busy machine.
   */
  threads?: number;
  /**
   * Data-parallel ranks (default 1): the worker starts `ranks - 1` more processes on this
   * machine (one per GPU, or gloo on the CPU) and spreads each `forward_backward` over them;
   * see docs/scale.md.
   */
  ranks?: number;
  /** torch.distributed backend of the ranks (default `auto`: NCCL with GPUs, else gloo). */
  backend?: "auto" | "gloo" | "nccl";
  /** Seconds a rank waits for the others in one collective before the call fails (600). */
  collectiveTimeoutS?: number;
  /** How long to wait for the worker to listen and answer /health (default 120 s). */
  startupTimeoutMs?: number;
  /** Receives every line the worker prints (default: kept only for error messages). */
  onLog?: (line: string) => void;
  /**
   * Print the worker's `cpu_warning` (CPU matmuls far below an optimised BLAS, with the fix)
   * on stderr when it has one (default true).
   */
  warnSlowCpu?: boolean;
}

/** A running local worker. */
export interface LocalWorker extends LaunchedWorker {
  /** The Python that runs it (path and torch version). */
  readonly python: PythonInfo;
}

/**
 * Spawns `python -m reins_worker` (the package in `lib/trainer/worker`) and waits until it
 * answers `/health`.
 *
 * @example
 * ```ts ignore
 * import { startLocalWorker } from "./local_worker.ts";
 * await using worker = await startLocalWorker();
 * await worker.client.init({
 *   model: {
 *     kind: "builtin",
 *     config: {
 *       vocab_size: 64, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, d_ff: 64,
 *       max_seq_len: 128,
 *     },
 *   },
 * });
 * ```
 */
export async function startLocalWorker(options: LocalWorkerOptions = {}): Promise<LocalWorker> {
  const python = await resolvePython(options.python);
  const host = options.host ?? "127.0.0.1";
  const args = [
    "-u",
    "-m",
    "reins_worker",
    "--host",
    host,
    "--port",
    String(options.port ?? 0),
    "--exit-with-parent",
  ];
  if (options.threads) args.push("--threads", String(options.threads));
  if (options.ranks !== undefined) {
    if (!Number.isInteger(options.ranks) || options.ranks < 1) {
      throw new RangeError(`ranks: expected an integer >= 1, got ${options.ranks}`);
    }
    args.push("--ranks", String(options.ranks));
  }
  if (options.backend) args.push("--backend", options.backend);
  if (options.collectiveTimeoutS !== undefined) {
    args.push("--collective-timeout-s", String(options.collectiveTimeoutS));
  }
  const proc = spawnWorkerProcess(
    new Deno.Command(python.python, {
      args,
      env: workerEnv({
        ...(options.threads
          ? {
            OPENBLAS_NUM_THREADS: String(options.threads),
            OMP_NUM_THREADS: String(options.threads),
          }
          : {}),
        ...options.env,
      }),
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }),
    options.onLog,
  );
  const timeoutMs = options.startupTimeoutMs ?? 120_000;
  try {
    const url = await readyUrl(
      proc,
      timeoutMs,
      () => `worker did not start within ${timeoutMs} ms:\n${proc.tail()}`,
    );
    const client = new TrainerClient(url, options);
    const health = await client.health();
    if (health.cpu_warning && options.warnSlowCpu !== false) {
      console.warn(`reins worker: ${health.cpu_warning}`);
    }
    return { url, client, python, health, ...processHandle(proc) };
  } catch (error) {
    await proc.stop();
    throw error;
  }
}

/**
 * One line on a worker's CPU speed, from its `/health` (for run headers).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { describeCpu } from "./local_worker.ts";
 * const health = {
 *   ok: true as const, initialized: false, policy_version: 0, device: "cpu", pid: 1,
 *   generating: 0, weights_pending: false, cpu_matmul_gflops: 55.8, blas: "openblas-pthread",
 *   torch_threads: 2, cpu_warning: null,
 * };
 * assert.equal(
 *   describeCpu(health),
 *   "CPU matmul 55.8 GFLOP/s fp32 (BLAS openblas-pthread, 2 torch threads)",
 * );
 * ```
 */
export function describeCpu(health: WorkerHealth): string {
  if (health.cpu_matmul_gflops === undefined) return "CPU matmul rate not reported by the worker";
  return `CPU matmul ${health.cpu_matmul_gflops.toFixed(1)} GFLOP/s fp32 ` +
    `(BLAS ${health.blas ?? "unknown"}, ${health.torch_threads ?? "?"} torch threads)`;
}
