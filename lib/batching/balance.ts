/**
 * Data-parallel balancing: split work items (rows, rollouts) into k parts of near-equal cost.
 *
 * The cost of a sequence of L tokens is modelled as a·L + L² (linear layers grow with L,
 * attention with L²); see {@link workload}. Two heuristics: LPT (longest first onto the least
 * loaded part; within 4/3 of optimal) and Karmarkar–Karp's largest differencing method, which
 * is usually much tighter on many similar items.
 *
 * @module
 */
import { ValidationError } from "../schema.ts";
import type { BalanceMethod } from "./schema.ts";
import { Heap } from "./heap.ts";

/**
 * Workload of one sequence of `length` tokens: a·L + L².
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { workload } from "./balance.ts";
 * assert.equal(workload(100, 6144), 624400);
 * ```
 */
export function workload(length: number, a: number): number {
  return a * length + length * length;
}

/** A partition of items into parts, with each part's load. */
export interface BalanceResult {
  /** Item indices of each part, ascending. */
  parts: number[][];
  /** Σ cost of each part. */
  loads: number[];
  /** max(load) / mean(load) − 1; 0 for a perfect split (and for no work at all). */
  imbalance: number;
}

/**
 * Relative imbalance of loads: max / mean − 1.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { imbalance } from "./balance.ts";
 * assert.equal(imbalance([3, 1]), 0.5);
 * ```
 */
export function imbalance(loads: readonly number[]): number {
  if (loads.length === 0) return 0;
  let sum = 0;
  let max = 0;
  for (const l of loads) {
    sum += l;
    if (l > max) max = l;
  }
  return sum > 0 ? max / (sum / loads.length) - 1 : 0;
}

function checkInputs(costs: readonly number[], k: number): void {
  if (!Number.isInteger(k) || k < 1) {
    throw new ValidationError("parts", [`parts: must be an integer >= 1, got ${k}`]);
  }
  costs.forEach((c, i) => {
    if (!Number.isFinite(c) || c < 0) {
      throw new ValidationError(`costs[${i}]`, [
        `costs[${i}]: must be a finite number >= 0, got ${c}`,
      ]);
    }
  });
}

function result(costs: readonly number[], parts: number[][]): BalanceResult {
  for (const p of parts) p.sort((a, b) => a - b);
  const loads = parts.map((p) => p.reduce((acc, i) => acc + costs[i], 0));
  return { parts, loads, imbalance: imbalance(loads) };
}

/**
 * LPT: items in decreasing cost, each onto the currently least-loaded part (ties: lowest part).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { partitionLpt } from "./balance.ts";
 * assert.deepEqual(partitionLpt([5, 4, 3, 3, 3], 2).loads, [8, 10]);
 * ```
 */
export function partitionLpt(costs: readonly number[], k: number): BalanceResult {
  checkInputs(costs, k);
  const order = costs.map((_, i) => i).sort((a, b) => costs[b] - costs[a] || a - b);
  const parts: number[][] = Array.from({ length: k }, () => []);
  const heap = new Heap<{ load: number; part: number }>((x, y) =>
    x.load < y.load || (x.load === y.load && x.part < y.part)
  );
  for (let p = 0; p < k; p++) heap.push({ load: 0, part: p });
  for (const i of order) {
    const least = heap.pop() as { load: number; part: number };
    parts[least.part].push(i);
    heap.push({ load: least.load + costs[i], part: least.part });
  }
  return result(costs, parts);
}

interface KkNode {
  /** Part sums, descending. */
  sums: number[];
  sets: number[][];
  id: number;
}

/**
 * Karmarkar–Karp largest differencing for k parts: every item starts as a k-tuple
 * (c, 0, …, 0); the two tuples with the largest spread are merged, pairing the largest sum of
 * one with the smallest of the other, until one tuple — the partition — is left.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { partitionKk } from "./balance.ts";
 * assert.deepEqual(partitionKk([5, 4, 3, 3, 3], 2).loads, [10, 8]); // differences 1, 0, 2, 2
 * ```
 */
export function partitionKk(costs: readonly number[], k: number): BalanceResult {
  checkInputs(costs, k);
  if (costs.length === 0) return result(costs, Array.from({ length: k }, () => []));
  const spread = (n: KkNode) => n.sums[0] - n.sums[k - 1];
  const heap = new Heap<KkNode>((x, y) => {
    const dx = spread(x);
    const dy = spread(y);
    return dx > dy || (dx === dy && x.id < y.id);
  });
  let nextId = 0;
  costs.forEach((c, i) => {
    const sums = new Array<number>(k).fill(0);
    sums[0] = c;
    const sets: number[][] = Array.from({ length: k }, () => []);
    sets[0].push(i);
    heap.push({ sums, sets, id: nextId++ });
  });
  while (heap.size > 1) {
    const a = heap.pop() as KkNode;
    const b = heap.pop() as KkNode;
    const merged: { sum: number; set: number[] }[] = [];
    for (let j = 0; j < k; j++) {
      const x = a.sets[j];
      const y = b.sets[k - 1 - j];
      // Small-to-large keeps the total copying at O(n log n).
      const set = x.length >= y.length ? x : y;
      for (const i of x.length >= y.length ? y : x) set.push(i);
      merged.push({ sum: a.sums[j] + b.sums[k - 1 - j], set });
    }
    merged.sort((p, q) => q.sum - p.sum);
    heap.push({ sums: merged.map((m) => m.sum), sets: merged.map((m) => m.set), id: nextId++ });
  }
  const last = heap.pop() as KkNode;
  return result(costs, last.sets);
}

/**
 * Splits items into `k` parts by cost with the chosen heuristic.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { balance, workload } from "./balance.ts";
 * const lengths = [900, 850, 400, 300, 120, 60];
 * const out = balance(lengths.map((L) => workload(L, 6144)), 2, "kk");
 * assert.equal(out.imbalance < 0.05, true);
 * ```
 */
export function balance(
  costs: readonly number[],
  k: number,
  method: BalanceMethod = "kk",
): BalanceResult {
  return method === "kk" ? partitionKk(costs, k) : partitionLpt(costs, k);
}
