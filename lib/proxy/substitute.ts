/**
 * The `substitute` ablation mode: when a call's messages provably extend the previous call of
 * its conversation (same earlier messages, then the very assistant turn the proxy returned),
 * the prompt reuses the previous prompt ids and the sampled response ids instead of
 * re-tokenizing the rendered history. The prompt then differs from what deployment would send;
 * every such call is recorded with `mode: "substitute"`.
 *
 * @module
 */
import type { ChatMessage } from "../schema.ts";
import type { ChatTokenizer, RenderOptions } from "../tokens/types.ts";
import type { LastCall } from "./sessions.ts";

function sameJson(a: string, b: string): boolean {
  if (a === b) return true;
  try {
    return JSON.stringify(JSON.parse(a)) === JSON.stringify(JSON.parse(b));
  } catch {
    return false;
  }
}

function sameMessage(a: ChatMessage, b: ChatMessage): boolean {
  return a.role === b.role && (a.content ?? "") === (b.content ?? "") &&
    (a.tool_call_id ?? "") === (b.tool_call_id ?? "") &&
    (a.reasoning_content ?? "") === (b.reasoning_content ?? "") &&
    JSON.stringify(a.tool_calls?.map((t) => [t.function.name, t.function.arguments]) ?? []) ===
      JSON.stringify(b.tool_calls?.map((t) => [t.function.name, t.function.arguments]) ?? []);
}

/** True when `message` is the assistant turn `last` returned (tool-call JSON compared by value). */
export function isReturnedTurn(message: ChatMessage, last: LastCall): boolean {
  if (message.role !== "assistant") return false;
  if ((message.content ?? "").trim() !== last.content.trim()) return false;
  const calls = message.tool_calls ?? [];
  if (calls.length !== last.toolCalls.length) return false;
  return calls.every((c, i) =>
    c.function.name === last.toolCalls[i].name &&
    sameJson(c.function.arguments, last.toolCalls[i].arguments)
  );
}

/**
 * Builds the substituted prompt, or returns null when substitution is not provably sound (the
 * caller then falls back to the faithful prompt and records `faithful`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import type { ChatMessage } from "../schema.ts";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * import { substitutePrompt } from "./substitute.ts";
 * const tokenizer = await loadQwen3Tokenizer();
 * const first: ChatMessage[] = [{ role: "user", content: "2+2?" }];
 * const promptIds = tokenizer.encode(tokenizer.render(first, { addGenerationPrompt: true }));
 * const responseIds = [...tokenizer.encode("<think>\n\n</think>\n\n4<|im_end|>")];
 * const last = {
 *   messages: first, promptIds, responseIds, finishReason: "stop" as const, content: "4",
 *   toolCalls: [],
 * };
 * const messages: ChatMessage[] = [
 *   ...first,
 *   { role: "assistant", content: "4" },
 *   { role: "user", content: "3+3?" },
 * ];
 * const ids = substitutePrompt(tokenizer, last, messages, { addGenerationPrompt: true });
 * // ids = last.promptIds ∥ last.responseIds ∥ encode(text of the new turns)
 * assert.equal([...promptIds, ...responseIds].every((id, i) => ids?.[i] === id), true);
 * ```
 */
export function substitutePrompt(
  tokenizer: ChatTokenizer,
  last: LastCall,
  messages: ChatMessage[],
  options: RenderOptions,
): Uint32Array | null {
  const n = last.messages.length;
  if (last.finishReason !== "stop" || last.responseIds.length === 0) return null;
  const endId = last.responseIds[last.responseIds.length - 1];
  if (!tokenizer.eosTokenIds.includes(endId)) return null;
  if (messages.length <= n + 1) return null;
  for (let i = 0; i < n; i++) if (!sameMessage(messages[i], last.messages[i])) return null;
  if (!isReturnedTurn(messages[n], last)) return null;
  const prefix = tokenizer.render(messages.slice(0, n + 1), {
    ...options,
    addGenerationPrompt: false,
  });
  const full = tokenizer.render(messages, { ...options, addGenerationPrompt: true });
  const endText = tokenizer.decode([endId]);
  const prefixEnd = prefix.lastIndexOf(endText);
  if (prefixEnd < 0) return null;
  // Where the assistant turn ends in the full rendering: templates may render it differently
  // once it is no longer the last message (Qwen3 drops its empty think block), so look for the
  // end token from where the two renderings part (or from the turn's end when they do not).
  let common = 0;
  const limit = Math.min(prefix.length, full.length);
  while (common < limit && prefix.charCodeAt(common) === full.charCodeAt(common)) common++;
  const turnEnd = full.indexOf(endText, Math.min(common, prefixEnd));
  if (turnEnd < 0) return null;
  // What the template writes after the assistant's end token (e.g. "\n"), then the new turns.
  const tail = tokenizer.encode(full.slice(turnEnd + endText.length));
  const out = new Uint32Array(last.promptIds.length + last.responseIds.length + tail.length);
  out.set(last.promptIds, 0);
  out.set(last.responseIds, last.promptIds.length);
  out.set(tail, last.promptIds.length + last.responseIds.length);
  return out;
}
