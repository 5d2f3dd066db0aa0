/**
 * Incremental detokenization for streaming responses.
 *
 * @module
 */
import { HfChatTokenizer } from "./hf.ts";
import type { ChatTokenizer } from "./types.ts";

/**
 * Turns ids pushed one at a time into text deltas. A delta never ends inside a UTF-8 character:
 * bytes of an incomplete character are held back until a later token completes them (or proves
 * them invalid, which yields U+FFFD exactly where a full decode would put it). For tokenizers with
 * byte pieces ({@link HfChatTokenizer.bytePieces}: Qwen3, the char tokenizer, any ByteLevel BPE)
 * the deltas plus {@link StreamDecoder.flush} concatenate to exactly `decode(allIds)`. Other
 * tokenizers use windows of ids (the vLLM scheme), which is exact for common decoders but not
 * guaranteed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "./qwen3.ts";
 * import { StreamDecoder } from "./stream_decoder.ts";
 * const qwen = await loadQwen3Tokenizer();
 * const decoder = new StreamDecoder(qwen);
 * let text = "";
 * for (const id of qwen.encode("héllo 😀")) text += decoder.push(id);
 * assert.equal(text += decoder.flush(), "héllo 😀");
 * ```
 */
export class StreamDecoder {
  readonly #tokenizer: ChatTokenizer;
  readonly #bytes: HfChatTokenizer | undefined;
  #utf8 = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });
  #pending = false;
  // Window state of the fallback path (ids since the last emitted boundary).
  #ids: number[] = [];
  #prefixOffset = 0;
  #readOffset = 0;

  constructor(tokenizer: ChatTokenizer) {
    this.#tokenizer = tokenizer;
    this.#bytes = tokenizer instanceof HfChatTokenizer && tokenizer.bytePieces
      ? tokenizer
      : undefined;
  }

  /** Adds one id; returns the text it completes (possibly empty). */
  push(id: number): string {
    const bytes = this.#bytes;
    if (bytes === undefined) return this.#pushWindow(id);
    if (bytes.isAddedToken(id)) {
      // Added tokens are decoded verbatim and end the byte run before them, like a full decode.
      const flushed = this.#pending ? this.#utf8.decode() : "";
      this.#pending = false;
      return flushed + bytes.decode([id]);
    }
    this.#pending = true;
    return this.#utf8.decode(bytes.tokenBytes(id), { stream: true });
  }

  /** Adds several ids; returns the concatenated deltas. */
  pushMany(ids: ArrayLike<number>): string {
    let out = "";
    for (let i = 0; i < ids.length; i++) out += this.push(ids[i]);
    return out;
  }

  /**
   * Ends the stream: returns held-back text (U+FFFD for bytes that never completed a character)
   * and resets the decoder for reuse.
   */
  flush(): string {
    if (this.#bytes !== undefined) {
      const out = this.#pending ? this.#utf8.decode() : "";
      this.#pending = false;
      return out;
    }
    const ids = this.#ids;
    const out = ids.length > this.#readOffset
      ? this.#decode(ids.slice(this.#prefixOffset)).slice(
        this.#decode(ids.slice(this.#prefixOffset, this.#readOffset)).length,
      )
      : "";
    this.#ids = [];
    this.#prefixOffset = 0;
    this.#readOffset = 0;
    return out;
  }

  #decode(ids: number[]): string {
    return ids.length === 0 ? "" : this.#tokenizer.decode(ids);
  }

  #pushWindow(id: number): string {
    if (!Number.isInteger(id) || id < 0 || id >= this.#tokenizer.vocabSize) {
      throw new RangeError(`token id ${id} is not in the vocabulary of ${this.#tokenizer.name}`);
    }
    this.#ids.push(id);
    const prefix = this.#decode(this.#ids.slice(this.#prefixOffset, this.#readOffset));
    const full = this.#decode(this.#ids.slice(this.#prefixOffset));
    if (full.length > prefix.length && !full.endsWith("\uFFFD")) {
      this.#prefixOffset = this.#readOffset;
      this.#readOffset = this.#ids.length;
      return full.slice(prefix.length);
    }
    return "";
  }
}
