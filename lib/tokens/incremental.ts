/**
 * Per-session incremental chat encoding: `encode(render(messages))`, token for token, at a cost
 * proportional to the text that changed since the session's previous call.
 *
 * Why it is exact: `@huggingface/tokenizers` (like the Rust `tokenizers`) first splits the text
 * at added tokens matched in the raw text (`<|im_start|>`, `<think>`, `<tool_call>`, …), scanning
 * left to right and taking the longest match; each piece between two matches is then normalized,
 * pre-tokenized and run through the model on its own. So the ids of a text are the concatenation
 * of the ids of its *chunks*, a chunk being one added-token match plus the text up to the next
 * match (plus the text before the first match). A chunk starting with a match is split the same
 * way when encoded alone: its first match is found again (the scan restarts there in the full
 * text too), and a scan truncated at the chunk's end can only find fewer matches, of which the
 * full scan found none. Two adjustments keep this true for every tokenizer the library supports:
 * an added token with `lstrip` trims the end of the chunk before it (done here, before encoding
 * that chunk), and Metaspace's `prepend_scheme: "first"` (the only pre-tokenizer that looks at the
 * piece index) treats "first piece" identically because only the leading chunk can start with
 * plain text. The encoder therefore splits each render into chunks with the same scan, reuses the
 * ids of chunks it encoded in the previous call, and encodes only new chunks.
 *
 * Rendering is not cached: the template is a program over the whole message list (Qwen3's strips
 * the reasoning of turns before the last user query, so an old turn's text depends on later
 * messages), and no message-level memoization of an arbitrary template is sound. It costs a few
 * milliseconds at 32k tokens; the figures are in `docs/tokens.md`.
 *
 * @module
 */
import type { ChatMessage } from "../schema.ts";
import type { AddedToken } from "./schema.ts";
import { HfChatTokenizer } from "./hf.ts";
import type { ChatTokenizer, RenderOptions } from "./types.ts";

interface TrieNode {
  next: Map<number, TrieNode>;
  token: AddedToken | undefined;
}

/** Added-token scanner with the semantics of the library's own splitter (longest match, left to right). */
class AddedTokenScanner {
  readonly #root: TrieNode = { next: new Map(), token: undefined };
  readonly #first = new Uint8Array(65536);
  readonly hasLstrip: boolean;

  constructor(tokens: readonly AddedToken[]) {
    let lstrip = false;
    for (const token of tokens) {
      let node = this.#root;
      for (let i = 0; i < token.content.length; i++) {
        const code = token.content.charCodeAt(i);
        let child = node.next.get(code);
        if (!child) {
          child = { next: new Map(), token: undefined };
          node.next.set(code, child);
        }
        node = child;
      }
      node.token = token;
      this.#first[token.content.charCodeAt(0)] = 1;
      if (token.lstrip) lstrip = true;
    }
    this.hasLstrip = lstrip;
  }

  /** Start offsets and tokens of every match, in order. */
  scan(text: string): { starts: number[]; tokens: AddedToken[] } {
    const starts: number[] = [];
    const tokens: AddedToken[] = [];
    const first = this.#first;
    const n = text.length;
    let i = 0;
    while (i < n) {
      if (first[text.charCodeAt(i)] === 0) {
        i++;
        continue;
      }
      let node: TrieNode | undefined = this.#root;
      let match: AddedToken | undefined;
      for (let j = i; j < n; j++) {
        node = node.next.get(text.charCodeAt(j));
        if (node === undefined) break;
        if (node.token) match = node.token;
      }
      if (match) {
        starts.push(i);
        tokens.push(match);
        i += match.content.length;
      } else i++;
    }
    return { starts, tokens };
  }
}

/** Where long chunks are encoded instead of the caller's thread (e.g. a tokenizer worker). */
export interface ChunkOffload {
  /** Chunks of at least this many characters go to {@link ChunkOffload.encode}. */
  minChars: number;
  /** Encodes like the encoder's own tokenizer does (the same ids). */
  encode(chunk: string): Promise<Uint32Array>;
}

const NO_CHUNKS: ReadonlyMap<string, Uint32Array> = new Map();

/** Counters of an {@link IncrementalChatEncoder} (cumulative over its calls). */
export interface IncrementalEncoderStats {
  calls: number;
  /** Tokens taken from the previous call's chunks. */
  reusedTokens: number;
  /** Tokens produced by running the tokenizer on new chunks. */
  encodedTokens: number;
  renderMs: number;
  encodeMs: number;
}

/**
 * One session's incremental encoder (one per conversation: a proxy keeps one per rollout and
 * conversation). {@link IncrementalChatEncoder.encodeChat} returns exactly
 * `tokenizer.encode(tokenizer.render(messages, options))`; only chunks of text absent from the
 * previous call are tokenized, so a 32k-token history gaining 500 tokens costs about as much as
 * tokenizing those 500 tokens (plus the render).
 *
 * Memory: the previous call's chunk ids (≈ one copy of the context).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import type { ChatMessage } from "../schema.ts";
 * import { loadQwen3Tokenizer } from "./qwen3.ts";
 * import { IncrementalChatEncoder } from "./incremental.ts";
 * const qwen = await loadQwen3Tokenizer();
 * const session = new IncrementalChatEncoder(qwen);
 * const messages: ChatMessage[] = [{ role: "user", content: "hi" }];
 * session.encodeChat(messages, { addGenerationPrompt: true });
 * messages.push({ role: "assistant", content: "hello" }, { role: "user", content: "more" });
 * const ids = session.encodeChat(messages, { addGenerationPrompt: true });
 * assert.deepEqual(ids, qwen.encode(qwen.render(messages, { addGenerationPrompt: true })));
 * // Of the second call's 21 ids, 13 come from chunks the first call already tokenized:
 * assert.equal(ids.length, 21);
 * assert.equal(session.stats.reusedTokens, 13);
 * ```
 */
export class IncrementalChatEncoder {
  readonly tokenizer: ChatTokenizer;
  readonly #scanner: AddedTokenScanner | undefined;
  #chunks = new Map<string, Uint32Array>();
  #stats: IncrementalEncoderStats = {
    calls: 0,
    reusedTokens: 0,
    encodedTokens: 0,
    renderMs: 0,
    encodeMs: 0,
  };

  constructor(tokenizer: ChatTokenizer) {
    this.tokenizer = tokenizer;
    // Without the added-token list the chunking cannot be proven exact: fall back to full encodes.
    this.#scanner = tokenizer instanceof HfChatTokenizer
      ? new AddedTokenScanner(tokenizer.rawSplitTokens)
      : undefined;
  }

  /** Cumulative counters (a copy). */
  get stats(): IncrementalEncoderStats {
    return { ...this.#stats };
  }

  /** Renders and encodes; equal to `encode(render(messages, options))`. */
  encodeChat(messages: ChatMessage[], options: RenderOptions = {}): Uint32Array {
    return this.renderAndEncode(messages, options).ids;
  }

  /** Renders and encodes, returning the prompt text too. */
  renderAndEncode(
    messages: ChatMessage[],
    options: RenderOptions = {},
  ): { text: string; ids: Uint32Array } {
    const t0 = performance.now();
    const text = this.tokenizer.render(messages, options);
    this.#stats.renderMs += performance.now() - t0;
    return { text, ids: this.encodeText(text) };
  }

  /** Encodes `text`, equal to `tokenizer.encode(text)`, reusing the previous call's chunks. */
  encodeText(text: string): Uint32Array {
    const t0 = performance.now();
    return this.#assemble(this.#chunkTexts(text), NO_CHUNKS, t0);
  }

  /**
   * {@link renderAndEncode} with every new chunk of at least `offload.minChars` characters
   * encoded by `offload.encode` (another thread's copy of the same tokenizer, so the ids are
   * the same): a long prompt no longer holds the caller's thread for its tokenization.
   */
  async renderAndEncodeOffThread(
    messages: ChatMessage[],
    options: RenderOptions,
    offload: ChunkOffload,
  ): Promise<{ text: string; ids: Uint32Array }> {
    const t0 = performance.now();
    const text = this.tokenizer.render(messages, options);
    this.#stats.renderMs += performance.now() - t0;
    return { text, ids: await this.encodeTextOffThread(text, offload) };
  }

  /** {@link encodeText} with the long new chunks encoded by `offload` (see {@link renderAndEncodeOffThread}). */
  async encodeTextOffThread(text: string, offload: ChunkOffload): Promise<Uint32Array> {
    const chunks = this.#chunkTexts(text);
    const ready = new Map<string, Uint32Array>();
    for (const chunk of chunks) {
      if (chunk.length < offload.minChars || this.#chunks.has(chunk) || ready.has(chunk)) continue;
      ready.set(chunk, await offload.encode(chunk));
    }
    return this.#assemble(chunks, ready, performance.now());
  }

  /**
   * The texts the prompt is encoded in, in order: cut before each added token, so each is
   * encoded by the model on its own (without the scanner, the whole text is one chunk).
   */
  #chunkTexts(text: string): string[] {
    const scanner = this.#scanner;
    if (scanner === undefined) return [text];
    const { starts, tokens } = scanner.scan(text);
    const chunks: string[] = [];
    const chunkCount = starts.length + (starts[0] === 0 ? 0 : 1);
    for (let k = 0; k < chunkCount; k++) {
      // Chunk k spans [begin, end): a leading text-only chunk when the text does not start with
      // an added token, then one chunk per match.
      const m = starts[0] === 0 ? k : k - 1;
      const begin = m < 0 ? 0 : starts[m];
      const end = m + 1 < starts.length ? starts[m + 1] : text.length;
      let chunk = text.slice(begin, end);
      if (scanner.hasLstrip && m + 1 < starts.length && tokens[m + 1].lstrip) {
        const head = m < 0 ? 0 : tokens[m].content.length;
        chunk = chunk.slice(0, head) + chunk.slice(head).trimEnd();
      }
      chunks.push(chunk);
    }
    return chunks;
  }

  /** Concatenates the chunks' ids: from this call, the previous one, `ready`, or encoded now. */
  #assemble(
    chunks: string[],
    ready: ReadonlyMap<string, Uint32Array>,
    t0: number,
  ): Uint32Array {
    const stats = this.#stats;
    stats.calls++;
    if (this.#scanner === undefined) {
      const ids = ready.get(chunks[0]) ?? this.tokenizer.encode(chunks[0]);
      stats.encodedTokens += ids.length;
      stats.encodeMs += performance.now() - t0;
      return ids;
    }
    const previous = this.#chunks;
    const current = new Map<string, Uint32Array>();
    const parts: Uint32Array[] = [];
    let total = 0;
    for (const chunk of chunks) {
      let ids = current.get(chunk);
      if (ids === undefined) {
        ids = previous.get(chunk);
        if (ids === undefined) {
          ids = ready.get(chunk) ?? this.tokenizer.encode(chunk);
          stats.encodedTokens += ids.length;
        } else stats.reusedTokens += ids.length;
        current.set(chunk, ids);
      } else stats.reusedTokens += ids.length;
      parts.push(ids);
      total += ids.length;
    }
    this.#chunks = current;
    const out = new Uint32Array(total);
    let offset = 0;
    for (const part of parts) {
      out.set(part, offset);
      offset += part.length;
    }
    stats.encodeMs += performance.now() - t0;
    return out;
  }

  /** Forgets the cached chunks (e.g. when a session ends). */
  reset(): void {
    this.#chunks = new Map();
  }
}
