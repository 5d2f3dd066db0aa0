/**
 * OpenAI Responses input: `instructions` + `input` items (messages, reasoning, function and
 * custom tool calls and their outputs) folded into the chat messages the template renders.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { decodeResponsesInput } from "./openai_responses_input.ts";
 * const messages = decodeResponsesInput("hi", "be brief");
 * assert.deepEqual(messages.map((m) => m.role), ["system", "user"]);
 * ```
 *
 * @module
 */
import type { ChatMessage } from "../../schema.ts";
import { asObject, badRequest, reqString, textOfContent } from "./types.ts";

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
    } else if (type === "function_call" || type === "custom_tool_call") {
      // Free-form tools (Codex's apply_patch) carry `input`: the raw input becomes the call's
      // arguments.
      const argsKey = type === "function_call" ? "arguments" : "input";
      const t = openTurn();
      const args = item[argsKey] ?? "";
      if (typeof args !== "string") badRequest(`${f}.${argsKey}`, "must be a string");
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
