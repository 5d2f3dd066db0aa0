/**
 * A run's stack as separate processes that a supervisor restarts when they die: the trainer
 * worker (Python), the gateway with the proxy (`bin/gateway.ts`, durable SQLite store in
 * the run directory, on a fixed port) and the rollout controller (`controller_process.ts`, a
 * fixed id so it re-adopts its attempts). The training loop runs in the supervisor's process.
 *
 * The worker sits behind a small forwarder in this process, so its address never changes:
 * - `<forwarder>/…` (the proxy's upstream) goes to the current worker; while the worker is down
 *   or not yet restored (409 `not_initialized`) it answers 503, which the proxy retries with
 *   backoff (an outage is ridden out, not failed);
 * - `<forwarder>/gen/<n>/…` (the loop's trainer client) goes through only while `n` is the
 *   worker's current generation, and answers 410 otherwise: a loop started before a worker
 *   restart can never train or checkpoint the restored worker with its newer state.
 *
 * When the worker dies the supervisor starts a new one, bumps the generation and calls
 * `onWorkerRestart` (the loop then resumes from its last checkpoint, which restores the
 * worker). Hand-written: no reachable package supervises this mix of processes.
 *
 * @module
 */
import { GatewayClient } from "../gateway/client.ts";
import { startLocalWorker } from "../trainer/local_worker.ts";
import { TrainerClient } from "../trainer/client.ts";
import type { LocalWorker } from "../trainer/local_worker.ts";
import type { LoopConfigInput } from "./schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { type LoopResult, runLoop, type RunLoopOptions } from "./run.ts";

/** The processes a supervisor runs. */
export type SupervisedRole = "worker" | "gateway" | "controller";

/** Options of {@link Supervisor.start}. */
export interface SupervisorOptions {
  outDir: string;
  /** Harness data directory (the controller's registry). */
  dataDir?: string;
  /** Gateway tokenizer flag (`char`, `qwen3` or a directory). */
  tokenizer: string;
  /** Controller id (stable across restarts). */
  controllerId: string;
  concurrency?: number;
  /** Torch threads of the worker. */
  threads?: number;
  python?: string;
  /** Proxy retries of an upstream call (default 20: about a minute of backoff). */
  upstreamRetries?: number;
  log?: (line: string) => void;
}

interface Child {
  process: Deno.ChildProcess;
  pid: number;
  /** Set when the supervisor itself stops it (no restart). */
  stopping: boolean;
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

function alive(pid: number): boolean {
  try {
    const stat = Deno.readTextFileSync(`/proc/${pid}/stat`);
    return !/^\d+ \(.*\) [ZX]/.test(stat);
  } catch {
    return false;
  }
}

async function waitHealthy(url: string, timeoutMs: number): Promise<void> {
  const deadline = performance.now() + timeoutMs;
  while (performance.now() < deadline) {
    try {
      const res = await fetch(`${url}/v1/health`, { signal: AbortSignal.timeout(2_000) });
      await res.body?.cancel();
      if (res.ok) return;
    } catch { /* not up yet */ }
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error(`${url} did not answer /v1/health within ${timeoutMs} ms`);
}

/** A supervised stack (see the module doc). */
export class Supervisor {
  readonly options: SupervisorOptions;
  readonly adminKey = `ra_${crypto.randomUUID().replaceAll("-", "")}`;
  /** Restarts per role (after deaths the supervisor did not cause). */
  readonly restarts: Record<SupervisedRole, number> = { worker: 0, gateway: 0, controller: 0 };
  /** Called after a worker restart, with the new generation. */
  onWorkerRestart: (generation: number) => void = () => {};
  gatewayUrl = "";
  forwarderUrl = "";
  #gatewayPort = 0;
  #generation = 0;
  #worker: LocalWorker | null = null;
  #workerPid = 0;
  #gateway: Child | null = null;
  #controller: Child | null = null;
  #server: Deno.HttpServer | null = null;
  #closed = false;
  #watch: ReturnType<typeof setInterval> | undefined;
  #restarting = new Set<SupervisedRole>();

  constructor(options: SupervisorOptions) {
    this.options = options;
  }

  /** The worker generation (bumped by every worker restart). */
  get generation(): number {
    return this.#generation;
  }

  #log(line: string): void {
    this.options.log?.(`[supervisor] ${line}`);
  }

  /** Starts worker, forwarder, gateway and controller. */
  async start(): Promise<void> {
    await Deno.mkdir(`${this.options.outDir}/logs`, { recursive: true });
    await this.#startWorker();
    this.#server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      (req) => this.#forward(req),
    );
    this.forwarderUrl = `http://127.0.0.1:${(this.#server.addr as Deno.NetAddr).port}`;
    this.#gatewayPort = freePort();
    this.gatewayUrl = `http://127.0.0.1:${this.#gatewayPort}`;
    await this.#startGateway();
    await this.#startController();
    this.#watch = setInterval(() => this.#check(), 250);
  }

  /** A gateway client with the admin key (rides out gateway restarts). */
  gatewayClient(): GatewayClient {
    return new GatewayClient(this.gatewayUrl, { apiKey: this.adminKey });
  }

  /** The loop's trainer client for the current worker generation. */
  trainerClient(): { client: TrainerClient; url: string } {
    const url = `${this.forwarderUrl}/gen/${this.#generation}`;
    return { client: new TrainerClient(url), url };
  }

  /** The pid of a role's current process (0 when down). */
  pid(role: SupervisedRole): number {
    if (role === "worker") return this.#workerPid;
    return (role === "gateway" ? this.#gateway : this.#controller)?.pid ?? 0;
  }

  /** SIGKILLs a role's process (the supervisor then restarts it); false when it was down. */
  kill(role: SupervisedRole): boolean {
    const pid = this.pid(role);
    if (!pid || !alive(pid) || this.#restarting.has(role)) return false;
    Deno.kill(pid, "SIGKILL");
    this.#log(`SIGKILL ${role} (pid ${pid})`);
    return true;
  }

  /** Whether every role is up (no restart in progress). */
  get healthy(): boolean {
    return this.#restarting.size === 0 && (["worker", "gateway", "controller"] as const)
      .every((r) => alive(this.pid(r)));
  }

  #check(): void {
    if (this.#closed) return;
    for (const role of ["worker", "gateway", "controller"] as const) {
      if (this.#restarting.has(role) || alive(this.pid(role))) continue;
      this.#restarting.add(role);
      this.restarts[role]++;
      this.#log(`${role} died; restarting`);
      const start = role === "worker"
        ? () => this.#startWorker()
        : role === "gateway"
        ? () => this.#startGateway()
        : () => this.#startController();
      const retry = async (): Promise<void> => {
        while (!this.#closed) {
          try {
            await start();
            return;
          } catch (error) {
            this.#log(`${role} restart failed (${(error as Error).message}); again`);
            await new Promise((r) => setTimeout(r, 500));
          }
        }
      };
      retry().finally(() => {
        this.#restarting.delete(role);
        if (role === "worker" && !this.#closed) {
          this.#generation++;
          this.#log(`worker back (generation ${this.#generation})`);
          this.onWorkerRestart(this.#generation);
        }
      });
    }
  }

  async #startWorker(): Promise<void> {
    const old = this.#worker;
    this.#worker = null;
    this.#workerPid = 0;
    await old?.close().catch(() => undefined);
    const worker = await startLocalWorker({
      threads: this.options.threads ?? 1,
      ...(this.options.python ? { python: this.options.python } : {}),
    });
    this.#workerPid = (await worker.client.health()).pid;
    this.#worker = worker;
  }

  async #forward(req: Request): Promise<Response> {
    const url = new URL(req.url);
    let path = url.pathname;
    const gen = path.match(/^\/gen\/(\d+)(\/.*)$/);
    if (gen) {
      if (Number(gen[1]) !== this.#generation) {
        await req.body?.cancel();
        return Response.json(
          { error: { code: "worker_restarted", message: "the worker restarted since" } },
          { status: 410 },
        );
      }
      path = gen[2];
    }
    const worker = this.#worker;
    const unavailable = () =>
      Response.json({ error: { code: "worker_restarting", message: "worker restarting" } }, {
        status: 503,
        headers: { "retry-after": "1" },
      });
    if (!worker || !alive(this.#workerPid)) {
      await req.body?.cancel();
      return unavailable();
    }
    try {
      const res = await fetch(`${worker.url}${path}${url.search}`, {
        method: req.method,
        headers: req.headers,
        body: req.body,
        signal: req.signal,
      });
      // A restarted worker answers 409 until the loop restored it: to the proxy, that is the
      // worker still restarting.
      if (!gen && res.status === 409) {
        const text = await res.text();
        if (text.includes("not_initialized")) return unavailable();
        return new Response(text, { status: res.status, headers: res.headers });
      }
      return new Response(res.body, { status: res.status, headers: res.headers });
    } catch {
      return unavailable();
    }
  }

  #spawn(name: SupervisedRole, args: string[]): Child {
    const process = new Deno.Command(Deno.execPath(), {
      args,
      env: { REINS_ADMIN_KEY: this.adminKey, NO_COLOR: "1" },
      stdin: "null",
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const log = Deno.openSync(`${this.options.outDir}/logs/${name}.log`, {
      append: true,
      create: true,
    });
    const writer = async (stream: ReadableStream<Uint8Array>) => {
      for await (const chunk of stream) log.writeSync(chunk);
    };
    Promise.all([writer(process.stdout), writer(process.stderr)])
      .catch(() => undefined).finally(() => log.close());
    return { process, pid: process.pid, stopping: false };
  }

  async #startGateway(): Promise<void> {
    const cli = new URL("../../bin/gateway.ts", import.meta.url).pathname;
    this.#gateway = this.#spawn("gateway", [
      "run",
      "-A",
      cli,
      "--db",
      `${await Deno.realPath(this.options.outDir)}/gateway.db`,
      "--port",
      String(this.#gatewayPort),
      "--upstream",
      this.forwarderUrl,
      "--upstream-retries",
      String(this.options.upstreamRetries ?? 20),
      "--tokenizer",
      this.options.tokenizer,
      "--no-ui",
    ]);
    await waitHealthy(this.gatewayUrl, 120_000);
  }

  async #startController(): Promise<void> {
    const entry = new URL("./controller_process.ts", import.meta.url).pathname;
    const root = `${await Deno.realPath(this.options.outDir)}/controller`;
    this.#controller = this.#spawn("controller", [
      "run",
      "-A",
      entry,
      "--gateway",
      this.gatewayUrl,
      "--root",
      root,
      "--id",
      this.options.controllerId,
      "--concurrency",
      String(this.options.concurrency ?? 8),
      ...(this.options.dataDir ? ["--data-dir", this.options.dataDir] : []),
    ]);
  }

  /** Stops everything (controller drained first; no restarts). */
  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#watch);
    for (const child of [this.#controller, this.#gateway]) {
      if (!child) continue;
      child.stopping = true;
      try {
        child.process.kill("SIGTERM");
      } catch { /* already gone */ }
      const done = await Promise.race([
        child.process.status.then(() => true),
        new Promise<false>((r) => setTimeout(() => r(false), 10_000)),
      ]);
      if (!done) {
        try {
          child.process.kill("SIGKILL");
        } catch { /* gone */ }
        await child.process.status;
      }
    }
    await this.#worker?.close().catch(() => undefined);
    await this.#server?.shutdown();
  }
}

/** Options of {@link runLoopSupervised}: `runLoop`'s, less the abort signal it owns. */
export interface SupervisedLoopOptions extends Omit<RunLoopOptions, "signal"> {
  tokenizer?: ChatTokenizer;
  /** Receives each incarnation's abort signal (for work the loop's hooks start). */
  onSignal?: (signal: AbortSignal) => void;
  /** Resumes allowed before the error is thrown (default 30). */
  maxResumes?: number;
}

/**
 * Runs the loop on a supervised stack to its last step: whenever it stops (the worker
 * restarted, which aborts it; or any error while a process was down), it waits until every
 * process is up and resumes from its last checkpoint, which restores the worker.
 *
 * @example
 * ```ts ignore
 * const sup = new Supervisor({ outDir, tokenizer: "char", controllerId: "run-ctl" });
 * await sup.start();
 * const { result, resumes } = await runLoopSupervised(sup, config, { tokenizer });
 * await sup.close();
 * ```
 */
export async function runLoopSupervised(
  sup: Supervisor,
  config: LoopConfigInput,
  options: SupervisedLoopOptions = {},
): Promise<{ result: LoopResult; resumes: number }> {
  const gateway = sup.gatewayClient();
  let resume = options.resume ?? false;
  let resumes = 0;
  while (true) {
    const abort = new AbortController();
    options.onSignal?.(abort.signal);
    sup.onWorkerRestart = () => abort.abort(new Error("the worker restarted"));
    const { client } = sup.trainerClient();
    try {
      const result = await runLoop(config, {
        gateway,
        worker: client,
        workerUrl: sup.forwarderUrl,
        ...(options.tokenizer ? { tokenizer: options.tokenizer } : {}),
      }, { ...options, resume, signal: abort.signal });
      return { result, resumes };
    } catch (error) {
      if (++resumes > (options.maxResumes ?? 30)) throw error;
      resume = true;
      sup.options.log?.(
        `[supervisor] loop stopped (${(error as Error).message}); resuming from its checkpoint`,
      );
      await new Promise((res) => setTimeout(res, 500));
      while (!sup.healthy) await new Promise((res) => setTimeout(res, 200));
    }
  }
}
