/**
 * The official `openai` SDK as the harness: Chat Completions, Completions and Responses,
 * streaming and not, multi-turn with tool calls, served by a scripted token-level policy
 * through the gateway-mounted proxy; every call is captured token-exactly.
 */
import assert from "node:assert/strict";
import type OpenAI from "openai";
import type { ChatMessage, ModelRequestEvent } from "../lib/schema.ts";
import {
  ADD_TOOL,
  assertCaptured,
  openaiClient,
  type ProxyFixture,
  startProxyFixture,
} from "./proxy_helpers.ts";

const TURNS = [
  {
    reasoning: "I should use the tool.",
    content: "Let me add.",
    tool_calls: [{ name: "add", arguments: { a: 1, b: 2 } }],
  },
  { reasoning: "The tool said 3.", content: "1 + 2 = 3." },
];

/**
 * The two captured calls of the calculator conversation (TURNS): the question, then the same
 * question with the tool call `callId` (arguments `args`) and its result.
 */
function assertCalculatorCaptured(
  fx: ProxyFixture,
  events: ModelRequestEvent[],
  callId: string,
  args: string,
): void {
  assert.equal(events.length, 2);
  const sent: ChatMessage[] = [
    { role: "system", content: "You are a calculator." },
    { role: "user", content: "What is 1 + 2?" },
  ];
  assertCaptured(fx, events[0], { messages: sent, tools: [ADD_TOOL] }, fx.upstream!.calls[0]);
  assertCaptured(fx, events[1], {
    messages: [
      ...sent,
      {
        role: "assistant",
        content: "Let me add.",
        reasoning_content: "I should use the tool.",
        tool_calls: [{
          id: callId,
          type: "function",
          function: { name: "add", arguments: args },
        }],
      },
      { role: "tool", content: "3", tool_call_id: callId },
    ],
    tools: [ADD_TOOL],
  }, fx.upstream!.calls[1]);
}

Deno.test("chat completions: a tool-using conversation, non-streamed then streamed, is served and captured token-exactly", async () => {
  const fx = await startProxyFixture({ scripted: { turns: TURNS } });
  try {
    const client = openaiClient(fx);
    const messages: OpenAI.ChatCompletionMessageParam[] = [
      { role: "system", content: "You are a calculator." },
      { role: "user", content: "What is 1 + 2?" },
    ];
    const first = await client.chat.completions.create({
      model: "policy",
      messages,
      tools: [ADD_TOOL],
    });
    const choice = first.choices[0];
    assert.equal(choice.finish_reason, "tool_calls");
    assert.equal(choice.message.content, "Let me add.");
    assert.equal(
      (choice.message as unknown as { reasoning_content: string }).reasoning_content,
      "I should use the tool.",
    );
    const call = choice.message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    assert.equal(call.function.name, "add");
    assert.deepEqual(JSON.parse(call.function.arguments), { a: 1, b: 2 });
    assert.equal(first.usage?.completion_tokens, fx.upstream!.calls[0].responseIds.length);

    messages.push(choice.message as OpenAI.ChatCompletionMessageParam);
    messages.push({ role: "tool", tool_call_id: call.id, content: "3" });
    const stream = await client.chat.completions.create({
      model: "policy",
      messages,
      tools: [ADD_TOOL],
      stream: true,
      stream_options: { include_usage: true },
    });
    let content = "";
    let reasoning = "";
    let finish: string | null = null;
    let chunks = 0;
    let usage: OpenAI.CompletionUsage | undefined;
    for await (const chunk of stream) {
      chunks++;
      const delta = chunk.choices[0]?.delta as { content?: string; reasoning_content?: string };
      content += delta?.content ?? "";
      reasoning += delta?.reasoning_content ?? "";
      finish = chunk.choices[0]?.finish_reason ?? finish;
      usage = chunk.usage ?? usage;
    }
    assert.equal(content, "1 + 2 = 3.");
    assert.equal(reasoning, "The tool said 3.");
    assert.equal(finish, "stop");
    assert.ok(chunks > 5, `streamed token by token (${chunks} chunks)`);
    assert.equal(usage?.completion_tokens, fx.upstream!.calls[1].responseIds.length);

    const events = await fx.modelRequests();
    assertCalculatorCaptured(fx, events, call.id, call.function.arguments);
    for (const e of events) {
      assert.equal(e.payload.flavor, "openai_chat");
      assert.equal(e.payload.http_status, 200);
      assert.equal(e.payload.mode, "faithful");
      assert.equal(e.payload.segment?.conversation, "main");
      assert.equal(e.payload.upstream, fx.upstream!.url);
      assert.equal(e.payload.client_disconnected, false);
      // How the call was sampled (the trainer recomputes at its temperature; truncated calls
      // are masked): the proxy's defaults here.
      assert.deepEqual(e.payload.sampling, { temperature: 1, top_p: 1, top_k: 0, min_p: 0 });
    }
    assert.equal(events[0].payload.finish_reason, "stop");
    // The request is kept with its conversation replaced by a digest.
    assert.equal(
      typeof (events[0].payload.request.messages as { sha256: string }).sha256,
      "string",
    );
    assert.equal(events[0].payload.request.model, "policy");
  } finally {
    await fx.close();
  }
});

Deno.test("completions: text and token-id prompts, stop strings cut the text and the recorded ids", async () => {
  const fx = await startProxyFixture({
    scripted: { turns: [{ raw: "42\nQ: and 3+3?\nA: 6" }, { raw: "abc" }, { raw: "one two" }] },
  });
  try {
    const client = openaiClient(fx);
    const prompt = "Q: 6*7?\nA: ";
    const first = await client.completions.create({
      model: "policy",
      prompt,
      max_tokens: 50,
      stop: ["\nQ:"],
    });
    assert.equal(first.choices[0].text, "42");
    assert.equal(first.choices[0].finish_reason, "stop");

    const ids = Array.from(fx.tokenizer.encode("Hello"));
    const stream = await client.completions.create({
      model: "policy",
      prompt: ids,
      max_tokens: 50,
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.text ?? "";
    assert.equal(text, "abc");

    const short = await client.completions.create({ model: "policy", prompt: "x", max_tokens: 1 });
    assert.equal(short.choices[0].finish_reason, "length");

    const events = await fx.modelRequests();
    assert.equal(events.length, 3);
    assertCaptured(fx, events[0], { promptIds: fx.tokenizer.encode(prompt) });
    // Kept: the tokens up to the one that completed the stop string, not the rest.
    const sampled = fx.upstream!.calls[0].responseIds;
    const kept = Array.from(events[0].payload.response_token_ids);
    assert.ok(kept.length < sampled.length);
    assert.deepEqual(kept, sampled.slice(0, kept.length));
    assert.ok(fx.tokenizer.decode(kept).includes("\nQ:"));
    assert.ok(!fx.tokenizer.decode(kept.slice(0, -1)).includes("\nQ:"));
    assertCaptured(fx, events[1], { promptIds: ids }, fx.upstream!.calls[1]);
    assert.equal(events[2].payload.finish_reason, "length");
    assert.equal(events[2].payload.response_token_ids.length, 1);
  } finally {
    await fx.close();
  }
});

Deno.test("responses: function calls, reasoning items and the streamed event sequence Codex expects", async () => {
  const fx = await startProxyFixture({ scripted: { turns: TURNS } });
  try {
    const client = openaiClient(fx);
    const tool = {
      type: "function" as const,
      name: "add",
      description: ADD_TOOL.function.description,
      parameters: ADD_TOOL.function.parameters,
      strict: false,
    };
    const first = await client.responses.create({
      model: "policy",
      instructions: "You are a calculator.",
      input: "What is 1 + 2?",
      tools: [tool],
    });
    assert.equal(first.status, "completed");
    const types = first.output.map((item) => item.type);
    assert.deepEqual(types, ["reasoning", "message", "function_call"]);
    const fc = first.output[2] as OpenAI.Responses.ResponseFunctionToolCall;
    assert.equal(fc.name, "add");
    assert.deepEqual(JSON.parse(fc.arguments), { a: 1, b: 2 });
    assert.equal(first.output_text, "Let me add.");

    const stream = await client.responses.create({
      model: "policy",
      instructions: "You are a calculator.",
      input: [
        { role: "user", content: "What is 1 + 2?" },
        ...first.output as OpenAI.Responses.ResponseInputItem[],
        { type: "function_call_output", call_id: fc.call_id, output: "3" },
      ],
      tools: [tool],
      stream: true,
    });
    const events: string[] = [];
    let text = "";
    let completed: OpenAI.Responses.Response | undefined;
    for await (const event of stream) {
      events.push(event.type);
      if (event.type === "response.output_text.delta") text += event.delta;
      if (event.type === "response.completed") completed = event.response;
    }
    assert.equal(events[0], "response.created");
    assert.equal(events[1], "response.in_progress");
    assert.equal(events.at(-1), "response.completed");
    for (
      const expected of [
        "response.output_item.added",
        "response.reasoning_text.delta",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.output_item.done",
      ]
    ) assert.ok(events.includes(expected), `has ${expected}`);
    assert.equal(text, "1 + 2 = 3.");
    assert.equal(completed?.output_text ?? text, "1 + 2 = 3.");

    const captured = await fx.modelRequests();
    assertCalculatorCaptured(fx, captured, fc.call_id, fc.arguments);
    assert.equal(captured[1].payload.flavor, "openai_responses");
  } finally {
    await fx.close();
  }
});

Deno.test("models: GET /v1/models lists the registered policy", async () => {
  const fx = await startProxyFixture();
  try {
    const client = openaiClient(fx);
    const ids: string[] = [];
    for await (const model of client.models.list()) ids.push(model.id);
    assert.deepEqual(ids, ["policy"]);
  } finally {
    await fx.close();
  }
});
