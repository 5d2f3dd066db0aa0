/**
 * OpenAI Responses conformance: every answer of `/v1/responses` (non-streamed bodies, every
 * streamed event, error bodies) matches the OpenResponses specification's schemas
 * (`tests/support/wire/openresponses.ts`), on the cases of the spec's own compliance set (basic
 * text, streaming, system prompt, tool calling streamed and not, multi-turn) plus reasoning, a
 * length stop and errors; the request's settings are echoed; the text's logprobs are the
 * policy's exact sampled ones; and the official `openai` SDK's stream helper consumes each
 * stream (`client.responses.stream(...).finalResponse()`).
 */
import assert from "node:assert/strict";
import type OpenAI from "openai";
import { openaiClient } from "./proxy_helpers.ts";
import {
  assertExactLogprobs,
  conform,
  type ConformanceFixture,
  FINAL,
  LONG,
  post,
  readSse,
  TEXT,
  THOUGHT,
  TOOL_PREFACE,
  withConformanceFixture,
} from "./support/wire/conformance.ts";
import { OpenAIErrorBody, ResponseResource } from "./support/wire/openresponses.ts";
import { checkResponsesStream } from "./support/wire/responses_stream.ts";
import { ADD_TOOL } from "./support/tools.ts";

const TOOL = {
  type: "function" as const,
  name: "add",
  description: ADD_TOOL.function.description,
  parameters: ADD_TOOL.function.parameters,
  strict: false,
};

/** Posts a request streamed and not; checks both against the spec; returns both. */
async function both(
  fx: ConformanceFixture,
  body: Record<string, unknown>,
) {
  const url = `${fx.openaiBase}/responses`;
  const res = await post(fx, url, { model: "policy", ...body });
  assert.equal(res.status, 200);
  const plain = conform(ResponseResource, await res.json(), "the response");
  const streamed = checkResponsesStream(
    await readSse(await post(fx, url, { model: "policy", ...body, stream: true })),
  );
  // Streamed and not, the same call gives the same answer (ids and timestamps aside).
  const shape = (r: ResponseResource) =>
    JSON.stringify(
      { ...r, id: 0, created_at: 0, completed_at: r.completed_at === null },
      (k, v) => (k === "id" || k === "call_id") ? 0 : v,
    );
  assert.equal(shape(streamed.final), shape(plain), "streamed final = non-streamed answer");
  return { plain, streamed };
}

function messageText(r: ResponseResource): string {
  return r.output.flatMap((i) => i.type === "message" ? i.content : [])
    .map((c) => "text" in c ? c.text : "").join("");
}

Deno.test("responses conformance: basic text, system prompt and multi-turn answers are full ResponseResources", () =>
  withConformanceFixture(async (fx) => {
    // basic-response / streaming-response of the compliance set
    const basic = await both(fx, {
      input: [{ type: "message", role: "user", content: "Say hello in exactly 3 words." }],
    });
    assert.equal(basic.plain.status, "completed");
    assert.equal(typeof basic.plain.completed_at, "number");
    assert.equal(messageText(basic.plain), TEXT);
    assert.deepEqual(basic.plain.output.map((i) => i.type), ["message"]);
    // the spec's defaults for what the request did not set
    const p = basic.plain;
    assert.deepEqual(
      [p.instructions, p.previous_response_id, p.tools, p.tool_choice, p.truncation],
      [null, null, [], "auto", "disabled"],
    );
    assert.deepEqual([p.temperature, p.top_p, p.presence_penalty, p.frequency_penalty], [
      1,
      1,
      0,
      0,
    ]);
    assert.deepEqual([p.top_logprobs, p.store, p.background, p.max_tool_calls], [
      0,
      false,
      false,
      null,
    ]);
    assert.deepEqual([p.metadata, p.text, p.reasoning], [{}, { format: { type: "text" } }, {
      effort: null,
      summary: null,
    }]);
    assert.equal(p.max_output_tokens, 4096, "the max tokens the policy was allowed");
    assert.ok(p.usage && p.usage.total_tokens === p.usage.input_tokens + p.usage.output_tokens);

    // system-prompt: a system input message, and instructions (echoed)
    const system = await both(fx, {
      instructions: "You are a pirate.",
      input: [
        { type: "message", role: "system", content: "Always respond in pirate speak." },
        { type: "message", role: "user", content: "Say hello." },
      ],
      temperature: 0.5,
      top_p: 0.9,
      max_output_tokens: 64,
      metadata: { run: "42" },
      user: "u-1",
      safety_identifier: "s-1",
      prompt_cache_key: "k-1",
      text: { format: { type: "text" }, verbosity: "low" },
      reasoning: { effort: "low" },
      parallel_tool_calls: false,
    });
    const s = system.plain;
    assert.equal(s.instructions, "You are a pirate.");
    assert.deepEqual([s.temperature, s.top_p, s.max_output_tokens], [0.5, 0.9, 64]);
    assert.deepEqual(s.metadata, { run: "42" });
    assert.deepEqual([s.user, s.safety_identifier, s.prompt_cache_key], ["u-1", "s-1", "k-1"]);
    assert.deepEqual(s.text, { format: { type: "text" }, verbosity: "low" });
    assert.deepEqual(s.reasoning, { effort: "low", summary: null });
    assert.equal(s.parallel_tool_calls, false);
    const calls = fx.upstream!.calls;
    assert.equal(calls.at(-1)!.body.temperature, 0.5, "the sampling parameters reached the policy");
    const prompt = fx.tokenizer.decode(calls.at(-1)!.promptIds);
    assert.ok(prompt.includes("You are a pirate.") && prompt.includes("pirate speak"));

    // multi-turn
    const multi = await both(fx, {
      input: [
        { type: "message", role: "user", content: "My name is Alice." },
        { type: "message", role: "assistant", content: "Hello Alice!" },
        { type: "message", role: "user", content: "What is my name?" },
      ],
    });
    assert.equal(multi.plain.status, "completed");
    assert.ok(fx.tokenizer.decode(calls.at(-1)!.promptIds).includes("Hello Alice!"));
  }));

Deno.test("responses conformance: output_text events carry the exact sampled logprobs; content parts too when included", () =>
  withConformanceFixture(async (fx) => {
    const url = `${fx.openaiBase}/responses`;
    const streamed = checkResponsesStream(
      await readSse(await post(fx, url, { model: "policy", input: "hi", stream: true })),
    );
    const call = fx.upstream!.calls.at(-1)!;
    const [only] = [...streamed.text.values()];
    assertExactLogprobs(fx, call, only.logprobs as never, TEXT);
    const deltas = streamed.events.filter((e) => e.type === "response.output_text.delta");
    assert.ok(deltas.length > 1, "several deltas");
    for (const d of deltas) {
      const joined = (d as { logprobs: { token: string }[] }).logprobs.map((t) => t.token).join("");
      assert.equal(joined, (d as { delta: string }).delta, "each delta's tokens spell the delta");
    }
    // Without `include`, the content part carries none; with it, the same exact list.
    const [part] = (streamed.final.output[0] as { content: { logprobs?: unknown }[] }).content;
    assert.equal(part.logprobs, undefined);
    const include = ["message.output_text.logprobs"];
    const res = await post(fx, url, { model: "policy", input: "hi", include });
    const plain = conform(ResponseResource, await res.json(), "the response");
    const [withLp] = (plain.output[0] as { content: { logprobs?: never[] }[] }).content;
    assertExactLogprobs(fx, fx.upstream!.calls.at(-1)!, withLp.logprobs!, TEXT);
    const again = checkResponsesStream(
      await readSse(await post(fx, url, { model: "policy", input: "hi", include, stream: true })),
    );
    const [streamedPart] = (again.final.output[0] as { content: { logprobs?: unknown }[] })
      .content;
    assert.deepEqual(streamedPart.logprobs, withLp.logprobs);
    // Alternatives are not available: asking for them is refused, naming the field.
    const refused = await post(fx, url, { model: "policy", input: "hi", top_logprobs: 3 });
    assert.equal(refused.status, 400);
    const body = conform(OpenAIErrorBody, await refused.json(), "the error");
    assert.equal(body.error.param, "top_logprobs");
  }));

Deno.test("responses conformance: tool calling, streamed and not, with reasoning items, then the tool result turn", () =>
  withConformanceFixture(async (fx) => {
    const { plain, streamed } = await both(fx, {
      input: [{ type: "message", role: "user", content: "[tool] What is 1 + 2?" }],
      tools: [TOOL],
      tool_choice: "auto",
    });
    assert.deepEqual(plain.output.map((i) => i.type), ["reasoning", "message", "function_call"]);
    assert.deepEqual(plain.tools, [{ ...TOOL }], "the tools echoed");
    const [rs, msg, fc] = plain.output as [
      { content: { type: string; text: string }[]; summary: unknown[] },
      unknown,
      { call_id: string; name: string; arguments: string; status: string },
    ];
    assert.deepEqual(rs.content, [{ type: "reasoning_text", text: "I should add." }]);
    assert.deepEqual(rs.summary, []);
    assert.equal(messageText(plain), TOOL_PREFACE);
    assert.deepEqual([fc.name, JSON.parse(fc.arguments), fc.status], [
      "add",
      { a: 1, b: 2 },
      "completed",
    ]);
    assert.ok(msg);
    // tool-calling-streaming of the compliance set
    const types = streamed.events.map((e) => e.type);
    for (
      const t of [
        "response.reasoning_text.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
      ]
    ) assert.ok(types.includes(t as never), t);
    assert.ok(
      streamed.events.some((e) =>
        e.type === "response.output_item.added" && e.item.type === "function_call"
      ),
    );
    assert.ok(
      plain.usage!.output_tokens_details.reasoning_tokens > 0,
      "reasoning tokens counted",
    );

    // The result goes back as a function_call_output: the final answer.
    const next = await both(fx, {
      input: [
        { type: "message", role: "user", content: "[tool] What is 1 + 2?" },
        ...plain.output,
        { type: "function_call_output", call_id: fc.call_id, output: "3" },
      ],
      tools: [TOOL],
    });
    assert.equal(messageText(next.plain), FINAL);
  }));

Deno.test("responses conformance: a length stop is incomplete with incomplete_details, streamed and not", () =>
  withConformanceFixture(async (fx) => {
    const { plain, streamed } = await both(fx, { input: "[long] count", max_output_tokens: 8 });
    assert.equal(plain.status, "incomplete");
    assert.deepEqual(plain.incomplete_details, { reason: "max_output_tokens" });
    assert.equal(plain.completed_at, null);
    assert.equal(plain.usage!.output_tokens, 8);
    const [msg] = plain.output as { status: string }[];
    assert.equal(msg.status, "incomplete", "the cut item is incomplete");
    const cut = messageText(plain);
    assert.ok(cut.length > 0 && LONG.startsWith(cut) && cut.length < LONG.length, cut);
    assert.equal(streamed.events.at(-1)!.type, "response.incomplete");
  }));

Deno.test("responses conformance: errors in the spec's shape (HTTP error bodies; response.failed in a stream)", () =>
  withConformanceFixture(async (fx) => {
    const url = `${fx.openaiBase}/responses`;
    // Bad input: 400 naming the field.
    for (
      const [body, param] of [
        [{ model: "policy", input: [{ type: "mystery" }] }, "input[0].type"],
        [{ model: "policy", input: "hi", presence_penalty: 0.5 }, "presence_penalty"],
        [{ model: "policy", input: "hi", previous_response_id: "resp_1" }, "previous_response_id"],
        [{ model: "policy", input: "hi", metadata: { a: 1 } }, "metadata.a"],
      ] as const
    ) {
      const res = await post(fx, url, body);
      assert.equal(res.status, 400, JSON.stringify(body));
      const error = conform(OpenAIErrorBody, await res.json(), "the error body");
      assert.equal(error.error.param, param);
      assert.equal(error.error.type, "invalid_request_error");
    }
    // The first generation succeeds; the upstream then fails: streamed, response.failed.
    conform(
      ResponseResource,
      await (await post(fx, url, { model: "policy", input: "hi" })).json(),
      "ok",
    );
    const failed = checkResponsesStream(
      await readSse(await post(fx, url, { model: "policy", input: "hi", stream: true })),
    );
    assert.equal(failed.final.status, "failed");
    assert.equal(failed.final.error?.code, "server_error");
    assert.match(failed.final.error!.message, /500/);
    const plain = await post(fx, url, { model: "policy", input: "hi" });
    assert.equal(plain.status, 502);
    conform(OpenAIErrorBody, await plain.json(), "the error body");
  }, { fail: (i) => i >= 1 ? { status: 500 } : null }));

Deno.test("responses conformance: the openai SDK's stream helper consumes every stream", () =>
  withConformanceFixture(async (fx) => {
    const client = openaiClient(fx);
    const cases: OpenAI.Responses.ResponseCreateParamsStreaming[] = [
      { model: "policy", input: "hi", stream: true },
      {
        model: "policy",
        input: "[think] hi",
        stream: true,
        include: ["message.output_text.logprobs"],
      },
      { model: "policy", input: "[tool] add", tools: [TOOL], stream: true },
      { model: "policy", input: "[long] count", max_output_tokens: 4, stream: true },
    ];
    for (const params of cases) {
      const stream = client.responses.stream(params);
      let deltas = "";
      stream.on("response.output_text.delta", (e) => (deltas += e.delta));
      const final = await stream.finalResponse();
      conform(ResponseResource, final, `finalResponse for ${JSON.stringify(params.input)}`);
      assert.equal(final.output_text, deltas, "the SDK's output_text is the deltas");
    }
    const think = await client.responses.stream(cases[1]).finalResponse();
    const reasoning = think.output.find((i) => i.type === "reasoning");
    assert.equal(reasoning?.content?.[0]?.text, THOUGHT);
    assert.equal(think.output_text, TEXT);
  }));
