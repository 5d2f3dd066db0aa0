/**
 * Checks streamed Chat Completions and Completions answers against the OpenAI API reference:
 * every `data:` line is a chunk of the published shape (or, last, a stream error), the stream
 * ends with `[DONE]`, all chunks share id/created/model, exactly one chunk carries the
 * finish_reason, `stream_options.include_usage` adds one last chunk with empty `choices` and the
 * usage while every other chunk carries `usage: null` (and without it no chunk carries `usage`),
 * tool-call deltas open with id, type and name, and the deltas fold into the final message.
 *
 * @module
 */
import assert from "node:assert/strict";
import { conform, type SseEvent } from "./conformance.ts";
import { ChatCompletionChunk, Completion, StreamError, type TokenLogprob } from "./openai_chat.ts";
import type { z } from "zod";

/** A chat stream folded into what the non-streamed answer would be. */
export interface FoldedChat {
  content: string;
  reasoning: string;
  toolCalls: { id: string; name: string; arguments: string }[];
  logprobs: z.infer<typeof TokenLogprob>[] | null;
  finishReason: string;
  usage: unknown;
  error: z.infer<typeof StreamError> | null;
}

function common(sse: readonly SseEvent[], includeUsage: boolean) {
  assert.ok(sse.length >= 1, "a stream sends something");
  for (const e of sse) assert.equal(e.event, undefined, "chat streams use unnamed events");
  // A stream ends with [DONE], or with the error that cut it short.
  const done = sse.at(-1)!.data === "[DONE]";
  const datas = sse.slice(0, done ? -1 : undefined).map((e) =>
    JSON.parse(e.data) as Record<string, unknown>
  );
  assert.ok(datas.every((d, i) => i === datas.length - 1 || !("error" in d)), "error is last");
  const error = "error" in (datas.at(-1) ?? {})
    ? conform(StreamError, datas.pop(), "stream error")
    : null;
  assert.ok(done || error, "the stream ends with [DONE] or an error");
  for (const [i, d] of datas.entries()) {
    if (includeUsage) assert.ok("usage" in d, `chunk ${i}: usage present with include_usage`);
    else assert.ok(!("usage" in d), `chunk ${i}: no usage without include_usage`);
  }
  let usage: unknown = null;
  if (includeUsage && !error) {
    const last = datas.pop()!;
    assert.deepEqual(last.choices, [], "the usage chunk has no choices");
    assert.ok(last.usage, "the usage chunk carries the usage");
    usage = last.usage;
  }
  for (const [i, d] of datas.entries()) {
    if (includeUsage) assert.equal(d.usage, null, `chunk ${i}: usage null before the last`);
    assert.equal((d.choices as unknown[]).length, 1, `chunk ${i}: one choice`);
  }
  return { datas, error, usage };
}

/** Validates and folds a Chat Completions stream. */
export function checkChatStream(sse: readonly SseEvent[], includeUsage = false): FoldedChat {
  const { datas, error, usage } = common(sse, includeUsage);
  const chunks = datas.map((d, i) => conform(ChatCompletionChunk, d, `chunk ${i}`));
  const folded: FoldedChat = {
    content: "",
    reasoning: "",
    toolCalls: [],
    logprobs: null,
    finishReason: "",
    usage,
    error,
  };
  const first = chunks[0];
  assert.equal(first.choices[0].delta.role, "assistant", "the first delta names the role");
  chunks.forEach((c, i) => {
    assert.deepEqual([c.id, c.created, c.model], [first.id, first.created, first.model]);
    const [choice] = c.choices;
    const last = i === chunks.length - 1;
    if (!error) {
      assert.equal(choice.finish_reason !== null, last, `chunk ${i}: finish_reason only last`);
    } else assert.equal(choice.finish_reason, null, `chunk ${i}: no finish before the error`);
    if (choice.finish_reason) folded.finishReason = choice.finish_reason;
    folded.content += choice.delta.content ?? "";
    folded.reasoning += (choice.delta as { reasoning_content?: string }).reasoning_content ?? "";
    if (choice.logprobs?.content) {
      (folded.logprobs ??= []).push(...choice.logprobs.content);
    }
    for (const tc of choice.delta.tool_calls ?? []) {
      if (tc.index === folded.toolCalls.length) {
        assert.ok(tc.id && tc.type === "function" && tc.function?.name, "a new call names itself");
        folded.toolCalls.push({ id: tc.id, name: tc.function.name, arguments: "" });
      }
      assert.ok(tc.index < folded.toolCalls.length, "tool call indexes count up");
      folded.toolCalls[tc.index].arguments += tc.function?.arguments ?? "";
    }
  });
  return folded;
}

/** A completions stream folded. */
export interface FoldedCompletion {
  text: string;
  logprobs: { tokens: string[]; token_logprobs: number[]; text_offset: number[] } | null;
  finishReason: string;
  usage: unknown;
  error: z.infer<typeof StreamError> | null;
}

/** Validates and folds a Completions stream. */
export function checkCompletionStream(
  sse: readonly SseEvent[],
  includeUsage = false,
): FoldedCompletion {
  const { datas, error, usage } = common(sse, includeUsage);
  const chunks = datas.map((d, i) => conform(Completion, d, `chunk ${i}`));
  const folded: FoldedCompletion = { text: "", logprobs: null, finishReason: "", usage, error };
  chunks.forEach((c, i) => {
    assert.deepEqual([c.id, c.created, c.model], [
      chunks[0].id,
      chunks[0].created,
      chunks[0].model,
    ]);
    const [choice] = c.choices;
    const last = i === chunks.length - 1;
    if (!error) {
      assert.equal(choice.finish_reason !== null, last, `chunk ${i}: finish_reason only last`);
    }
    if (choice.finish_reason) folded.finishReason = choice.finish_reason;
    folded.text += choice.text;
    if (choice.logprobs?.tokens) {
      folded.logprobs ??= { tokens: [], token_logprobs: [], text_offset: [] };
      folded.logprobs.tokens.push(...choice.logprobs.tokens);
      folded.logprobs.token_logprobs.push(...choice.logprobs.token_logprobs!);
      folded.logprobs.text_offset.push(...choice.logprobs.text_offset!);
    }
  });
  return folded;
}
