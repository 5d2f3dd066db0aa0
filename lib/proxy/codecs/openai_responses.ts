/**
 * OpenAI Responses (`POST /v1/responses`, what Codex speaks), answered as the OpenResponses
 * specification's `ResponseResource`: every required field present, the request's settings
 * echoed (instructions, function tools, tool choice, sampling parameters, metadata, …) and the
 * rest at the spec's defaults; reasoning (`<think>`) as `reasoning` items with `reasoning_text`
 * content; `incomplete` with `incomplete_details` on a length stop; the streamed event sequence
 * `response.created … response.completed | incomplete | failed` with the sampled tokens' exact
 * logprobs on every `response.output_text.delta`/`.done`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openaiResponsesCodec } from "./openai_responses.ts";
 * const request = openaiResponsesCodec.decode(
 *   { model: "m", instructions: "be brief", input: "hi", metadata: { run: "7" } },
 *   { defaultMaxTokens: 256, maxTokensLimit: 4096 },
 * );
 * assert.deepEqual(request.messages?.map((m) => m.role), ["system", "user"]);
 * assert.equal(request.echo?.instructions, "be brief");
 * assert.deepEqual(request.echo?.metadata, { run: "7" });
 * ```
 *
 * @module
 */
import type { JsonObject } from "../../schema.ts";
import type { ToolDefinition } from "../../tokens/types.ts";
import type { OutputPart, TokenLogprob } from "../../tokens/parse_output.ts";
import { openaiTokenLogprob } from "./logprobs.ts";
import { openaiErrorBody } from "./openai_chat.ts";
import { decodeResponsesInput } from "./openai_responses_input.ts";
import * as wire from "./types.ts";

export { decodeResponsesInput } from "./openai_responses_input.ts";

const LOGPROBS_INCLUDE = "message.output_text.logprobs";

/** Reads an optional string field (null allowed). */
function optString(obj: Record<string, unknown>, key: string): string | null {
  const value = obj[key];
  if (value === undefined || value === null) return null;
  if (typeof value !== "string") wire.badRequest(key, "must be a string");
  return value;
}

/** Function tools as the model sees them, and as the response reports them. */
function decodeTools(value: unknown): { tools: ToolDefinition[]; echo: JsonObject[] } {
  const echo: JsonObject[] = [];
  const tools = wire.decodeToolList(value, "tools", (tool, field) => {
    // Hosted tools (web_search, local_shell, …) have no meaning for a self-hosted policy.
    if (tool.type !== "function") return null;
    const fn = wire.normalizeFunctionTool(tool.name, tool.description, tool.parameters, field);
    const f = fn.function as JsonObject;
    echo.push({
      type: "function",
      name: f.name as string,
      description: (f.description as string | undefined) ?? null,
      parameters: (f.parameters as JsonObject | undefined) ?? null,
      strict: typeof tool.strict === "boolean" ? tool.strict : null,
    });
    return fn;
  });
  return { tools, echo };
}

function decodeToolChoice(value: unknown): JsonObject | string {
  if (value === undefined || value === null) return "auto";
  if (value === "none" || value === "auto" || value === "required") return value;
  const choice = wire.asObject(value, "tool_choice");
  if (choice.type === "function") {
    if (typeof choice.name !== "string" || choice.name === "") {
      wire.badRequest("tool_choice.name", "must be a non-empty string");
    }
    return { type: "function", name: choice.name };
  }
  if (choice.type === "allowed_tools") {
    const mode = choice.mode ?? "auto";
    if (mode !== "none" && mode !== "auto" && mode !== "required") {
      wire.badRequest("tool_choice.mode", 'must be "none", "auto" or "required"');
    }
    if (!Array.isArray(choice.tools)) wire.badRequest("tool_choice.tools", "must be an array");
    return { type: "allowed_tools", mode, tools: choice.tools as JsonObject[] };
  }
  return wire.badRequest(
    "tool_choice",
    `must be "none", "auto", "required", a function or allowed_tools (got ${
      JSON.stringify(choice.type)
    })`,
  );
}

function decodeMetadata(value: unknown): JsonObject {
  if (value === undefined || value === null) return {};
  const meta = wire.asObject(value, "metadata");
  const keys = Object.keys(meta);
  if (keys.length > 16) wire.badRequest("metadata", "at most 16 keys");
  for (const key of keys) {
    if (typeof meta[key] !== "string") wire.badRequest(`metadata.${key}`, "must be a string");
  }
  return meta as JsonObject;
}

function decodeText(value: unknown): JsonObject {
  if (value === undefined || value === null) return { format: { type: "text" } };
  const text = wire.asObject(value, "text");
  const format = text.format === undefined || text.format === null
    ? { type: "text" }
    : wire.asObject(text.format, "text.format");
  if (format.type !== "text" && format.type !== "json_schema" && format.type !== "json_object") {
    wire.badRequest("text.format.type", 'must be "text", "json_schema" or "json_object"');
  }
  return {
    format: format as JsonObject,
    ...(typeof text.verbosity === "string" ? { verbosity: text.verbosity } : {}),
  };
}

function decodeInclude(value: unknown): string[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value) || !value.every((v) => typeof v === "string")) {
    wire.badRequest("include", "must be an array of strings");
  }
  return value as string[];
}

function decode(body: unknown, options: wire.DecodeOptions): wire.NormalizedRequest {
  const obj = wire.asObject(body, "body");
  if (obj.previous_response_id !== undefined && obj.previous_response_id !== null) {
    wire.badRequest("previous_response_id", "not supported: send the whole input (store=false)");
  }
  if (obj.conversation !== undefined && obj.conversation !== null) {
    wire.badRequest("conversation", "not supported: send the whole input (store=false)");
  }
  if (wire.optBool(obj, "background") === true) wire.badRequest("background", "not supported");
  if (obj.max_tool_calls !== undefined && obj.max_tool_calls !== null) {
    wire.badRequest("max_tool_calls", "not supported: the policy's tool calls are not limited");
  }
  const n = wire.optPositiveInt(obj, "n");
  if (n !== undefined && n > 1) wire.badRequest("n", "only n=1 is supported");
  wire.zeroPenalty(obj, "presence_penalty");
  wire.zeroPenalty(obj, "frequency_penalty");
  wire.zeroTopLogprobs(obj);
  const reasoning = obj.reasoning === undefined || obj.reasoning === null
    ? undefined
    : wire.asObject(obj.reasoning, "reasoning");
  const toolChoice = decodeToolChoice(obj.tool_choice);
  const tools = decodeTools(obj.tools);
  const include = decodeInclude(obj.include);
  const sampling = {
    max_tokens: wire.resolveMaxTokens(wire.optPositiveInt(obj, "max_output_tokens"), options),
    temperature: wire.optNumber(obj, "temperature", 0, 2) ?? 1,
    top_p: wire.optNumber(obj, "top_p", 0, 1) ?? 1,
    stop: [],
    seed: null,
  };
  const instructions = optString(obj, "instructions");
  const effort = reasoning?.effort ?? null;
  const summary = reasoning?.summary ?? null;
  if (effort !== null && typeof effort !== "string") {
    wire.badRequest("reasoning.effort", "must be a string");
  }
  if (summary !== null && typeof summary !== "string") {
    wire.badRequest("reasoning.summary", "must be a string");
  }
  return {
    flavor: "openai_responses",
    model: typeof obj.model === "string" ? obj.model : "",
    stream: wire.optBool(obj, "stream") ?? false,
    messages: decodeResponsesInput(obj.input, instructions),
    prompt: null,
    promptIds: null,
    tools: toolChoice === "none" ? [] : tools.tools,
    sampling,
    ...(effort === "none" ? { enableThinking: false } : {}),
    includeUsage: false,
    logprobs: include.includes(LOGPROBS_INCLUDE),
    echo: {
      previous_response_id: null,
      instructions,
      tools: tools.echo,
      tool_choice: toolChoice,
      truncation: "disabled",
      parallel_tool_calls: wire.optBool(obj, "parallel_tool_calls") ?? true,
      text: decodeText(obj.text),
      top_p: sampling.top_p,
      presence_penalty: 0,
      frequency_penalty: 0,
      top_logprobs: 0,
      temperature: sampling.temperature,
      reasoning: { effort, summary },
      user: optString(obj, "user"),
      max_output_tokens: sampling.max_tokens,
      max_tool_calls: null,
      store: false,
      background: false,
      service_tier: "default",
      metadata: decodeMetadata(obj.metadata),
      safety_identifier: optString(obj, "safety_identifier"),
      prompt_cache_key: optString(obj, "prompt_cache_key"),
    },
  };
}

function itemId(prefix: string, callId: string, index: number): string {
  return `${prefix}_${callId.replace(/^[a-z]+[-_]/, "")}_${index}`;
}

type ItemStatus = "in_progress" | "completed" | "incomplete";

function textPart(text: string, logprobs: readonly TokenLogprob[] | null): JsonObject {
  return {
    type: "output_text",
    text,
    annotations: [],
    ...(logprobs ? { logprobs: logprobs.map(openaiTokenLogprob) } : {}),
  };
}

function messageItem(id: string, status: ItemStatus, content: JsonObject[]): JsonObject {
  return { type: "message", id, status, role: "assistant", content };
}

function reasoningItem(id: string, text: string | null): JsonObject {
  return {
    type: "reasoning",
    id,
    summary: [],
    content: text === null ? [] : [{ type: "reasoning_text", text }],
  };
}

function functionItem(
  id: string,
  tc: { id: string; name: string },
  args: string,
  status: ItemStatus,
): JsonObject {
  return { type: "function_call", id, call_id: tc.id, name: tc.name, arguments: args, status };
}

/** The full `ResponseResource`: identity and status, the request's echo, output and usage. */
function responseObject(
  start: wire.StreamStart,
  request: wire.NormalizedRequest,
  state: {
    status: "in_progress" | "completed" | "incomplete" | "failed";
    output: JsonObject[];
    usage: JsonObject | null;
    error?: JsonObject;
  },
): JsonObject {
  return {
    id: start.id,
    object: "response",
    created_at: start.created,
    completed_at: state.status === "completed" ? wire.nowSeconds() : null,
    status: state.status,
    incomplete_details: state.status === "incomplete" ? { reason: "max_output_tokens" } : null,
    model: start.model,
    output: state.output,
    error: state.error ?? null,
    ...(request.echo ?? {}),
    usage: state.usage,
  };
}

function usageOf(call: wire.FinishedCall): JsonObject {
  return {
    input_tokens: call.prompt_tokens,
    input_tokens_details: { cached_tokens: 0 },
    output_tokens: call.completion_tokens,
    output_tokens_details: { reasoning_tokens: call.output.logprobs?.reasoning.length ?? 0 },
    total_tokens: call.prompt_tokens + call.completion_tokens,
  };
}

function statusOf(call: wire.FinishedCall): "completed" | "incomplete" {
  return call.finish_reason === "length" ? "incomplete" : "completed";
}

function respond(call: wire.FinishedCall, request: wire.NormalizedRequest): JsonObject {
  const start = { id: call.id, model: call.model, created: call.created, prompt_tokens: 0 };
  const status = statusOf(call);
  const output: JsonObject[] = [];
  const { content, reasoning, tool_calls: calls } = call.output;
  const withText = content !== "" || calls.length === 0;
  if (reasoning) output.push(reasoningItem(itemId("rs", call.id, output.length), reasoning));
  if (withText) {
    const logprobs = request.logprobs ? call.output.logprobs?.content ?? [] : null;
    // A length stop cuts the text short; tool calls are only ever parsed whole.
    const st = status === "incomplete" ? "incomplete" : "completed";
    const part = textPart(content, logprobs);
    output.push(messageItem(itemId("msg", call.id, output.length), st, [part]));
  }
  for (const tc of calls) {
    output.push(functionItem(itemId("fc", call.id, output.length), tc, tc.arguments, "completed"));
  }
  return responseObject(start, request, { status, output, usage: usageOf(call) });
}

interface OpenItem {
  kind: "reasoning" | "message";
  id: string;
  text: string;
  logprobs: TokenLogprob[];
}

function stream(start: wire.StreamStart, request: wire.NormalizedRequest): wire.StreamEncoder {
  let seq = 0;
  let outputIndex = -1;
  const done: JsonObject[] = [];
  let open: OpenItem | null = null;
  const event = (type: string, data: JsonObject): string =>
    wire.sse({ type, sequence_number: seq++, ...data }, type);
  const snapshot = (
    status: "in_progress" | "completed" | "incomplete" | "failed",
    usage: JsonObject | null,
    error?: JsonObject,
  ) => responseObject(start, request, { status, output: [...done], usage, error });

  const close = (status: ItemStatus): string => {
    if (!open) return "";
    const { kind, id, text, logprobs } = open;
    open = null;
    const base = { item_id: id, output_index: outputIndex, content_index: 0 };
    if (kind === "reasoning") {
      const part = { type: "reasoning_text", text };
      const item = reasoningItem(id, text);
      done.push(item);
      return event("response.reasoning_text.done", { ...base, text }) +
        event("response.content_part.done", { ...base, part }) +
        event("response.output_item.done", { output_index: outputIndex, item });
    }
    const part = textPart(text, request.logprobs ? logprobs : null);
    const item = messageItem(id, status, [part]);
    done.push(item);
    return event("response.output_text.done", {
      ...base,
      text,
      logprobs: logprobs.map(openaiTokenLogprob),
    }) +
      event("response.content_part.done", { ...base, part }) +
      event("response.output_item.done", { output_index: outputIndex, item });
  };

  const openItem = (kind: "reasoning" | "message"): string => {
    outputIndex++;
    const id = itemId(kind === "reasoning" ? "rs" : "msg", start.id, outputIndex);
    open = { kind, id, text: "", logprobs: [] };
    const base = { item_id: id, output_index: outputIndex, content_index: 0 };
    const item = kind === "reasoning"
      ? reasoningItem(id, null)
      : messageItem(id, "in_progress", []);
    const part = kind === "reasoning"
      ? { type: "reasoning_text", text: "" }
      : textPart("", request.logprobs ? [] : null);
    return event("response.output_item.added", { output_index: outputIndex, item }) +
      event("response.content_part.added", { ...base, part });
  };

  const toolCall = (part: Extract<OutputPart, { type: "tool_call" }>): string => {
    let out = close("completed");
    outputIndex++;
    const id = itemId("fc", start.id, outputIndex);
    const base = { item_id: id, output_index: outputIndex };
    out += event("response.output_item.added", {
      output_index: outputIndex,
      item: functionItem(id, part, "", "in_progress"),
    }) +
      event("response.function_call_arguments.delta", { ...base, delta: part.arguments }) +
      event("response.function_call_arguments.done", { ...base, arguments: part.arguments });
    const item = functionItem(id, part, part.arguments, "completed");
    done.push(item);
    return out + event("response.output_item.done", { output_index: outputIndex, item });
  };

  return {
    start(): string {
      return event("response.created", { response: snapshot("in_progress", null) }) +
        event("response.in_progress", { response: snapshot("in_progress", null) });
    },
    part(part: OutputPart): string {
      if (part.type === "tool_call") return toolCall(part);
      const kind = part.type === "reasoning" ? "reasoning" : "message";
      let out = "";
      if (open?.kind !== kind) out += close("completed") + openItem(kind);
      const now = open as unknown as OpenItem;
      now.text += part.text;
      const logprobs = part.logprobs ?? [];
      now.logprobs.push(...logprobs);
      const base = { item_id: now.id, output_index: outputIndex, content_index: 0 };
      return out +
        (kind === "reasoning"
          ? event("response.reasoning_text.delta", { ...base, delta: part.text })
          : event("response.output_text.delta", {
            ...base,
            delta: part.text,
            logprobs: logprobs.map(openaiTokenLogprob),
          }));
    },
    finish(call: wire.FinishedCall): string {
      const status = statusOf(call);
      let out = close(status);
      if (!done.some((item) => item.type === "message") && call.output.tool_calls.length === 0) {
        out += openItem("message") + close(status);
      }
      return out + event(`response.${status}`, { response: snapshot(status, usageOf(call)) });
    },
    error: (message: string) =>
      event("response.failed", {
        response: snapshot("failed", null, { code: "server_error", message }),
      }),
  };
}

/** The OpenAI Responses codec. */
export const openaiResponsesCodec: wire.Codec = {
  flavor: "openai_responses",
  decode,
  respond,
  stream,
  errorBody: openaiErrorBody,
};
