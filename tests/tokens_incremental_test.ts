import assert from "node:assert/strict";
import type { ChatMessage } from "../lib/schema.ts";
import {
  CHAR_TOKENIZER_DIR,
  type HfChatTokenizer,
  IncrementalChatEncoder,
  loadCharTokenizer,
  loadHfTokenizer,
  loadQwen3Tokenizer,
  type RenderOptions,
  type ToolDefinition,
} from "../lib/tokens/mod.ts";
import { trajectoriesRoot } from "../lib/trajectories/load.ts";

const qwen = await loadQwen3Tokenizer();
const char = await loadCharTokenizer();

/** Seeded generator so that a failure names a reproducible seed. */
function rng(seed: number) {
  let state = seed >>> 0;
  const next = () => {
    state = (Math.imul(state, 1664525) + 1013904223) >>> 0;
    return state / 4294967296;
  };
  const int = (n: number) => Math.floor(next() * n);
  const pick = <T>(items: readonly T[]): T => items[int(items.length)];
  return { next, int, pick };
}

// Fragments chosen to stress tokenization at chunk edges: whitespace runs, partial and whole
// special tokens inside content, combining marks (NFC), astral characters, digits, contractions.
const FRAGMENTS = [
  "the",
  " quick",
  "Brown",
  "fox",
  "  ",
  "   ",
  "\n",
  "\n\n",
  "\t",
  " \n ",
  "12345",
  "3.14",
  "'s",
  "'ll",
  "don't",
  "{",
  "}",
  '"',
  "\\n",
  "()",
  "=>",
  "数据处理",
  "你好",
  "😀",
  "👍🏽",
  "🇫🇷",
  "𝒳",
  "e\u0301",
  "\u1100\u1161",
  "café",
  "Ωμέγα",
  "<|im_start|>",
  "<|im_end|>",
  "<think>",
  "</think>",
  "<tool_call>",
  "<tool_response>",
  "<|im_",
  "think>",
  "<",
  "|>",
  "</tool",
  "<|endoftext|>",
  "...",
  "---",
  "#",
  "`code`",
  "path/to/file.ts:12",
];

function randomText(r: ReturnType<typeof rng>, maxFragments = 12): string {
  let out = "";
  const n = r.int(maxFragments + 1);
  for (let i = 0; i < n; i++) out += r.pick(FRAGMENTS);
  return out;
}

function randomArguments(r: ReturnType<typeof rng>): string {
  const roll = r.int(5);
  if (roll === 0) return "not json " + randomText(r, 3);
  if (roll === 1) return JSON.stringify([randomText(r, 2), r.int(100)]);
  return JSON.stringify({ cmd: randomText(r, 4), n: r.int(1000), flag: r.int(2) === 0 });
}

function assistantTurn(r: ReturnType<typeof rng>): ChatMessage[] {
  const calls = r.int(3);
  const message: ChatMessage = { role: "assistant", content: randomText(r) };
  const style = r.int(4);
  if (style === 0) message.reasoning_content = randomText(r);
  if (style === 1) message.content = `<think>\n${randomText(r)}\n</think>\n\n${message.content}`;
  if (style === 2 && calls > 0) message.content = r.int(2) ? null : "";
  if (calls > 0) {
    message.tool_calls = Array.from({ length: calls }, (_, i) => ({
      id: `call_${i}`,
      type: "function" as const,
      function: { name: r.pick(["bash", "read_file", "edit"]), arguments: randomArguments(r) },
    }));
  }
  const out: ChatMessage[] = [message];
  for (let i = 0; i < calls; i++) {
    out.push({ role: "tool", tool_call_id: `call_${i}`, content: randomText(r, 20) });
  }
  return out;
}

const TOOLS: ToolDefinition[] = [
  { type: "function", function: { name: "bash", parameters: { type: "object" } } },
  { type: "function", function: { name: "read_file", description: "Read a file 📄" } },
];

/**
 * Simulates one harness session: the history grows by turns, sometimes gets a new user query
 * (Qwen3 then strips earlier reasoning), an edited earlier message, a compaction, or changed
 * render options. Every call must equal a full render + encode.
 */
function runSession(tokenizer: HfChatTokenizer, seed: number): { calls: number; reused: number } {
  const r = rng(seed);
  const session = new IncrementalChatEncoder(tokenizer);
  const messages: ChatMessage[] = [];
  if (r.int(3) > 0) messages.push({ role: "system", content: randomText(r) });
  messages.push({ role: "user", content: randomText(r) });
  let options: RenderOptions = { addGenerationPrompt: true, tools: r.int(2) ? TOOLS : undefined };
  const steps = 6 + r.int(8);
  for (let step = 0; step < steps; step++) {
    const action = r.int(10);
    if (action < 5) messages.push(...assistantTurn(r));
    else if (action < 7) {
      messages.push(...assistantTurn(r), { role: "user", content: randomText(r) });
    } else if (action === 7 && messages.length > 2) {
      // Harness rewrote an earlier message.
      const index = 1 + r.int(messages.length - 1);
      if (messages[index].role !== "tool") {
        messages[index] = { ...messages[index], content: randomText(r) };
      }
    } else if (action === 8) {
      // Compaction: the history is replaced by a summary, keeping the system prompt.
      const system = messages[0].role === "system" ? [messages[0]] : [];
      messages.splice(0, messages.length, ...system, {
        role: "user",
        content: `Summary: ${randomText(r, 20)}`,
      });
    } else {
      options = {
        addGenerationPrompt: r.int(3) > 0,
        enableThinking: r.pick([undefined, true, false]),
        tools: r.int(2) ? TOOLS : undefined,
      };
    }
    const expected = tokenizer.encode(tokenizer.render(messages, options));
    const actual = session.encodeChat(messages, options);
    assert.deepEqual(
      [...actual],
      [...expected],
      `${tokenizer.name}: seed ${seed}, step ${step} differs from the full encode`,
    );
  }
  const stats = session.stats;
  return { calls: stats.calls, reused: stats.reusedTokens };
}

Deno.test("incremental: random Qwen3 sessions equal full render+encode at every call", () => {
  let reused = 0;
  let calls = 0;
  for (let seed = 1; seed <= 120; seed++) {
    const result = runSession(qwen, seed);
    reused += result.reused;
    calls += result.calls;
  }
  assert.ok(calls >= 120 * 6);
  assert.ok(reused > 0, "the sessions must exercise chunk reuse");
});

Deno.test("incremental: random char-tokenizer sessions equal full render+encode at every call", () => {
  let reused = 0;
  for (let seed = 1000; seed < 1120; seed++) reused += runSession(char, seed).reused;
  assert.ok(reused > 0);
});

Deno.test("incremental: a growing history re-tokenizes only the new turn", () => {
  const session = new IncrementalChatEncoder(qwen);
  const r = rng(5);
  const messages: ChatMessage[] = [{ role: "user", content: randomText(r, 200) }];
  for (let i = 0; i < 10; i++) {
    // No reasoning: the new user query must not make Qwen3 strip anything.
    messages.push({ role: "assistant", content: randomText(r, 30) });
    messages.push({ role: "user", content: randomText(r, 100) });
  }
  const first = session.encodeChat(messages, { addGenerationPrompt: true });
  const before = session.stats;
  messages.push({ role: "assistant", content: "done." });
  messages.push({ role: "user", content: "next question" });
  const second = session.encodeChat(messages, { addGenerationPrompt: true });
  const after = session.stats;
  const encoded = after.encodedTokens - before.encodedTokens;
  assert.ok(second.length > first.length);
  assert.ok(encoded < 30, `encoded ${encoded} tokens for a two-message turn`);
  assert.ok(after.reusedTokens - before.reusedTokens > first.length / 2);
  assert.deepEqual([...second], [
    ...qwen.encode(qwen.render(messages, { addGenerationPrompt: true })),
  ]);
  session.reset();
  assert.deepEqual([...session.encodeChat(messages, { addGenerationPrompt: true })], [...second]);
});

Deno.test("incremental: encodeText equals encode on related raw texts (prefix edits, cut tokens)", () => {
  const r = rng(77);
  for (const tokenizer of [qwen, char]) {
    const session = new IncrementalChatEncoder(tokenizer);
    let text = "";
    for (let i = 0; i < 300; i++) {
      const roll = r.int(4);
      if (roll === 0) text = text.slice(0, r.int(text.length + 1));
      else if (roll === 1) text = randomText(r, 5) + text.slice(r.int(text.length + 1));
      else text += randomText(r, 6);
      assert.deepEqual(
        [...session.encodeText(text)],
        [...tokenizer.encode(text)],
        JSON.stringify(text),
      );
    }
  }
});

Deno.test("incremental: exact for added tokens with lstrip/rstrip, nested matches and a Metaspace 'first' pre-tokenizer", async () => {
  // A variant of the char tokenizer exercising the two library behaviours chunking must respect.
  const json = JSON.parse(await Deno.readTextFile(new URL("tokenizer.json", CHAR_TOKENIZER_DIR)));
  const config = JSON.parse(
    await Deno.readTextFile(new URL("tokenizer_config.json", CHAR_TOKENIZER_DIR)),
  );
  const vocab = json.model.vocab as Record<string, number>;
  vocab["▁"] = 107;
  vocab["<|sep|>"] = 108;
  json.added_tokens.push({
    id: 108,
    content: "<|sep|>",
    single_word: false,
    lstrip: true,
    rstrip: true,
    normalized: false,
    special: true,
  });
  // A token that is a prefix of others: the scan must take the longest match, as the library does.
  vocab["<|im"] = 109;
  json.added_tokens.push({
    id: 109,
    content: "<|im",
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: false,
  });
  // ...and one inside a longer token, which only a wrong (shortest-first) scan would split at.
  vocab["_sta"] = 110;
  json.added_tokens.push({
    id: 110,
    content: "_sta",
    single_word: false,
    lstrip: false,
    rstrip: false,
    normalized: false,
    special: false,
  });
  json.pre_tokenizer = {
    type: "Metaspace",
    replacement: "▁",
    prepend_scheme: "first",
    split: false,
  };
  const tokenizer = loadHfTokenizer(json, config, { name: "char-variant" });
  const session = new IncrementalChatEncoder(tokenizer);
  const r = rng(3);
  const pieces = [
    "a b",
    "  ",
    " <|sep|> ",
    "<|sep|>",
    "x\n",
    "<|im_start|>",
    "<|im",
    "_end|>",
    "_sta",
    " y ",
    "\t",
  ];
  let text = "";
  let checked = 0;
  for (let i = 0; i < 300; i++) {
    text = r.int(5) === 0 ? text.slice(0, r.int(text.length + 1)) : text + r.pick(pieces);
    assert.deepEqual(
      [...session.encodeText(text)],
      [...tokenizer.encode(text)],
      JSON.stringify(text),
    );
    checked++;
  }
  assert.equal(checked, 300);
  assert.ok(session.stats.reusedTokens > 0);
});

Deno.test("incremental: real tau-bench conversations, every assistant call, match full encodes", async () => {
  const file = `${trajectoriesRoot()}/tau-bench/gpt-4o-airline.json`;
  const runs = JSON.parse(await Deno.readTextFile(file)) as { traj: ChatMessage[] }[];
  let calls = 0;
  let reused = 0;
  for (const run of runs.slice(0, 6)) {
    const messages = run.traj.map((m): ChatMessage => ({
      role: m.role,
      content: m.content ?? "",
      ...(m.tool_calls ? { tool_calls: m.tool_calls } : {}),
      ...(m.tool_call_id ? { tool_call_id: m.tool_call_id } : {}),
    }));
    for (const tokenizer of [qwen, char]) {
      const session = new IncrementalChatEncoder(tokenizer);
      for (let k = 1; k < messages.length; k++) {
        if (messages[k].role !== "assistant") continue;
        const prefix = messages.slice(0, k);
        const options = { addGenerationPrompt: true };
        assert.deepEqual(
          [...session.encodeChat(prefix, options)],
          [...tokenizer.encode(tokenizer.render(prefix, options))],
        );
        calls++;
      }
      reused += session.stats.reusedTokens;
    }
  }
  assert.ok(calls > 50, `only ${calls} calls`);
  assert.ok(reused > 0);
});
