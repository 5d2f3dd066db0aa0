/**
 * The tokenizer worker (issue #29) gives the ids the tokenizer gives on this thread, so moving a
 * long prompt's tokenization off the event loop changes no token: the numerics stay exact.
 */
import assert from "node:assert/strict";
import { encodeWorkerFor } from "../lib/tokens/encode_worker.ts";
import { loadHfTokenizer } from "../lib/tokens/hf.ts";
import { IncrementalChatEncoder } from "../lib/tokens/incremental.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import type { ChatMessage } from "../lib/schema.ts";

/** Mixed text: words, numbers, code, CJK, emoji and whitespace runs. */
function mixedText(n: number): string {
  const parts = [
    "def f(x):\n    return x*2\n",
    "数据 ",
    "🙂 ",
    "  \t\n",
    "naïve café ",
    "1234567 ",
  ];
  return Array.from({ length: n }, (_, i) => `w${(i * 7919) % 10_007} ${parts[i % parts.length]}`)
    .join("");
}

Deno.test("tokenizer worker: the same ids as the tokenizer on this thread", async () => {
  const tokenizer = await loadQwen3Tokenizer();
  const worker = encodeWorkerFor(tokenizer);
  assert.ok(worker, "a tokenizer read from a directory can be loaded by another thread");
  try {
    const text = `<|im_start|>user\n${mixedText(6_000)}<|im_end|>\n<|im_start|>assistant\n`;
    assert.deepEqual(await worker.encode(text), tokenizer.encode(text));
    assert.deepEqual(await worker.encode(""), tokenizer.encode(""));
  } finally {
    await worker.close();
  }
});

Deno.test("tokenizer worker: encodeTextOffThread equals encodeText on a growing conversation", async () => {
  const tokenizer = await loadQwen3Tokenizer();
  const worker = encodeWorkerFor(tokenizer)!;
  try {
    // A 1 000-character threshold sends the long turns to the worker, the short ones not.
    const offload = { minChars: 1_000, encode: (chunk: string) => worker.encode(chunk) };
    const offThread = new IncrementalChatEncoder(tokenizer);
    const here = new IncrementalChatEncoder(tokenizer);
    const messages: ChatMessage[] = [{ role: "user", content: mixedText(400) }];
    for (let turn = 0; turn < 3; turn++) {
      const got = await offThread.renderAndEncodeOffThread(messages, {
        addGenerationPrompt: true,
      }, offload);
      const want = here.renderAndEncode(messages, { addGenerationPrompt: true });
      assert.equal(got.text, want.text);
      assert.deepEqual(got.ids, want.ids, `turn ${turn}`);
      messages.push(
        { role: "assistant" as const, content: `ok ${turn}` },
        { role: "user" as const, content: turn % 2 ? "short" : mixedText(300 + turn) },
      );
    }
    // Earlier turns' chunks are reused, not sent again.
    assert.ok(offThread.stats.reusedTokens > 0);
  } finally {
    await worker.close();
  }
});

Deno.test("tokenizer worker: none for a tokenizer built from objects; a closed one fails pending encodes", async () => {
  const tokenizer = await loadQwen3Tokenizer();
  const fromObjects = loadHfTokenizer(
    {
      version: "1.0",
      added_tokens: [],
      normalizer: null,
      pre_tokenizer: null,
      post_processor: null,
      decoder: null,
      model: { type: "WordLevel", vocab: { a: 0, "[UNK]": 1 }, unk_token: "[UNK]" },
    },
    {},
  );
  assert.equal(encodeWorkerFor(fromObjects), null);
  const worker = encodeWorkerFor(tokenizer)!;
  const pending = worker.encode(mixedText(20_000));
  await worker.close();
  await assert.rejects(pending, /tokenizer worker: (closed|exited)/);
});
