import assert from "node:assert/strict";
import type { ChatMessage } from "../lib/schema.ts";
import { loadQwen3Tokenizer, QWEN3_TOKENS } from "../lib/tokens/mod.ts";

const qwen = await loadQwen3Tokenizer();

const TOOLS = [{
  type: "function",
  function: {
    name: "get_weather",
    description: "Get weather",
    parameters: {
      type: "object",
      properties: { city: { type: "string" } },
      required: ["city"],
    },
  },
}];

const CONVERSATION: ChatMessage[] = [
  { role: "system", content: "You are helpful." },
  { role: "user", content: "What is the weather in Paris?" },
  {
    role: "assistant",
    content: "",
    reasoning_content: "I need the tool.",
    tool_calls: [{
      id: "call_1",
      type: "function",
      function: { name: "get_weather", arguments: '{"city":"Paris"}' },
    }],
  },
  { role: "tool", tool_call_id: "call_1", content: '{"temp": 20}' },
  { role: "assistant", content: "It is 20°C.", reasoning_content: "Got it." },
  { role: "user", content: "Thanks!" },
];

Deno.test("qwen3: chat marker ids are the published ones", () => {
  assert.equal(qwen.tokenId("<|im_start|>"), 151644);
  assert.equal(qwen.tokenId("<|im_end|>"), 151645);
  assert.equal(qwen.tokenId("<|endoftext|>"), 151643);
  assert.equal(qwen.tokenId("<think>"), 151667);
  assert.equal(qwen.tokenId("</think>"), 151668);
  assert.equal(qwen.tokenId("<tool_call>"), QWEN3_TOKENS.tool_call);
  assert.equal(qwen.tokenId("<tool_response>"), QWEN3_TOKENS.tool_response);
  assert.equal(qwen.tokenId("no such token"), undefined);
  assert.equal(qwen.vocabSize, 151669);
  assert.deepEqual([...qwen.eosTokenIds], [151645, 151643]);
  assert.equal(qwen.name, "qwen3");
});

Deno.test("qwen3: special tokens written in text encode to their ids, no BOS/EOS added", () => {
  assert.deepEqual([...qwen.encode("<|im_start|>")], [151644]);
  assert.deepEqual([...qwen.encode("<think>\n")], [151667, 198]);
  const ids = qwen.encode("<|im_start|>user\nhi<|im_end|>");
  assert.equal(ids[0], 151644);
  assert.equal(ids[ids.length - 1], 151645);
  const plain = qwen.encode("hello world");
  assert.deepEqual([...plain], [14990, 1879]);
  assert.equal(qwen.encode("").length, 0);
  assert.ok(plain instanceof Uint32Array);
});

Deno.test("qwen3: a multi-turn conversation with tools renders exactly like the official template", () => {
  const text = qwen.render(CONVERSATION, { tools: TOOLS, addGenerationPrompt: true });
  const expected = "<|im_start|>system\nYou are helpful.\n\n# Tools\n\n" +
    "You may call one or more functions to assist with the user query.\n\n" +
    "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n" +
    '{"type": "function", "function": {"name": "get_weather", "description": "Get weather", ' +
    '"parameters": {"type": "object", "properties": {"city": {"type": "string"}}, ' +
    '"required": ["city"]}}}\n</tools>\n\n' +
    "For each function call, return a json object with function name and arguments within " +
    "<tool_call></tool_call> XML tags:\n<tool_call>\n" +
    '{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call><|im_end|>\n' +
    "<|im_start|>user\nWhat is the weather in Paris?<|im_end|>\n" +
    // Reasoning of turns before the last user query is dropped by the template.
    "<|im_start|>assistant\n<tool_call>\n" +
    '{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call><|im_end|>\n' +
    '<|im_start|>user\n<tool_response>\n{"temp": 20}\n</tool_response><|im_end|>\n' +
    "<|im_start|>assistant\nIt is 20°C.<|im_end|>\n" +
    "<|im_start|>user\nThanks!<|im_end|>\n" +
    "<|im_start|>assistant\n";
  assert.equal(text, expected);
  assert.equal(qwen.decode(qwen.encode(text)), text);
});

Deno.test("qwen3: reasoning after the last user query is kept, and stripped once a user speaks", () => {
  const turn: ChatMessage[] = [
    { role: "user", content: "Add 2 and 2." },
    { role: "assistant", content: "4", reasoning_content: "Two plus two." },
  ];
  const current = qwen.render(turn);
  assert.equal(
    current,
    "<|im_start|>user\nAdd 2 and 2.<|im_end|>\n" +
      "<|im_start|>assistant\n<think>\nTwo plus two.\n</think>\n\n4<|im_end|>\n",
  );
  const later = qwen.render([...turn, { role: "user", content: "And 3+3?" }], {
    addGenerationPrompt: true,
  });
  assert.ok(!later.includes("Two plus two."));
  assert.ok(later.includes("<|im_start|>assistant\n4<|im_end|>\n"));
  // The earlier turn's tokens change: the next prompt does not extend the previous one.
  const previousIds = qwen.encode(current);
  const laterIds = qwen.encode(later);
  assert.notDeepEqual([...laterIds.subarray(0, previousIds.length)], [...previousIds]);
});

Deno.test("qwen3: inline <think> in content is parsed out like the official template", () => {
  const text = qwen.render([
    { role: "user", content: "q" },
    { role: "assistant", content: "<think>\nhmm\n</think>\n\nanswer" },
  ]);
  assert.ok(text.endsWith("<|im_start|>assistant\n<think>\nhmm\n</think>\n\nanswer<|im_end|>\n"));
});

Deno.test("qwen3: enable_thinking=false appends an empty think block to the generation prompt", () => {
  const messages: ChatMessage[] = [{ role: "user", content: "hi" }];
  assert.equal(
    qwen.render(messages, { addGenerationPrompt: true, enableThinking: false }),
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n",
  );
  assert.equal(
    qwen.render(messages, { addGenerationPrompt: true }),
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n",
  );
});

Deno.test("qwen3: arguments that are not a JSON object stay as written; null content renders empty", () => {
  const text = qwen.render([
    { role: "user", content: "go" },
    {
      role: "assistant",
      content: null,
      tool_calls: [{ type: "function", function: { name: "run", arguments: "not json {" } }],
    },
  ]);
  assert.ok(text.includes('{"name": "run", "arguments": not json {}\n</tool_call>'));
});

Deno.test("qwen3: text round-trips through encode/decode, CJK and emoji included", () => {
  for (
    const text of [
      "héllo wörld",
      "数据处理很重要。",
      "emoji 😀👍🏽 and flags 🇫🇷",
      "  leading spaces\n\n\ttabs",
      "<|im_start|>assistant\n<think>\nx\n</think>\n\ny<|im_end|>",
    ]
  ) {
    assert.equal(qwen.decode(qwen.encode(text)), text);
  }
});

Deno.test("qwen3: bad input names the field", () => {
  assert.throws(
    () => qwen.render([{ role: "bot" as "user", content: "x" }]),
    /messages\[0\]\.role/,
  );
  assert.throws(
    () =>
      qwen.render([{
        role: "assistant",
        content: "",
        tool_calls: [{
          type: "function",
          function: { name: "f", arguments: { a: 1 } as unknown as string },
        }],
      }]),
    /messages\[0\]\.tool_calls\[0\]\.function/,
  );
  assert.throws(() => qwen.decode([1, 2, 999_999_999]), /ids\[2\]: token id 999999999/);
  assert.throws(() => qwen.decode([-1]), /ids\[0\]/);
  assert.throws(() => qwen.encode(5 as unknown as string), /text: must be a string/);
});

Deno.test("qwen3: the loader works whatever the current directory", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const module = new URL("../lib/tokens/qwen3.ts", import.meta.url).href;
    const config = new URL("../deno.json", import.meta.url).pathname;
    const code = `import { loadQwen3Tokenizer } from "${module}";\n` +
      `const t = await loadQwen3Tokenizer();\nconsole.log(t.tokenId("<think>"));`;
    const output = await new Deno.Command(Deno.execPath(), {
      args: ["eval", "--no-lock", "--config", config, code],
      cwd: dir,
      stdout: "piped",
      stderr: "piped",
    }).output();
    assert.equal(output.code, 0, new TextDecoder().decode(output.stderr));
    assert.equal(new TextDecoder().decode(output.stdout).trim(), "151667");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("qwen3: the loader caches one tokenizer per process", async () => {
  assert.equal(await loadQwen3Tokenizer(), qwen);
});
