/**
 * Shared-prefix packing: micro-batches whose samples start with the same untrained prompt store
 * that prompt once and hang every sample's remaining tokens off it as a branch (a prefix tree
 * over the packed samples), so the worker computes the prompt once per micro-batch instead of
 * once per sample.
 *
 * Why this is exact: the packed row is a tree row (`parent` per token). The worker lets a token
 * attend to its ancestors only, gives it its depth as position and predicts it from its parent,
 * so every token of a sample sees exactly the tokens (and positions) it saw in its own row.
 * Only tokens untrained (`loss_mask` 0) in every sample that shares them are shared, so each
 * trained token keeps its own node with its own advantage, weight and behaviour logprob, and
 * `sequence_ids` keeps each sample its own sequence for sequence-level losses (GSPO).
 *
 * @module
 */
import type { MicroBatch, PackOptions } from "./schema.ts";
import {
  checkPacking,
  type MemberPlacement,
  type PackableRow,
  writeMicroBatch,
} from "./packing.ts";

/**
 * A node of a compressed prefix tree (radix tree) over shareable prefixes: its edge holds the
 * tokens at depths `from … to − 1`, read from `tokens` (the row that created it; in a prefix
 * tree depth t is token index t of every row below). Children are keyed by their first token.
 * Nodes are O(rows), not O(tokens), so long prompts cost no per-token objects.
 */
interface TrieNode {
  tokens: ArrayLike<number>;
  from: number;
  to: number;
  children: Map<number, TrieNode>;
  /** While planning: the micro-batches (bin ids) holding this whole edge. */
  bins: Set<number>;
  /** While writing a row: the packed-row index of depth `from` (the edge is one run). */
  row: number;
}

const newNode = (tokens: ArrayLike<number>, from: number, to: number, row = -1): TrieNode => ({
  tokens,
  from,
  to,
  children: new Map(),
  bins: new Set(),
  row,
});

/** Cuts `node`'s edge at depth `at` (from < at < to): the lower part becomes its only child. */
function split(node: TrieNode, at: number): void {
  const lower: TrieNode = {
    tokens: node.tokens,
    from: at,
    to: node.to,
    children: node.children,
    bins: new Set(node.bins),
    row: node.row < 0 ? -1 : node.row + (at - node.from),
  };
  node.to = at;
  node.children = new Map([[node.tokens[at], lower]]);
}

/**
 * Walks `tokens[0 … limit)` down the tree, calling `visit(node, depth)` for each node entered
 * with the depth matched within its edge. Read-only.
 */
function walk(
  root: TrieNode,
  tokens: ArrayLike<number>,
  limit: number,
  visit: (node: TrieNode, depth: number) => void,
): void {
  let node = root;
  let depth = 0;
  while (depth < limit) {
    const child = node.children.get(tokens[depth]);
    if (!child) return;
    const end = Math.min(child.to, limit);
    let d = depth + 1;
    while (d < end && child.tokens[d] === tokens[d]) d++;
    visit(child, d);
    if (d < child.to) return;
    node = child;
    depth = d;
  }
}

/**
 * Inserts `tokens[0 … limit)`: follows the matching path (splitting an edge where the path
 * leaves it or `limit` ends inside it, so that every node on the path is wholly shared), then
 * adds the rest as one new leaf whose edge starts at packed-row index `row`. Calls `mark` on
 * every node of the path. Returns the matched depth and the node ending there (the root if 0).
 */
function insert(
  root: TrieNode,
  tokens: ArrayLike<number>,
  limit: number,
  row: number,
  mark: (node: TrieNode) => void,
): { matched: number; last: TrieNode } {
  let node = root;
  let depth = 0;
  while (depth < limit) {
    const child = node.children.get(tokens[depth]);
    if (!child) {
      const leaf = newNode(tokens, depth, limit, row);
      node.children.set(tokens[depth], leaf);
      mark(leaf);
      return { matched: depth, last: node };
    }
    const end = Math.min(child.to, limit);
    let d = depth + 1;
    while (d < end && child.tokens[d] === tokens[d]) d++;
    if (d < child.to) split(child, d);
    mark(child);
    node = child;
    depth = d;
  }
  return { matched: depth, last: node };
}

interface Bin {
  members: number[];
  used: number;
  oversized: boolean;
}

/**
 * How many leading tokens of a row may live in shared nodes: the untrained tokens before its
 * first trained one, never its last token (every sample keeps at least one node of its own),
 * and none of a tree row's (those are packed as they are).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { shareablePrefixLength } from "./shared_prefix.ts";
 * assert.equal(shareablePrefixLength({ tokens: [5, 6, 7, 8], loss_mask: [0, 0, 1, 0] }), 2);
 * assert.equal(shareablePrefixLength({ tokens: [5, 6], loss_mask: [0, 0] }), 1);
 * ```
 */
export function shareablePrefixLength(
  row: Pick<PackableRow, "tokens" | "loss_mask" | "parent">,
): number {
  if (row.parent !== undefined) return 0;
  const n = row.tokens.length;
  let k = 0;
  while (k < n - 1 && row.loss_mask[k] === 0) k++;
  return k;
}

/**
 * Packs rows into shared-prefix micro-batches of at most `token_budget` tokens each, counting
 * a shared prefix once.
 *
 * Each micro-batch is one tree row: per token `parent` (−1 at a root), and `sequence_ids`
 * (the segment's index in the micro-batch) so that sequence-level losses still see one sequence
 * per sample. Tokens untrained in every sample that shares them (the leading prompt up to a
 * sample's first trained token, never its last token) are stored once; everything from a
 * sample's first unshared token on is its own contiguous run `start … start + length − 1`,
 * and {@link segmentTokenIndex} maps every token of a sample to its node. A micro-batch where
 * nothing could be shared is written exactly as {@link packMicroBatches} writes it.
 *
 * `first_fit_decreasing` (default) takes rows in prefix-tree order (rows sharing the longest
 * prompt next to each other, whatever their input order; longest first among equal prompts)
 * and puts each into the micro-batch where it adds the fewest tokens (the deepest shared
 * prefix; the first such on ties) among those with room, opening a new one when none has;
 * `sequential` fills micro-batches in input order (so shares well only when samples of a group
 * are adjacent). A row that fits nowhere and alone exceeds the budget gets a micro-batch of its
 * own, marked `oversized`. Within a micro-batch, segments keep their input order. Rows with
 * tree `parent`s (the `tree` merge strategy) are packed as they are, without sharing.
 *
 * The worker computes the same logprobs, loss and gradient as for the unshared packing (up to
 * float rounding); tests/trainer_shared_prefix_test.ts checks this against the real worker for
 * PPO, GSPO and CE.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { packSharedPrefix } from "./shared_prefix.ts";
 * import { segmentTokenIndex } from "./packing.ts";
 * const prompt = [1, 2, 3, 4, 5, 6];
 * const sample = (id: string, response: number[]) => {
 *   const tokens = [...prompt, ...response];
 *   const mask = tokens.map((_, t) => (t < prompt.length ? 0 : 1));
 *   return {
 *     rollout_id: id, group_id: "g", tokens, loss_mask: mask, advantages: mask,
 *     loss_weights: mask.map((m) => m / 6), rollout_logprobs: mask.map((m) => -m),
 *   };
 * };
 * const [mb] = packSharedPrefix(
 *   [sample("a", [7, 8, 9]), sample("b", [7, 10]), sample("c", [11])],
 *   { token_budget: 16 },
 * );
 * assert.equal(mb.tokens, 12); // the prompt once (6) + 3 + 2 + 1, instead of 24
 * assert.deepEqual(mb.segments.map((s) => s.shared), [0, 6, 6]);
 * assert.deepEqual(mb.row.sequence_ids, [0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 2]); // one id per sample
 * assert.deepEqual(
 *   segmentTokenIndex(mb, mb.segments[1]),
 *   new Int32Array([0, 1, 2, 3, 4, 5, 9, 10]),
 * );
 * ```
 */
export function packSharedPrefix(
  rows: readonly PackableRow[],
  options: PackOptions,
): MicroBatch[] {
  const { token_budget: budget, order } = checkPacking(rows, options);
  const shareable = rows.map(shareablePrefixLength);
  const root = newNode([], 0, 0);
  const bins: Bin[] = [];

  /** How many leading tokens row i shares with each bin holding part of its prefix. */
  const matches = (i: number): Map<number, number> => {
    const out = new Map<number, number>();
    // Bins are prefix-closed, so a deeper node's depth overrides a shallower one's.
    walk(root, rows[i].tokens, shareable[i], (node, depth) => {
      for (const b of node.bins) out.set(b, depth);
    });
    return out;
  };
  const place = (i: number, b: number, cost: number) => {
    const bin = bins[b];
    bin.members.push(i);
    bin.used += cost;
    if (!bin.oversized) insert(root, rows[i].tokens, shareable[i], -1, (node) => node.bins.add(b));
  };
  const open = (i: number) => {
    const n = rows[i].tokens.length;
    bins.push({ members: [], used: 0, oversized: n > budget });
    place(i, bins.length - 1, n);
  };

  if (order === "sequential") {
    let current = -1;
    rows.forEach((row, i) => {
      const n = row.tokens.length;
      if (current >= 0 && !bins[current].oversized) {
        const cost = n - (matches(i).get(current) ?? 0);
        if (bins[current].used + cost <= budget) {
          place(i, current, cost);
          return;
        }
      }
      open(i);
      current = bins.length - 1;
    });
  } else {
    for (const i of prefixTreeOrder(rows, shareable)) {
      const n = rows[i].tokens.length;
      const shared = matches(i);
      let best = -1;
      let bestCost = Infinity;
      bins.forEach((bin, b) => {
        if (bin.oversized) return;
        const cost = n - (shared.get(b) ?? 0);
        if (bin.used + cost <= budget && cost < bestCost) {
          best = b;
          bestCost = cost;
        }
      });
      if (best >= 0) place(i, best, bestCost);
      else open(i);
    }
    for (const b of bins) b.members.sort((x, y) => x - y);
    bins.sort((x, y) => x.members[0] - y.members[0]);
  }
  return bins.map((b) => writeSharedRow(rows, shareable, b.members, b.oversized));
}

/**
 * Rows in prefix-tree order: a depth-first walk of the tree of their shareable prefixes (children
 * in order of first appearance), so that rows sharing the longest prefix are next to each other;
 * rows whose prefix ends at the same node longest first (as first-fit-decreasing takes them).
 */
function prefixTreeOrder(rows: readonly PackableRow[], shareable: readonly number[]): number[] {
  const root = newNode([], 0, 0);
  rows.forEach((row, i) => insert(root, row.tokens, shareable[i], -1, () => {}));
  // Every insert split at its row's limit, so each row's prefix ends exactly at a node.
  const endsAt = new Map<TrieNode, number[]>();
  rows.forEach((row, i) => {
    let end = root;
    walk(root, row.tokens, shareable[i], (node) => (end = node));
    const list = endsAt.get(end);
    if (list) list.push(i);
    else endsAt.set(end, [i]);
  });
  const order: number[] = [];
  const stack: TrieNode[] = [root];
  while (stack.length > 0) {
    const node = stack.pop()!;
    const here = endsAt.get(node) ?? [];
    here.sort((a, b) => rows[b].tokens.length - rows[a].tokens.length || a - b);
    order.push(...here);
    stack.push(...[...node.children.values()].reverse());
  }
  return order;
}

/** Writes one micro-batch: members in input order, each sharing what earlier ones placed. */
function writeSharedRow(
  rows: readonly PackableRow[],
  shareable: readonly number[],
  members: readonly number[],
  oversized: boolean,
): MicroBatch {
  // First pass: how much of each member is shared with the members before it, and where.
  const root = newNode([], 0, 0);
  const placed: MemberPlacement[] = [];
  let total = 0;
  for (const i of members) {
    const start = total;
    const { matched, last } = insert(root, rows[i].tokens, shareable[i], start, () => {});
    // The packed-row index of the last shared token (−1: nothing shared, a new root).
    const lastIndex = matched > 0 ? last.row + (matched - 1 - last.from) : -1;
    placed.push({ shared: matched, last: lastIndex, start });
    total += rows[i].tokens.length - matched;
  }

  return writeMicroBatch(rows, members, placed, total, oversized, true);
}
