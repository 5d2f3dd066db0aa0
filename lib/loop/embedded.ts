/**
 * The embedded stack of a local run, assembled with `startStack` (`lib/stack`): a SQLite gateway
 * (in `<outDir>/gateway.db`, so a resumed run finds its rollouts again) with the proxy mounted and a token-level upstream pointing at a
 * local CPU worker, and a local controller running the harness registry's harnesses (as
 * processes, or in this process for specs whose `runner` is `in_process`). The controller
 * starts only when the loop asks (after its bookkeeping rollout exists).
 *
 * @module
 */
import { GatewayClient } from "../gateway/client.ts";
import type { RunningGateway } from "../gateway/server.ts";
import { LocalBackend } from "../controller/local_backend.ts";
import { Reconciler } from "../controller/reconciler.ts";
import { harnessRegistry, type HarnessRegistryOptions } from "../harness/registry.ts";
import type { ProxyOptionsInput } from "../schema.ts";
import { type RunningStack, startStack } from "../stack/stack.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import type { TrainerClient } from "../trainer/client.ts";
import { startLocalWorker } from "../trainer/local_worker.ts";
import type { LoopServices } from "./run.ts";
import { type EngineServer, startEngineServer } from "../engine/server.ts";
import { LlamaCppSync } from "../engine/sync.ts";

/**
 * The worker a stack trains and samples with: a local CPU worker by default, or any other that
 * the trainer client reaches (`launch`/`connect` to a GPU host: a `LaunchedWorker`).
 */
export interface StackWorker {
  readonly url: string;
  readonly client: TrainerClient;
  /** Recent output of the worker process ("" when only connected). */
  logs(): string;
  close(): Promise<void>;
}

/** Options of {@link startEmbedded}. */
export interface EmbeddedOptions {
  outDir: string;
  tokenizer: ChatTokenizer;
  /** Harness processes run at once. */
  concurrency?: number;
  /** Harness registry settings (dataset directory, extra harnesses and rewards). */
  registry?: HarnessRegistryOptions;
  /** Python interpreter of the worker and torch threads (local worker only). */
  python?: string;
  threads?: number;
  /**
   * Starts the worker instead of a local CPU one, e.g.
   * `() => launch({ url: "http://gpu-host:8000" })` for a GPU host.
   */
  worker?: () => Promise<StackWorker>;
  /** Controller id (a resumed run must reuse it to re-adopt its attempts). */
  controllerId?: string;
  proxy?: ProxyOptionsInput;
  /** Receives controller log lines. */
  logger?: (line: string) => void;
  /**
   * Samples with llama.cpp instead of the worker: a reins engine (lib/engine/server.ts) starts
   * in this process without weights, the proxy's upstream is that engine (kind `llama_cpp`),
   * and the loop syncs every version to it (GGUF export + reload) before calls go through.
   */
  engine?: {
    kind: "llama_cpp";
    /** Directory with the policy's tokenizer.json (the GGUF's vocabulary). */
    tokenizerDir: string;
    /** GGUF tensor type of the exports (default f32: logprobs match the fp32 trainer). */
    type?: "f32" | "f16" | "q8_0" | "q4_0";
    /** Sequences llama.cpp generates at once (default 8). */
    slots?: number;
    threads?: number;
  };
}

/** A running embedded stack. */
export interface EmbeddedStack extends AsyncDisposable {
  gateway: RunningGateway;
  client: GatewayClient;
  worker: StackWorker;
  /** The llama.cpp engine, when the stack samples with one. */
  engine: EngineServer | null;
  reconciler: Reconciler;
  services: LoopServices;
  close(): Promise<void>;
}

/**
 * Starts worker, gateway (+ proxy) and controller (not yet started) for a run in `outDir`.
 *
 * @example
 * ```ts ignore
 * await using stack = await startEmbedded({ outDir: "runs/toy", tokenizer });
 * await runLoop(config, stack.services);
 * ```
 */
export async function startEmbedded(options: EmbeddedOptions): Promise<EmbeddedStack> {
  await Deno.mkdir(options.outDir, { recursive: true });
  // The controller's attempt wrappers run in other directories: every path must be absolute.
  const outDir = await Deno.realPath(options.outDir);
  const worker = options.worker ? await options.worker() : await startLocalWorker({
    ...(options.python ? { python: options.python } : {}),
    ...(options.threads ? { threads: options.threads } : {}),
  });
  let stack: RunningStack;
  let engine: EngineServer | null = null;
  try {
    if (options.engine) {
      engine = await startEngineServer({
        ...(options.engine.slots ? { slots: options.engine.slots } : {}),
        ...(options.engine.threads ? { threads: options.engine.threads } : {}),
      });
    }
    stack = await startStack({
      db: `${outDir}/gateway.db`,
      port: 0,
      proxy: {
        tokenizer: options.tokenizer,
        upstream: engine
          ? { kind: "llama_cpp", endpoints: [engine.url], max_retries: 2 }
          : { kind: "token_level", endpoints: [worker.url], max_retries: 2 },
        options: { max_hold_ms: 600_000, ...options.proxy },
      },
    });
  } catch (error) {
    await engine?.close();
    await worker.close();
    throw error;
  }
  const sampler = engine && options.engine
    ? {
      kind: "llama_cpp",
      url: engine.url,
      sync: new LlamaCppSync({
        endpoint: engine.url,
        dir: `${outDir}/gguf`,
        tokenizer: options.engine.tokenizerDir,
        type: options.engine.type ?? "f32",
        // Straight from the worker's memory: no checkpoint file, no exporter process per step.
        worker: worker.client,
      }),
    }
    : null;
  const gateway = stack.gateway;
  const client = new GatewayClient(gateway.url, { apiKey: gateway.adminKey });
  const registry = harnessRegistry(options.registry ?? {});
  const reconciler = new Reconciler(
    client,
    new LocalBackend({
      root: `${outDir}/controller`,
      harnesses: registry.harnesses,
      rewardFunctions: registry.rewardFunctions,
      // Harness specs with `runner: "in_process"` (the toy's arithmetic) run in this process.
      inProcess: registry.inProcess,
      pollMs: 50,
    }),
    {
      worker: options.controllerId ?? "loop-controller",
      concurrency: options.concurrency ?? 8,
      gatewayUrl: gateway.url,
      poll_ms: 50,
      lease_ms: 60_000,
      sweep_ms: 5_000,
      ...(options.logger ? { logger: options.logger } : {}),
    },
  );
  let started = false;
  const close = async () => {
    if (started) await reconciler.stop("kill").catch(() => undefined);
    await stack.close().catch(() => undefined);
    await engine?.close().catch(() => undefined);
    await worker.close().catch(() => undefined);
  };
  return {
    gateway,
    client,
    worker,
    engine,
    reconciler,
    services: {
      gateway: client,
      worker: worker.client,
      workerUrl: sampler?.url ?? worker.url,
      ...(sampler ? { engine: sampler } : {}),
      tokenizer: options.tokenizer,
      startController: async () => {
        if (started) return;
        started = true;
        await reconciler.start();
      },
    },
    close,
    [Symbol.asyncDispose]: close,
  };
}
