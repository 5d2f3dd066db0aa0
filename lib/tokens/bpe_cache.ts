/**
 * A cheaper word cache for `@huggingface/tokenizers`' BPE model.
 *
 * The library memoises each pre-tokenized word's BPE pieces in an LRU cache whose every hit
 * deletes and re-inserts the key (four hash-map operations, and a table that keeps growing and
 * rehashing). Profiling the split study over the shipped transcripts (`measureSplitsGrid`, 45 s)
 * put 42% of the JavaScript time in that map: `Map.prototype.set` and its lookups. A hit here is
 * one `Map.get`; a full cache is cleared and refills with the words still in use. The pieces are
 * a pure function of the word, so the ids never change, only the time.
 *
 * The library exposes no option for its cache, so {@link replaceBpeCache} swaps the model's
 * `cache` property (a library internal, pinned with the package version in `deno.json`); it
 * leaves any model whose cache does not have the library's `get`/`put`/`clear` shape alone.
 *
 * @module
 */

/** The library's cache interface, and the value it caches: a word's BPE pieces. */
interface PieceCache {
  get(word: string): string[] | undefined;
  put(word: string, pieces: string[]): void;
  clear(): void;
}

/** Words cached before the cache is cleared (the library's LRU holds 10,000). */
export const BPE_CACHE_WORDS = 20_000;

/**
 * A word → pieces cache with the library's interface: lookups never reorder, and a full cache
 * is cleared at the next insert.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { WordCache } from "./bpe_cache.ts";
 * const cache = new WordCache(2);
 * cache.put("hello", ["hel", "lo"]);
 * cache.put("world", ["world"]);
 * assert.deepEqual(cache.get("hello"), ["hel", "lo"]);
 * cache.put("again", ["again"]); // full: cleared, then stored
 * assert.equal(cache.get("hello"), undefined);
 * assert.deepEqual(cache.get("again"), ["again"]);
 * ```
 */
export class WordCache implements PieceCache {
  readonly #words = new Map<string, string[]>();

  constructor(readonly capacity: number = BPE_CACHE_WORDS) {}

  get(word: string): string[] | undefined {
    return this.#words.get(word);
  }

  put(word: string, pieces: string[]): void {
    if (this.#words.size >= this.capacity) this.#words.clear();
    this.#words.set(word, pieces);
  }

  clear(): void {
    this.#words.clear();
  }
}

function isPieceCache(value: unknown): value is PieceCache {
  const cache = value as Partial<PieceCache> | null;
  return typeof cache === "object" && cache !== null && typeof cache.get === "function" &&
    typeof cache.put === "function" && typeof cache.clear === "function";
}

/**
 * Gives a `@huggingface/tokenizers` `Tokenizer`'s BPE model a {@link WordCache}; true when it
 * did (a model without the library's BPE cache is left as it is, and false is returned).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { replaceBpeCache, WordCache } from "./bpe_cache.ts";
 * const tokenizer = { model: { bpe: () => [], cache: { get() {}, put() {}, clear() {} } } };
 * assert.equal(replaceBpeCache(tokenizer), true);
 * assert.ok(tokenizer.model.cache instanceof WordCache);
 * assert.equal(replaceBpeCache({ model: { cache: null } }), false);
 * ```
 */
export function replaceBpeCache(tokenizer: unknown): boolean {
  const model = (tokenizer as { model?: { bpe?: unknown; cache?: unknown } } | null)?.model;
  if (!model || typeof model.bpe !== "function" || !isPieceCache(model.cache)) return false;
  model.cache = new WordCache();
  return true;
}
