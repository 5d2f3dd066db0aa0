/**
 * The llama.cpp engine: the torch worker's token-level generate API (`POST /generate`: ids in;
 * ids and behaviour logprobs out; NDJSON streaming; several sequences at once) served from a
 * GGUF through `node-llama-cpp`, with the sampling done in `sampler.ts`, plus weight sync:
 *
 * - `GET /health`: `{ok, engine: "llama_cpp", policy_version, generating, queued, gguf, ...}`;
 * - `POST /generate`: the worker's body (`GenerateRequestSchema`) and two more truncations,
 *   `top_k` (0 = off) and `min_p` (0 = off); answers as the worker does, every response naming
 *   the policy version that produced all of its tokens;
 * - `POST /sync` `{version, gguf}`: loads the new GGUF beside the old one; the old version keeps
 *   serving until the new one is ready, then takes no new request and is freed once its
 *   requests are done. A version older than the one served is refused (409).
 *
 * @module
 */
import { Hono } from "hono";
import { z } from "zod";
import { HttpError } from "../util/error.ts";
import { bodyLimits, readJson } from "../http/body.ts";
import { GenerateRequestSchema } from "../schema/proxy.ts";
import { loadLlama } from "./llama_eval.ts";
import { LlamaPolicy, type PolicyLoadOptions } from "./policy.ts";
import { seededUniform } from "./sampler.ts";

/** `POST /generate` of the engine: the worker's body plus `top_k` and `min_p`. */
export const EngineGenerateRequestSchema = GenerateRequestSchema.extend({
  top_k: z.number().int().min(0).default(0),
  min_p: z.number().min(0).max(1).default(0),
});

/** `POST /sync`: serve `version` from the GGUF at `gguf`. */
export const EngineSyncRequestSchema = z.object({
  version: z.number().int().min(0),
  gguf: z.string().min(1),
});

/** Options of {@link startEngineServer}. */
export interface EngineServerOptions {
  /** The GGUF served first; without one, `/generate` answers 409 until the first `/sync`. */
  gguf?: string;
  /** Its policy version (default 0). */
  version?: number;
  hostname?: string;
  /** 0 (default): an ephemeral port. */
  port?: number;
  /** Sequences generated at once (default 8). */
  slots?: number;
  /**
   * llama.cpp CPU threads (default 1: its workers spin while waiting, and on a shared machine a
   * second thread measured 40× slower per token; raise it on a machine of your own).
   */
  threads?: number;
  /** `false` (default): llama.cpp's prebuilt CPU build; `"cuda"`: its CUDA build. */
  gpu?: false | "cuda";
  kvCacheType?: "F32" | "F16";
  /** Request bodies larger than this are refused with a 413 (default 16 MiB). */
  maxBodyBytes?: number;
}

/** A running engine. */
export interface EngineServer {
  readonly url: string;
  /** The version served to new requests (null before the first GGUF). */
  readonly version: number | null;
  /** Loads a new version (as `POST /sync`); resolves once it serves new requests. */
  sync(version: number, gguf: string): Promise<{ policy_version: number; load_ms: number }>;
  close(): Promise<void>;
}

function issuesMessage(error: z.ZodError): { message: string; field: string } {
  const issue = error.issues[0];
  const field = issue.path.length ? issue.path.join(".") : "body";
  return { message: `${field}: ${issue.message}`, field };
}

function parseBody<T extends z.ZodType>(schema: T, body: unknown): z.infer<T> {
  const parsed = schema.safeParse(body);
  if (!parsed.success) {
    const { message, field } = issuesMessage(parsed.error);
    throw new HttpError(400, message, { field });
  }
  return parsed.data;
}

/**
 * Starts the engine on `options.gguf`.
 *
 * @example
 * ```ts ignore
 * import { startEngineServer } from "./server.ts";
 * const engine = await startEngineServer({ gguf: "policy.gguf" });
 * const res = await fetch(`${engine.url}/generate`, {
 *   method: "POST",
 *   body: JSON.stringify({ prompt_ids: [5, 6, 7], max_tokens: 8, seed: 1 }),
 * });
 * console.log(await res.json()); // {ids, logprobs, finish_reason, policy_version: 0}
 * await engine.close();
 * ```
 */
export async function startEngineServer(options: EngineServerOptions): Promise<EngineServer> {
  const llama = await loadLlama(options.gpu ?? false);
  const load: PolicyLoadOptions = {
    slots: options.slots ?? 8,
    threads: options.threads ?? 1,
    gpuLayers: options.gpu ? "max" : 0,
    kvCacheType: options.kvCacheType ?? "F32",
  };
  let current: LlamaPolicy | null = options.gguf
    ? await LlamaPolicy.load(llama, options.gguf, options.version ?? 0, load)
    : null;
  const retiring = new Set<Promise<void>>();
  let syncing: Promise<unknown> = Promise.resolve();
  let syncs = 0;

  const sync = (version: number, gguf: string) => {
    // One load at a time, in order: a second sync waits for the first.
    const run = syncing.then(async () => {
      if (current && version < current.version) {
        throw new HttpError(
          409,
          `version: ${version} is older than the version served (${current.version})`,
          { field: "version" },
        );
      }
      const t0 = performance.now();
      let next: LlamaPolicy;
      try {
        next = await LlamaPolicy.load(llama, gguf, version, load);
      } catch (error) {
        throw new HttpError(
          400,
          `gguf: llama.cpp cannot load ${gguf}: ${(error as Error).message}`,
          { field: "gguf" },
        );
      }
      const old = current;
      current = next;
      syncs++;
      if (old) {
        const done = old.retire();
        retiring.add(done);
        done.finally(() => retiring.delete(done));
      }
      return { policy_version: version, load_ms: performance.now() - t0 };
    });
    syncing = run.catch(() => undefined);
    return run;
  };

  const app = new Hono();
  app.onError((error) => {
    const http = error instanceof HttpError
      ? error
      : new HttpError(500, `engine: ${(error as Error).message}`);
    return http.toResponse();
  });
  // A prompt of a full context is well under this; larger bodies are refused as they arrive.
  app.use("*", bodyLimits({ maxBytes: options.maxBodyBytes ?? 16 * 1024 * 1024 }));
  app.get("/health", (c) =>
    c.json({
      ok: true,
      engine: "llama_cpp",
      initialized: current !== null,
      policy_version: current?.version ?? null,
      gguf: current?.path ?? null,
      generating: current?.active ?? 0,
      queued: current?.queued ?? 0,
      retiring: retiring.size,
      syncs,
      slots: load.slots,
      max_seq_len: current?.maxSeqLen ?? null,
      device: options.gpu ? "cuda" : "cpu",
    }));
  app.post("/sync", async (c) => {
    const body = parseBody(EngineSyncRequestSchema, await readJson(c.req.raw));
    return c.json(await sync(body.version, body.gguf));
  });
  app.post("/generate", async (c) => {
    const spec = parseBody(EngineGenerateRequestSchema, await readJson(c.req.raw));
    const policy = current; // the version this whole response comes from
    if (!policy) {
      throw new HttpError(409, "no policy loaded: POST /sync {version, gguf} first", {
        code: "not_initialized",
      });
    }
    spec.prompt_ids.forEach((id, i) => {
      if (id >= policy.vocabSize) {
        throw new HttpError(
          400,
          `prompt_ids[${i}]: token id ${id} is outside the vocabulary (${policy.vocabSize})`,
          { field: `prompt_ids[${i}]` },
        );
      }
    });
    if (spec.prompt_ids.length >= policy.maxSeqLen) {
      throw new HttpError(
        400,
        `prompt_ids: ${spec.prompt_ids.length} tokens leave no room in the context ` +
          `(${policy.maxSeqLen})`,
        { field: "prompt_ids" },
      );
    }
    const generation = (onToken: (id: number, lp: number) => void, signal?: AbortSignal) =>
      policy.generate({
        promptIds: spec.prompt_ids,
        maxTokens: spec.max_tokens,
        stopIds: new Set(spec.stop_ids),
        sampling: {
          temperature: spec.temperature,
          top_p: spec.top_p,
          top_k: spec.top_k,
          min_p: spec.min_p,
        },
        uniform: seededUniform(spec.seed),
        onToken,
        ...(signal ? { signal } : {}),
      });
    if (!spec.stream) {
      const ids: number[] = [];
      const logprobs: number[] = [];
      const end = await generation((id, lp) => {
        ids.push(id);
        logprobs.push(lp);
      }, c.req.raw.signal);
      return c.json({ ids, logprobs, ...end });
    }
    const encoder = new TextEncoder();
    const abort = new AbortController();
    const body = new ReadableStream<Uint8Array>({
      start(sink) {
        const line = (value: unknown) => {
          try {
            sink.enqueue(encoder.encode(JSON.stringify(value) + "\n"));
          } catch {
            abort.abort(); // the reader went away: stop sampling for it
          }
        };
        generation((id, lp) => line({ ids: [id], logprobs: [lp] }), abort.signal)
          .then((end) => line({ done: true, ...end }))
          .catch((error) => line({ error: { code: "internal", message: String(error) } }))
          .finally(() => {
            try {
              sink.close();
            } catch {
              // already closed by a cancel
            }
          });
      },
      cancel() {
        abort.abort();
      },
    });
    return new Response(body, { headers: { "content-type": "application/x-ndjson" } });
  });

  const server = Deno.serve({
    hostname: options.hostname ?? "127.0.0.1",
    port: options.port ?? 0,
    onListen: () => {},
  }, app.fetch);
  const addr = server.addr as Deno.NetAddr;
  return {
    url: `http://${addr.hostname}:${addr.port}`,
    get version() {
      return current?.version ?? null;
    },
    sync,
    async close() {
      await server.shutdown();
      await syncing;
      await Promise.all([...retiring]);
      await current?.retire();
    },
  };
}
