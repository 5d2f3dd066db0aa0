/**
 * Micro-batch packing under a token budget (sequence packing with position resets).
 *
 * Rows are concatenated into one row per micro-batch; `segment_starts` marks where each packed
 * sequence begins, and the worker resets positions and blocks attention there, so a packed row
 * computes exactly what its rows would compute one by one. Weights are copied as they are:
 * they came from the whole batch's denominators, so packing never changes the loss.
 *
 * @module
 */
import { parseOrThrow, type Sample, type TrainingRow, ValidationError } from "../schema.ts";
import {
  type MicroBatch,
  type PackedSegment,
  type PackOptions,
  PackOptionsSchema,
  type PackOrder,
} from "./schema.ts";

/**
 * What the packer reads: a {@link TrainingRow}, or a zero-copy view of a sample's typed arrays
 * ({@link sampleRowView}), so a plan never has to materialise unpacked JSON rows.
 */
export interface PackableRow {
  rollout_id: string;
  group_id: string;
  tokens: ArrayLike<number>;
  loss_mask: ArrayLike<number>;
  advantages: ArrayLike<number>;
  loss_weights: ArrayLike<number>;
  rollout_logprobs: ArrayLike<number>;
  parent?: ArrayLike<number>;
  segment_starts?: readonly number[];
  /** Sampling temperature per token (absent: all 1). */
  temperatures?: ArrayLike<number>;
}

/**
 * A zero-copy {@link PackableRow} view of a sample with `advantage` and `loss_weight` filled.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { sampleRowView } from "./packing.ts";
 * const view = sampleRowView({
 *   rollout_id: "r", group_id: "g", reward: 1, tokens: new Uint32Array([5, 6]),
 *   loss_mask: new Uint8Array([0, 1]), rollout_logprobs: new Float32Array([0, -0.5]),
 *   advantage: new Float32Array([1, 1]), loss_weight: new Float32Array([0, 1]),
 *   policy_version: 0,
 *   provenance: { request_seqs: [1], split_reason: null, strategy: "prefix_merge",
 *     off_policy: false, response_starts: [1] },
 * });
 * assert.equal(view.loss_weights[1], 1);
 * ```
 */
export function sampleRowView(sample: Sample): PackableRow {
  const view: PackableRow = {
    rollout_id: sample.rollout_id,
    group_id: sample.group_id,
    tokens: sample.tokens,
    loss_mask: sample.loss_mask,
    advantages: sample.advantage ?? new Float32Array(0),
    loss_weights: sample.loss_weight ?? new Float32Array(0),
    rollout_logprobs: sample.rollout_logprobs,
  };
  if (sample.parent) view.parent = sample.parent;
  if (sample.temperatures) view.temperatures = sample.temperatures;
  return view;
}

/**
 * Packs rows into micro-batches of at most `token_budget` tokens each.
 *
 * `first_fit_decreasing` (default) places rows longest first into the first micro-batch with
 * room, which keeps their number close to the minimum; `sequential` fills micro-batches in input
 * order. A row longer than the budget is never cut: it gets a micro-batch of its own, marked
 * `oversized`. Within a micro-batch, segments keep their input order.
 *
 * Rows with tree `parent`s can be packed with linear rows: the packed row then carries
 * `parent` for every token (tree parents shifted by the segment's offset, linear rows as chains,
 * −1 at each segment start).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { packMicroBatches } from "./packing.ts";
 * const row = (n: number) => ({
 *   rollout_id: `r${n}`, group_id: "g", tokens: new Array(n).fill(7),
 *   loss_mask: new Array(n).fill(1), advantages: new Array(n).fill(1),
 *   loss_weights: new Array(n).fill(0.01), rollout_logprobs: new Array(n).fill(-1),
 * });
 * const mbs = packMicroBatches([row(6), row(5), row(4), row(3)], { token_budget: 9 });
 * assert.deepEqual(mbs.map((m) => m.row.segment_starts), [[0, 6], [0, 5]]);
 * ```
 */
export function packMicroBatches(
  rows: readonly PackableRow[],
  options: PackOptions,
): MicroBatch[] {
  const { token_budget: budget, order } = checkPacking(rows, options);
  const bins: { members: number[]; used: number; oversized: boolean }[] = [];
  if (order === "sequential") {
    let open: { members: number[]; used: number; oversized: boolean } | null = null;
    rows.forEach((row, i) => {
      const n = row.tokens.length;
      if (n > budget) {
        bins.push({ members: [i], used: n, oversized: true });
        return;
      }
      if (!open || open.used + n > budget) {
        open = { members: [], used: 0, oversized: false };
        bins.push(open);
      }
      open.members.push(i);
      open.used += n;
    });
  } else {
    const order = rows.map((_, i) => i).sort((a, b) =>
      rows[b].tokens.length - rows[a].tokens.length || a - b
    );
    for (const i of order) {
      const n = rows[i].tokens.length;
      if (n > budget) {
        bins.push({ members: [i], used: n, oversized: true });
        continue;
      }
      const bin = bins.find((b) => !b.oversized && b.used + n <= budget);
      if (bin) {
        bin.members.push(i);
        bin.used += n;
      } else {
        bins.push({ members: [i], used: n, oversized: false });
      }
    }
    for (const b of bins) b.members.sort((x, y) => x - y);
    bins.sort((x, y) => x.members[0] - y.members[0]);
  }
  return bins.map((b) => packRows(rows, b.members, b.oversized));
}

/**
 * The checked options of a packing of `rows` (defaults filled in), after
 * {@link checkPackableRows} has checked the rows.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkPacking } from "./packing.ts";
 * assert.equal(checkPacking([], { token_budget: 8 }).order, "first_fit_decreasing");
 * assert.throws(() => checkPacking([], { token_budget: 0 }), /token_budget/);
 * ```
 */
export function checkPacking(
  rows: readonly PackableRow[],
  options: PackOptions,
): { token_budget: number; order: PackOrder } {
  const opts = parseOrThrow(PackOptionsSchema, options, "options");
  checkPackableRows(rows);
  return opts;
}

/**
 * Checks rows before packing: unpacked (no `segment_starts`), non-empty, and one value per
 * token in every per-token array. Throws a {@link ValidationError} naming the field
 * (`rows[2].loss_mask`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkPackableRows } from "./packing.ts";
 * const row = {
 *   rollout_id: "r", group_id: "g", tokens: [1, 2], loss_mask: [0, 1], advantages: [1, 1],
 *   loss_weights: [0, 1], rollout_logprobs: [0, -1],
 * };
 * assert.doesNotThrow(() => checkPackableRows([row]));
 * assert.throws(
 *   () => checkPackableRows([{ ...row, loss_mask: [1] }]),
 *   /rows\[0\]\.loss_mask: expected 2 values/,
 * );
 * ```
 */
export function checkPackableRows(rows: readonly PackableRow[]): void {
  rows.forEach((row, i) => {
    if (row.segment_starts !== undefined) {
      throw new ValidationError(`rows[${i}].segment_starts`, [
        `rows[${i}].segment_starts: row is already packed; pack unpacked rows`,
      ]);
    }
    const n = row.tokens.length;
    if (n === 0) {
      throw new ValidationError(`rows[${i}].tokens`, [`rows[${i}].tokens: row has no tokens`]);
    }
    for (const key of ["loss_mask", "advantages", "loss_weights", "rollout_logprobs"] as const) {
      if (row[key].length !== n) {
        throw new ValidationError(`rows[${i}].${key}`, [
          `rows[${i}].${key}: expected ${n} values (one per token), got ${row[key].length}`,
        ]);
      }
    }
    if (row.parent !== undefined && row.parent.length !== n) {
      throw new ValidationError(`rows[${i}].parent`, [
        `rows[${i}].parent: expected ${n} values (one per token), got ${row.parent.length}`,
      ]);
    }
  });
}

function packRows(
  rows: readonly PackableRow[],
  members: readonly number[],
  oversized: boolean,
): MicroBatch {
  const placed: MemberPlacement[] = [];
  let total = 0;
  for (const i of members) {
    placed.push({ shared: 0, last: -1, start: total });
    total += rows[i].tokens.length;
  }
  return writeMicroBatch(rows, members, placed, total, oversized, false);
}

/**
 * Where a member of a micro-batch goes: its first `shared` tokens are already in the row (the
 * last of them at index `last`, −1 when none), the rest is written from `start` on.
 */
export interface MemberPlacement {
  shared: number;
  last: number;
  start: number;
}

/**
 * Writes one micro-batch row of `total` tokens from its members and their placements (the
 * writer of both {@link packMicroBatches} and the shared-prefix packer). With no token shared
 * it is a plain packed row (`segment_starts`, `parent` only when a member is a tree); otherwise
 * a tree row with `parent` and one `sequence_ids` entry per member. `withShared` records each
 * segment's `shared` count.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { writeMicroBatch } from "./packing.ts";
 * const row = (tokens: number[]) => ({
 *   rollout_id: "r", group_id: "g", tokens, loss_mask: tokens.map(() => 0),
 *   advantages: tokens.map(() => 0), loss_weights: tokens.map(() => 0),
 *   rollout_logprobs: tokens.map(() => 0),
 * });
 * const mb = writeMicroBatch(
 *   [row([1, 2, 3]), row([1, 2, 4])],
 *   [0, 1],
 *   [{ shared: 0, last: -1, start: 0 }, { shared: 2, last: 1, start: 3 }],
 *   4,
 *   false,
 *   true,
 * );
 * assert.deepEqual(mb.row.tokens, [1, 2, 3, 4]);
 * assert.deepEqual(mb.row.parent, [-1, 0, 1, 1]);
 * ```
 */
export function writeMicroBatch(
  rows: readonly PackableRow[],
  members: readonly number[],
  placed: readonly MemberPlacement[],
  total: number,
  oversized: boolean,
  withShared: boolean,
): MicroBatch {
  const tokens = new Array<number>(total);
  const lossMask = new Array<0 | 1>(total);
  const advantages = new Array<number>(total);
  const weights = new Array<number>(total);
  const logprobs = new Array<number>(total);
  const parent = new Array<number>(total);
  const sequenceIds = new Array<number>(total);
  const temperatures = new Array<number>(total);
  let anyTemperature = false;
  const segments: PackedSegment[] = [];
  let anyShared = false;
  let anyParent = false;
  members.forEach((i, k) => {
    const row = rows[i];
    const { shared, last, start } = placed[k];
    const length = row.tokens.length - shared;
    anyShared ||= shared > 0;
    anyParent ||= row.parent !== undefined;
    segments.push({
      source: i,
      rollout_id: row.rollout_id,
      group_id: row.group_id,
      start,
      length,
      had_parent: row.parent !== undefined,
      ...(withShared ? { shared } : {}),
    });
    const p = row.parent;
    const temps = row.temperatures;
    anyTemperature ||= temps !== undefined;
    for (let t = 0; t < length; t++) {
      const at = start + t;
      const from = shared + t;
      tokens[at] = row.tokens[from];
      lossMask[at] = row.loss_mask[from] as 0 | 1;
      advantages[at] = row.advantages[from];
      weights[at] = row.loss_weights[from];
      logprobs[at] = row.rollout_logprobs[from];
      sequenceIds[at] = k;
      temperatures[at] = temps ? temps[from] : 1;
      if (p) parent[at] = p[from] < 0 ? -1 : p[from] + start;
      else parent[at] = t > 0 ? at - 1 : last;
    }
  });

  const first = rows[members[0]];
  const row: TrainingRow = {
    rollout_id: first.rollout_id,
    group_id: first.group_id,
    tokens,
    loss_mask: lossMask,
    advantages,
    loss_weights: weights,
    rollout_logprobs: logprobs,
  };
  if (anyTemperature) row.temperatures = temperatures;
  if (anyShared) {
    row.parent = parent;
    row.sequence_ids = sequenceIds;
  } else {
    // Nothing shared: the plain packed row (segment starts; parents only for tree members).
    row.segment_starts = segments.map((s) => s.start);
    if (anyParent) row.parent = parent;
  }
  return { row, segments, tokens: total, oversized };
}

/**
 * The packed-row index of every token of one segment's source row: `start + t` for a plainly
 * packed segment; for a shared-prefix segment (`PackedSegment.shared`) its leading shared
 * tokens are the ancestors of its first own token, found by walking `row.parent` up.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { packMicroBatches, segmentTokenIndex } from "./packing.ts";
 * const row = {
 *   rollout_id: "r", group_id: "g", tokens: [1, 2], loss_mask: [0, 1] as (0 | 1)[],
 *   advantages: [1, 1], loss_weights: [0, 1], rollout_logprobs: [0, -1],
 * };
 * const [mb] = packMicroBatches([row, row], { token_budget: 8 });
 * assert.deepEqual(segmentTokenIndex(mb, mb.segments[1]), new Int32Array([2, 3]));
 * ```
 */
export function segmentTokenIndex(mb: MicroBatch, segment: PackedSegment): Int32Array {
  const shared = segment.shared ?? 0;
  const out = new Int32Array(shared + segment.length);
  for (let t = 0; t < segment.length; t++) out[shared + t] = segment.start + t;
  if (shared > 0) {
    const parent = mb.row.parent;
    if (!parent) {
      throw new ValidationError("row.parent", [
        "row.parent: a segment with shared tokens needs the packed row's parents",
      ]);
    }
    let p = parent[segment.start];
    for (let t = shared - 1; t >= 0; t--) {
      if (p < 0) {
        throw new ValidationError("row.parent", [
          `row.parent: segment of source ${segment.source} has fewer than ${shared} ancestors`,
        ]);
      }
      out[t] = p;
      p = parent[p];
    }
  }
  return out;
}

/**
 * Splits a micro-batch back into its source rows (the inverse of packing), e.g. to check a
 * worker's per-row results or to run a worker without packing support.
 *
 * Shared-prefix micro-batches (`packSharedPrefix`) unpack to the same tokens and loss
 * masks; a shared token's advantage, weight and behaviour logprob are those of the segment that
 * placed it (they are never read: shared tokens are untrained).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { packMicroBatches, unpackMicroBatch } from "./packing.ts";
 * const row = {
 *   rollout_id: "r", group_id: "g", tokens: [1, 2], loss_mask: [0, 1] as (0 | 1)[],
 *   advantages: [1, 1], loss_weights: [0, 1], rollout_logprobs: [0, -1],
 * };
 * const [mb] = packMicroBatches([row, row], { token_budget: 8 });
 * assert.equal(unpackMicroBatch(mb).length, 2);
 * ```
 */
export function unpackMicroBatch(mb: MicroBatch): TrainingRow[] {
  const { row } = mb;
  return mb.segments.map((seg) => {
    if (seg.shared) {
      // Shared-prefix segments are always linear samples (tree rows are never shared).
      const index = segmentTokenIndex(mb, seg);
      const pick = <T>(values: readonly T[]) => Array.from(index, (i) => values[i]);
      return {
        rollout_id: seg.rollout_id,
        group_id: seg.group_id,
        tokens: pick(row.tokens),
        loss_mask: pick(row.loss_mask),
        advantages: pick(row.advantages),
        loss_weights: pick(row.loss_weights),
        rollout_logprobs: pick(row.rollout_logprobs),
      };
    }
    const end = seg.start + seg.length;
    const out: TrainingRow = {
      rollout_id: seg.rollout_id,
      group_id: seg.group_id,
      tokens: row.tokens.slice(seg.start, end),
      loss_mask: row.loss_mask.slice(seg.start, end),
      advantages: row.advantages.slice(seg.start, end),
      loss_weights: row.loss_weights.slice(seg.start, end),
      rollout_logprobs: row.rollout_logprobs.slice(seg.start, end),
    };
    if (seg.had_parent && row.parent) {
      out.parent = row.parent.slice(seg.start, end).map((p) => (p < 0 ? -1 : p - seg.start));
    }
    return out;
  });
}
