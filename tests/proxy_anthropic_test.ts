/**
 * The official `@anthropic-ai/sdk` as the harness (what Claude Code speaks): Messages with
 * tool_use/tool_result and thinking blocks, streaming and not, through the proxy.
 */
import assert from "node:assert/strict";
import Anthropic from "@anthropic-ai/sdk";
import type { ChatMessage } from "../lib/schema.ts";
import { decodeAnthropicMessages } from "../lib/proxy/codecs/anthropic_messages.ts";
import { ADD_TOOL, assertCaptured, startProxyFixture } from "./proxy_helpers.ts";

const TURNS = [
  {
    reasoning: "Use the tool.",
    content: "Adding.",
    tool_calls: [{ name: "add", arguments: { a: 2, b: 5 } }],
  },
  { content: "2 + 5 = 7." },
  { content: "x".repeat(40) },
];

const TOOL = {
  name: "add",
  description: ADD_TOOL.function.description,
  input_schema: ADD_TOOL.function.parameters as Anthropic.Tool.InputSchema,
};

Deno.test("messages: a streamed tool-using turn then a non-streamed answer, captured token-exactly", async () => {
  const fx = await startProxyFixture({ scripted: { turns: TURNS } });
  try {
    // Claude Code probes the base URL first.
    const head = await fetch(fx.anthropicBase, { method: "HEAD" });
    assert.equal(head.status, 200);
    await head.body?.cancel();

    const client = new Anthropic({ baseURL: fx.anthropicBase, apiKey: fx.token, maxRetries: 0 });
    const messages: Anthropic.MessageParam[] = [{ role: "user", content: "What is 2 + 5?" }];
    const stream = client.messages.stream({
      model: "policy",
      max_tokens: 256,
      system: [{ type: "text", text: "You are a calculator." }],
      messages,
      tools: [TOOL],
    });
    const kinds: string[] = [];
    stream.on("streamEvent", (event) => kinds.push(event.type));
    const first = await stream.finalMessage();
    assert.equal(kinds[0], "message_start");
    assert.equal(kinds.at(-1), "message_stop");
    assert.ok(kinds.includes("content_block_delta"));
    assert.equal(first.stop_reason, "tool_use");
    assert.deepEqual(first.content.map((b) => b.type), ["thinking", "text", "tool_use"]);
    const thinking = first.content[0] as Anthropic.ThinkingBlock;
    assert.equal(thinking.thinking, "Use the tool.");
    assert.equal((first.content[1] as Anthropic.TextBlock).text, "Adding.");
    const use = first.content[2] as Anthropic.ToolUseBlock;
    assert.equal(use.name, "add");
    assert.deepEqual(use.input, { a: 2, b: 5 });

    messages.push({ role: "assistant", content: first.content as Anthropic.ContentBlockParam[] });
    messages.push({
      role: "user",
      content: [{ type: "tool_result", tool_use_id: use.id, content: "7" }],
    });
    const second = await client.messages.create({
      model: "policy",
      max_tokens: 256,
      system: "You are a calculator.",
      messages,
      tools: [TOOL],
    });
    assert.equal(second.stop_reason, "end_turn");
    assert.deepEqual(second.content, [{ type: "text", text: "2 + 5 = 7.", citations: null }]);
    assert.equal(second.usage.output_tokens, fx.upstream!.calls[1].responseIds.length);

    const short = await client.messages.create({
      model: "policy",
      max_tokens: 3,
      messages: [{ role: "user", content: "say x" }],
    });
    assert.equal(short.stop_reason, "max_tokens");

    const events = await fx.modelRequests();
    assert.equal(events.length, 3);
    const sent: ChatMessage[] = [
      { role: "system", content: "You are a calculator." },
      { role: "user", content: "What is 2 + 5?" },
    ];
    const tools = [ADD_TOOL];
    assertCaptured(fx, events[0], { messages: sent, tools }, fx.upstream!.calls[0]);
    assertCaptured(fx, events[1], {
      messages: [
        ...sent,
        {
          role: "assistant",
          content: "Adding.",
          reasoning_content: "Use the tool.",
          tool_calls: [{
            id: use.id,
            type: "function",
            function: { name: "add", arguments: JSON.stringify({ a: 2, b: 5 }) },
          }],
        },
        { role: "tool", content: "7", tool_call_id: use.id },
      ],
      tools,
    }, fx.upstream!.calls[1]);
    assert.equal(events[2].payload.finish_reason, "length");
    assert.equal(events[2].payload.response_token_ids.length, 3);
    assert.equal(events[2].payload.segment?.opened_by, "branch");
    for (const e of events) assert.equal(e.payload.flavor, "anthropic_messages");
  } finally {
    await fx.close();
  }
});

Deno.test("messages: count_tokens answers the rendered prompt length", async () => {
  const fx = await startProxyFixture();
  try {
    const client = new Anthropic({ baseURL: fx.anthropicBase, apiKey: fx.token, maxRetries: 0 });
    const counted = await client.messages.countTokens({
      model: "policy",
      messages: [{ role: "user", content: "hello there" }],
    });
    const expected = fx.tokenizer.encode(
      fx.tokenizer.render([{ role: "user", content: "hello there" }], {
        addGenerationPrompt: true,
      }),
    ).length;
    assert.equal(counted.input_tokens, expected);
  } finally {
    await fx.close();
  }
});

Deno.test("a mid-conversation system turn (Claude Code 2.x reminders) stays a system message in place", () => {
  const messages = decodeAnthropicMessages("you are terse", [
    { role: "user", content: "hi" },
    { role: "system", content: [{ type: "text", text: "reminder: be brief" }] },
    { role: "assistant", content: "hello" },
  ]);
  assert.deepEqual(messages.map((m) => [m.role, m.content]), [
    ["system", "you are terse"],
    ["user", "hi"],
    ["system", "reminder: be brief"],
    ["assistant", "hello"],
  ]);
});
