/**
 * OpenAI Responses (`POST /v1/responses`, what Codex speaks): input items (messages, function
 * calls and their outputs, reasoning), function tools, and the streamed event sequence
 * `response.created … response.completed`.
 *
 * @example
 * ```ts
 * import { openaiResponsesCodec } from "./openai_responses.ts";
 * const request = openaiResponsesCodec.decode(
 *   { model: "m", instructions: "be brief", input: "hi" },
 *   { defaultMaxTokens: 256, maxTokensLimit: 4096 },
 * );
 * request.messages?.map((m) => m.role); // ["system", "user"]
 * ```
 *
 * @module
 */
import type { ChatMessage, JsonObject } from "../../schema.ts";
import type { ToolDefinition } from "../../tokens/types.ts";
import type { OutputPart } from "../parse_output.ts";
import { openaiErrorBody } from "./openai_chat.ts";
import {
  asObject,
  badRequest,
  type Codec,
  type DecodeOptions,
  decodeToolList,
  type FinishedCall,
  type NormalizedRequest,
  normalizeFunctionTool,
  optBool,
  optNumber,
  optPositiveInt,
  reqString,
  resolveMaxTokens,
  sse,
  type StreamEncoder,
  type StreamStart,
  textOfContent,
} from "./types.ts";

function decodeTools(value: unknown): ToolDefinition[] {
  return decodeToolList(value, "tools", (tool, field) =>
    // Hosted tools (web_search, local_shell, …) have no meaning for a self-hosted policy.
    tool.type !== "function"
      ? null
      : normalizeFunctionTool(tool.name, tool.description, tool.parameters, field));
}

function reasoningText(item: Record<string, unknown>, field: string): string {
  if (Array.isArray(item.content) && item.content.length > 0) {
    return textOfContent(item.content, `${field}.content`);
  }
  if (Array.isArray(item.summary)) {
    return item.summary.map((part, i) => {
      const p = asObject(part, `${field}.summary[${i}]`);
      return typeof p.text === "string" ? p.text : "";
    }).join("\n\n");
  }
  return "";
}

/** Converts Responses input items into normalized chat messages. */
export function decodeResponsesInput(input: unknown, instructions: unknown): ChatMessage[] {
  const messages: ChatMessage[] = [];
  if (instructions !== undefined && instructions !== null) {
    if (typeof instructions !== "string") badRequest("instructions", "must be a string");
    if (instructions !== "") messages.push({ role: "system", content: instructions });
  }
  if (typeof input === "string") {
    messages.push({ role: "user", content: input });
    return messages;
  }
  if (!Array.isArray(input) || input.length === 0) {
    badRequest("input", "must be a string or a non-empty array of items");
  }
  // Reasoning, assistant text and function calls of one model turn arrive as separate items;
  // they are folded back into one assistant message (the shape the chat template renders).
  let turn: ChatMessage | null = null;
  const openTurn = (): ChatMessage => {
    if (!turn) {
      turn = { role: "assistant", content: "" };
      messages.push(turn);
    }
    return turn;
  };
  input.forEach((raw, i) => {
    const f = `input[${i}]`;
    const item = asObject(raw, f);
    const type = item.type ?? (item.role !== undefined ? "message" : undefined);
    if (type === "message") {
      let role = item.role;
      if (role === "developer") role = "system";
      if (role === "assistant") {
        const text = textOfContent(item.content, `${f}.content`);
        const current: ChatMessage | null = turn;
        if (current && (current.tool_calls?.length || current.content)) turn = null;
        const t = openTurn();
        t.content = (t.content ?? "") + text;
        return;
      }
      if (role !== "user" && role !== "system") {
        badRequest(`${f}.role`, `unsupported role ${JSON.stringify(item.role)}`);
      }
      turn = null;
      messages.push({ role, content: textOfContent(item.content, `${f}.content`) });
    } else if (type === "reasoning") {
      const current: ChatMessage | null = turn;
      if (current && (current.tool_calls?.length || current.content)) turn = null;
      const text = reasoningText(item, f);
      const t = openTurn();
      if (text) {
        t.reasoning_content = (t.reasoning_content ? t.reasoning_content + "\n\n" : "") + text;
      }
    } else if (type === "function_call") {
      const t = openTurn();
      const args = item.arguments ?? "";
      if (typeof args !== "string") badRequest(`${f}.arguments`, "must be a string");
      (t.tool_calls ??= []).push({
        id: reqString(item, "call_id", `${f}.call_id`),
        type: "function",
        function: { name: reqString(item, "name", `${f}.name`), arguments: args },
      });
    } else if (type === "custom_tool_call") {
      // Free-form tools (Codex's apply_patch): the raw input becomes the call's arguments.
      const t = openTurn();
      const args = item.input ?? "";
      if (typeof args !== "string") badRequest(`${f}.input`, "must be a string");
      (t.tool_calls ??= []).push({
        id: reqString(item, "call_id", `${f}.call_id`),
        type: "function",
        function: { name: reqString(item, "name", `${f}.name`), arguments: args },
      });
    } else if (type === "function_call_output" || type === "custom_tool_call_output") {
      turn = null;
      const output = typeof item.output === "string"
        ? item.output
        : textOfContent(item.output, `${f}.output`);
      messages.push({
        role: "tool",
        content: output,
        tool_call_id: reqString(item, "call_id", `${f}.call_id`),
      });
    } else {
      badRequest(`${f}.type`, `unsupported input item type ${JSON.stringify(type)}`);
    }
  });
  return messages;
}

function decode(body: unknown, options: DecodeOptions): NormalizedRequest {
  const obj = asObject(body, "body");
  if (obj.previous_response_id !== undefined && obj.previous_response_id !== null) {
    badRequest("previous_response_id", "not supported: send the whole input (store=false)");
  }
  const n = optPositiveInt(obj, "n");
  if (n !== undefined && n > 1) badRequest("n", "only n=1 is supported");
  const reasoning = obj.reasoning === undefined || obj.reasoning === null
    ? undefined
    : asObject(obj.reasoning, "reasoning");
  return {
    flavor: "openai_responses",
    model: typeof obj.model === "string" ? obj.model : "",
    stream: optBool(obj, "stream") ?? false,
    messages: decodeResponsesInput(obj.input, obj.instructions),
    prompt: null,
    promptIds: null,
    tools: obj.tool_choice === "none" ? [] : decodeTools(obj.tools),
    sampling: {
      max_tokens: resolveMaxTokens(optPositiveInt(obj, "max_output_tokens"), options),
      temperature: optNumber(obj, "temperature", 0, 2) ?? 1,
      top_p: optNumber(obj, "top_p", 0, 1) ?? 1,
      stop: [],
      seed: null,
    },
    ...(reasoning?.effort === "none" ? { enableThinking: false } : {}),
    includeUsage: false,
  };
}

function itemId(prefix: string, callId: string, index: number): string {
  return `${prefix}_${callId.replace(/^[a-z]+[-_]/, "")}_${index}`;
}

function outputItems(call: FinishedCall): JsonObject[] {
  const items: JsonObject[] = [];
  let index = 0;
  if (call.output.reasoning) {
    items.push({
      type: "reasoning",
      id: itemId("rs", call.id, index++),
      summary: [{ type: "summary_text", text: call.output.reasoning }],
    });
  }
  if (call.output.content || call.output.tool_calls.length === 0) {
    items.push(messageItem(itemId("msg", call.id, index++), call.output.content, "completed"));
  }
  for (const tc of call.output.tool_calls) {
    items.push(functionItem(itemId("fc", call.id, index++), tc, tc.arguments, "completed"));
  }
  return items;
}

function messageItem(id: string, text: string, status: string): JsonObject {
  return {
    type: "message",
    id,
    status,
    role: "assistant",
    content: status === "in_progress" ? [] : [{ type: "output_text", text, annotations: [] }],
  };
}

function functionItem(
  id: string,
  tc: { id: string; name: string },
  args: string,
  status: string,
): JsonObject {
  return { type: "function_call", id, call_id: tc.id, name: tc.name, arguments: args, status };
}

function responseObject(
  start: StreamStart,
  status: "in_progress" | "completed" | "incomplete",
  output: JsonObject[],
  usage: JsonObject | null,
): JsonObject {
  return {
    id: start.id,
    object: "response",
    created_at: start.created,
    status,
    model: start.model,
    output,
    incomplete_details: status === "incomplete" ? { reason: "max_output_tokens" } : null,
    error: null,
    parallel_tool_calls: true,
    tool_choice: "auto",
    tools: [],
    usage,
  };
}

function usageOf(call: FinishedCall): JsonObject {
  return {
    input_tokens: call.prompt_tokens,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: call.completion_tokens,
    output_tokens_details: { reasoning_tokens: 0 },
    total_tokens: call.prompt_tokens + call.completion_tokens,
  };
}

function respond(call: FinishedCall): JsonObject {
  const start = { id: call.id, model: call.model, created: call.created, prompt_tokens: 0 };
  const status = call.finish_reason === "length" ? "incomplete" : "completed";
  const body = responseObject(start, status, outputItems(call), usageOf(call));
  body.output_text = call.output.content;
  return body;
}

function stream(start: StreamStart): StreamEncoder {
  let seq = 0;
  let outputIndex = -1;
  const done: JsonObject[] = [];
  let open: { kind: "reasoning" | "message"; id: string; text: string } | null = null;
  const event = (type: string, data: JsonObject): string =>
    sse({ type, sequence_number: seq++, ...data }, type);

  const close = (): string => {
    if (!open) return "";
    const { kind, id, text } = open;
    open = null;
    const base = { item_id: id, output_index: outputIndex };
    if (kind === "reasoning") {
      const part = { type: "summary_text", text };
      const item = { type: "reasoning", id, summary: [part] };
      done.push(item);
      return event("response.reasoning_summary_text.done", { ...base, summary_index: 0, text }) +
        event("response.reasoning_summary_part.done", { ...base, summary_index: 0, part }) +
        event("response.output_item.done", { output_index: outputIndex, item });
    }
    const part = { type: "output_text", text, annotations: [] };
    const item = messageItem(id, text, "completed");
    done.push(item);
    return event("response.output_text.done", { ...base, content_index: 0, text }) +
      event("response.content_part.done", { ...base, content_index: 0, part }) +
      event("response.output_item.done", { output_index: outputIndex, item });
  };

  const openItem = (kind: "reasoning" | "message"): string => {
    outputIndex++;
    const id = itemId(kind === "reasoning" ? "rs" : "msg", start.id, outputIndex);
    open = { kind, id, text: "" };
    const base = { item_id: id, output_index: outputIndex };
    if (kind === "reasoning") {
      return event("response.output_item.added", {
        output_index: outputIndex,
        item: { type: "reasoning", id, summary: [] },
      }) +
        event("response.reasoning_summary_part.added", {
          ...base,
          summary_index: 0,
          part: { type: "summary_text", text: "" },
        });
    }
    return event("response.output_item.added", {
      output_index: outputIndex,
      item: messageItem(id, "", "in_progress"),
    }) +
      event("response.content_part.added", {
        ...base,
        content_index: 0,
        part: { type: "output_text", text: "", annotations: [] },
      });
  };

  return {
    start(): string {
      const response = responseObject(start, "in_progress", [], null);
      return event("response.created", { response }) + event("response.in_progress", { response });
    },
    part(part: OutputPart): string {
      let out = "";
      if (part.type === "tool_call") {
        out += close();
        outputIndex++;
        const id = itemId("fc", start.id, outputIndex);
        const item = functionItem(id, part, part.arguments, "completed");
        done.push(item);
        return out +
          event("response.output_item.added", {
            output_index: outputIndex,
            item: functionItem(id, part, "", "in_progress"),
          }) +
          event("response.function_call_arguments.delta", {
            item_id: id,
            output_index: outputIndex,
            delta: part.arguments,
          }) +
          event("response.function_call_arguments.done", {
            item_id: id,
            output_index: outputIndex,
            arguments: part.arguments,
          }) +
          event("response.output_item.done", { output_index: outputIndex, item });
      }
      const kind = part.type === "reasoning" ? "reasoning" : "message";
      const current = open as { kind: string } | null;
      if (!current || current.kind !== kind) out += close() + openItem(kind);
      const now = open as unknown as { id: string; text: string };
      now.text += part.text;
      const base = { item_id: now.id, output_index: outputIndex };
      return out + (kind === "reasoning"
        ? event("response.reasoning_summary_text.delta", {
          ...base,
          summary_index: 0,
          delta: part.text,
        })
        : event("response.output_text.delta", { ...base, content_index: 0, delta: part.text }));
    },
    finish(call: FinishedCall): string {
      let out = close();
      if (
        done.length === 0 ||
        !done.some((item) => item.type === "message") && call.output.tool_calls.length === 0
      ) {
        out += openItem("message") + close();
      }
      const status = call.finish_reason === "length" ? "incomplete" : "completed";
      const response = responseObject(start, status, done, usageOf(call));
      return out + event(`response.${status}`, { response });
    },
    error: (message: string) =>
      event("response.failed", {
        response: {
          ...responseObject(start, "in_progress", done, null),
          status: "failed",
          error: { code: "server_error", message },
        },
      }),
  };
}

/** The OpenAI Responses codec. */
export const openaiResponsesCodec: Codec = {
  flavor: "openai_responses",
  decode,
  respond,
  stream,
  errorBody: openaiErrorBody,
};
