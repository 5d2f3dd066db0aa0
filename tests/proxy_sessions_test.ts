/**
 * Conversation/segment tagging (sub-agents, side conversations, compaction), the substitute
 * ablation mode, the SGLang token-level protocol, and token-exact prompts over random
 * multi-turn conversations through the proxy's per-session incremental encoder.
 */
import assert from "node:assert/strict";
import type OpenAI from "openai";
import type { ChatMessage } from "../lib/schema.ts";
import { SessionTracker } from "../lib/proxy/sessions.ts";
import type { ScriptedTurn } from "../lib/proxy/scripted_upstream.ts";
import { ADD_TOOL, assertCaptured, openaiClient, startProxyFixture } from "./proxy_helpers.ts";
import { mulberry32 } from "./fixtures/algo/samples.ts";

const SYSTEM: ChatMessage = { role: "system", content: "You are an agent." };
const TASK: ChatMessage = { role: "user", content: "Fix the bug." };

Deno.test("sessions: a harness's side conversation is side-<kind> even when it comes first; the agent's is main", () => {
  const sessions = new SessionTracker();
  // OpenCode sends its title request before the agent's first call.
  const title = sessions.tag("r", "a", [
    { role: "system", content: "You are a title generator. You output ONLY a thread title." },
    TASK,
  ]);
  assert.deepEqual(title.segment, { conversation: "side-title", index: 0, opened_by: "branch" });
  const agent = sessions.tag("r", "a", [SYSTEM, TASK]);
  assert.deepEqual(agent.segment, { conversation: "main", index: 0, opened_by: "root" });
  const memory = sessions.tag("r", "a", [
    { role: "system", content: "Run memory extraction over the session." },
    TASK,
  ]);
  assert.equal(memory.segment.conversation, "side-memory");
  const sub = sessions.tag("r", "a", [{ role: "system", content: "You are a sub-agent." }, TASK]);
  assert.equal(sub.segment.conversation, "branch-1");
  // Without markers, first come is main (the old naming).
  const plain = new SessionTracker({ sideConversations: {} });
  assert.equal(plain.tag("r", "a", title.conversation.lastMessages!).segment.conversation, "main");
});

Deno.test("sessions: same leading messages = one conversation; different ones = a branch; replaced history = a compaction segment", () => {
  const sessions = new SessionTracker();
  const first = sessions.tag("r", "a", [SYSTEM, TASK]);
  assert.deepEqual(first.segment, { conversation: "main", index: 0, opened_by: "root" });
  const turn: ChatMessage[] = [SYSTEM, TASK, { role: "assistant", content: "Looking." }, {
    role: "user",
    content: "go on",
  }];
  assert.deepEqual(sessions.tag("r", "a", turn).segment, {
    conversation: "main",
    index: 0,
    opened_by: null,
  });
  // The harness re-serialised the assistant turn: not a compaction.
  const rewritten = [...turn];
  rewritten[2] = { role: "assistant", content: "Looking!" };
  assert.equal(sessions.tag("r", "a", rewritten).segment.opened_by, null);
  const side = sessions.tag("r", "a", [{ role: "system", content: "Write a title." }, TASK]);
  assert.deepEqual(side.segment, { conversation: "branch-1", index: 0, opened_by: "branch" });
  const compacted = sessions.tag("r", "a", [SYSTEM, TASK, {
    role: "user",
    content: "Summary: looked.",
  }]);
  assert.deepEqual(compacted.segment, { conversation: "main", index: 1, opened_by: "compaction" });
  assert.deepEqual(
    sessions.tag("r", "a", [SYSTEM, TASK, { role: "user", content: "Summary: looked." }, {
      role: "assistant",
      content: "ok",
    }]).segment,
    { conversation: "main", index: 1, opened_by: null },
  );
  // Another attempt starts over.
  assert.equal(sessions.tag("r", "b", [SYSTEM, TASK]).segment.opened_by, "root");
  const bounded = new SessionTracker({ maxAttempts: 2 });
  for (const id of ["1", "2", "3"]) bounded.tag("r", id, [TASK]);
  assert.equal(bounded.size, 2);
});

Deno.test("sessions through the proxy: a side conversation and a compaction are tagged on the captured calls", async () => {
  const fx = await startProxyFixture({ scripted: { turns: [{ content: "ok" }] } });
  try {
    const client = openaiClient(fx);
    const ask = (messages: ChatMessage[]) =>
      client.chat.completions.create({
        model: "policy",
        messages: messages as OpenAI.ChatCompletionMessageParam[],
      });
    await ask([SYSTEM, TASK]);
    await ask([{ role: "system", content: "Write a title." }, TASK]);
    await ask([SYSTEM, TASK, { role: "assistant", content: "ok" }, {
      role: "user",
      content: "more",
    }]);
    await ask([SYSTEM, TASK, { role: "user", content: "Summary of the work so far." }]);
    const segments = (await fx.modelRequests()).map((e) => e.payload.segment);
    assert.deepEqual(segments, [
      { conversation: "main", index: 0, opened_by: "root" },
      { conversation: "branch-1", index: 0, opened_by: "branch" },
      { conversation: "main", index: 0, opened_by: null },
      { conversation: "main", index: 1, opened_by: "compaction" },
    ]);
  } finally {
    await fx.close();
  }
});

Deno.test("substitute mode reuses the sampled ids when the history provably extends the last turn, and says so", async () => {
  const fx = await startProxyFixture({
    proxy: { mode: "substitute" },
    scripted: {
      turns: [
        { content: "Let me add.", tool_calls: [{ name: "add", arguments: { a: 1, b: 2 } }] },
        { content: "3." },
        { content: "Done." },
      ],
    },
  });
  try {
    const client = openaiClient(fx);
    const messages: OpenAI.ChatCompletionMessageParam[] = [{ role: "user", content: "1 + 2?" }];
    const first = await client.chat.completions.create({
      model: "policy",
      messages,
      tools: [ADD_TOOL],
    });
    const message = first.choices[0].message;
    const call = message.tool_calls![0] as OpenAI.ChatCompletionMessageFunctionToolCall;
    messages.push(message as OpenAI.ChatCompletionMessageParam, {
      role: "tool",
      tool_call_id: call.id,
      content: "3",
    });
    await client.chat.completions.create({ model: "policy", messages, tools: [ADD_TOOL] });
    // A harness that edits the returned text breaks the proof: back to the faithful prompt.
    const edited: OpenAI.ChatCompletionMessageParam[] = [
      ...messages,
      { role: "assistant", content: "3!" },
      { role: "user", content: "thanks" },
    ];
    await client.chat.completions.create({ model: "policy", messages: edited, tools: [ADD_TOOL] });

    const events = await fx.modelRequests();
    assert.deepEqual(events.map((e) => e.payload.mode), ["faithful", "substitute", "faithful"]);
    const [e1, e2] = events;
    const prefix = [...e1.payload.prompt_token_ids, ...e1.payload.response_token_ids];
    assert.deepEqual(Array.from(e2.payload.prompt_token_ids.subarray(0, prefix.length)), prefix);
    const tail = fx.tokenizer.decode(e2.payload.prompt_token_ids.subarray(prefix.length));
    assert.match(
      tail,
      /^\n<\|im_start\|>user\n<tool_response>\n3\n<\/tool_response><\|im_end\|>\n<\|im_start\|>assistant\n$/,
    );
    assert.deepEqual(Array.from(e2.payload.response_token_ids), fx.upstream!.calls[1].responseIds);
    assert.deepEqual(
      Array.from(fx.upstream!.calls[1].promptIds),
      Array.from(e2.payload.prompt_token_ids),
    );
  } finally {
    await fx.close();
  }
});

Deno.test("SGLang /generate as the token-level upstream: ids, logprobs, streaming; version from the registry", async () => {
  const fx = await startProxyFixture({
    scripted: { turns: [{ content: "first answer" }, { content: "second answer" }], chunkSize: 3 },
    upstream: (url) => ({ kind: "sglang", endpoints: [url!] }),
  });
  try {
    const client = openaiClient(fx);
    const messages: ChatMessage[] = [{ role: "user", content: "hello" }];
    const r = await client.chat.completions.create({
      model: "policy",
      messages: messages as OpenAI.ChatCompletionMessageParam[],
    });
    assert.equal(r.choices[0].message.content, "first answer");
    const stream = await client.chat.completions.create({
      model: "policy",
      messages: messages as OpenAI.ChatCompletionMessageParam[],
      stream: true,
    });
    let text = "";
    for await (const chunk of stream) text += chunk.choices[0]?.delta?.content ?? "";
    assert.equal(text, "second answer");
    assert.ok(fx.upstream!.calls.every((c) => c.protocol === "sglang"));
    const events = await fx.modelRequests();
    for (const [i, event] of events.entries()) {
      assertCaptured(fx, event, { messages }, fx.upstream!.calls[i]);
      assert.equal(event.payload.policy_version, 7);
    }
  } finally {
    await fx.close();
  }
});

Deno.test("random multi-turn conversations: every captured prompt equals a full render + encode (incremental cache, template rewrites included)", async () => {
  const words = ["alpha", "beta", " gamma", "δέλτα", "数字", "🙂", "\n\n", "x=1;", "  spaced  "];
  const random = mulberry32(20261130);
  const pick = () => words[Math.floor(random() * words.length)];
  const phrase = (n: number) =>
    Array.from({ length: 1 + Math.floor(random() * n) }, pick).join(" ");
  const fx = await startProxyFixture({
    scripted: {
      policy: (): ScriptedTurn => {
        const r = random();
        if (r < 0.4) {
          return {
            reasoning: phrase(6),
            content: random() < 0.5 ? phrase(3) : "",
            tool_calls: [{ name: "add", arguments: { a: Math.floor(random() * 100), b: 1 } }],
          };
        }
        return { reasoning: random() < 0.7 ? phrase(8) : undefined, content: phrase(10) };
      },
    },
  });
  try {
    const client = openaiClient(fx);
    let checked = 0;
    for (let conversation = 0; conversation < 3; conversation++) {
      const messages: OpenAI.ChatCompletionMessageParam[] = [
        { role: "system", content: `conversation ${conversation}: ${phrase(4)}` },
        { role: "user", content: phrase(6) },
      ];
      for (let turn = 0; turn < 6; turn++) {
        const before = (await fx.modelRequests()).length;
        const stream = random() < 0.5;
        const sent = structuredClone(messages) as ChatMessage[];
        for (const m of sent) if (m.content === null) m.content = "";
        const r = await client.chat.completions.create({
          model: "policy",
          messages,
          tools: [ADD_TOOL],
          stream,
        }) as OpenAI.ChatCompletion | AsyncIterable<OpenAI.ChatCompletionChunk>;
        // Rebuild the assistant turn as a harness would (streamed or not).
        const message = "choices" in r ? r.choices[0].message : await collect(r);
        const events = await fx.modelRequests();
        assert.equal(events.length, before + 1);
        assertCaptured(fx, events.at(-1)!, { messages: sent, tools: [ADD_TOOL] });
        checked++;
        messages.push(message as OpenAI.ChatCompletionMessageParam);
        const calls = (message.tool_calls ?? []) as OpenAI.ChatCompletionMessageFunctionToolCall[];
        for (const call of calls) {
          messages.push({ role: "tool", tool_call_id: call.id, content: phrase(3) });
        }
        // A new user message makes Qwen3 strip earlier reasoning (a template rewrite).
        if (calls.length === 0) messages.push({ role: "user", content: phrase(5) });
      }
    }
    assert.equal(checked, 18);
  } finally {
    await fx.close();
  }
});

async function collect(stream: AsyncIterable<OpenAI.ChatCompletionChunk>) {
  const message: {
    role: "assistant";
    content: string;
    reasoning_content?: string;
    tool_calls?: OpenAI.ChatCompletionMessageFunctionToolCall[];
  } = { role: "assistant", content: "" };
  for await (const chunk of stream) {
    const delta = chunk.choices[0]?.delta as {
      content?: string;
      reasoning_content?: string;
      tool_calls?: { id: string; function: { name: string; arguments: string } }[];
    } | undefined;
    if (!delta) continue;
    message.content += delta.content ?? "";
    if (delta.reasoning_content) {
      message.reasoning_content = (message.reasoning_content ?? "") + delta.reasoning_content;
    }
    for (const tc of delta.tool_calls ?? []) {
      (message.tool_calls ??= []).push({ id: tc.id, type: "function", function: tc.function });
    }
  }
  return message;
}
