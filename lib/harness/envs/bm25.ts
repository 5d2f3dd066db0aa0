/**
 * A small BM25 index for the search environment.
 *
 * @module
 */

/** Lower-cased word and number tokens. */
export function tokenize(text: string): string[] {
  return text.toLowerCase().match(/[\p{L}\p{N}]+/gu) ?? [];
}

/** One hit of {@link Bm25Index.search}. */
export interface Bm25Hit {
  /** Index of the document in the list given to the index. */
  index: number;
  /** BM25 score (higher is better). */
  score: number;
}

/**
 * Okapi BM25 (k1 = 1.2, b = 0.75) over a fixed list of texts.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { Bm25Index } from "./bm25.ts";
 * const index = new Bm25Index(["the red fox", "a blue whale", "red wine"]);
 * assert.equal(index.search("red fox", 1)[0].index, 0);
 * ```
 */
export class Bm25Index {
  readonly #docs: Map<string, number>[];
  readonly #lengths: number[];
  readonly #df = new Map<string, number>();
  readonly #avg: number;
  /** Indexes `texts` (k1, b: the BM25 parameters). */
  constructor(texts: string[], readonly k1 = 1.2, readonly b = 0.75) {
    this.#docs = texts.map((text) => {
      const tf = new Map<string, number>();
      for (const token of tokenize(text)) tf.set(token, (tf.get(token) ?? 0) + 1);
      for (const token of tf.keys()) this.#df.set(token, (this.#df.get(token) ?? 0) + 1);
      return tf;
    });
    this.#lengths = texts.map((text) => tokenize(text).length);
    this.#avg = this.#lengths.reduce((a, b) => a + b, 0) / Math.max(1, texts.length);
  }

  /** The `k` best documents for `query` (score > 0), best first; ties by index. */
  search(query: string, k: number): Bm25Hit[] {
    const n = this.#docs.length;
    const terms = [...new Set(tokenize(query))];
    const hits: Bm25Hit[] = [];
    for (let i = 0; i < n; i++) {
      let score = 0;
      for (const term of terms) {
        const f = this.#docs[i].get(term);
        if (!f) continue;
        const df = this.#df.get(term)!;
        const idf = Math.log(1 + (n - df + 0.5) / (df + 0.5));
        score += idf * (f * (this.k1 + 1)) /
          (f + this.k1 * (1 - this.b + this.b * this.#lengths[i] / this.#avg));
      }
      if (score > 0) hits.push({ index: i, score });
    }
    hits.sort((a, b) => b.score - a.score || a.index - b.index);
    return hits.slice(0, k);
  }
}
