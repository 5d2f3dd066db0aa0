/**
 * OpenAI Chat Completions (`POST /v1/chat/completions`): tools, tool_calls, tool messages,
 * `reasoning_content`, streaming chunks and `[DONE]`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openaiChatCodec } from "./openai_chat.ts";
 * const request = openaiChatCodec.decode(
 *   { model: "m", messages: [{ role: "user", content: "hi" }] },
 *   { defaultMaxTokens: 256, maxTokensLimit: 4096 },
 * );
 * assert.equal(request.messages?.length, 1);
 * ```
 *
 * @module
 */
import type { ChatMessage, JsonObject } from "../../schema.ts";
import type { OutputPart, TokenLogprob } from "../../tokens/parse_output.ts";
import { openaiTokenLogprob } from "./logprobs.ts";
import * as wire from "./types.ts";
import type { ToolDefinition } from "../../tokens/types.ts";

/** Reads OpenAI `tools` (function tools only). */
export function decodeOpenAITools(value: unknown, field = "tools"): ToolDefinition[] {
  return wire.decodeToolList(value, field, (tool, toolField) => {
    if (tool.type !== "function") {
      wire.badRequest(`${toolField}.type`, `unsupported tool type ${JSON.stringify(tool.type)}`);
    }
    const fn = wire.asObject(tool.function, `${toolField}.function`);
    return wire.normalizeFunctionTool(
      fn.name,
      fn.description,
      fn.parameters,
      `${toolField}.function`,
    );
  });
}

function decodeToolCalls(value: unknown, field: string): ChatMessage["tool_calls"] {
  if (value === undefined || value === null) return undefined;
  if (!Array.isArray(value)) wire.badRequest(field, "must be an array");
  if (value.length === 0) return undefined;
  return value.map((raw, i) => {
    const call = wire.asObject(raw, `${field}[${i}]`);
    const fn = wire.asObject(call.function, `${field}[${i}].function`);
    const name = wire.reqString(fn, "name", `${field}[${i}].function.name`);
    const args = fn.arguments ?? "";
    if (typeof args !== "string") {
      wire.badRequest(`${field}[${i}].function.arguments`, "must be a string");
    }
    return {
      ...(typeof call.id === "string" ? { id: call.id } : {}),
      type: "function" as const,
      function: { name, arguments: args },
    };
  });
}

/** Reads OpenAI chat `messages` into normalized messages. */
export function decodeChatMessages(value: unknown, field = "messages"): ChatMessage[] {
  if (!Array.isArray(value) || value.length === 0) {
    wire.badRequest(field, "must be a non-empty array");
  }
  return value.map((raw, i) => {
    const f = `${field}[${i}]`;
    const msg = wire.asObject(raw, f);
    let role = msg.role;
    if (role === "developer") role = "system";
    if (role !== "system" && role !== "user" && role !== "assistant" && role !== "tool") {
      wire.badRequest(`${f}.role`, `unsupported role ${JSON.stringify(msg.role)}`);
    }
    const out: ChatMessage = { role, content: wire.textOfContent(msg.content, `${f}.content`) };
    if (role === "assistant") {
      const reasoning = msg.reasoning_content ?? msg.reasoning;
      if (typeof reasoning === "string" && reasoning !== "") out.reasoning_content = reasoning;
      const calls = decodeToolCalls(msg.tool_calls, `${f}.tool_calls`);
      if (calls) out.tool_calls = calls;
    }
    if (role === "tool") {
      if (typeof msg.tool_call_id === "string") out.tool_call_id = msg.tool_call_id;
    }
    if (typeof msg.name === "string") out.name = msg.name;
    return out;
  });
}

function decode(body: unknown, options: wire.DecodeOptions): wire.NormalizedRequest {
  const obj = wire.asObject(body, "body");
  const n = wire.optPositiveInt(obj, "n");
  if (n !== undefined && n > 1) wire.badRequest("n", "only n=1 is supported");
  const maxTokens = wire.optPositiveInt(obj, "max_completion_tokens") ??
    wire.optPositiveInt(obj, "max_tokens");
  const streamOptions = obj.stream_options === undefined || obj.stream_options === null
    ? {}
    : wire.asObject(obj.stream_options, "stream_options");
  const kwargs = obj.chat_template_kwargs === undefined
    ? {}
    : wire.asObject(obj.chat_template_kwargs, "chat_template_kwargs");
  const thinking = wire.optBool(kwargs, "enable_thinking", "chat_template_kwargs.enable_thinking");
  wire.zeroPenalty(obj, "presence_penalty");
  wire.zeroPenalty(obj, "frequency_penalty");
  const logprobs = wire.optBool(obj, "logprobs") ?? false;
  if (!logprobs && obj.top_logprobs !== undefined && obj.top_logprobs !== null) {
    wire.badRequest("top_logprobs", "needs logprobs: true");
  }
  wire.zeroTopLogprobs(obj);
  return {
    flavor: "openai_chat",
    model: typeof obj.model === "string" ? obj.model : "",
    stream: wire.optBool(obj, "stream") ?? false,
    messages: decodeChatMessages(obj.messages),
    prompt: null,
    promptIds: null,
    tools: obj.tool_choice === "none" ? [] : decodeOpenAITools(obj.tools),
    sampling: {
      max_tokens: wire.resolveMaxTokens(maxTokens, options),
      temperature: wire.optNumber(obj, "temperature", 0, 2) ?? 1,
      top_p: wire.optNumber(obj, "top_p", 0, 1) ?? 1,
      stop: wire.readStop(obj.stop, "stop"),
      seed: wire.readSeed(obj),
    },
    ...(thinking !== undefined ? { enableThinking: thinking } : {}),
    includeUsage: wire.optBool(streamOptions, "include_usage", "stream_options.include_usage") ??
      false,
    logprobs,
  };
}

function finishReason(call: wire.FinishedCall): string {
  if (call.finish_reason === "length") return "length";
  return call.output.tool_calls.length > 0 ? "tool_calls" : "stop";
}

/**
 * The OpenAI `usage` object (Chat Completions and Completions); the reasoning token count when
 * the generation attributed tokens to reasoning.
 */
export function openaiUsage(call: wire.FinishedCall): JsonObject {
  return {
    prompt_tokens: call.prompt_tokens,
    completion_tokens: call.completion_tokens,
    total_tokens: call.prompt_tokens + call.completion_tokens,
    ...(call.output.logprobs
      ? { completion_tokens_details: { reasoning_tokens: call.output.logprobs.reasoning.length } }
      : {}),
  };
}

/**
 * The non-streaming answer of an OpenAI endpoint (`chat.completion`, `text_completion`): one
 * choice (index 0) and the usage.
 */
export function openaiResponse(
  call: wire.FinishedCall,
  object: string,
  choice: JsonObject,
): JsonObject {
  return {
    id: call.id,
    object,
    created: call.created,
    model: call.model,
    choices: [{ index: 0, ...choice }],
    usage: openaiUsage(call),
  };
}

/** The chunks of an OpenAI stream (Chat Completions and Completions). */
export interface OpenaiChunks {
  /** A chunk holding one choice (index 0). */
  chunk(choice: JsonObject): string;
  /** The end of the stream: the usage chunk when `include_usage` asked for it, then `[DONE]`. */
  done(call: wire.FinishedCall): string;
  /** An error event in the middle of the stream. */
  error(message: string): string;
}

/**
 * The chunks of an OpenAI stream of `object` chunks (`chat.completion.chunk`,
 * `text_completion`). With `include_usage` every chunk carries `usage`, null until the last one.
 */
export function openaiChunks(
  start: wire.StreamStart,
  request: wire.NormalizedRequest,
  object: string,
): OpenaiChunks {
  const head = { id: start.id, object, created: start.created, model: start.model };
  const usageField = request.includeUsage ? { usage: null } : {};
  return {
    chunk: (choice) => wire.sse({ ...head, choices: [{ index: 0, ...choice }], ...usageField }),
    done(call) {
      const usage = request.includeUsage
        ? wire.sse({ ...head, choices: [], usage: openaiUsage(call) })
        : "";
      return usage + wire.sse("[DONE]");
    },
    error: (message) => wire.sse(openaiErrorBody(500, message)),
  };
}

/** A choice's `logprobs`: the content tokens, or null when not asked for or not known. */
function choiceLogprobs(
  request: wire.NormalizedRequest,
  tokens: readonly TokenLogprob[] | undefined,
): JsonObject | null {
  if (!request.logprobs || tokens === undefined) return null;
  return { content: tokens.map(openaiTokenLogprob), refusal: null };
}

function respond(call: wire.FinishedCall, request: wire.NormalizedRequest): JsonObject {
  const message: JsonObject = {
    role: "assistant",
    content: call.output.content === "" && call.output.tool_calls.length > 0
      ? null
      : call.output.content,
    refusal: null,
  };
  if (call.output.reasoning) message.reasoning_content = call.output.reasoning;
  if (call.output.tool_calls.length > 0) {
    message.tool_calls = call.output.tool_calls.map((tc) => ({
      id: tc.id,
      type: "function",
      function: { name: tc.name, arguments: tc.arguments },
    }));
  }
  const logprobs = choiceLogprobs(request, call.output.logprobs?.content);
  return openaiResponse(call, "chat.completion", {
    message,
    logprobs,
    finish_reason: finishReason(call),
  });
}

function stream(start: wire.StreamStart, request: wire.NormalizedRequest): wire.StreamEncoder {
  let toolIndex = 0;
  const chunks = openaiChunks(start, request, "chat.completion.chunk");
  const chunk = (
    delta: JsonObject,
    finish: string | null = null,
    logprobs: JsonObject | null = null,
  ): string => chunks.chunk({ delta, logprobs, finish_reason: finish });
  return {
    start: () => chunk({ role: "assistant", content: "" }),
    part(part: OutputPart): string {
      if (part.type === "content") {
        return chunk({ content: part.text }, null, choiceLogprobs(request, part.logprobs));
      }
      if (part.type === "reasoning") return chunk({ reasoning_content: part.text });
      return chunk({
        tool_calls: [{
          index: toolIndex++,
          id: part.id,
          type: "function",
          function: { name: part.name, arguments: part.arguments },
        }],
      });
    },
    finish: (call: wire.FinishedCall) => chunk({}, finishReason(call)) + chunks.done(call),
    error: chunks.error,
  };
}

/** OpenAI-style error body (shared by the three OpenAI flavors). */
export function openaiErrorBody(status: number, message: string, param?: string): JsonObject {
  const type = status === 401
    ? "authentication_error"
    : status === 403
    ? "permission_error"
    : status === 404
    ? "not_found_error"
    : status === 429
    ? "rate_limit_error"
    : status >= 500
    ? "server_error"
    : "invalid_request_error";
  return { error: { message, type, param: param ?? null, code: null } };
}

/** The OpenAI Chat Completions codec. */
export const openaiChatCodec: wire.Codec = {
  flavor: "openai_chat",
  decode,
  respond,
  stream,
  errorBody: openaiErrorBody,
};
