/**
 * Anthropic Messages conformance: every answer of `/v1/messages` (bodies, every streamed event,
 * error bodies and error events) matches the API reference's schemas
 * (`tests/support/wire/anthropic_messages.ts`) on text, system prompt, multi-turn, thinking, tool
 * use (with `input_json_delta`), stop sequence, length stop and error cases, streamed and not;
 * the streamed events fold into the non-streamed message; and the official
 * `@anthropic-ai/sdk` stream helper (`client.messages.stream(...).finalMessage()`) consumes each
 * stream.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import { checkMessageStream } from "./support/wire/anthropic_stream.ts";
import {
  ErrorBody,
  type Message,
  Message as MessageSchema,
} from "./support/wire/anthropic_messages.ts";
import {
  conform,
  type ConformanceFixture,
  FINAL,
  post,
  readSse,
  TEXT,
  THOUGHT,
  TOOL_PREFACE,
  withConformanceFixture,
} from "./support/wire/conformance.ts";
import { ADD_TOOL } from "./support/tools.ts";

const TOOL = {
  name: "add",
  description: ADD_TOOL.function.description,
  input_schema: ADD_TOOL.function.parameters,
};

async function both(fx: ConformanceFixture, body: Record<string, unknown>) {
  const url = `${fx.anthropicBase}/v1/messages`;
  const res = await post(fx, url, { model: "policy", max_tokens: 256, ...body });
  assert.equal(res.status, 200);
  const plain = conform(MessageSchema, await res.json(), "the message");
  const streamed = checkMessageStream(
    await readSse(await post(fx, url, { model: "policy", max_tokens: 256, ...body, stream: true })),
  );
  const shape = (m: Message) =>
    JSON.stringify(m, (k, v) => (k === "id" || k === "input_tokens") ? 0 : v);
  assert.equal(shape(streamed.message), shape(plain), "the events fold into the message");
  return { plain, streamed };
}

function text(m: Message): string {
  return m.content.map((b) => b.type === "text" ? b.text : "").join("");
}

Deno.test("messages conformance: text, system prompt, multi-turn and thinking, streamed and not", () =>
  withConformanceFixture(async (fx) => {
    const basic = await both(fx, { messages: [{ role: "user", content: "Say hello." }] });
    assert.equal(text(basic.plain), TEXT);
    assert.deepEqual([basic.plain.stop_reason, basic.plain.stop_sequence], ["end_turn", null]);
    assert.ok(basic.plain.usage.input_tokens > 0 && basic.plain.usage.output_tokens > 0);
    assert.ok(basic.streamed.events.some((e) => e.type === "ping"), "a ping");
    await both(fx, {
      system: [{ type: "text", text: "You are a pirate." }],
      messages: [{ role: "user", content: [{ type: "text", text: "Say hello." }] }],
      temperature: 0.5,
    });
    const sent = fx.upstream!.calls.at(-1)!;
    assert.equal(sent.body.temperature, 0.5);
    assert.ok(fx.tokenizer.decode(sent.promptIds).includes("You are a pirate."));
    await both(fx, {
      system: "Be brief.",
      messages: [
        { role: "user", content: "My name is Alice." },
        { role: "assistant", content: "Hello Alice!" },
        { role: "user", content: "What is my name?" },
      ],
    });
    const think = await both(fx, {
      messages: [{ role: "user", content: "[think] hi" }],
      thinking: { type: "enabled", budget_tokens: 1024 },
    });
    assert.deepEqual(think.plain.content.map((b) => b.type), ["thinking", "text"]);
    assert.equal((think.plain.content[0] as { thinking: string }).thinking, THOUGHT);
    const deltas = think.streamed.events.flatMap((e) =>
      e.type === "content_block_delta" ? [e.delta.type] : []
    );
    assert.ok(deltas.includes("thinking_delta") && deltas.includes("signature_delta"));
  }));

Deno.test("messages conformance: tool_use with input_json_delta, the tool_result turn, stop sequences and length stops", () =>
  withConformanceFixture(async (fx) => {
    const first = await both(fx, {
      messages: [{ role: "user", content: "[tool] What is 1 + 2?" }],
      tools: [TOOL],
    });
    assert.equal(first.plain.stop_reason, "tool_use");
    assert.deepEqual(first.plain.content.map((b) => b.type), ["thinking", "text", "tool_use"]);
    assert.equal(text(first.plain), TOOL_PREFACE);
    const use = first.plain.content[2] as { id: string; name: string; input: unknown };
    assert.deepEqual([use.name, use.input], ["add", { a: 1, b: 2 }]);
    assert.match(use.id, /^toolu_/);
    assert.ok(
      first.streamed.events.some((e) =>
        e.type === "content_block_delta" && e.delta.type === "input_json_delta"
      ),
    );
    const next = await both(fx, {
      messages: [
        { role: "user", content: "[tool] What is 1 + 2?" },
        { role: "assistant", content: first.plain.content },
        { role: "user", content: [{ type: "tool_result", tool_use_id: use.id, content: "3" }] },
      ],
      tools: [TOOL],
    });
    assert.equal(text(next.plain), FINAL);

    const stopped = await both(fx, {
      messages: [{ role: "user", content: "Say hello." }],
      stop_sequences: ["friend"],
    });
    assert.deepEqual([stopped.plain.stop_reason, stopped.plain.stop_sequence], [
      "stop_sequence",
      "friend",
    ]);
    assert.equal(text(stopped.plain), "Hello there, ");
    const cut = await both(fx, {
      messages: [{ role: "user", content: "[long] count" }],
      max_tokens: 8,
    });
    assert.equal(cut.plain.stop_reason, "max_tokens");
    assert.equal(cut.plain.usage.output_tokens, 8);
  }));

Deno.test("messages conformance: errors as error bodies and error events; the SDK's stream helper consumes every stream", () =>
  withConformanceFixture(async (fx) => {
    const client = new Anthropic({ baseURL: fx.anthropicBase, apiKey: fx.token, maxRetries: 0 });
    const cases: Record<string, unknown>[] = [
      { messages: [{ role: "user", content: "hi" }] },
      { messages: [{ role: "user", content: "[think] hi" }] },
      { messages: [{ role: "user", content: "[tool] add" }], tools: [TOOL] },
      { messages: [{ role: "user", content: "[long] count" }], max_tokens: 8 },
    ];
    for (const params of cases) {
      const stream = client.messages.stream({
        model: "policy",
        max_tokens: 256,
        ...params,
      } as Anthropic.MessageStreamParams);
      let deltas = "";
      stream.on("text", (t) => (deltas += t));
      const final = await stream.finalMessage();
      const checked = conform(MessageSchema, final, `finalMessage ${JSON.stringify(params)}`);
      assert.equal(text(checked), deltas);
    }
    const url = `${fx.anthropicBase}/v1/messages`;
    const bad = await post(fx, url, {
      model: "policy",
      messages: [{ role: "user", content: "x" }],
    });
    assert.equal(bad.status, 400);
    const body = conform(ErrorBody, await bad.json(), "the error body");
    assert.equal(body.error.type, "invalid_request_error");
    assert.match(body.error.message, /max_tokens/);
    // The upstream now fails: the stream ends with an error event.
    const failed = checkMessageStream(
      await readSse(
        await post(fx, url, {
          model: "policy",
          max_tokens: 16,
          messages: [{ role: "user", content: "hi" }],
          stream: true,
        }),
      ),
    );
    assert.equal(failed.error?.type, "api_error");
    await assert.rejects(
      client.messages.stream({
        model: "policy",
        max_tokens: 16,
        messages: [{ role: "user", content: "hi" }],
      }).finalMessage(),
      /500/,
      "the SDK surfaces the error event",
    );
    const plain = await post(fx, url, {
      model: "policy",
      max_tokens: 16,
      messages: [{ role: "user", content: "hi" }],
    });
    assert.equal(plain.status, 502);
    conform(ErrorBody, await plain.json(), "the error body");
  }, { fail: (i) => i >= 4 ? { status: 500 } : null }));
