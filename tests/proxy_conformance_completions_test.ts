/**
 * OpenAI Completions conformance: every answer of `/v1/completions` (bodies, every streamed
 * chunk, errors) matches the API reference's `Completion` schema
 * (`tests/support/wire/openai_chat.ts`) on text, token-id prompts, length stop, stop strings
 * and error cases, streamed and not, with and without `stream_options.include_usage`;
 * `logprobs: 0` returns the exact sampled logprobs in the legacy shape (tokens,
 * token_logprobs, text_offset); the `openai` SDK consumes the streams.
 */
import assert from "node:assert/strict";
import { openaiClient } from "./proxy_helpers.ts";
import { checkCompletionStream } from "./support/wire/chat_stream.ts";
import {
  conform,
  type ConformanceFixture,
  findRun,
  post,
  readSse,
  withConformanceFixture,
} from "./support/wire/conformance.ts";
import { Completion } from "./support/wire/openai_chat.ts";
import { OpenAIErrorBody } from "./support/wire/openresponses.ts";

async function both(fx: ConformanceFixture, body: Record<string, unknown>) {
  const url = `${fx.openaiBase}/completions`;
  const res = await post(fx, url, { model: "policy", ...body });
  assert.equal(res.status, 200);
  const plain = conform(Completion, await res.json(), "the completion");
  const [choice] = plain.choices;
  assert.ok(choice.finish_reason, "a finished completion names its finish_reason");
  for (const includeUsage of [false, true]) {
    const folded = checkCompletionStream(
      await readSse(
        await post(fx, url, {
          model: "policy",
          ...body,
          stream: true,
          ...(includeUsage ? { stream_options: { include_usage: true } } : {}),
        }),
      ),
      includeUsage,
    );
    assert.equal(folded.text, choice.text, "the chunks add up to the text");
    assert.equal(folded.finishReason, choice.finish_reason);
    assert.deepEqual(
      folded.logprobs,
      choice.logprobs
        ? {
          tokens: choice.logprobs.tokens,
          token_logprobs: choice.logprobs.token_logprobs,
          text_offset: choice.logprobs.text_offset,
        }
        : null,
      "the chunks' logprobs add up",
    );
    if (includeUsage) assert.deepEqual(folded.usage, plain.usage);
  }
  return plain;
}

Deno.test("completions conformance: text, token-id prompts, stop strings and length stops, streamed and not", () =>
  withConformanceFixture(async (fx) => {
    const plain = await both(fx, { prompt: "Q: 1+1?\nA:", max_tokens: 64 });
    assert.equal(plain.choices[0].finish_reason, "stop");
    assert.equal(plain.choices[0].logprobs, null, "no logprobs unless asked");
    const u = plain.usage!;
    assert.equal(u.total_tokens, u.prompt_tokens + u.completion_tokens);
    const ids = Array.from(fx.tokenizer.encode("Q: 2+2?\nA:"));
    await both(fx, { prompt: ids, max_tokens: 64 });
    assert.deepEqual(fx.upstream!.calls.at(-1)!.promptIds, ids);
    const stopped = await both(fx, { prompt: "Say hi.", max_tokens: 64, stop: ["friend"] });
    assert.equal(stopped.choices[0].text, "<think>\n\n</think>\n\nHello there, ");
    assert.equal(stopped.choices[0].finish_reason, "stop");
    const cut = await both(fx, { prompt: "[long]", max_tokens: 3 });
    assert.equal(cut.choices[0].finish_reason, "length");
    assert.equal(cut.usage!.completion_tokens, 3);
  }));

Deno.test("completions conformance: logprobs: 0 gives the exact sampled logprobs (legacy shape); alternatives are refused", () =>
  withConformanceFixture(async (fx) => {
    const plain = await both(fx, { prompt: "Say hi.", max_tokens: 64, logprobs: 0 });
    const [choice] = plain.choices;
    const lp = choice.logprobs!;
    const call = fx.upstream!.calls.at(-1)!;
    // Every returned token, in order, with its offset in the text; the end token has no text.
    assert.equal(lp.tokens!.join(""), choice.text, "the tokens spell the text");
    assert.equal(findRun(call.logprobs, lp.token_logprobs!), 0, "the sampled logprobs, from 0");
    assert.equal(lp.token_logprobs!.length, call.responseIds.length - 1, "all but the end token");
    let offset = 0;
    lp.tokens!.forEach((t, i) => {
      assert.equal(lp.text_offset![i], offset, `offset of token ${i}`);
      assert.equal(t, fx.tokenizer.decode([call.responseIds[i]]));
      offset += t.length;
    });
    assert.equal(lp.top_logprobs, null, "no alternatives");
    const url = `${fx.openaiBase}/completions`;
    for (
      const [extra, param] of [
        [{ logprobs: 2 }, "logprobs"],
        [{ presence_penalty: 0.5 }, "presence_penalty"],
        [{ echo: true }, "echo"],
      ] as const
    ) {
      const res = await post(fx, url, { model: "policy", prompt: "x", ...extra });
      assert.equal(res.status, 400);
      assert.equal(conform(OpenAIErrorBody, await res.json(), "error").error.param, param);
    }
  }));

Deno.test("completions conformance: a failing upstream ends the stream with an error chunk; the SDK consumes the streams", () =>
  withConformanceFixture(async (fx) => {
    const client = openaiClient(fx);
    const stream = await client.completions.create({
      model: "policy",
      prompt: "Say hi.",
      max_tokens: 64,
      stream: true,
      stream_options: { include_usage: true },
      logprobs: 0,
    });
    let text = "";
    let usage = null;
    for await (const chunk of stream) {
      conform(Completion, JSON.parse(JSON.stringify(chunk)), "an SDK chunk");
      text += chunk.choices[0]?.text ?? "";
      usage = chunk.usage ?? usage;
    }
    assert.ok(text.endsWith("Hello there, friend."));
    assert.ok(usage);
    const cut = await client.completions.create({
      model: "policy",
      prompt: "[long]",
      max_tokens: 2,
      stream: true,
    });
    let finish = null;
    for await (const chunk of cut) finish = chunk.choices[0]?.finish_reason ?? finish;
    assert.equal(finish, "length");
    const failed = checkCompletionStream(
      await readSse(
        await post(fx, `${fx.openaiBase}/completions`, {
          model: "policy",
          prompt: "x",
          stream: true,
        }),
      ),
    );
    assert.equal(failed.error?.error.type, "server_error");
    const plain = await post(fx, `${fx.openaiBase}/completions`, { model: "policy", prompt: "x" });
    assert.equal(plain.status, 502);
    conform(OpenAIErrorBody, await plain.json(), "the error body");
  }, { fail: (i) => i >= 2 ? { status: 500 } : null }));
