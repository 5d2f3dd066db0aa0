import assert from "node:assert/strict";
import type { ChatMessage } from "../lib/schema.ts";
import { CHAR_TOKENIZER_DIR, loadCharTokenizer } from "../lib/tokens/mod.ts";

const char = await loadCharTokenizer();

const SPECIALS = [
  "<|endoftext|>",
  "<|im_start|>",
  "<|im_end|>",
  "<think>",
  "</think>",
  "<tool_call>",
  "</tool_call>",
  "<tool_response>",
  "</tool_response>",
];

Deno.test("char: vocabulary is printable ASCII, tab, newline, unk and the chat markers (< 128 ids)", () => {
  assert.ok(char.vocabSize <= 128);
  assert.equal(char.vocabSize, 95 + 2 + 1 + SPECIALS.length);
  for (const special of SPECIALS) {
    const id = char.tokenId(special);
    assert.ok(id !== undefined && id < 128, special);
    assert.deepEqual([...char.encode(special)], [id]);
  }
  for (let c = 0x20; c <= 0x7e; c++) {
    const ids = char.encode(String.fromCharCode(c));
    assert.equal(ids.length, 1);
    assert.ok(ids[0] < 128);
  }
  assert.deepEqual([...char.eosTokenIds], [
    char.tokenId("<|im_end|>"),
    char.tokenId("<|endoftext|>"),
  ]);
});

Deno.test("char: one id per character, non-ASCII becomes <unk>, ids all < 128", () => {
  const ids = char.encode("héllo 😀\n\tok");
  assert.equal(ids.length, [..."héllo 😀\n\tok"].length);
  const unk = char.tokenId("<unk>");
  assert.equal(ids[1], unk);
  assert.equal(ids[6], unk);
  assert.ok(ids.every((id) => id < 128));
  assert.equal(char.decode(char.encode("plain ASCII\n\t~!")), "plain ASCII\n\t~!");
});

Deno.test("char: the chat template mimics Qwen3's layout in short form", () => {
  const messages: ChatMessage[] = [
    { role: "system", content: "Be brief." },
    { role: "user", content: "2+2?" },
    {
      role: "assistant",
      content: "",
      reasoning_content: "add",
      tool_calls: [{ type: "function", function: { name: "calc", arguments: '{"e":"2+2"}' } }],
    },
    { role: "tool", content: "4" },
    { role: "assistant", content: "4", reasoning_content: "done" },
    { role: "user", content: "thanks" },
  ];
  const tools = [{ type: "function", function: { name: "calc", parameters: {} } }];
  const text = char.render(messages, { tools, addGenerationPrompt: true });
  assert.equal(
    text,
    "<|im_start|>system\nBe brief.\n# Tools\n" +
      '{"name": "calc", "parameters": {}}<|im_end|>\n' +
      "<|im_start|>user\n2+2?<|im_end|>\n" +
      // Unlike Qwen3, earlier-turn reasoning is kept.
      "<|im_start|>assistant\n<think>add</think>" +
      '<tool_call>{"name": "calc", "arguments": {"e": "2+2"}}</tool_call><|im_end|>\n' +
      "<|im_start|>tool\n<tool_response>4</tool_response><|im_end|>\n" +
      "<|im_start|>assistant\n<think>done</think>4<|im_end|>\n" +
      "<|im_start|>user\nthanks<|im_end|>\n" +
      "<|im_start|>assistant\n",
  );
  const ids = char.encode(text);
  assert.ok(ids.every((id) => id < 128));
  assert.equal(char.decode(ids), text);
  // Multi-turn prompts extend each other token for token (no reasoning stripping).
  const shorter = char.encode(char.render(messages.slice(0, 5), { tools }));
  assert.deepEqual([...ids.subarray(0, shorter.length)], [...shorter]);
});

Deno.test("char: no system turn without system prompt or tools; enable_thinking=false", () => {
  assert.equal(
    char.render([{ role: "user", content: "hi" }], {
      addGenerationPrompt: true,
      enableThinking: false,
    }),
    "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n<think></think>",
  );
});

Deno.test("char: the shipped files are what scripts/make_char_tokenizer.ts generates", async () => {
  const { buildCharTokenizerFiles } = await import("../scripts/make_char_tokenizer.ts");
  const { tokenizer, config } = buildCharTokenizerFiles();
  const onDisk = (name: string) =>
    Deno.readTextFile(new URL(name, CHAR_TOKENIZER_DIR)).then((t) => JSON.parse(t));
  assert.deepEqual(await onDisk("tokenizer.json"), tokenizer);
  assert.deepEqual(await onDisk("tokenizer_config.json"), config);
});
