/** Pure helpers of the built-in agent loop. */
import assert from "node:assert/strict";
import {
  CONFIRM_REQUEST,
  extractAnswer,
  historyChars,
  reserializeArguments,
  runAgent,
  SUBAGENT_SYSTEM,
  SUMMARY_REQUEST,
  SUMMARY_SYSTEM,
} from "../lib/harness/builtin/agent.ts";
import { nonCanonicalTokenizer, promptRole } from "../lib/harness/builtin/scripted.ts";
import OpenAI from "openai";
import { BuiltinHarnessOptionsSchema } from "../lib/harness/schema.ts";
import { qwen3 } from "./support/harness_fixture.ts";

Deno.test("extractAnswer: the last <answer> tag, else a final-answer line, else the text", () => {
  assert.equal(extractAnswer("a <answer>1</answer> b <answer> 2 </answer>"), "2");
  assert.equal(extractAnswer("work\nFinal answer: Pelfen"), "Pelfen");
  assert.equal(extractAnswer("  42 \n"), "42");
  assert.equal(extractAnswer(""), "");
});

Deno.test("reserializeArguments: sorted keys; changed only when a template would render it differently", () => {
  assert.deepEqual(reserializeArguments('{"path": "a", "content": "x"}'), {
    text: '{"content":"x","path":"a"}',
    changed: true,
  });
  assert.deepEqual(reserializeArguments('{"a": {"z": 1, "b": [ {"y": 2, "c": 3} ]}}'), {
    text: '{"a":{"b":[{"c":3,"y":2}],"z":1}}',
    changed: true,
  });
  // Whitespace alone: templates parse and re-emit the JSON, so nothing changes for the model.
  assert.equal(reserializeArguments('{ "expression" :  "1 + 2" }').changed, false);
  assert.deepEqual(reserializeArguments("not json"), { text: "not json", changed: false });
});

Deno.test("historyChars counts everything after the system prompt and the task", () => {
  const n = historyChars([
    { role: "system", content: "s".repeat(100) },
    { role: "user", content: "t".repeat(100) },
    {
      role: "assistant",
      content: null,
      reasoning_content: "abc",
      tool_calls: [{ id: "1", type: "function", function: { name: "calc", arguments: "{}" } }],
    },
    { role: "tool", tool_call_id: "1", content: "12345" },
  ]);
  assert.equal(n, 3 + 4 + 2 + 5);
});

Deno.test("promptRole tells the harness's conversations apart in rendered Qwen3 prompts", async () => {
  const tokenizer = await qwen3();
  const render = (messages: { role: "system" | "user" | "assistant"; content: string }[]) =>
    tokenizer.render(messages, { addGenerationPrompt: true });
  const base = [{ role: "system" as const, content: "You solve." }, {
    role: "user" as const,
    content: "What is 2 + 2?",
  }];
  assert.equal(promptRole(render(base)), "main");
  assert.equal(
    promptRole(render([...base, { role: "assistant", content: "4" }, {
      role: "user",
      content: SUMMARY_REQUEST,
    }])),
    "summary",
  );
  assert.equal(
    promptRole(render([...base, { role: "assistant", content: "4" }, {
      role: "user",
      content: CONFIRM_REQUEST,
    }])),
    "confirm",
  );
  assert.equal(
    promptRole(render([{ role: "system", content: SUBAGENT_SYSTEM }, base[1]])),
    "subagent",
  );
  assert.equal(
    promptRole(render([{ role: "system", content: SUMMARY_SYSTEM }, base[1]])),
    "summary",
  );
});

Deno.test("nonCanonicalTokenizer: same text, different ids, only where the marker is", async () => {
  const tokenizer = await qwen3();
  const split = nonCanonicalTokenizer(tokenizer, "Calculating");
  const text = "Calculating 1 + 2 first.";
  const ids = split.encode(text);
  assert.equal(split.decode(ids), text);
  assert.notDeepEqual(Array.from(ids), Array.from(tokenizer.encode(text)));
  assert.deepEqual(
    Array.from(split.encode("no marker")),
    Array.from(tokenizer.encode("no marker")),
  );
  assert.throws(() => nonCanonicalTokenizer(tokenizer, "x"), /marker: must have at least two/);
});

Deno.test("runAgent: the seed option seeds call n with seed + n; without it no seed is sent", async () => {
  const calculator = {
    name: "calculator",
    description: "evaluates",
    parameters: { type: "object", properties: { expression: { type: "string" } } },
    run: () => Promise.resolve("56"),
  };
  const seeds = async (seed: number | undefined) => {
    const sent: (number | undefined)[] = [];
    let turn = 0;
    const client = new OpenAI({
      apiKey: "x",
      baseURL: "http://127.0.0.1:1/v1",
      fetch: async (_url: string | URL | Request, init?: RequestInit) => {
        sent.push(JSON.parse(String(init?.body)).seed);
        const message = turn++ === 0
          ? {
            role: "assistant",
            content: null,
            tool_calls: [{
              id: "c1",
              type: "function",
              function: { name: "calculator", arguments: '{"expression":"7 * 8"}' },
            }],
          }
          : { role: "assistant", content: "<answer>56</answer>" };
        return await Promise.resolve(
          new Response(
            JSON.stringify({
              id: "x",
              object: "chat.completion",
              created: 0,
              model: "m",
              choices: [{ index: 0, message, finish_reason: "stop" }],
            }),
            { headers: { "content-type": "application/json" } },
          ),
        );
      },
    });
    const options = BuiltinHarnessOptionsSchema.parse({
      max_turns: 3,
      ...(seed === undefined ? {} : { seed }),
    });
    const out = await runAgent({
      client,
      options,
      task: "7 * 8?",
      systemPrompt: "s",
      tools: [calculator],
    });
    assert.equal(out.answer, "56");
    return sent;
  };
  assert.deepEqual(await seeds(100), [100, 101]);
  assert.deepEqual(await seeds(undefined), [undefined, undefined]);
});
