/**
 * The `buffer_substitute` repair: when the text-level prefix holds but the ids differ, find the
 * re-tokenized response `â_i` inside `prompt_{i+1}` so that the sampled `a_i` can stand in for
 * it. The result is off-policy by construction (`a_{i+1}` was sampled after `â_i`, not `a_i`);
 * it exists to measure that harm.
 *
 * @module
 */
import type { ModelRequest } from "../schema.ts";
import type { DecodeFn } from "./diagnose.ts";
import { startsWith } from "./token_seq.ts";

/**
 * Number of ids of `prompt` after `prev.prompt_token_ids` that decode to exactly the text of
 * `prev`'s sampled response, or -1 when the prompt does not repeat the earlier prompt exactly or
 * the response text is not found right after it.
 *
 * @example
 * ```ts
 * import { findRetokenizedResponse } from "./buffer_substitute.ts";
 * const decode = (ids: Uint32Array) =>
 *   [...ids].map((id) => id === 300 ? "ab" : String.fromCharCode(id)).join("");
 * const prev = {
 *   prompt_token_ids: Uint32Array.of(120), response_token_ids: Uint32Array.of(300),
 * };
 * // The next prompt spells the response "ab" as two ids (97, 98) then adds "!".
 * findRetokenizedResponse(Uint32Array.of(120, 97, 98, 33), prev, decode); // 2
 * ```
 */
export function findRetokenizedResponse(
  prompt: Uint32Array,
  prev: Pick<ModelRequest, "prompt_token_ids" | "response_token_ids">,
  decode: DecodeFn,
): number {
  const base = prev.prompt_token_ids.length;
  if (!startsWith(prompt, prev.prompt_token_ids)) return -1;
  const target = decode(prev.response_token_ids);
  if (target.length === 0) return -1;
  const rest = prompt.subarray(base);
  // Every id decodes to at least one character, so the span has at most target.length ids.
  let lo = 1;
  let hi = Math.min(rest.length, target.length + 8);
  if (hi < 1 || decode(rest.subarray(0, hi)).length < target.length) return -1;
  while (lo < hi) {
    const mid = (lo + hi) >>> 1;
    if (decode(rest.subarray(0, mid)).length >= target.length) hi = mid;
    else lo = mid + 1;
  }
  for (let k = lo; k <= Math.min(rest.length, lo + 3); k++) {
    const text = decode(rest.subarray(0, k));
    if (text === target) return k;
    if (text.length > target.length + 4) break;
  }
  return -1;
}
