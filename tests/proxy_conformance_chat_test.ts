/**
 * OpenAI Chat Completions conformance: every answer of `/v1/chat/completions` (bodies, every
 * streamed chunk, error bodies and stream errors) matches the API reference's schemas
 * (`tests/support/wire/openai_chat.ts`) on text, system prompt, multi-turn, tool calls, length
 * stop and error cases, streamed and not, with and without `stream_options.include_usage`;
 * `logprobs: true` returns the policy's exact sampled logprobs; and the official `openai` SDK's
 * stream helper (`client.chat.completions.stream(...).finalChatCompletion()`) consumes each stream.
 */
import assert from "node:assert/strict";
import { openaiClient } from "./proxy_helpers.ts";
import { ADD_TOOL } from "./support/tools.ts";
import { checkChatStream, type FoldedChat } from "./support/wire/chat_stream.ts";
import {
  assertExactLogprobs,
  conform,
  type ConformanceFixture,
  FINAL,
  findRun,
  post,
  readSse,
  TEXT,
  THOUGHT,
  TOOL_PREFACE,
  UTF8,
  withConformanceFixture,
} from "./support/wire/conformance.ts";
import type { HfChatTokenizer } from "../lib/tokens/hf.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { PartTokens } from "../lib/proxy/codecs/logprobs.ts";
import { type ChatCompletion, ChatCompletion as ChatSchema } from "./support/wire/openai_chat.ts";
import { OpenAIErrorBody } from "./support/wire/openresponses.ts";

/** One request, non-streamed and streamed (with and without usage); all checked and compared. */
async function both(fx: ConformanceFixture, body: Record<string, unknown>) {
  const url = `${fx.openaiBase}/chat/completions`;
  const res = await post(fx, url, { model: "policy", ...body });
  assert.equal(res.status, 200);
  const plain = conform(ChatSchema, await res.json(), "the completion");
  const folded: FoldedChat[] = [];
  for (const includeUsage of [false, true]) {
    const sse = await readSse(
      await post(fx, url, {
        model: "policy",
        ...body,
        stream: true,
        ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
      }),
    );
    const f = checkChatStream(sse, includeUsage);
    const [choice] = plain.choices;
    assert.equal(f.content, choice.message.content ?? "", "streamed content = message content");
    assert.equal(f.finishReason, choice.finish_reason);
    assert.deepEqual(
      f.toolCalls.map((t) => [t.name, t.arguments]),
      (choice.message.tool_calls ?? []).map((t) => [t.function.name, t.function.arguments]),
    );
    assert.equal(
      f.reasoning,
      (choice.message as { reasoning_content?: string }).reasoning_content ?? "",
    );
    assert.deepEqual(f.logprobs, choice.logprobs?.content ?? null, "streamed logprobs = plain");
    if (includeUsage) assert.deepEqual(f.usage, plain.usage, "the usage chunk = the usage");
    folded.push(f);
  }
  return { plain, folded };
}

function usageAdds(c: ChatCompletion): void {
  const u = c.usage!;
  assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
}

Deno.test("chat conformance: text, system prompt and multi-turn, streamed and not", () =>
  withConformanceFixture(async (fx) => {
    const basic = await both(fx, { messages: [{ role: "user", content: "Say hello." }] });
    const [choice] = basic.plain.choices;
    assert.deepEqual(
      [choice.message.content, choice.message.refusal, choice.finish_reason, choice.logprobs],
      [TEXT, null, "stop", null],
    );
    usageAdds(basic.plain);
    const system = await both(fx, {
      messages: [
        { role: "system", content: "You are a pirate." },
        { role: "developer", content: "Speak like one." },
        { role: "user", content: "Say hello." },
      ],
      temperature: 0.3,
      max_completion_tokens: 100,
      seed: 7,
    });
    assert.equal(system.plain.choices[0].message.content, TEXT);
    const sent = fx.upstream!.calls.at(-1)!;
    assert.deepEqual([sent.body.temperature, sent.body.seed], [0.3, 7]);
    assert.ok(fx.tokenizer.decode(sent.promptIds).includes("You are a pirate."));
    await both(fx, {
      messages: [
        { role: "user", content: "My name is Alice." },
        { role: "assistant", content: "Hello Alice!" },
        { role: "user", content: "[think] What is my name?" },
      ],
    });
    const think = await both(fx, { messages: [{ role: "user", content: "[think] hi" }] });
    const message = think.plain.choices[0].message as { reasoning_content?: string };
    assert.equal(message.reasoning_content, THOUGHT);
    assert.ok(think.plain.usage!.completion_tokens_details!.reasoning_tokens! > 0);
  }));

Deno.test("chat conformance: tool calls (tool_calls finish, deltas with id/type/name) and the tool result turn", () =>
  withConformanceFixture(async (fx) => {
    const first = await both(fx, {
      messages: [{ role: "user", content: "[tool] What is 1 + 2?" }],
      tools: [ADD_TOOL],
    });
    const [choice] = first.plain.choices;
    assert.equal(choice.finish_reason, "tool_calls");
    assert.equal(choice.message.content, TOOL_PREFACE);
    const [call] = choice.message.tool_calls!;
    assert.deepEqual([call.type, call.function.name, JSON.parse(call.function.arguments)], [
      "function",
      "add",
      { a: 1, b: 2 },
    ]);
    const next = await both(fx, {
      messages: [
        { role: "user", content: "[tool] What is 1 + 2?" },
        choice.message,
        { role: "tool", tool_call_id: call.id, content: "3" },
      ],
      tools: [ADD_TOOL],
    });
    assert.equal(next.plain.choices[0].message.content, FINAL);
  }));

Deno.test("chat conformance: logprobs: true gives the exact sampled logprobs; top_logprobs > 0 is refused", () =>
  withConformanceFixture(async (fx) => {
    const { plain } = await both(fx, {
      messages: [{ role: "user", content: "[think] hi" }],
      logprobs: true,
      top_logprobs: 0,
    });
    const content = plain.choices[0].logprobs!.content!;
    assertExactLogprobs(fx, fx.upstream!.calls.at(-1)!, content, TEXT);
    assert.equal(plain.choices[0].logprobs!.refusal, null);
    // Characters split across tokens: each token's bytes are its exact bytes (half a character
    // included), and all the bytes, in order, are the text's UTF-8.
    const utf8 = await both(fx, {
      messages: [{ role: "user", content: "[utf8]" }],
      logprobs: true,
    });
    const tokens = utf8.plain.choices[0].logprobs!.content!;
    const sampled = fx.upstream!.calls.at(-1)!;
    const start = findRun(sampled.logprobs, tokens.map((t) => t.logprob));
    assert.ok(start >= 0);
    assert.ok(
      tokens.some((t) => t.token.includes("\uFFFD")),
      "some token holds part of a character",
    );
    tokens.forEach((t, j) => {
      const id = sampled.responseIds[start + j];
      assert.deepEqual(t.bytes, Array.from((fx.tokenizer as HfChatTokenizer).tokenBytes(id)));
    });
    assert.deepEqual(tokens.flatMap((t) => t.bytes!), Array.from(new TextEncoder().encode(UTF8)));
    assert.equal(utf8.plain.choices[0].message.content, UTF8);
    const url = `${fx.openaiBase}/chat/completions`;
    for (
      const [extra, param] of [
        [{ logprobs: true, top_logprobs: 2 }, "top_logprobs"],
        [{ top_logprobs: 0 }, "top_logprobs"],
        [{ frequency_penalty: 1 }, "frequency_penalty"],
      ] as const
    ) {
      const res = await post(fx, url, {
        model: "policy",
        messages: [{ role: "user", content: "hi" }],
        ...extra,
      });
      assert.equal(res.status, 400);
      assert.equal(conform(OpenAIErrorBody, await res.json(), "error").error.param, param);
    }
  }));

Deno.test("chat conformance: a length stop, and errors (HTTP bodies, stream error chunks)", () =>
  withConformanceFixture(async (fx) => {
    const long = await both(fx, {
      messages: [{ role: "user", content: "[long] count" }],
      max_tokens: 4,
    });
    assert.equal(long.plain.choices[0].finish_reason, "length");
    assert.equal(long.plain.usage!.completion_tokens, 4);
    const url = `${fx.openaiBase}/chat/completions`;
    const bad = await post(fx, url, {
      model: "policy",
      messages: [{ role: "user", content: [{ type: "image_url", image_url: { url: "x" } }] }],
    });
    assert.equal(bad.status, 400);
    const body = conform(OpenAIErrorBody, await bad.json(), "the error body");
    assert.equal(body.error.param, "messages[0].content[0].type");
    // The upstream now fails: a stream ends with an error chunk, then [DONE].
    const failed = checkChatStream(
      await readSse(
        await post(fx, url, {
          model: "policy",
          messages: [{ role: "user", content: "hi" }],
          stream: true,
        }),
      ),
    );
    assert.equal(failed.error?.error.type, "server_error");
    const client = openaiClient(fx);
    await assert.rejects(
      client.chat.completions.stream({
        model: "policy",
        messages: [{ role: "user", content: "hi" }],
      }).finalChatCompletion(),
      /500/,
      "the SDK surfaces the stream's error",
    );
  }, { fail: (i) => i >= 3 ? { status: 500 } : null }));

Deno.test("chat conformance: the openai SDK's stream helper consumes every stream", () =>
  withConformanceFixture(async (fx) => {
    const client = openaiClient(fx);
    const cases: [string, Record<string, unknown>][] = [
      ["hi", {}],
      ["[think] hi", { logprobs: true, stream_options: { include_usage: true } }],
      ["[tool] add", { tools: [ADD_TOOL] }],
      ["[long] count", { max_tokens: 4 }],
    ];
    for (const [content, extra] of cases) {
      const stream = client.chat.completions.stream({
        model: "policy",
        messages: [{ role: "user", content }],
        ...extra,
      });
      const final = await stream.finalChatCompletion();
      const checked = conform(ChatSchema, JSON.parse(JSON.stringify(final)), content);
      assert.ok(checked.choices[0].finish_reason);
      if ("logprobs" in extra) {
        assert.equal(final.choices[0].logprobs!.content!.map((t) => t.token).join(""), TEXT);
        assert.ok(final.usage, "include_usage: the SDK got the usage");
      }
    }
  }));

Deno.test("chat conformance: a logprob entry's token text is decode([id]), over Qwen3's whole vocabulary", async () => {
  const tokenizer = await loadQwen3Tokenizer();
  const tokens = new PartTokens(tokenizer);
  const ids: number[] = [];
  for (let id = 0; id < tokenizer.vocabSize; id++) {
    // One character of text per token, so each token lands in the one part below.
    tokens.add(id, -1, ids.push(id));
  }
  const [part] = tokens.attach([{ type: "content", text: "", span: [0, ids.length] }]);
  assert.equal(part.logprobs!.length, ids.length);
  part.logprobs!.forEach((entry, i) => {
    assert.equal(entry.token, tokenizer.decode([ids[i]]), `token ${ids[i]}`);
  });
});
