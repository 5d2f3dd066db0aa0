/**
 * A minimal binary heap (the planners' priority queue).
 *
 * @module
 */

/**
 * Binary heap ordered by `before(a, b)` (true when `a` must come out first).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { Heap } from "./heap.ts";
 * const h = new Heap<number>((a, b) => a < b);
 * [3, 1, 2].forEach((x) => h.push(x));
 * assert.equal(h.pop(), 1);
 * ```
 */
export class Heap<T> {
  #items: T[] = [];
  #before: (a: T, b: T) => boolean;
  constructor(before: (a: T, b: T) => boolean) {
    this.#before = before;
  }
  /** Number of items held. */
  get size(): number {
    return this.#items.length;
  }
  /** Adds an item. */
  push(item: T): void {
    const items = this.#items;
    items.push(item);
    let i = items.length - 1;
    while (i > 0) {
      const up = (i - 1) >> 1;
      if (!this.#before(items[i], items[up])) break;
      [items[i], items[up]] = [items[up], items[i]];
      i = up;
    }
  }
  /** Removes and returns the first item (undefined when empty). */
  pop(): T | undefined {
    const items = this.#items;
    if (items.length === 0) return undefined;
    const top = items[0];
    const last = items.pop() as T;
    if (items.length > 0) {
      items[0] = last;
      let i = 0;
      for (;;) {
        const l = 2 * i + 1;
        const r = l + 1;
        let best = i;
        if (l < items.length && this.#before(items[l], items[best])) best = l;
        if (r < items.length && this.#before(items[r], items[best])) best = r;
        if (best === i) break;
        [items[i], items[best]] = [items[best], items[i]];
        i = best;
      }
    }
    return top;
  }
}
