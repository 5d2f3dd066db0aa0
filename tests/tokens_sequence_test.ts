import assert from "node:assert/strict";
import {
  commonPrefixLength,
  concatTokens,
  decodeWithOffsets,
  isPrefix,
  loadCharTokenizer,
  loadQwen3Tokenizer,
  tokensEqual,
} from "../lib/tokens/mod.ts";

const qwen = await loadQwen3Tokenizer();
const char = await loadCharTokenizer();

Deno.test("commonPrefixLength counts equal leading ids", () => {
  const a = Uint32Array.of(5, 6, 7, 8);
  assert.equal(commonPrefixLength(a, Uint32Array.of(5, 6, 9)), 2);
  assert.equal(commonPrefixLength(a, a), 4);
  assert.equal(commonPrefixLength(a, Uint32Array.of(5, 6)), 2);
  assert.equal(commonPrefixLength(a, new Uint32Array(0)), 0);
  assert.equal(commonPrefixLength(Uint32Array.of(1), Uint32Array.of(2)), 0);
  assert.equal(commonPrefixLength(a.subarray(1), [6, 7, 0]), 2);
});

Deno.test("commonPrefixLength agrees with a naive scan on random sequences", () => {
  let seed = 7;
  const rand = (n: number) => {
    seed = (Math.imul(seed, 1664525) + 1013904223) >>> 0;
    return seed % n;
  };
  for (let trial = 0; trial < 300; trial++) {
    const a = Uint32Array.from({ length: rand(50) }, () => rand(4));
    const b = Uint32Array.from(a.subarray(0, rand(a.length + 1)));
    const extended = concatTokens(b, Uint32Array.from({ length: rand(5) }, () => rand(4)));
    let naive = 0;
    while (naive < a.length && naive < extended.length && a[naive] === extended[naive]) naive++;
    assert.equal(commonPrefixLength(a, extended), naive);
    assert.equal(isPrefix(b, a), true);
    assert.equal(isPrefix(extended, a), naive === extended.length);
  }
});

Deno.test("isPrefix, tokensEqual and concatTokens", () => {
  assert.ok(isPrefix(Uint32Array.of(), Uint32Array.of(1)));
  assert.ok(isPrefix(Uint32Array.of(1, 2), Uint32Array.of(1, 2)));
  assert.ok(!isPrefix(Uint32Array.of(1, 2, 3), Uint32Array.of(1, 2)));
  assert.ok(!isPrefix(Uint32Array.of(2), Uint32Array.of(1, 2)));
  assert.ok(tokensEqual(Uint32Array.of(1, 2), [1, 2]));
  assert.ok(!tokensEqual(Uint32Array.of(1, 2), [1, 2, 3]));
  assert.ok(!tokensEqual(Uint32Array.of(1, 3), [1, 2]));
  const joined = concatTokens(Uint32Array.of(1), [2, 3], new Uint32Array(0), Uint32Array.of(4));
  assert.ok(joined instanceof Uint32Array);
  assert.deepEqual([...joined], [1, 2, 3, 4]);
  assert.equal(concatTokens().length, 0);
});

Deno.test("decodeWithOffsets: spans tile the text and slice each token's own text", () => {
  const text = "<|im_start|>user\nhello world, 你好!<|im_end|>";
  const ids = qwen.encode(text);
  const { text: decoded, spans } = decodeWithOffsets(qwen, ids);
  assert.equal(decoded, text);
  assert.equal(spans.length, ids.length);
  assert.deepEqual(spans[0], [0, "<|im_start|>".length]);
  let position = 0;
  for (let i = 0; i < ids.length; i++) {
    assert.equal(spans[i][0], position);
    position = spans[i][1];
    const piece = decoded.slice(...spans[i]);
    if (!piece.includes("\uFFFD") && piece.length > 0) assert.equal(qwen.decode([ids[i]]), piece);
  }
  assert.equal(position, decoded.length);
});

Deno.test("decodeWithOffsets: a character split across byte tokens belongs to the token that completes it", () => {
  // Find a character Qwen3 splits into several byte-level tokens.
  const candidates = ["𝒳", "🦜", "ꙮ", "𓀀", "🫠", "䶵"];
  const split = candidates.find((c) => qwen.encode(c).length > 1);
  assert.ok(split, "expected some rare character to need several tokens");
  const ids = qwen.encode(`a${split}b`);
  const { text, spans } = decodeWithOffsets(qwen, ids);
  assert.equal(text, `a${split}b`);
  const charStart = 1;
  const charEnd = 1 + split.length;
  const covering = spans.filter(([s, e]) => s <= charStart && e >= charEnd);
  assert.equal(covering.length, 1);
  const owner = spans.indexOf(covering[0]);
  // Tokens before the completing one (holding only leading bytes) get an empty span at the start.
  for (let i = 0; i < owner; i++) {
    const [s, e] = spans[i];
    if (s >= charStart) assert.deepEqual([s, e], [charStart, charStart]);
  }
  assert.equal(text.slice(...spans[spans.length - 1]), "b");
});

Deno.test("decodeWithOffsets: bytes that never complete a character become U+FFFD like decode", () => {
  const split = ["𝒳", "🦜", "ꙮ", "𓀀", "🫠", "䶵"].find((c) => qwen.encode(c).length > 1)!;
  const ids = qwen.encode(split);
  assert.ok(ids.length > 1);
  const truncated = ids.subarray(0, 1);
  const expected = qwen.decode(truncated);
  assert.ok(expected.includes("\uFFFD"));
  const { text, spans } = decodeWithOffsets(qwen, truncated);
  assert.equal(text, expected);
  assert.deepEqual(spans[0], [0, expected.length]);
  const withMarker = Uint32Array.of(...truncated, qwen.tokenId("<|im_end|>")!);
  const result = decodeWithOffsets(qwen, withMarker);
  assert.equal(result.text, qwen.decode(withMarker));
  assert.equal(result.text.slice(...result.spans[1]), "<|im_end|>");
});

Deno.test("decodeWithOffsets: char tokenizer gives one character per token", () => {
  const ids = char.encode("ab\n<think>c");
  const { text, spans } = decodeWithOffsets(char, ids);
  assert.equal(text, "ab\n<think>c");
  assert.deepEqual(spans, [[0, 1], [1, 2], [2, 3], [3, 10], [10, 11]]);
  assert.deepEqual(decodeWithOffsets(char, []), { text: "", spans: [] });
});
