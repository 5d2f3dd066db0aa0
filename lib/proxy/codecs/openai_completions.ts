/**
 * OpenAI Completions (`POST /v1/completions`): a raw prompt (text, or token ids for exact
 * control), no chat template, text deltas when streaming.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openaiCompletionsCodec } from "./openai_completions.ts";
 * const request = openaiCompletionsCodec.decode(
 *   { model: "m", prompt: "1+1=" },
 *   { defaultMaxTokens: 256, maxTokensLimit: 4096 },
 * );
 * assert.equal(request.sampling.max_tokens, 16); // the OpenAI default
 * ```
 *
 * @module
 */
import type { JsonObject } from "../../schema.ts";
import type { OutputPart, TokenLogprob } from "../../tokens/parse_output.ts";
import { completionLogprobs } from "./logprobs.ts";
import { openaiChunks, openaiErrorBody, openaiResponse } from "./openai_chat.ts";
import * as wire from "./types.ts";

function decodePrompt(value: unknown): { prompt: string | null; promptIds: number[] | null } {
  if (typeof value === "string") return { prompt: value, promptIds: null };
  if (Array.isArray(value)) {
    if (value.length === 1 && typeof value[0] === "string") {
      return { prompt: value[0], promptIds: null };
    }
    if (value.length > 0 && value.every((v) => Number.isInteger(v) && v >= 0 && v <= 0xffffffff)) {
      return { prompt: null, promptIds: value as number[] };
    }
    if (value.length === 1 && Array.isArray(value[0])) return decodePrompt(value[0]);
    if (value.length > 1) wire.badRequest("prompt", "only one prompt per request is supported");
  }
  return wire.badRequest("prompt", "must be a string or an array of token ids");
}

function decode(body: unknown, options: wire.DecodeOptions): wire.NormalizedRequest {
  const obj = wire.asObject(body, "body");
  const n = wire.optPositiveInt(obj, "n");
  if (n !== undefined && n > 1) wire.badRequest("n", "only n=1 is supported");
  const bestOf = wire.optPositiveInt(obj, "best_of");
  if (bestOf !== undefined && bestOf > 1) wire.badRequest("best_of", "only best_of=1 is supported");
  if (obj.echo === true) wire.badRequest("echo", "echo is not supported");
  if (obj.suffix !== undefined && obj.suffix !== null) {
    wire.badRequest("suffix", "suffix is not supported");
  }
  const { prompt, promptIds } = decodePrompt(obj.prompt);
  wire.zeroPenalty(obj, "presence_penalty");
  wire.zeroPenalty(obj, "frequency_penalty");
  const logprobs = obj.logprobs;
  if (logprobs !== undefined && logprobs !== null) {
    if (typeof logprobs !== "number" || !Number.isInteger(logprobs) || logprobs < 0) {
      wire.badRequest("logprobs", "must be an integer between 0 and 5");
    }
    if (logprobs > 0) {
      wire.badRequest(
        "logprobs",
        "only 0 is supported: the policy server returns the sampled token's logprob " +
          "(token_logprobs), no alternatives",
      );
    }
  }
  const streamOptions = obj.stream_options === undefined || obj.stream_options === null
    ? {}
    : wire.asObject(obj.stream_options, "stream_options");
  return {
    flavor: "openai_completions",
    model: typeof obj.model === "string" ? obj.model : "",
    stream: wire.optBool(obj, "stream") ?? false,
    messages: null,
    prompt,
    promptIds,
    tools: [],
    sampling: {
      max_tokens: Math.min(wire.optPositiveInt(obj, "max_tokens") ?? 16, options.maxTokensLimit),
      temperature: wire.optNumber(obj, "temperature", 0, 2) ?? 1,
      top_p: wire.optNumber(obj, "top_p", 0, 1) ?? 1,
      stop: wire.readStop(obj.stop, "stop"),
      seed: wire.readSeed(obj),
    },
    includeUsage: wire.optBool(streamOptions, "include_usage", "stream_options.include_usage") ??
      false,
    logprobs: logprobs === 0,
  };
}

function choiceLogprobs(
  request: wire.NormalizedRequest,
  tokens: readonly TokenLogprob[] | undefined,
): JsonObject | null {
  return request.logprobs && tokens ? completionLogprobs(tokens) : null;
}

function respond(call: wire.FinishedCall, request: wire.NormalizedRequest): JsonObject {
  const logprobs = choiceLogprobs(request, call.output.logprobs?.content);
  return openaiResponse(call, "text_completion", {
    text: call.text,
    logprobs,
    finish_reason: call.finish_reason,
  });
}

function stream(start: wire.StreamStart, request: wire.NormalizedRequest): wire.StreamEncoder {
  const chunks = openaiChunks(start, request, "text_completion");
  const chunk = (text: string, finish: string | null, logprobs: JsonObject | null): string =>
    chunks.chunk({ text, logprobs, finish_reason: finish });
  return {
    start: () => "",
    part: (part: OutputPart) =>
      part.type === "tool_call"
        ? ""
        : chunk(part.text, null, choiceLogprobs(request, part.logprobs)),
    finish: (call: wire.FinishedCall) => chunk("", call.finish_reason, null) + chunks.done(call),
    error: chunks.error,
  };
}

/** The OpenAI Completions codec. */
export const openaiCompletionsCodec: wire.Codec = {
  flavor: "openai_completions",
  decode,
  respond,
  stream,
  errorBody: openaiErrorBody,
};
