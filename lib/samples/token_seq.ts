/**
 * Hot-loop helpers on token sequences, written for the assembler's inner loops: prefix tests
 * against a concatenation `a ∥ b` without building it.
 *
 * @module
 */

/**
 * Length of the common prefix of `x` and the concatenation `a ∥ b` (never materialised).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { commonPrefixConcat } from "./token_seq.ts";
 * const x = Uint32Array.of(1, 2, 3, 9);
 * assert.equal(commonPrefixConcat(x, Uint32Array.of(1, 2), Uint32Array.of(3, 4)), 3);
 * ```
 */
export function commonPrefixConcat(x: Uint32Array, a: Uint32Array, b: Uint32Array): number {
  const na = Math.min(a.length, x.length);
  let i = 0;
  while (i < na && x[i] === a[i]) i++;
  if (i < a.length) return i;
  const nb = Math.min(b.length, x.length - a.length);
  let j = 0;
  while (j < nb && x[a.length + j] === b[j]) j++;
  return a.length + j;
}

/**
 * True when `x` starts with `a ∥ b`. Checks the two boundary tokens first so that most
 * mismatches are rejected without a scan.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { startsWithConcat } from "./token_seq.ts";
 * assert.equal(
 *   startsWithConcat(Uint32Array.of(1, 2, 3, 9), Uint32Array.of(1, 2), Uint32Array.of(3)),
 *   true,
 * );
 * ```
 */
export function startsWithConcat(x: Uint32Array, a: Uint32Array, b: Uint32Array): boolean {
  const na = a.length;
  const nb = b.length;
  if (x.length < na + nb) return false;
  if (nb > 0 && x[na + nb - 1] !== b[nb - 1]) return false;
  if (na > 0 && x[na - 1] !== a[na - 1]) return false;
  for (let i = 0; i < na; i++) if (x[i] !== a[i]) return false;
  for (let j = 0; j < nb; j++) if (x[na + j] !== b[j]) return false;
  return true;
}

/**
 * True when `x` starts with `a`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { startsWith } from "./token_seq.ts";
 * assert.equal(startsWith(Uint32Array.of(1, 2, 3), Uint32Array.of(1, 2)), true);
 * ```
 */
export function startsWith(x: Uint32Array, a: Uint32Array): boolean {
  return startsWithConcat(x, a, EMPTY);
}

/**
 * True when `a` and `b` hold the same ids.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { sameIds } from "./token_seq.ts";
 * assert.equal(sameIds(Uint32Array.of(1, 2), Uint32Array.of(1, 2)), true);
 * ```
 */
export function sameIds(a: Uint32Array, b: Uint32Array): boolean {
  return a.length === b.length && startsWithConcat(a, b, EMPTY);
}

const EMPTY = new Uint32Array(0);

/**
 * Ids of `a ∥ b` in `[start, end)`, copied into a plain array (for evidence).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { sliceConcat } from "./token_seq.ts";
 * assert.deepEqual(sliceConcat(Uint32Array.of(1, 2), Uint32Array.of(3, 4), 1, 3), [2, 3]);
 * ```
 */
export function sliceConcat(a: Uint32Array, b: Uint32Array, start: number, end: number): number[] {
  const out: number[] = [];
  const stop = Math.min(end, a.length + b.length);
  for (let i = Math.max(0, start); i < stop; i++) out.push(i < a.length ? a[i] : b[i - a.length]);
  return out;
}
