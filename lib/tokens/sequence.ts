/**
 * Utilities on token sequences (`Uint32Array`): prefix tests, concatenation and token ↔ text
 * offsets.
 *
 * @module
 */
import { HfChatTokenizer } from "./hf.ts";
import { StreamDecoder } from "./stream_decoder.ts";
import type { ChatTokenizer } from "./types.ts";

/**
 * Length of the longest common prefix of two id sequences.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { commonPrefixLength } from "./sequence.ts";
 * assert.equal(commonPrefixLength(Uint32Array.of(1, 2, 3), Uint32Array.of(1, 2, 4)), 2);
 * ```
 */
export function commonPrefixLength(a: ArrayLike<number>, b: ArrayLike<number>): number {
  const n = a.length < b.length ? a.length : b.length;
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/**
 * True when `prefix` is a (not necessarily proper) prefix of `of`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isPrefix } from "./sequence.ts";
 * assert.equal(isPrefix(Uint32Array.of(1, 2), Uint32Array.of(1, 2, 3)), true);
 * ```
 */
export function isPrefix(prefix: ArrayLike<number>, of: ArrayLike<number>): boolean {
  return prefix.length <= of.length && commonPrefixLength(prefix, of) === prefix.length;
}

/**
 * True when both sequences hold the same ids.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { tokensEqual } from "./sequence.ts";
 * assert.equal(tokensEqual(Uint32Array.of(1, 2), [1, 2]), true);
 * ```
 */
export function tokensEqual(a: ArrayLike<number>, b: ArrayLike<number>): boolean {
  return a.length === b.length && commonPrefixLength(a, b) === a.length;
}

/**
 * Concatenates id sequences into one new `Uint32Array`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { concatTokens } from "./sequence.ts";
 * assert.deepEqual(concatTokens(Uint32Array.of(1), [2, 3]), new Uint32Array([1, 2, 3]));
 * ```
 */
export function concatTokens(...parts: ArrayLike<number>[]): Uint32Array {
  let total = 0;
  for (const part of parts) total += part.length;
  const out = new Uint32Array(total);
  let offset = 0;
  for (const part of parts) {
    if (part instanceof Uint32Array) out.set(part, offset);
    else for (let i = 0; i < part.length; i++) out[offset + i] = part[i];
    offset += part.length;
  }
  return out;
}

/** Decoded text and, per token, the `[start, end)` UTF-16 span it produced. */
export interface DecodedWithOffsets {
  text: string;
  spans: Array<[number, number]>;
}

/**
 * Decodes ids and maps each token to its text span (UTF-16 offsets into `text`).
 *
 * Rule for tokens that split a UTF-8 character (byte-level BPE): a character belongs to the token
 * whose byte completes it. A token holding only leading bytes gets an empty span at the position
 * where its character will start, the completing token's span covers the whole character, and
 * bytes that never complete a character decode to U+FFFD in the span of the token whose byte
 * proved them invalid (or of the last token of their run). Spans are contiguous, ordered and
 * cover `text`; `text` equals `tokenizer.decode(ids)` for tokenizers with byte pieces. This is
 * also exactly what {@link StreamDecoder} emits per token.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "./qwen3.ts";
 * import { decodeWithOffsets } from "./sequence.ts";
 * const qwen = await loadQwen3Tokenizer();
 * const { text, spans } = decodeWithOffsets(qwen, qwen.encode("hello world"));
 * assert.equal(text.slice(...spans[1]), " world");
 * ```
 */
export function decodeWithOffsets(
  tokenizer: ChatTokenizer,
  ids: ArrayLike<number>,
): DecodedWithOffsets {
  const spans: Array<[number, number]> = new Array(ids.length);
  const pieces: string[] = [];
  let position = 0;
  if (tokenizer instanceof HfChatTokenizer && tokenizer.bytePieces) {
    const utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
    let pending = false;
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (tokenizer.isAddedToken(id)) {
        if (pending) {
          const flushed = utf8.decode();
          if (flushed.length > 0 && i > 0) {
            pieces.push(flushed);
            position += flushed.length;
            spans[i - 1][1] = position;
          }
          pending = false;
        }
        const content = tokenizer.decode([id]);
        pieces.push(content);
        spans[i] = [position, position + content.length];
        position += content.length;
        continue;
      }
      const bytes = tokenizer.tokenBytes(id);
      const piece = utf8.decode(bytes, { stream: true });
      pending = true;
      pieces.push(piece);
      spans[i] = [position, position + piece.length];
      position += piece.length;
    }
    if (pending) {
      const flushed = utf8.decode();
      if (flushed.length > 0) {
        pieces.push(flushed);
        position += flushed.length;
        spans[ids.length - 1][1] = position;
      }
    }
    return { text: pieces.join(""), spans };
  }
  const decoder = new StreamDecoder(tokenizer);
  for (let i = 0; i < ids.length; i++) {
    const piece = decoder.push(ids[i]);
    pieces.push(piece);
    spans[i] = [position, position + piece.length];
    position += piece.length;
  }
  const rest = decoder.flush();
  if (rest.length > 0 && ids.length > 0) {
    pieces.push(rest);
    spans[ids.length - 1][1] = position + rest.length;
  }
  return { text: pieces.join(""), spans };
}
