/**
 * Schemas of the proxy area: upstream configuration, proxy options and the token-level
 * generate protocol spoken by the reins trainer worker.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "./core.ts";
 * import { UpstreamConfigSchema } from "./proxy.ts";
 * const upstream = parseOrThrow(UpstreamConfigSchema, {
 *   kind: "token_level",
 *   endpoints: ["http://127.0.0.1:8300"],
 * });
 * assert.equal(upstream.max_retries, 3);
 * ```
 *
 * @module
 */
import { z } from "zod";
import { PromptModeSchema } from "./core.ts";

/**
 * Which protocol the proxy speaks to its upstream:
 * - `token_level`: the reins generate protocol (`POST /generate` with `prompt_ids`);
 * - `sglang`: SGLang's native `POST /generate` (`input_ids`, `sampling_params`);
 * - `openai_compatible`: a vLLM-style OpenAI server (`return_token_ids`, `logprobs`);
 * - `llama_cpp`: the reins llama.cpp engine (`deno task engine`), which speaks the reins
 *   generate protocol too.
 */
export const UpstreamKindSchema = z.enum([
  "token_level",
  "sglang",
  "openai_compatible",
  "llama_cpp",
]);
/** Which protocol the proxy speaks to its upstream. */
export type UpstreamKind = z.infer<typeof UpstreamKindSchema>;

/** Where and how the proxy calls the policy. */
export const UpstreamConfigSchema = z.object({
  kind: UpstreamKindSchema.default("token_level"),
  /** Base URLs (no trailing path); a rollout sticks to one of them (prefix cache). */
  endpoints: z.array(z.string().url()).min(1),
  /** Model name sent to an OpenAI-compatible upstream (default: the caller's model). */
  model: z.string().optional(),
  /** Bearer key for an OpenAI-compatible upstream. */
  api_key: z.string().optional(),
  /** Time allowed until the upstream answers (headers), and between two streamed chunks. */
  timeout_ms: z.number().int().positive().default(120_000),
  /** Retries after the first try, on timeouts, connection errors, 429 and 5xx. */
  max_retries: z.number().int().min(0).max(20).default(3),
  backoff_base_ms: z.number().min(0).default(200),
  backoff_max_ms: z.number().min(0).default(5_000),
  /** SGLang: set when the server streams only new tokens (`--incremental-streaming-output`). */
  sglang_incremental: z.boolean().default(false),
});
/** Where and how the proxy calls the policy. */
export type UpstreamConfig = z.infer<typeof UpstreamConfigSchema>;
/** Upstream configuration as a caller writes it (defaults optional). */
export type UpstreamConfigInput = z.input<typeof UpstreamConfigSchema>;

/** Proxy behaviour switches. */
export const ProxyOptionsSchema = z.object({
  /** `faithful` (default): prompt = the template rendering of what was sent. */
  mode: PromptModeSchema.default("faithful"),
  /** Prompts longer than this many tokens are refused with a 400. */
  max_prompt_tokens: z.number().int().positive().default(131_072),
  /** `max_tokens` used when a caller sends none (OpenAI chat/Responses). */
  default_max_tokens: z.number().int().positive().default(4_096),
  /** Largest `max_tokens` accepted; larger requests are clamped. */
  max_tokens_limit: z.number().int().positive().default(32_768),
  /** How long a call may be held while the gateway is in the `update` phase. */
  max_hold_ms: z.number().int().positive().default(600_000),
  /** Request bodies larger than this are refused with a 413. */
  max_body_bytes: z.number().int().positive().default(32 * 1024 * 1024),
  /** Qwen3 `enable_thinking` default when the caller does not say. */
  enable_thinking: z.boolean().optional(),
  /**
   * Attempts whose conversation state (segments, incremental encoder caches, last call) is kept;
   * the least recently active are forgotten first (≈ one copy of each context in memory).
   */
  max_sessions: z.number().int().positive().default(1024),
  /**
   * How long a model-registry read is reused for the policy version of calls whose upstream
   * does not report one (SGLang, vLLM). Those servers load new weights asynchronously anyway;
   * 0 reads the registry on every call.
   */
  registry_cache_ms: z.number().int().min(0).default(250),
  /** Model name answered by `GET /v1/models` when the registry is empty. */
  default_model: z.string().default("reins-policy"),
});
/** Proxy behaviour switches. */
export type ProxyOptions = z.infer<typeof ProxyOptionsSchema>;
/** Proxy options as a caller writes them. */
export type ProxyOptionsInput = z.input<typeof ProxyOptionsSchema>;

const ids = z.array(z.number().int().min(0).max(0xffffffff));
const finiteNumber = z.number().refine(Number.isFinite, "must be a finite number");

/** Body of `POST {worker}/generate` (the reins token-level protocol). */
export const GenerateRequestSchema = z.object({
  prompt_ids: ids.min(1),
  max_tokens: z.number().int().positive(),
  /** 0 = greedy. */
  temperature: z.number().min(0).default(1),
  top_p: z.number().gt(0).max(1).default(1),
  stop_ids: ids.default([]),
  seed: z.number().int().nullable().default(null),
  stream: z.boolean().default(false),
});
/** Body of `POST {worker}/generate`. */
export type GenerateRequest = z.infer<typeof GenerateRequestSchema>;

/** Non-streaming answer of `POST /generate`: ids (stop id included) and one logprob each. */
export const GenerateResponseSchema = z.object({
  ids,
  logprobs: z.array(finiteNumber),
  finish_reason: z.enum(["stop", "length"]),
  policy_version: z.number().int().min(0),
}).refine((v) => v.ids.length === v.logprobs.length, {
  path: ["logprobs"],
  message: "expected one logprob per id",
});
/** Non-streaming answer of `POST /generate`. */
export type GenerateResponse = z.infer<typeof GenerateResponseSchema>;

/** One NDJSON line of a streamed `POST /generate` answer. */
export const GenerateStreamLineSchema = z.union([
  z.object({
    done: z.literal(true),
    finish_reason: z.enum(["stop", "length"]),
    policy_version: z.number().int().min(0),
  }),
  z.object({ ids, logprobs: z.array(finiteNumber) }).refine(
    (v) => v.ids.length === v.logprobs.length,
    { path: ["logprobs"], message: "expected one logprob per id" },
  ),
  z.object({ error: z.object({ code: z.string().optional(), message: z.string() }) }),
]);
/** One NDJSON line of a streamed `POST /generate` answer. */
export type GenerateStreamLine = z.infer<typeof GenerateStreamLineSchema>;
