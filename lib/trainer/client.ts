/**
 * Typed HTTP client of the reins trainer worker (`lib/trainer/worker`).
 *
 * Requests are validated before they leave (a `ValidationError` names the bad field); worker
 * errors surface as an {@link HttpError} with the HTTP status (0: unreachable), the worker's
 * error code and, for 4xx, the offending field. Streamed replies are read with the one NDJSON
 * line reader of `lib/http/lines.ts`.
 *
 * @module
 */
import type { z } from "zod";
import { HttpError } from "../util/error.ts";
import { readLines } from "../http/lines.ts";
import {
  type CheckpointResponse,
  CheckpointResponseSchema,
  type ForwardBackwardRequest,
  ForwardBackwardRequestSchema,
  type ForwardBackwardResponse,
  ForwardBackwardResponseSchema,
  GenerateRequestSchema,
  type GenerateResponse,
  GenerateResponseSchema,
  type GenerateStreamLine,
  GenerateStreamLineSchema,
  LogprobsRequestSchema,
  type LogprobsResponse,
  LogprobsResponseSchema,
  type OptimStepResponse,
  OptimStepResponseSchema,
  parseOrThrow,
  WorkerErrorBodySchema,
  type WorkerExportRequest,
  WorkerExportRequestSchema,
  type WorkerExportResponse,
  WorkerExportResponseSchema,
  type WorkerGradients,
  WorkerGradientsSchema,
  type WorkerHealth,
  WorkerHealthSchema,
  type WorkerInitRequest,
  WorkerInitRequestSchema,
  type WorkerState,
  WorkerStateSchema,
} from "../schema.ts";

/** A generate request as a caller writes it (defaults optional). */
export type GenerateInput = z.input<typeof GenerateRequestSchema>;

/**
 * The trainer client's error: {@link HttpError} itself (kept as a name for existing code).
 *
 * @deprecated Use `HttpError` from `lib/util/error.ts`.
 */
export const TrainerWorkerError = HttpError;
/** The trainer client's error (see {@link HttpError}). */
export type TrainerWorkerError = HttpError;

/** Options of {@link TrainerClient}. */
export interface TrainerClientOptions {
  /** Per-request timeout in ms (default 10 minutes: a GPU step on a large batch is slow). */
  timeoutMs?: number;
}

/** Combined end of a streamed generation. */
export interface GenerateStreamDone {
  done: true;
  finish_reason: "stop" | "length";
  policy_version: number;
}

/**
 * Client of one trainer worker.
 *
 * @example
 * ```ts ignore
 * import { TrainerClient } from "./client.ts";
 * const client = new TrainerClient("http://127.0.0.1:8300");
 * await client.init({
 *   model: {
 *     kind: "builtin",
 *     config: {
 *       vocab_size: 64, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, d_ff: 64,
 *       max_seq_len: 128,
 *     },
 *   },
 * });
 * const out = await client.generate({ prompt_ids: [1, 2, 3], max_tokens: 8 });
 * out.ids.length; // <= 8
 * ```
 */
export class TrainerClient {
  /** Base URL without a trailing slash. */
  readonly url: string;
  readonly #timeoutMs: number;

  constructor(url: string, options: TrainerClientOptions = {}) {
    this.url = url.replace(/\/+$/, "");
    this.#timeoutMs = options.timeoutMs ?? 600_000;
  }

  async #request<S extends z.ZodType>(
    method: "GET" | "POST",
    path: string,
    body: unknown,
    schema: S,
    signal?: AbortSignal,
  ): Promise<z.infer<S>> {
    const response = await this.#fetch(method, path, body, signal);
    const json = await response.json();
    return parseOrThrow(schema, json, "response");
  }

  async #fetch(
    method: "GET" | "POST",
    path: string,
    body: unknown,
    signal?: AbortSignal,
    timeout = true,
  ): Promise<Response> {
    const controller = new AbortController();
    const onAbort = () => controller.abort(signal?.reason);
    signal?.addEventListener("abort", onAbort, { once: true });
    const timer = timeout
      ? setTimeout(
        () => controller.abort(new Error(`timed out after ${this.#timeoutMs} ms`)),
        this.#timeoutMs,
      )
      : undefined;
    let response: Response;
    try {
      response = await fetch(`${this.url}${path}`, {
        method,
        headers: body === undefined ? undefined : { "content-type": "application/json" },
        body: body === undefined ? undefined : JSON.stringify(body),
        signal: controller.signal,
      });
    } catch (error) {
      const reason = error instanceof Error ? error.message : String(error);
      throw new HttpError(
        0,
        `trainer worker at ${this.url} did not answer ${method} ${path}: ${reason}`,
        { code: "unreachable", cause: error },
      );
    } finally {
      if (timer !== undefined) clearTimeout(timer);
      signal?.removeEventListener("abort", onAbort);
    }
    if (!response.ok) throw await errorFrom(response, method, path);
    return response;
  }

  /** `GET /health`: liveness and the current policy version. */
  health(): Promise<WorkerHealth> {
    return this.#request("GET", "/health", undefined, WorkerHealthSchema);
  }

  /** `GET /state`: device, dtype, parameter count, versions, fingerprints. */
  state(): Promise<WorkerState> {
    return this.#request("GET", "/state", undefined, WorkerStateSchema);
  }

  /** `POST /init`: loads a policy (built-in from config + seed, a checkpoint, or HF). */
  async init(request: WorkerInitRequest): Promise<WorkerState> {
    const body = parseOrThrow(WorkerInitRequestSchema, request);
    return await this.#request("POST", "/init", body, WorkerStateSchema);
  }

  /** `POST /save`: writes weights, optimizer state and policy version to `path` (worker-side). */
  save(path: string): Promise<CheckpointResponse> {
    return this.#request("POST", "/save", { path }, CheckpointResponseSchema);
  }

  /**
   * `POST /export`: writes the weights held now as a GGUF and/or an HF directory (worker-side
   * paths), without a checkpoint round trip; answers the version written.
   */
  async exportWeights(request: WorkerExportRequest): Promise<WorkerExportResponse> {
    const body = parseOrThrow(WorkerExportRequestSchema, request);
    return await this.#request("POST", "/export", body, WorkerExportResponseSchema);
  }

  /** `POST /load`: restores weights, optimizer state and policy version from `path`. */
  load(path: string): Promise<CheckpointResponse> {
    return this.#request("POST", "/load", { path }, CheckpointResponseSchema);
  }

  /** `POST /generate` (non-streaming): sampled ids, their logprobs and the finish reason. */
  async generate(request: GenerateInput, signal?: AbortSignal): Promise<GenerateResponse> {
    const body = { ...parseOrThrow(GenerateRequestSchema, request), stream: false };
    return await this.#request("POST", "/generate", body, GenerateResponseSchema, signal);
  }

  /**
   * `POST /generate` with `stream: true`: yields `{ids, logprobs}` chunks as tokens are
   * produced, then the final `{done: true, ...}` line. Abort `signal` (or stop iterating) to
   * cancel the generation on the worker.
   */
  async *generateStream(
    request: GenerateInput,
    signal?: AbortSignal,
  ): AsyncGenerator<GenerateStreamLine, void, void> {
    const body = { ...parseOrThrow(GenerateRequestSchema, request), stream: true };
    const response = await this.#fetch("POST", "/generate", body, signal, false);
    for await (const line of readLines(response.body!)) {
      const parsed = parseOrThrow(GenerateStreamLineSchema, JSON.parse(line), "stream");
      if ("error" in parsed) {
        throw new HttpError(500, parsed.error.message, { code: parsed.error.code ?? "error" });
      }
      yield parsed;
      if ("done" in parsed) return;
    }
    throw new HttpError(0, "generate stream ended without a done line", { code: "truncated" });
  }

  /**
   * `POST /logprobs`: per-token logprobs and entropies of the current policy for each
   * sequence; index 0 of each sequence is 0 (nothing predicts the first token).
   */
  async logprobs(sequences: number[][], options: { temperature?: number } = {}): Promise<
    LogprobsResponse
  > {
    const body = parseOrThrow(LogprobsRequestSchema, { sequences, ...options });
    return await this.#request("POST", "/logprobs", body, LogprobsResponseSchema);
  }

  /**
   * `POST /forward_backward`: accumulates the gradient of Σ w·ℓ over the rows' trained tokens.
   * Gradients add up across calls until {@link optimStep} or {@link zeroGrad}.
   */
  async forwardBackward(request: ForwardBackwardRequest): Promise<ForwardBackwardResponse> {
    const body = parseOrThrow(ForwardBackwardRequestSchema, request);
    return await this.#request("POST", "/forward_backward", body, ForwardBackwardResponseSchema);
  }

  /** `POST /optim_step`: AdamW step with gradient clipping; bumps the policy version. */
  optimStep(): Promise<OptimStepResponse> {
    return this.#request("POST", "/optim_step", {}, OptimStepResponseSchema);
  }

  /** `POST /zero_grad`: drops accumulated gradients. */
  async zeroGrad(): Promise<void> {
    const response = await this.#fetch("POST", "/zero_grad", {});
    await response.body?.cancel();
  }

  /** `POST /debug/gradients`: the accumulated gradient, flattened (tiny models only). */
  gradients(): Promise<WorkerGradients> {
    return this.#request("POST", "/debug/gradients", {}, WorkerGradientsSchema);
  }
}

async function errorFrom(
  response: Response,
  method: string,
  path: string,
): Promise<HttpError> {
  const text = await response.text();
  let parsed: ReturnType<typeof WorkerErrorBodySchema.safeParse> | undefined;
  try {
    parsed = WorkerErrorBodySchema.safeParse(JSON.parse(text));
  } catch {
    parsed = undefined;
  }
  if (parsed?.success) {
    const { code, message, field } = parsed.data.error;
    return new HttpError(response.status, message, { code, ...(field ? { field } : {}) });
  }
  return new HttpError(
    response.status,
    `${method} ${path} failed with HTTP ${response.status}: ${text.slice(0, 500)}`,
    { code: "http_error" },
  );
}

/**
 * Connects to a running worker (e.g. on a GPU box) after checking that it answers `/health`.
 *
 * @example
 * ```ts ignore
 * import { connect } from "./client.ts";
 * const client = await connect("http://gpu-box:8300");
 * (await client.state()).device; // "cuda:0"
 * ```
 */
export async function connect(
  url: string,
  options: TrainerClientOptions = {},
): Promise<TrainerClient> {
  const client = new TrainerClient(url, options);
  await client.health();
  return client;
}
