/**
 * Tokenizers and token sequences: Hugging Face tokenizer + chat-template loading (any
 * `tokenizer.json`, the bundled Qwen3 files, the char-level toy tokenizer) and the token utilities
 * the rest of reins builds on.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "./mod.ts";
 * const qwen = await loadQwen3Tokenizer();
 * const prompt = qwen.render([{ role: "user", content: "2+2?" }], { addGenerationPrompt: true });
 * assert.equal(qwen.encode(prompt)[0], 151644); // <|im_start|>
 * ```
 *
 * @module
 */
export type { ChatTokenizer, RenderOptions, ToolDefinition } from "./types.ts";
export {
  HfChatTokenizer,
  type HfTokenizerOptions,
  loadHfTokenizer,
  loadHfTokenizerFromDir,
} from "./hf.ts";
export { loadQwen3Tokenizer, QWEN3_TOKENS } from "./qwen3.ts";
export { CHAR_TOKENIZER_DIR, loadCharTokenizer } from "./char.ts";
export {
  commonPrefixLength,
  concatTokens,
  type DecodedWithOffsets,
  decodeWithOffsets,
  isPrefix,
  tokensEqual,
} from "./sequence.ts";
export { StreamDecoder } from "./stream_decoder.ts";
export { IncrementalChatEncoder, type IncrementalEncoderStats } from "./incremental.ts";
export {
  type AssistantOutput,
  collectOutput,
  OutputParser,
  type OutputParserOptions,
  type OutputPart,
  parseOutput,
  type TokenLogprob,
} from "./parse_output.ts";
export * from "./schema.ts";
