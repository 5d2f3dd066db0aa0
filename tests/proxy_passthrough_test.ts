/**
 * The OpenAI-compatible (vLLM) passthrough: the proxy forwards with `return_token_ids` and
 * `logprobs`, records the upstream's `prompt_token_ids`, `token_ids` and logprobs, takes the
 * policy version from the model registry, and answers in the caller's flavor.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import type OpenAI from "openai";
import type { ChatTokenizer } from "../lib/tokens/types.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { ADD_TOOL, openaiClient, type ProxyFixture, startProxyFixture } from "./proxy_helpers.ts";
import { checkMessageStream } from "./support/wire/anthropic_stream.ts";
import { checkChatStream } from "./support/wire/chat_stream.ts";
import { conform, post, readSse } from "./support/wire/conformance.ts";
import { ChatCompletion, Completion } from "./support/wire/openai_chat.ts";
import { ResponseResource } from "./support/wire/openresponses.ts";
import { checkResponsesStream } from "./support/wire/responses_stream.ts";

type Json = Record<string, unknown>;

interface FakeVllm {
  url: string;
  bodies: Json[];
  close(): Promise<void>;
}

/** A vLLM look-alike: ids from the tokenizer, logprobs -0.25 · (position + 1) / 10. */
function startFakeVllm(tokenizer: ChatTokenizer): FakeVllm {
  const bodies: Json[] = [];
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    const body = await req.json() as Json;
    bodies.push(body);
    if (body.return_token_ids !== true || !body.logprobs) {
      return Response.json({ error: { message: "expected return_token_ids and logprobs" } }, {
        status: 400,
      });
    }
    const chat = new URL(req.url).pathname === "/v1/chat/completions";
    const wantsTool = chat && Array.isArray(body.tools) && body.tools.length > 0 &&
      !(body.messages as Json[]).some((m) => m.role === "tool");
    const promptIds = chat
      ? Array.from(
        tokenizer.encode(tokenizer.render(body.messages as never, { addGenerationPrompt: true })),
      )
      : Array.from(tokenizer.encode(String(body.prompt)));
    const text = wantsTool
      ? '<tool_call>\n{"name": "add", "arguments": {"a": 4, "b": 4}}\n</tool_call>'
      : "Eight.";
    const ids = [...tokenizer.encode(text), tokenizer.eosTokenIds[0]];
    const lps = ids.map((_, i) => -0.25 * (i + 1) / 10);
    const toolCalls = wantsTool
      ? [{
        id: "chatcmpl-tool-1",
        type: "function",
        function: { name: "add", arguments: '{"a": 4, "b": 4}' },
      }]
      : undefined;
    const finish = wantsTool ? "tool_calls" : "stop";
    if (!body.stream) {
      const choice: Json = chat
        ? {
          index: 0,
          message: {
            role: "assistant",
            content: wantsTool ? null : text,
            tool_calls: toolCalls ?? [],
          },
          logprobs: { content: ids.map((id, i) => ({ token: `t${id}`, logprob: lps[i] })) },
          finish_reason: finish,
          token_ids: ids,
        }
        : {
          index: 0,
          text,
          logprobs: { token_logprobs: lps, tokens: ids.map(String) },
          finish_reason: "stop",
          token_ids: ids,
          prompt_token_ids: promptIds,
        };
      return Response.json({
        id: "x",
        object: "chat.completion",
        choices: [choice],
        prompt_token_ids: chat ? promptIds : null,
      });
    }
    const lines: string[] = [];
    const piece = (i: number, delta: Json, finishReason: string | null) => ({
      id: "x",
      object: "chat.completion.chunk",
      ...(i === 0 ? { prompt_token_ids: promptIds } : {}),
      choices: [{
        index: 0,
        delta,
        logprobs: { content: [{ token: `t${ids[i]}`, logprob: lps[i] }] },
        finish_reason: finishReason,
        token_ids: [ids[i]],
      }],
    });
    for (let i = 0; i < ids.length; i++) {
      const last = i === ids.length - 1;
      let delta: Json = {};
      if (wantsTool && last) delta = { tool_calls: [{ index: 0, ...toolCalls![0] }] };
      else if (!wantsTool && !last) delta = { content: tokenizer.decode([ids[i]]) };
      lines.push(`data: ${JSON.stringify(piece(i, delta, last ? finish : null))}\n\n`);
    }
    lines.push("data: [DONE]\n\n");
    return new Response(lines.join(""), { headers: { "content-type": "text/event-stream" } });
  });
  return {
    url: `http://127.0.0.1:${(server.addr as Deno.NetAddr).port}`,
    bodies,
    close: () => server.shutdown(),
  };
}

/** A passthrough proxy fixture over a fake vLLM (Qwen3 tokenizer); runs `fn`, closes both. */
async function withFakeVllm(
  fn: (
    fx: ProxyFixture,
    vllm: FakeVllm,
    tokenizer: ChatTokenizer,
  ) => Promise<void>,
): Promise<void> {
  const tokenizer = await loadQwen3Tokenizer();
  const vllm = startFakeVllm(tokenizer);
  try {
    const fx = await startProxyFixture({
      tokenizer,
      noScripted: true,
      upstream: () => ({ kind: "openai_compatible", endpoints: [vllm.url], model: "served-model" }),
    });
    try {
      await fn(fx, vllm, tokenizer);
    } finally {
      await fx.close();
    }
  } finally {
    await vllm.close();
  }
}

Deno.test("passthrough (vLLM): ids and logprobs come from the upstream; version from the registry; any caller flavor", () =>
  withFakeVllm(async (fx, vllm, tokenizer) => {
    const openai = openaiClient(fx);
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "4 + 4?" }];
    const first = await openai.chat.completions.create({
      model: "policy",
      messages,
      tools: [ADD_TOOL],
    });
    const tc = first.choices[0].message
      .tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.equal(tc.function.name, "add");
    assert.equal(first.choices[0].finish_reason, "tool_calls");
    messages.push(first.choices[0].message as OpenAI.ChatCompletionMessageParam, {
      role: "tool",
      tool_call_id: tc.id,
      content: "8",
    });
    const stream = await openai.chat.completions.create({
      model: "policy",
      messages,
      tools: [ADD_TOOL],
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    assert.equal(text, "Eight.");

    const anthropic = new Anthropic({ baseURL: fx.anthropicBase, apiKey: fx.token, maxRetries: 0 });
    const streamed = anthropic.messages.stream({
      model: "policy",
      max_tokens: 64,
      messages: [{ role: "user", content: "4 + 4?" }],
      tools: [{
        name: "add",
        input_schema: ADD_TOOL.function.parameters as Anthropic.Tool.InputSchema,
      }],
    });
    const message = await streamed.finalMessage();
    assert.equal(message.stop_reason, "tool_use");
    assert.deepEqual(
      (message.content.find((b) => b.type === "tool_use") as Anthropic.ToolUseBlock).input,
      { a: 4, b: 4 },
    );

    const completion = await openai.completions.create({
      model: "policy",
      prompt: "4 + 4 =",
      max_tokens: 8,
    });
    assert.equal(completion.choices[0].text, "Eight.");

    assert.ok(vllm.bodies.every((b) => b.model === "served-model" && b.return_token_ids === true));
    const events = await fx.modelRequests();
    assert.equal(events.length, 4);
    for (const event of events) {
      const p = event.payload;
      assert.equal(p.policy_version, 7, "from the model registry");
      assert.equal(p.upstream, vllm.url);
      assert.ok(p.prompt_token_ids.length > 0);
      assert.equal(p.response_logprobs.length, p.response_token_ids.length);
      assert.deepEqual(
        Array.from(p.response_logprobs),
        Array.from(p.response_token_ids, (_, i) => Math.fround(-0.25 * (i + 1) / 10)),
      );
      assert.equal(p.response_token_ids.at(-1), tokenizer.eosTokenIds[0]);
    }
    // Prompt ids are the upstream's own rendering of what was forwarded.
    const forwarded = vllm.bodies[1].messages as never;
    assert.deepEqual(
      Array.from(events[1].payload.prompt_token_ids),
      Array.from(tokenizer.encode(tokenizer.render(forwarded, { addGenerationPrompt: true }))),
    );
    assert.deepEqual(
      Array.from(events[3].payload.prompt_token_ids),
      Array.from(tokenizer.encode("4 + 4 =")),
    );

    // A new version in the registry is recorded on later calls (after the registry cache).
    await fx.store.upsertModel({ name: "policy", endpoints: [], version: 8, info: {} });
    await new Promise((r) => setTimeout(r, 300));
    await openai.completions.create({ model: "policy", prompt: "4 + 4 =", max_tokens: 8 });
    assert.equal((await fx.modelRequests()).at(-1)!.payload.policy_version, 8);
  }));

Deno.test("passthrough (vLLM): answers in every flavor match the published wire schemas", () =>
  withFakeVllm(async (fx) => {
    const messages = [{ role: "user", content: "4 + 4?" }];
    const chatUrl = `${fx.openaiBase}/chat/completions`;
    const chat = conform(
      ChatCompletion,
      await (await post(fx, chatUrl, { model: "policy", messages, logprobs: true })).json(),
      "chat",
    );
    // The passthrough attaches no per-token logprobs to answers (they are recorded only).
    assert.equal(chat.choices[0].logprobs, null);
    const folded = checkChatStream(
      await readSse(
        await post(fx, chatUrl, {
          model: "policy",
          messages,
          stream: true,
          stream_options: { include_usage: true },
        }),
      ),
      true,
    );
    assert.equal(folded.content, "Eight.");
    const responsesUrl = `${fx.openaiBase}/responses`;
    conform(
      ResponseResource,
      await (await post(fx, responsesUrl, { model: "policy", input: "4 + 4?" })).json(),
      "response",
    );
    const streamed = checkResponsesStream(
      await readSse(
        await post(fx, responsesUrl, { model: "policy", input: "4 + 4?", stream: true }),
      ),
    );
    assert.equal(streamed.final.status, "completed");
    const message = checkMessageStream(
      await readSse(
        await post(fx, `${fx.anthropicBase}/v1/messages`, {
          model: "policy",
          max_tokens: 64,
          messages,
          stream: true,
        }),
      ),
    );
    assert.equal(message.message.stop_reason, "end_turn");
    // (The look-alike streams chat chunks only: completions are checked non-streamed.)
    const completion = conform(
      Completion,
      await (await post(fx, `${fx.openaiBase}/completions`, {
        model: "policy",
        prompt: "4 + 4 =",
        logprobs: 0,
      })).json(),
      "completion",
    );
    assert.equal(completion.choices[0].logprobs, null);
    assert.equal(completion.choices[0].text, "Eight.");
  }));

Deno.test("passthrough (vLLM): answers and refusals through the gateway carry the security headers", () =>
  withFakeVllm(async (fx) => {
    const url = `${fx.openaiBase}/chat/completions`;
    const body = JSON.stringify({ model: "policy", messages: [{ role: "user", content: "hi" }] });
    const answered = await fetch(url, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.token}`, "content-type": "application/json" },
      body,
    });
    await answered.arrayBuffer();
    const refused = await fetch(url, {
      method: "POST",
      headers: { authorization: "Bearer not-a-token", "content-type": "application/json" },
      body,
    });
    await refused.arrayBuffer();
    assert.deepEqual([answered.status, refused.status], [200, 401]);
    // Set once, by the gateway's own middleware (the mounted proxy does not repeat them).
    for (const res of [answered, refused]) {
      assert.equal(res.headers.get("x-content-type-options"), "nosniff");
      assert.equal(res.headers.get("x-frame-options"), "SAMEORIGIN");
      assert.equal(res.headers.get("cross-origin-resource-policy"), "same-origin");
    }
  }));
