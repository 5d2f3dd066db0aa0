/**
 * One weight-sync protocol for every engine kind: after each optimizer step the loop calls
 * `syncWeights(version, checkpoint)` (the checkpoint the worker just saved) and registers the
 * version only once the engine serves it. Each engine takes the weights its own way:
 *
 * | kind        | how                                                                     |
 * |-------------|-------------------------------------------------------------------------|
 * | `worker`    | in memory: the worker that trains also samples; sync checks its version |
 * | `llama_cpp` | GGUF export (f32 by default) + `POST /sync` on the reins engine; the    |
 * |             | old weights serve until the new ones are loaded                         |
 * | `sglang`    | HF export + `POST /update_weights_from_disk` `{model_path,              |
 * |             | weight_version}` (SGLang's native server; `{success, message}` back)    |
 * | `vllm`      | HF export into the served model directory + `POST /collective_rpc`      |
 * |             | `{"method": "reload_weights"}` + `POST /reset_prefix_cache` (vLLM ≥     |
 * |             | 0.10 with `VLLM_SERVER_DEV_MODE=1`, which exposes both endpoints)        |
 *
 * `probe()` checks before a run starts that the engine can take new weights at all; a run on
 * an engine without a sync (a plain OpenAI-compatible server) or whose probe fails refuses to
 * start (`requireSync`), instead of training a policy the engine never serves.
 *
 * @module
 */
import { join } from "node:path";
import { exportCheckpoint } from "./export.ts";
import type { TrainerClient } from "../trainer/client.ts";

/** Which engine samples the policy. */
export type EngineKind = "worker" | "llama_cpp" | "sglang" | "vllm";

/** What one sync did. */
export interface SyncReport {
  kind: EngineKind;
  version: number;
  /** Checkpoint conversion (0 for the worker). */
  export_ms: number;
  /** The engine's own load, as measured from here. */
  load_ms: number;
  total_ms: number;
}

/** An engine the loop can push new weights to. */
export interface WeightSync {
  readonly kind: EngineKind;
  /** Where the engine serves (`/generate` or the OpenAI API). */
  readonly endpoint: string;
  /**
   * Whether `syncWeights` reads the checkpoint file; false when it exports straight from the
   * worker's memory (`POST /export`), so the loop need not save one each step.
   */
  readonly needsCheckpoint: boolean;
  /** Throws {@link EngineSyncError} naming why when the engine cannot take new weights. */
  probe(): Promise<void>;
  /** Makes the engine serve `version` from the worker checkpoint at `checkpoint`. */
  syncWeights(version: number, checkpoint: string): Promise<SyncReport>;
}

/** An engine cannot be synced (or a sync failed); the message says which and why. */
export class EngineSyncError extends Error {
  override name = "EngineSyncError";
}

/** Converts a worker checkpoint to GGUF and/or an HF directory (`reins_worker.export`). */
export interface Exporter {
  (request: {
    checkpoint: string;
    gguf?: string;
    type?: "f32" | "f16" | "q8_0" | "q4_0";
    hf?: string;
    dtype?: "float32" | "bfloat16" | "float16";
    tokenizer?: string;
  }): Promise<void>;
}

/**
 * The worker's exporter (`exportCheckpoint`: `python3 -m reins_worker.export` with the worker's
 * Python); its refusals become {@link EngineSyncError}s.
 *
 * @example
 * ```ts ignore
 * await pythonExporter({ checkpoint: "v3.pt", gguf: "v3.gguf", type: "f32", tokenizer: "tok" });
 * ```
 */
export const pythonExporter: Exporter = async (request) => {
  try {
    await exportCheckpoint(request);
  } catch (error) {
    throw new EngineSyncError(
      `export of ${request.checkpoint} failed: ${(error as Error).message}`,
    );
  }
};

async function call(
  url: string,
  init: RequestInit & { timeoutMs?: number },
  what: string,
): Promise<Response> {
  let response: Response;
  try {
    response = await fetch(url, {
      ...init,
      signal: AbortSignal.timeout(init.timeoutMs ?? 600_000),
    });
  } catch (error) {
    throw new EngineSyncError(`${what}: ${url} unreachable: ${(error as Error).message}`);
  }
  return response;
}

async function postJson(url: string, body: unknown, what: string): Promise<Response> {
  return await call(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify(body),
  }, what);
}

async function failure(response: Response, what: string): Promise<EngineSyncError> {
  const text = (await response.text().catch(() => "")).slice(0, 400);
  return new EngineSyncError(`${what}: ${response.url} answered ${response.status} ${text}`);
}

/**
 * The torch worker samples what it trains: there is nothing to move, only a version to check.
 *
 * @example
 * ```ts ignore
 * const sync = new WorkerSync(worker.url, worker.client);
 * await sync.syncWeights(3, ""); // throws unless the worker is at version 3
 * ```
 */
export class WorkerSync implements WeightSync {
  readonly kind = "worker" as const;
  readonly needsCheckpoint = false;
  readonly endpoint: string;
  readonly #client: Pick<TrainerClient, "health" | "state">;

  constructor(endpoint: string, client: Pick<TrainerClient, "health" | "state">) {
    this.endpoint = endpoint;
    this.#client = client;
  }

  async probe(): Promise<void> {
    await this.#client.health();
  }

  async syncWeights(version: number, _checkpoint: string): Promise<SyncReport> {
    const t0 = performance.now();
    const state = await this.#client.state();
    if (state.policy_version !== version) {
      throw new EngineSyncError(
        `worker ${this.endpoint} holds version ${state.policy_version}, not ${version}`,
      );
    }
    const ms = performance.now() - t0;
    return { kind: this.kind, version, export_ms: 0, load_ms: ms, total_ms: ms };
  }
}

/**
 * An exporter that writes the worker's weights straight from its memory (`POST /export`),
 * checking that they are the version being synced: no checkpoint file, no second Python.
 *
 * @example
 * ```ts ignore
 * const sync = new LlamaCppSync({ endpoint, dir, tokenizer, worker: stack.worker.client });
 * ```
 */
async function exportFromWorker(
  worker: Pick<TrainerClient, "exportWeights">,
  version: number,
  request: Parameters<Exporter>[0],
): Promise<void> {
  const { checkpoint: _unused, ...what } = request;
  const out = await worker.exportWeights(what).catch((error) => {
    throw new EngineSyncError(`export from the worker failed: ${(error as Error).message}`);
  });
  if (out.policy_version !== version) {
    throw new EngineSyncError(
      `the worker holds version ${out.policy_version}, not ${version}: nothing synced`,
    );
  }
}

/** Where an export's weights come from. */
interface Source {
  /** Export from this worker's memory (else: the exporter on the checkpoint file). */
  worker?: Pick<TrainerClient, "exportWeights">;
  exporter?: Exporter;
}

/** What every engine that loads exported files is told: where it serves, where weights come from. */
interface ExportTarget extends Source {
  /** The engine's base URL (trailing slashes are dropped). */
  endpoint: string;
}

function runExport(source: Source, version: number, request: Parameters<Exporter>[0]) {
  if (source.worker) return exportFromWorker(source.worker, version, request);
  return (source.exporter ?? pythonExporter)(request);
}

/**
 * What the engines that read exported files share: the endpoint without its trailing slashes,
 * whether a checkpoint file is needed, and a sync in two timed phases (export the version's
 * weights where the engine reads them, then have the engine load them).
 */
abstract class ExportThenLoad<Options extends ExportTarget> implements WeightSync {
  abstract readonly kind: EngineKind;
  readonly endpoint: string;
  readonly needsCheckpoint: boolean;
  protected readonly options: Options;

  constructor(options: Options) {
    this.endpoint = options.endpoint.replace(/\/+$/, "");
    this.needsCheckpoint = !options.worker;
    this.options = options;
  }

  abstract probe(): Promise<void>;

  /** Writes `version`'s weights where the engine reads them; returns that path. */
  protected abstract export(version: number, checkpoint: string): Promise<string>;

  /** Has the engine serve the weights that {@link export} wrote at `path`. */
  protected abstract load(version: number, path: string): Promise<void>;

  async syncWeights(version: number, checkpoint: string): Promise<SyncReport> {
    const t0 = performance.now();
    const path = await this.export(version, checkpoint);
    const t1 = performance.now();
    await this.load(version, path);
    const t2 = performance.now();
    return { kind: this.kind, version, export_ms: t1 - t0, load_ms: t2 - t1, total_ms: t2 - t0 };
  }
}

/** Options of the engines that load an HF directory ({@link SglangSync}, {@link VllmSync}). */
interface HfExportOptions extends ExportTarget {
  tokenizer?: string;
  dtype?: "float32" | "bfloat16" | "float16";
}

/** Exports `version` as an HF directory at `dir` (bfloat16 unless the options say otherwise). */
function exportHf(options: HfExportOptions, version: number, checkpoint: string, dir: string) {
  return runExport(options, version, {
    checkpoint,
    hf: dir,
    dtype: options.dtype ?? "bfloat16",
    ...(options.tokenizer ? { tokenizer: options.tokenizer } : {}),
  });
}

/** Options of {@link LlamaCppSync}. */
export interface LlamaCppSyncOptions extends ExportTarget {
  /** Where the GGUF exports go (one file per version; older ones are removed). */
  dir: string;
  /** Directory with the policy's tokenizer.json (the GGUF's vocabulary). */
  tokenizer: string;
  type?: "f32" | "f16" | "q8_0" | "q4_0";
}

/**
 * The reins llama.cpp engine: GGUF export, then `POST /sync {version, gguf}`.
 *
 * @example
 * ```ts ignore
 * const sync = new LlamaCppSync({ endpoint: engine.url, dir: "runs/x/gguf", tokenizer });
 * await sync.syncWeights(1, "runs/x/checkpoints/sync.pt");
 * ```
 */
export class LlamaCppSync extends ExportThenLoad<LlamaCppSyncOptions> {
  readonly kind = "llama_cpp" as const;
  #previous: string | null = null;

  async probe(): Promise<void> {
    const response = await call(`${this.endpoint}/health`, {}, "llama_cpp probe");
    const body = response.ok ? await response.json().catch(() => null) : null;
    if (body?.engine !== "llama_cpp") {
      throw new EngineSyncError(
        `llama_cpp probe: ${this.endpoint}/health is not the reins llama.cpp engine ` +
          `(status ${response.status})`,
      );
    }
  }

  protected async export(version: number, checkpoint: string): Promise<string> {
    await Deno.mkdir(this.options.dir, { recursive: true });
    const gguf = join(this.options.dir, `policy-v${version}.gguf`);
    await runExport(this.options, version, {
      checkpoint,
      gguf,
      type: this.options.type ?? "f32",
      tokenizer: this.options.tokenizer,
    });
    return gguf;
  }

  protected async load(version: number, gguf: string): Promise<void> {
    const response = await postJson(`${this.endpoint}/sync`, { version, gguf }, "llama_cpp sync");
    if (!response.ok) throw await failure(response, "llama_cpp sync");
    await response.body?.cancel();
    // The engine has let go of the previous file (it maps the new one).
    if (this.#previous && this.#previous !== gguf) {
      await Deno.remove(this.#previous).catch(() => undefined);
    }
    this.#previous = gguf;
  }
}

/** Options of {@link SglangSync}. */
export interface SglangSyncOptions extends HfExportOptions {
  /** Where HF exports go; SGLang must read the same path (shared disk). */
  dir: string;
}

/**
 * SGLang's native server: HF export, then `POST /update_weights_from_disk` with
 * `{model_path, weight_version, abort_all_requests: false}`; SGLang answers
 * `{success, message, num_paused_requests}` (400 with `success: false` on failure).
 *
 * @example
 * ```ts ignore
 * const sync = new SglangSync({ endpoint: "http://sglang:30000", dir: "/shared/policy" });
 * ```
 */
export class SglangSync extends ExportThenLoad<SglangSyncOptions> {
  readonly kind = "sglang" as const;

  async probe(): Promise<void> {
    const response = await call(`${this.endpoint}/get_model_info`, {}, "sglang probe");
    if (!response.ok) throw await failure(response, "sglang probe");
    await response.body?.cancel();
  }

  protected async export(version: number, checkpoint: string): Promise<string> {
    const dir = join(this.options.dir, `policy-v${version}`);
    await exportHf(this.options, version, checkpoint, dir);
    return dir;
  }

  protected async load(version: number, dir: string): Promise<void> {
    const response = await postJson(`${this.endpoint}/update_weights_from_disk`, {
      model_path: dir,
      weight_version: String(version),
      abort_all_requests: false,
    }, "sglang update_weights_from_disk");
    const body = await response.json().catch(() => null) as
      | { success?: boolean; message?: string }
      | null;
    if (!response.ok || body?.success !== true) {
      throw new EngineSyncError(
        `sglang update_weights_from_disk: ${this.endpoint} answered ${response.status}: ` +
          (body?.message ?? "no message"),
      );
    }
  }
}

/** Options of {@link VllmSync}. */
export interface VllmSyncOptions extends HfExportOptions {
  /** The directory vLLM serves (`vllm serve <modelDir>`): the export overwrites it. */
  modelDir: string;
}

/**
 * vLLM's OpenAI server in dev mode (`VLLM_SERVER_DEV_MODE=1`, vLLM ≥ 0.10): the HF export
 * replaces the files of the served model directory, then `POST /collective_rpc`
 * `{"method": "reload_weights"}` has every worker reload them in place (answer: 200, with
 * `{"results": [...]}` or empty), and `POST /reset_prefix_cache` drops KV entries computed
 * with the old weights. Without dev mode those endpoints do not exist: the probe's
 * `GET /is_sleeping` (also dev mode only) answers 404 and the run refuses to start.
 *
 * @example
 * ```ts ignore
 * const sync = new VllmSync({ endpoint: "http://vllm:8000", modelDir: "/shared/policy" });
 * ```
 */
export class VllmSync extends ExportThenLoad<VllmSyncOptions> {
  readonly kind = "vllm" as const;

  async probe(): Promise<void> {
    const response = await call(`${this.endpoint}/is_sleeping`, {}, "vllm probe");
    await response.body?.cancel();
    if (response.status === 404) {
      throw new EngineSyncError(
        `vllm probe: ${this.endpoint} has no dev-mode endpoints (/collective_rpc); start it ` +
          `with VLLM_SERVER_DEV_MODE=1 so that reins can reload its weights`,
      );
    }
    if (!response.ok) throw new EngineSyncError(`vllm probe: answered ${response.status}`);
  }

  protected async export(version: number, checkpoint: string): Promise<string> {
    // Export beside the served directory, then move the files in: vLLM never reads a torn file.
    const staging = `${this.options.modelDir.replace(/\/+$/, "")}.staging-v${version}`;
    await exportHf(this.options, version, checkpoint, staging);
    await Deno.mkdir(this.options.modelDir, { recursive: true });
    for await (const entry of Deno.readDir(staging)) {
      await Deno.rename(join(staging, entry.name), join(this.options.modelDir, entry.name));
    }
    await Deno.remove(staging, { recursive: true });
    return this.options.modelDir;
  }

  protected async load(_version: number, _modelDir: string): Promise<void> {
    const reload = await postJson(
      `${this.endpoint}/collective_rpc`,
      { method: "reload_weights" },
      "vllm collective_rpc",
    );
    if (!reload.ok) throw await failure(reload, "vllm collective_rpc reload_weights");
    await reload.body?.cancel();
    const reset = await call(`${this.endpoint}/reset_prefix_cache`, { method: "POST" }, "vllm");
    if (!reset.ok) throw await failure(reset, "vllm reset_prefix_cache");
    await reset.body?.cancel();
  }
}

/**
 * Refuses a run on an engine it cannot sync: throws {@link EngineSyncError} when `sync` is
 * null (an engine kind without a sync protocol, e.g. a plain OpenAI-compatible server) or its
 * probe fails.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { requireSync } from "./sync.ts";
 * await assert.rejects(
 *   requireSync({ kind: "openai_compatible", url: "http://127.0.0.1:9" }, null),
 *   /openai_compatible engine at http:\/\/127\.0\.0\.1:9 cannot sync weights/,
 * );
 * ```
 */
export async function requireSync(
  engine: { kind: string; url: string },
  sync: WeightSync | null,
): Promise<WeightSync> {
  if (!sync) {
    throw new EngineSyncError(
      `${engine.kind} engine at ${engine.url} cannot sync weights: the run would keep sampling ` +
        `the initial policy while the trainer moves on (use worker, llama_cpp, sglang or vllm)`,
    );
  }
  try {
    await sync.probe();
  } catch (error) {
    throw new EngineSyncError(
      `${sync.kind} engine at ${sync.endpoint} cannot sync weights: ${(error as Error).message}`,
    );
  }
  return sync;
}
