/**
 * Anthropic Messages (`POST /v1/messages`, what Claude Code speaks): system blocks,
 * tool_use/tool_result, thinking blocks, stop reasons and the streamed
 * `message_start … message_stop` event sequence.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { anthropicMessagesCodec } from "./anthropic_messages.ts";
 * const request = anthropicMessagesCodec.decode(
 *   { model: "m", max_tokens: 64, system: "be brief", messages: [{ role: "user", content: "hi" }] },
 *   { defaultMaxTokens: 256, maxTokensLimit: 4096 },
 * );
 * assert.equal(request.messages?.[0].role, "system");
 * ```
 *
 * @module
 */
import type { ChatMessage, JsonObject } from "../../schema.ts";
import type { ToolDefinition } from "../../tokens/types.ts";
import type { OutputPart } from "../../tokens/parse_output.ts";
import * as wire from "./types.ts";

function decodeTools(value: unknown): ToolDefinition[] {
  return wire.decodeToolList(value, "tools", (tool, field) =>
    // Server tools (web_search_…, bash_…) carry a type and no schema; only custom tools apply.
    tool.type !== undefined && tool.type !== "custom"
      ? null
      : wire.normalizeFunctionTool(tool.name, tool.description, tool.input_schema, field));
}

function toolResultText(value: unknown, field: string): string {
  if (typeof value === "string") return value;
  if (value === undefined || value === null) return "";
  if (!Array.isArray(value)) wire.badRequest(field, "must be a string or an array of blocks");
  return value.map((block, i) => {
    const b = wire.asObject(block, `${field}[${i}]`);
    if (b.type !== "text") {
      wire.badRequest(`${field}[${i}].type`, `unsupported block type ${JSON.stringify(b.type)}`);
    }
    return typeof b.text === "string" ? b.text : "";
  }).join("");
}

/** Converts Anthropic `system` + `messages` into normalized chat messages. */
export function decodeAnthropicMessages(system: unknown, value: unknown): ChatMessage[] {
  const out: ChatMessage[] = [];
  if (system !== undefined && system !== null) {
    const text = wire.textOfContent(system, "system");
    if (text !== "") out.push({ role: "system", content: text });
  }
  if (!Array.isArray(value) || value.length === 0) {
    wire.badRequest("messages", "must be a non-empty array");
  }
  value.forEach((raw, i) => {
    const f = `messages[${i}]`;
    const msg = wire.asObject(raw, f);
    const role = msg.role;
    // Claude Code 2.x sends mid-conversation `system` turns (reminders) for models it does not
    // know; they are kept as system messages where they stand, as the template renders them.
    if (role === "system") {
      const text = wire.textOfContent(msg.content, `${f}.content`);
      if (text !== "") out.push({ role: "system", content: text });
      return;
    }
    if (role !== "user" && role !== "assistant") {
      wire.badRequest(`${f}.role`, `must be "user", "assistant" or "system"`);
    }
    if (typeof msg.content === "string") {
      out.push({ role, content: msg.content });
      return;
    }
    if (!Array.isArray(msg.content)) {
      wire.badRequest(`${f}.content`, "must be a string or an array of blocks");
    }
    if (role === "assistant") {
      const turn: ChatMessage = { role: "assistant", content: "" };
      msg.content.forEach((block, j) => {
        const bf = `${f}.content[${j}]`;
        const b = wire.asObject(block, bf);
        if (b.type === "text") turn.content = (turn.content ?? "") + String(b.text ?? "");
        else if (b.type === "thinking") {
          turn.reasoning_content = (turn.reasoning_content ?? "") + String(b.thinking ?? "");
        } else if (b.type === "redacted_thinking") {
          // Opaque by construction: nothing to render.
        } else if (b.type === "tool_use") {
          (turn.tool_calls ??= []).push({
            id: wire.reqString(b, "id", `${bf}.id`),
            type: "function",
            function: {
              name: wire.reqString(b, "name", `${bf}.name`),
              arguments: JSON.stringify(b.input ?? {}),
            },
          });
        } else wire.badRequest(`${bf}.type`, `unsupported block type ${JSON.stringify(b.type)}`);
      });
      out.push(turn);
      return;
    }
    // A user turn: tool results become tool messages (in order), text stays a user message.
    let text = "";
    let sawText = false;
    const flush = () => {
      if (sawText) out.push({ role: "user", content: text });
      text = "";
      sawText = false;
    };
    msg.content.forEach((block, j) => {
      const bf = `${f}.content[${j}]`;
      const b = wire.asObject(block, bf);
      if (b.type === "text") {
        if (typeof b.text !== "string") wire.badRequest(`${bf}.text`, "must be a string");
        text += b.text;
        sawText = true;
      } else if (b.type === "tool_result") {
        flush();
        const result = toolResultText(b.content, `${bf}.content`);
        out.push({
          role: "tool",
          content: b.is_error === true && result === "" ? "error" : result,
          tool_call_id: wire.reqString(b, "tool_use_id", `${bf}.tool_use_id`),
        });
      } else wire.badRequest(`${bf}.type`, `unsupported block type ${JSON.stringify(b.type)}`);
    });
    flush();
  });
  return out;
}

function decode(body: unknown, options: wire.DecodeOptions): wire.NormalizedRequest {
  const obj = wire.asObject(body, "body");
  const maxTokens = wire.optPositiveInt(obj, "max_tokens");
  if (maxTokens === undefined) wire.badRequest("max_tokens", "is required");
  const thinking = obj.thinking === undefined || obj.thinking === null
    ? undefined
    : wire.asObject(obj.thinking, "thinking");
  const toolChoice = obj.tool_choice === undefined || obj.tool_choice === null
    ? undefined
    : wire.asObject(obj.tool_choice, "tool_choice");
  return {
    flavor: "anthropic_messages",
    model: typeof obj.model === "string" ? obj.model : "",
    stream: wire.optBool(obj, "stream") ?? false,
    messages: decodeAnthropicMessages(obj.system, obj.messages),
    prompt: null,
    promptIds: null,
    tools: toolChoice?.type === "none" ? [] : decodeTools(obj.tools),
    sampling: {
      max_tokens: Math.min(maxTokens, options.maxTokensLimit),
      temperature: wire.optNumber(obj, "temperature", 0, 1) ?? 1,
      top_p: wire.optNumber(obj, "top_p", 0, 1) ?? 1,
      stop: wire.readStop(obj.stop_sequences, "stop_sequences"),
      seed: null,
    },
    ...(thinking?.type === "disabled" ? { enableThinking: false } : {}),
    ...(thinking?.type === "enabled" ? { enableThinking: true } : {}),
    includeUsage: false,
  };
}

function stopReason(call: wire.FinishedCall): string {
  if (call.finish_reason === "length") return "max_tokens";
  if (call.stop_sequence !== null) return "stop_sequence";
  return call.output.tool_calls.length > 0 ? "tool_use" : "end_turn";
}

function parseInput(args: string): JsonObject {
  try {
    const value = JSON.parse(args);
    if (typeof value === "object" && value !== null && !Array.isArray(value)) return value;
  } catch {
    // falls through: the raw text is kept so nothing is lost
  }
  return { _raw: args };
}

function toolUseId(id: string): string {
  return id.startsWith("toolu_") ? id : `toolu_${id.replace(/^call_/, "")}`;
}

/** Usage as the Messages API reports it; the proxy knows nothing of prompt caches. */
function usage(input: number, output: number): JsonObject {
  return {
    input_tokens: input,
    output_tokens: output,
    cache_creation_input_tokens: null,
    cache_read_input_tokens: null,
    server_tool_use: null,
    service_tier: null,
  };
}

function respond(call: wire.FinishedCall): JsonObject {
  const content: JsonObject[] = [];
  if (call.output.reasoning) {
    content.push({ type: "thinking", thinking: call.output.reasoning, signature: "" });
  }
  if (call.output.content || call.output.tool_calls.length === 0) {
    content.push({ type: "text", text: call.output.content, citations: null });
  }
  for (const tc of call.output.tool_calls) {
    content.push({
      type: "tool_use",
      id: toolUseId(tc.id),
      name: tc.name,
      input: parseInput(tc.arguments),
    });
  }
  return {
    id: call.id,
    type: "message",
    role: "assistant",
    model: call.model,
    content,
    stop_reason: stopReason(call),
    stop_sequence: call.stop_sequence,
    usage: usage(call.prompt_tokens, call.completion_tokens),
  };
}

function stream(start: wire.StreamStart): wire.StreamEncoder {
  let index = -1;
  let open: "thinking" | "text" | null = null;
  const event = (type: string, data: JsonObject): string => wire.sse({ type, ...data }, type);
  const close = (): string => {
    if (open === null) return "";
    let out = "";
    if (open === "thinking") {
      // The policy's reasoning is not signed; the empty signature keeps the block's shape.
      out += event("content_block_delta", {
        index,
        delta: { type: "signature_delta", signature: "" },
      });
    }
    open = null;
    return out + event("content_block_stop", { index });
  };
  const openBlock = (kind: "thinking" | "text"): string => {
    index++;
    open = kind;
    const block: JsonObject = kind === "thinking"
      ? { type: "thinking", thinking: "", signature: "" }
      : { type: "text", text: "", citations: null };
    return event("content_block_start", { index, content_block: block });
  };
  return {
    start(): string {
      return event("message_start", {
        message: {
          id: start.id,
          type: "message",
          role: "assistant",
          model: start.model,
          content: [],
          stop_reason: null,
          stop_sequence: null,
          usage: usage(start.prompt_tokens, 0),
        },
      }) + event("ping", {});
    },
    part(part: OutputPart): string {
      if (part.type === "tool_call") {
        let out = close();
        index++;
        out += event("content_block_start", {
          index,
          content_block: { type: "tool_use", id: toolUseId(part.id), name: part.name, input: {} },
        });
        const input = JSON.stringify(parseInput(part.arguments));
        out += event("content_block_delta", {
          index,
          delta: { type: "input_json_delta", partial_json: input },
        });
        return out + event("content_block_stop", { index });
      }
      const kind = part.type === "reasoning" ? "thinking" : "text";
      let out = "";
      if (open !== kind) out += close() + openBlock(kind);
      const delta: JsonObject = kind === "thinking"
        ? { type: "thinking_delta", thinking: part.text }
        : { type: "text_delta", text: part.text };
      return out + event("content_block_delta", { index, delta });
    },
    finish(call: wire.FinishedCall): string {
      let out = close();
      if (index < 0) out += openBlock("text") + close();
      return out +
        event("message_delta", {
          delta: { stop_reason: stopReason(call), stop_sequence: call.stop_sequence },
          usage: { input_tokens: call.prompt_tokens, output_tokens: call.completion_tokens },
        }) +
        event("message_stop", {});
    },
    error: (message: string) => event("error", { error: { type: "api_error", message } }),
  };
}

/** Anthropic-style error body. */
export function anthropicErrorBody(status: number, message: string): JsonObject {
  const type = status === 401
    ? "authentication_error"
    : status === 403
    ? "permission_error"
    : status === 404
    ? "not_found_error"
    : status === 413
    ? "request_too_large"
    : status === 429
    ? "rate_limit_error"
    : status === 529 || status === 503
    ? "overloaded_error"
    : status >= 500
    ? "api_error"
    : "invalid_request_error";
  return { type: "error", error: { type, message } };
}

/** The Anthropic Messages codec. */
export const anthropicMessagesCodec: wire.Codec = {
  flavor: "anthropic_messages",
  decode,
  respond,
  stream,
  errorBody: anthropicErrorBody,
};
