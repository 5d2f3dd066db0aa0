/**
 * Token-level upstream clients: ids in, ids + logprobs out. Two protocols:
 * the reins generate protocol (`prompt_ids`, NDJSON streaming; the trainer worker speaks it)
 * and SGLang's native `/generate` (`input_ids`, `sampling_params`, `return_logprob`, SSE).
 *
 * @module
 */
import { readLines } from "../../http/lines.ts";
import { readSse } from "../../http/sse.ts";
import { intArray } from "../../util/arrays.ts";
import { GenerateResponseSchema, GenerateStreamLineSchema } from "../../schema.ts";
import type { Sampling } from "../codecs/types.ts";
import { type TryContext, UpstreamError, upstreamHttpError } from "./pool.ts";

/** What a token-level call asks for. */
export interface TokenRequest {
  promptIds: Uint32Array;
  sampling: Sampling;
  stopIds: readonly number[];
  /** Stream from the upstream (chunks reach `onTokens` as they arrive). */
  stream: boolean;
  /** Receives each chunk of new ids and their logprobs. */
  onTokens(ids: number[], logprobs: number[]): void;
}

/** What a token-level call returned. */
export interface TokenResult {
  ids: number[];
  logprobs: number[];
  finish_reason: "stop" | "length";
  /** Null when the upstream does not say (SGLang): the model registry decides. */
  policy_version: number | null;
}

/** One token-level protocol. */
export interface TokenUpstream {
  readonly kind: "token_level" | "sglang";
  generate(request: TokenRequest, ctx: TryContext): Promise<TokenResult>;
}

function protocolError(endpoint: string, message: string): UpstreamError {
  return new UpstreamError(`upstream ${endpoint}: ${message}`, { status: 502, retryable: false });
}

async function post(
  url: string,
  body: unknown,
  ctx: TryContext,
  headers: Record<string, string> = {},
) {
  const response = await ctx.fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
    signal: ctx.signal,
  });
  if (!response.ok) throw await upstreamHttpError(response, ctx.endpoint);
  if (!response.body) throw protocolError(ctx.endpoint, "empty body");
  return response;
}

/**
 * The reins generate protocol (`POST {endpoint}/generate`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ReinsGenerateUpstream } from "./token_level.ts";
 * const upstream = new ReinsGenerateUpstream();
 * assert.equal(upstream.kind, "token_level");
 * ```
 */
export class ReinsGenerateUpstream implements TokenUpstream {
  readonly kind = "token_level" as const;

  async generate(request: TokenRequest, ctx: TryContext): Promise<TokenResult> {
    const body = {
      prompt_ids: intArray(request.promptIds),
      max_tokens: request.sampling.max_tokens,
      temperature: request.sampling.temperature,
      top_p: request.sampling.top_p,
      stop_ids: [...request.stopIds],
      seed: request.sampling.seed,
      stream: request.stream,
    };
    const response = await post(`${ctx.endpoint}/generate`, body, ctx);
    if (!request.stream) {
      let json: unknown;
      try {
        json = await response.json();
      } catch (err) {
        throw protocolError(ctx.endpoint, `invalid JSON: ${(err as Error).message}`);
      }
      const parsed = GenerateResponseSchema.safeParse(json);
      if (!parsed.success) throw protocolError(ctx.endpoint, parsed.error.issues[0].message);
      request.onTokens(parsed.data.ids, parsed.data.logprobs);
      return { ...parsed.data };
    }
    const ids: number[] = [];
    const logprobs: number[] = [];
    for await (const line of readLines(response.body!, { onChunk: ctx.touch })) {
      let json: unknown;
      try {
        json = JSON.parse(line);
      } catch {
        throw protocolError(ctx.endpoint, `invalid NDJSON line: ${line.slice(0, 200)}`);
      }
      const parsed = GenerateStreamLineSchema.safeParse(json);
      if (!parsed.success) throw protocolError(ctx.endpoint, parsed.error.issues[0].message);
      const chunk = parsed.data;
      if ("error" in chunk) {
        throw new UpstreamError(`upstream ${ctx.endpoint}: ${chunk.error.message}`, {
          status: 502,
          retryable: ids.length === 0,
        });
      }
      if ("done" in chunk) {
        return {
          ids,
          logprobs,
          finish_reason: chunk.finish_reason,
          policy_version: chunk.policy_version,
        };
      }
      ids.push(...chunk.ids);
      logprobs.push(...chunk.logprobs);
      if (chunk.ids.length > 0) request.onTokens(chunk.ids, chunk.logprobs);
    }
    throw new UpstreamError(`upstream ${ctx.endpoint}: stream ended without a done line`, {
      status: 502,
      retryable: ids.length === 0,
    });
  }
}

interface SglangMeta {
  finish_reason?: { type?: string; matched?: unknown } | null;
  output_token_logprobs?: Array<[number | null, number, unknown]>;
}

/**
 * SGLang's native `POST {endpoint}/generate` with `input_ids`. SGLang reports no policy
 * version (the registry supplies it). Logprobs are of SGLang's sampling distribution.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { SglangUpstream } from "./token_level.ts";
 * assert.equal(new SglangUpstream({ incremental: false }).kind, "sglang");
 * ```
 */
export class SglangUpstream implements TokenUpstream {
  readonly kind = "sglang" as const;
  #incremental: boolean;

  constructor(options: { incremental: boolean }) {
    this.#incremental = options.incremental;
  }

  async generate(request: TokenRequest, ctx: TryContext): Promise<TokenResult> {
    const body = {
      input_ids: intArray(request.promptIds),
      sampling_params: {
        max_new_tokens: request.sampling.max_tokens,
        temperature: request.sampling.temperature,
        top_p: request.sampling.top_p,
        stop_token_ids: [...request.stopIds],
        skip_special_tokens: false,
        no_stop_trim: true,
        ...(request.sampling.seed !== null ? { sampling_seed: request.sampling.seed } : {}),
      },
      return_logprob: true,
      stream: request.stream,
    };
    const response = await post(`${ctx.endpoint}/generate`, body, ctx);
    const ids: number[] = [];
    const logprobs: number[] = [];
    let meta: SglangMeta = {};
    const take = (m: SglangMeta) => {
      const entries = m.output_token_logprobs ?? [];
      const fresh = this.#incremental || !request.stream ? entries : entries.slice(ids.length);
      const newIds: number[] = [];
      const newLps: number[] = [];
      for (const [lp, id] of fresh) {
        if (typeof lp !== "number" || !Number.isFinite(lp) || !Number.isInteger(id)) {
          throw protocolError(ctx.endpoint, "output_token_logprobs must hold [finite logprob, id]");
        }
        newIds.push(id);
        newLps.push(lp);
      }
      ids.push(...newIds);
      logprobs.push(...newLps);
      if (newIds.length > 0) request.onTokens(newIds, newLps);
      meta = m;
    };
    if (!request.stream) {
      const json = await response.json() as { meta_info?: SglangMeta };
      take(json.meta_info ?? {});
    } else {
      for await (const { data } of readSse(response.body!, { onChunk: ctx.touch })) {
        if (data.trim() === "[DONE]") break;
        const json = JSON.parse(data) as { meta_info?: SglangMeta; error?: { message?: string } };
        if (json.error) throw protocolError(ctx.endpoint, json.error.message ?? "error");
        take(json.meta_info ?? {});
      }
    }
    const type = meta.finish_reason?.type;
    return {
      ids,
      logprobs,
      finish_reason: type === "length" ? "length" : "stop",
      policy_version: null,
    };
  }
}
