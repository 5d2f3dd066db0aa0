/**
 * Token logprobs in the answers: each sampled token is attached to the output part its text
 * produced (so a streamed text delta carries exactly the tokens behind it), and written in each
 * wire format's shape. The logprobs are the policy's own sampling logprobs, the same numbers the
 * `model_request` event records; the upstream gives no alternatives, so `top_logprobs` lists are
 * always empty and requests for alternatives are refused by the codecs.
 *
 * @module
 */
import type { JsonObject } from "../../schema.ts";
import { HfChatTokenizer } from "../../tokens/hf.ts";
import type { ChatTokenizer } from "../../tokens/types.ts";
import type { OutputPart, TokenLogprob } from "../../tokens/parse_output.ts";

const utf8 = new TextEncoder();
const text = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

/** Byte-level vocabularies know each (non-added) token's exact bytes. */
function byteLevel(t: ChatTokenizer, id: number): HfChatTokenizer | null {
  return t instanceof HfChatTokenizer && t.bytePieces && !t.isAddedToken(id) ? t : null;
}

/** A sampled token whose text and bytes are decoded only when a codec asks for them. */
class SampledToken implements TokenLogprob {
  readonly #tokenizer: ChatTokenizer;
  readonly id: number;
  readonly logprob: number;
  readonly offset: number;
  #token: string | undefined;

  constructor(tokenizer: ChatTokenizer, id: number, logprob: number, offset: number) {
    this.#tokenizer = tokenizer;
    this.id = id;
    this.logprob = logprob;
    this.offset = offset;
  }

  get token(): string {
    // Decoding the bytes gives what `decode([id])` gives, several times faster (a conformance
    // test checks it over Qwen3's whole vocabulary).
    const bytes = byteLevel(this.#tokenizer, this.id);
    return this.#token ??= bytes
      ? text.decode(bytes.tokenBytes(this.id))
      : this.#tokenizer.decode([this.id]);
  }

  get bytes(): number[] {
    // Exact even for a token holding half a UTF-8 character.
    const bytes = byteLevel(this.#tokenizer, this.id);
    return Array.from(bytes ? bytes.tokenBytes(this.id) : utf8.encode(this.token));
  }
}

/**
 * Attributes sampled tokens to the output parts their text produced. Tokens are added as they
 * are sampled, with the end offset of the generated text after each; parts carry their `span`
 * (from {@link OutputParser}). A token belongs to the first part its text overlaps; a token with
 * no text of its own (a partial UTF-8 character) to the part holding the next character; tokens
 * of dropped markup (`<think>`, `</think>`, the end token) to none.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadCharTokenizer } from "../../tokens/char.ts";
 * import { PartTokens } from "./logprobs.ts";
 * const tokenizer = await loadCharTokenizer();
 * const tokens = new PartTokens(tokenizer);
 * [..."ab"].forEach((ch, i) => tokens.add(tokenizer.encode(ch)[0], -0.5 * (i + 1), i + 1));
 * const [part] = tokens.attach([{ type: "content", text: "b", span: [1, 2] }]);
 * assert.deepEqual(part.logprobs?.map((t) => [t.token, t.logprob]), [["b", -1]]);
 * ```
 */
export class PartTokens {
  readonly #tokenizer: ChatTokenizer;
  #tokens: { id: number; logprob: number; start: number; end: number }[] = [];
  #next = 0;
  #end = 0;

  constructor(tokenizer: ChatTokenizer) {
    this.#tokenizer = tokenizer;
  }

  /** Adds the next sampled token; `end` is the generated text's length after it. */
  add(id: number, logprob: number, end: number): void {
    this.#tokens.push({ id, logprob, start: this.#end, end });
    this.#end = end;
  }

  /** Sets `logprobs` on each part that has a span; returns the parts. */
  attach(parts: OutputPart[]): OutputPart[] {
    for (const part of parts) {
      if (!part.span) continue;
      const [from, to] = part.span;
      const mine: TokenLogprob[] = [];
      while (this.#next < this.#tokens.length) {
        const t = this.#tokens[this.#next];
        if (t.start >= to) break;
        if (Math.max(t.end, t.start + 1) > from) {
          mine.push(new SampledToken(this.#tokenizer, t.id, t.logprob, t.start));
        }
        this.#next++;
      }
      part.logprobs = [...part.logprobs ?? [], ...mine];
    }
    return parts;
  }
}

/**
 * One token in the OpenAI shape shared by Chat Completions (`logprobs.content[]`) and Responses
 * (`logprobs[]`): `{token, logprob, bytes, top_logprobs}`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openaiTokenLogprob } from "./logprobs.ts";
 * const entry = openaiTokenLogprob({ token: "hi", logprob: -0.25, bytes: [104, 105], offset: 0 });
 * assert.deepEqual(entry, { token: "hi", logprob: -0.25, bytes: [104, 105], top_logprobs: [] });
 * ```
 */
export function openaiTokenLogprob(t: TokenLogprob): JsonObject {
  return { token: t.token, logprob: t.logprob, bytes: t.bytes, top_logprobs: [] };
}

/**
 * The legacy Completions `logprobs` object for `tokens`; `text_offset` counts characters from
 * the start of the generated text.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { completionLogprobs } from "./logprobs.ts";
 * const lp = completionLogprobs([
 *   { token: "1", logprob: -0.5, bytes: [49], offset: 0 },
 *   { token: "+1", logprob: -1, bytes: [43, 49], offset: 1 },
 * ]);
 * assert.deepEqual(lp, {
 *   tokens: ["1", "+1"], token_logprobs: [-0.5, -1], top_logprobs: null, text_offset: [0, 1],
 * });
 * ```
 */
export function completionLogprobs(tokens: readonly TokenLogprob[]): JsonObject {
  return {
    tokens: tokens.map((t) => t.token),
    token_logprobs: tokens.map((t) => t.logprob),
    top_logprobs: null,
    text_offset: tokens.map((t) => t.offset),
  };
}
