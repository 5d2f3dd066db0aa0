/**
 * The char-level toy tokenizer shipped in `data/tokenizers/char/` (≤ 128 ids): printable ASCII,
 * `\t`, `\n`, `<unk>` and Qwen3's chat markers, with a short Qwen3-like chat template that keeps
 * earlier-turn reasoning.
 *
 * @module
 */
import { type HfChatTokenizer, loadHfTokenizerFromDir } from "./hf.ts";

/** Where the char tokenizer's Hugging Face files live. */
export const CHAR_TOKENIZER_DIR: URL = new URL("../../data/tokenizers/char/", import.meta.url);

let cached: Promise<HfChatTokenizer> | undefined;

/**
 * Loads (once per process) the char-level tokenizer. Characters outside printable ASCII, `\t`
 * and `\n` encode to `<unk>`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadCharTokenizer } from "./char.ts";
 * const tok = await loadCharTokenizer();
 * assert.deepEqual(tok.encode("hi"), new Uint32Array([84, 85]));
 * ```
 */
export function loadCharTokenizer(): Promise<HfChatTokenizer> {
  cached ??= loadHfTokenizerFromDir(CHAR_TOKENIZER_DIR, {
    name: "char",
    eosTokens: ["<|im_end|>", "<|endoftext|>"],
  }).catch((error) => {
    cached = undefined;
    throw error;
  });
  return cached;
}
