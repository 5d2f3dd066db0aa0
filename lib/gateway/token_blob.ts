/**
 * Compact token storage shared by both store backends.
 *
 * Token ids are stored as Uint32 little-endian blobs and logprobs as Float32 little-endian
 * blobs. A prompt that shares a prefix with an earlier call of the same attempt (its prompt
 * followed by its response) is stored as a reference `(ref_seq, ref_len)` plus the new tail, so
 * a multi-turn rollout costs about its final context instead of the sum of all its prompts.
 *
 * @module
 */

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/**
 * Encodes token ids as a Uint32 little-endian blob.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { decodeU32, encodeU32 } from "./token_blob.ts";
 * assert.deepEqual(decodeU32(encodeU32(Uint32Array.of(1, 70000))), new Uint32Array([1, 70000]));
 * ```
 */
export function encodeU32(ids: Uint32Array): Uint8Array {
  if (LITTLE_ENDIAN) {
    return new Uint8Array(ids.buffer.slice(ids.byteOffset, ids.byteOffset + ids.byteLength));
  }
  const out = new Uint8Array(ids.length * 4);
  const view = new DataView(out.buffer);
  ids.forEach((v, i) => view.setUint32(i * 4, v, true));
  return out;
}

/** Decodes a Uint32 little-endian blob (a fresh array, never a view of `bytes`). */
export function decodeU32(bytes: Uint8Array): Uint32Array {
  if (bytes.length % 4 !== 0) throw new Error(`token blob of ${bytes.length} bytes is not Uint32`);
  if (LITTLE_ENDIAN) {
    return new Uint32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  return Uint32Array.from({ length: bytes.length / 4 }, (_, i) => view.getUint32(i * 4, true));
}

/**
 * Encodes logprobs as a Float32 little-endian blob.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { decodeF32, encodeF32 } from "./token_blob.ts";
 * assert.deepEqual(decodeF32(encodeF32(Float32Array.of(-0.5, -2))), new Float32Array([-0.5, -2]));
 * ```
 */
export function encodeF32(values: Float32Array): Uint8Array {
  if (LITTLE_ENDIAN) {
    return new Uint8Array(
      values.buffer.slice(values.byteOffset, values.byteOffset + values.byteLength),
    );
  }
  const out = new Uint8Array(values.length * 4);
  const view = new DataView(out.buffer);
  values.forEach((v, i) => view.setFloat32(i * 4, v, true));
  return out;
}

/** Decodes a Float32 little-endian blob (a fresh array). */
export function decodeF32(bytes: Uint8Array): Float32Array {
  if (bytes.length % 4 !== 0) {
    throw new Error(`logprob blob of ${bytes.length} bytes is not Float32`);
  }
  if (LITTLE_ENDIAN) {
    return new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length));
  }
  const view = new DataView(bytes.buffer, bytes.byteOffset, bytes.length);
  return Float32Array.from({ length: bytes.length / 4 }, (_, i) => view.getFloat32(i * 4, true));
}

/**
 * Length of the longest common prefix of two id arrays.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { commonPrefixLength } from "./token_blob.ts";
 * assert.equal(commonPrefixLength(Uint32Array.of(1, 2, 3), Uint32Array.of(1, 2, 4)), 2);
 * ```
 */
export function commonPrefixLength(a: Uint32Array, b: Uint32Array): number {
  const n = Math.min(a.length, b.length);
  let i = 0;
  while (i < n && a[i] === b[i]) i++;
  return i;
}

/** The full token sequence an earlier call leaves as context: its prompt, then its response. */
export interface CallTokens {
  prompt: Uint32Array;
  response: Uint32Array;
}

/** How a prompt is stored: `ref_len` ids taken from call `ref_seq`'s context, then `tail`. */
export interface PromptPlan {
  ref_seq: number | null;
  ref_len: number;
  tail: Uint32Array;
}

/** Shared prefixes shorter than this are stored inline (a reference would save nothing). */
export const MIN_REFERENCE_TOKENS = 16;

/**
 * Picks the candidate whose context (prompt ∥ response) shares the longest prefix with
 * `prompt`, and stores the rest as the tail.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { planPrompt } from "./token_blob.ts";
 * const prev = { prompt: new Uint32Array(20).fill(7), response: Uint32Array.of(8, 9) };
 * const prompt = Uint32Array.of(...prev.prompt, 8, 9, 10);
 * const plan = planPrompt(prompt, [{ seq: 5, tokens: prev }]);
 * assert.deepEqual([plan.ref_seq, plan.ref_len, plan.tail.length], [5, 22, 1]);
 * ```
 */
export function planPrompt(
  prompt: Uint32Array,
  candidates: Array<{ seq: number; tokens: CallTokens }>,
): PromptPlan {
  let best: PromptPlan = { ref_seq: null, ref_len: 0, tail: prompt };
  for (const { seq, tokens } of candidates) {
    // Nothing shares more than the whole prompt; a context no longer than the best match so far
    // cannot beat it, and is not scanned (the most recent call, tried first, usually holds the
    // longest: each candidate's scan is ~16k comparisons for a long agent prompt).
    if (best.ref_len === prompt.length) break;
    if (tokens.prompt.length + tokens.response.length <= best.ref_len) continue;
    let shared = commonPrefixLength(prompt, tokens.prompt);
    if (shared === tokens.prompt.length) {
      shared += commonPrefixLength(prompt.subarray(shared), tokens.response);
    }
    if (shared >= MIN_REFERENCE_TOKENS && shared > best.ref_len) {
      best = { ref_seq: seq, ref_len: shared, tail: prompt.subarray(shared) };
    }
  }
  return best;
}

/**
 * Rebuilds a prompt from its reference's context and its tail.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { resolvePrompt } from "./token_blob.ts";
 * const ref = { prompt: Uint32Array.of(1, 2), response: Uint32Array.of(3, 4) };
 * assert.deepEqual(resolvePrompt(ref, 3, Uint32Array.of(9)), new Uint32Array([1, 2, 3, 9]));
 * ```
 */
export function resolvePrompt(
  ref: CallTokens | null,
  refLen: number,
  tail: Uint32Array,
): Uint32Array {
  if (!ref || refLen === 0) return tail.slice();
  const out = new Uint32Array(refLen + tail.length);
  const fromPrompt = Math.min(refLen, ref.prompt.length);
  out.set(ref.prompt.subarray(0, fromPrompt), 0);
  if (refLen > fromPrompt) out.set(ref.response.subarray(0, refLen - fromPrompt), fromPrompt);
  out.set(tail, refLen);
  return out;
}

/**
 * A bounded cache of decoded call tokens by event `seq`. Events are immutable, so an entry is
 * never stale, even when several gateways share one database.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { TokenCache } from "./token_blob.ts";
 * const cache = new TokenCache(1_000);
 * cache.set(7, { prompt: Uint32Array.of(1), response: Uint32Array.of(2) });
 * assert.deepEqual(cache.get(7)?.response, new Uint32Array([2]));
 * ```
 */
export class TokenCache {
  #map = new Map<number, CallTokens>();
  #tokens = 0;
  readonly #maxTokens: number;

  constructor(maxTokens = 8_000_000) {
    this.#maxTokens = maxTokens;
  }

  get(seq: number): CallTokens | undefined {
    const hit = this.#map.get(seq);
    if (hit) {
      // Refresh recency: Map iteration order is insertion order.
      this.#map.delete(seq);
      this.#map.set(seq, hit);
    }
    return hit;
  }

  set(seq: number, tokens: CallTokens): void {
    if (this.#map.has(seq)) return;
    this.#map.set(seq, tokens);
    this.#tokens += tokens.prompt.length + tokens.response.length;
    for (const [key, value] of this.#map) {
      if (this.#tokens <= this.#maxTokens || this.#map.size <= 1) break;
      this.#map.delete(key);
      this.#tokens -= value.prompt.length + value.response.length;
    }
  }
}
