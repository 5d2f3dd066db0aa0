/**
 * The `tree` strategy: one prefix tree per rollout. Shared prefixes are stored once, prompts
 * that diverge branch, and every call's exact `prompt ∥ response` is a root-to-node path.
 * Token k attends to its ancestors (`parent`, -1 for a root): the trainer needs tree attention.
 *
 * @module
 */
import type { Sample } from "../schema.ts";
import type { CallPlacement } from "./schema.ts";
import type { SampleMeta } from "./build.ts";
import { commonPrefixConcat } from "./token_seq.ts";
import type { ValidCall } from "./validate.ts";

/** A rollout's tree sample and where each call's response sits in it. */
export interface TreeResult {
  sample: Sample;
  /** One per call, `sample_index` 0. */
  placements: CallPlacement[];
}

/**
 * Packs the calls (seq order) into one prefix tree. Each call shares the longest prefix of its
 * prompt already in the tree; its response always gets fresh nodes, so every response token is
 * stored (and trained) exactly once, with its own behaviour logprob.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { buildTree, treePath } from "./tree.ts";
 * import type { ValidCall } from "./validate.ts";
 * const call = (seq: number, prompt: number[], response: number[]): ValidCall => ({
 *   seq, attempt_id: "a", rollout_id: "r", request: {
 *     flavor: "generate", request: {}, prompt_token_ids: Uint32Array.from(prompt),
 *     response_token_ids: Uint32Array.from(response),
 *     response_logprobs: new Float32Array(response.length), policy_version: 0,
 *     finish_reason: null, upstream: null, latency_ms: 0, retry_count: 0, http_status: 200,
 *     error: null, segment: null, mode: "faithful", client_disconnected: false,
 *   },
 * });
 * const { sample, placements } = buildTree([call(1, [1, 2], [3]), call(2, [1, 2, 4], [5])], {
 *   rollout_id: "r", group_id: "g", reward: 0, strategy: "tree",
 * });
 * assert.equal(sample.tokens.length, 5); // the shared [1, 2] once
 * const p = placements[1];
 * assert.deepEqual(
 *   treePath(sample, p.response_start + p.response_length - 1),
 *   new Uint32Array([1, 2, 4, 5]),
 * );
 * ```
 */
export function buildTree(calls: readonly ValidCall[], meta: SampleMeta): TreeResult {
  const n = calls.length;
  const from = new Int32Array(n).fill(-1);
  const shared = new Int32Array(n);
  const start = new Int32Array(n);
  let total = 0;
  for (let i = 0; i < n; i++) {
    const p = calls[i].request.prompt_token_ids;
    let best = -1;
    let bestLen = 0;
    for (let j = i - 1; j >= 0 && bestLen < p.length; j--) {
      const r = calls[j].request;
      // A call whose whole sequence is no longer than the best match cannot beat it.
      if (r.prompt_token_ids.length + r.response_token_ids.length <= bestLen) continue;
      const len = Math.min(
        p.length,
        commonPrefixConcat(p, r.prompt_token_ids, r.response_token_ids),
      );
      if (len > bestLen) {
        best = j;
        bestLen = len;
      }
    }
    from[i] = best;
    shared[i] = bestLen;
    start[i] = total;
    total += p.length + calls[i].request.response_token_ids.length - bestLen;
  }

  const nodeAt = (call: number, depth: number): number => {
    let j = call;
    while (depth < shared[j]) j = from[j];
    return start[j] + depth - shared[j];
  };

  const tokens = new Uint32Array(total);
  const parent = new Int32Array(total);
  const mask = new Uint8Array(total);
  const logprobs = new Float32Array(total);
  const placements: CallPlacement[] = [];
  let version = Infinity;
  for (let i = 0; i < n; i++) {
    const { prompt_token_ids: p, response_token_ids: r, response_logprobs: lp } = calls[i].request;
    const s = shared[i];
    let at = start[i];
    tokens.set(p.subarray(s), at);
    const responseStart = at + p.length - s;
    tokens.set(r, responseStart);
    mask.fill(1, responseStart, responseStart + r.length);
    logprobs.set(lp, responseStart);
    parent[at] = s === 0 ? -1 : nodeAt(from[i], s - 1);
    for (at++; at < responseStart + r.length; at++) parent[at] = at - 1;
    placements.push({
      seq: calls[i].seq,
      sample_index: 0,
      response_start: responseStart,
      response_length: r.length,
      prompt_length: p.length,
    });
    version = Math.min(version, calls[i].request.policy_version);
  }
  const sample: Sample = {
    rollout_id: meta.rollout_id,
    group_id: meta.group_id,
    tokens,
    loss_mask: mask,
    rollout_logprobs: logprobs,
    parent,
    reward: meta.reward,
    policy_version: version,
    provenance: {
      request_seqs: calls.map((c) => c.seq),
      split_reason: null,
      strategy: "tree",
      off_policy: false,
      response_starts: placements.map((p) => p.response_start),
    },
  };
  return { sample, placements };
}

/**
 * Node indices of the root-to-`node` path of a tree sample (root first).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { treePathNodes } from "./tree.ts";
 * const sample = { parent: Int32Array.of(-1, 0, 1, 1) };
 * assert.deepEqual(treePathNodes(sample, 3), [0, 1, 3]);
 * ```
 */
export function treePathNodes(sample: Pick<Sample, "parent">, node: number): number[] {
  const parent = sample.parent;
  if (!parent) throw new Error("treePathNodes: the sample has no parent indices (not a tree)");
  if (!Number.isInteger(node) || node < 0 || node >= parent.length) {
    throw new RangeError(`treePathNodes: node ${node} is outside 0..${parent.length - 1}`);
  }
  const path: number[] = [];
  for (let k = node; k !== -1; k = parent[k]) {
    if (path.length > parent.length || parent[k] >= k) {
      throw new Error(`treePathNodes: parent[${k}] = ${parent[k]} is not an earlier node`);
    }
    path.push(k);
  }
  return path.reverse();
}

/**
 * Token ids along the root-to-`node` path of a tree sample. For a call placed at
 * `response_start` with `response_length` ids, the path to its last response node is exactly
 * its `prompt ∥ response`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { treePath } from "./tree.ts";
 * const sample = { tokens: Uint32Array.of(7, 8, 9, 5), parent: Int32Array.of(-1, 0, 1, 1) };
 * assert.deepEqual(treePath(sample, 3), new Uint32Array([7, 8, 5]));
 * ```
 */
export function treePath(sample: Pick<Sample, "tokens" | "parent">, node: number): Uint32Array {
  const nodes = treePathNodes(sample, node);
  const out = new Uint32Array(nodes.length);
  for (let i = 0; i < nodes.length; i++) out[i] = sample.tokens[nodes[i]];
  return out;
}

/**
 * Depth of every node of a tree sample (0 for roots): the position id each token had in the
 * linear sequence it was sampled in, which tree attention needs for rotary positions.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { treeDepths } from "./tree.ts";
 * assert.deepEqual(
 *   treeDepths({ parent: Int32Array.of(-1, 0, 1, 1) }),
 *   new Int32Array([0, 1, 2, 2]),
 * );
 * ```
 */
export function treeDepths(sample: Pick<Sample, "parent">): Int32Array {
  const parent = sample.parent;
  if (!parent) throw new Error("treeDepths: the sample has no parent indices (not a tree)");
  const depth = new Int32Array(parent.length);
  for (let k = 0; k < parent.length; k++) {
    const p = parent[k];
    if (p >= k) throw new Error(`treeDepths: parent[${k}] = ${p} is not an earlier node`);
    depth[k] = p < 0 ? 0 : depth[p] + 1;
  }
  return depth;
}
