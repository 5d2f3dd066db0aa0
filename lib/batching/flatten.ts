/**
 * B_train: samples flattened into training rows (SPEC §7). Every row keeps its rollout id and
 * group id, and carries its per-token advantages and loss weights unchanged, so flattening
 * never changes rollout membership or weights.
 *
 * @module
 */
import { parseOrThrow, type Sample, type TrainingRow, TrainingRowSchema } from "../schema.ts";
import { assertSamples } from "../algo/validate.ts";

/**
 * Converts one sample (with `advantage` and `loss_weight` filled) into a JSON-ready row.
 * Float32 values widen to float64 exactly, so no weight changes on the way.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { sampleToRow } from "./flatten.ts";
 * const row = sampleToRow({
 *   rollout_id: "r", group_id: "g", reward: 1, tokens: new Uint32Array([5, 6]),
 *   loss_mask: new Uint8Array([0, 1]), rollout_logprobs: new Float32Array([0, -0.5]),
 *   advantage: new Float32Array([1, 1]), loss_weight: new Float32Array([0, 1]),
 *   policy_version: 0,
 *   provenance: { request_seqs: [1], split_reason: null, strategy: "prefix_merge",
 *     off_policy: false, response_starts: [1] },
 * });
 * assert.deepEqual(row.tokens, [5, 6]);
 * ```
 */
export function sampleToRow(sample: Sample): TrainingRow {
  assertSamples([sample], { advantage: true, loss_weight: true }, "sample");
  return toRow(sample);
}

/** Copies a typed array into a plain array (a preallocated loop is ~5× faster than Array.from). */
function toArray<T extends number>(src: ArrayLike<number>): T[] {
  const out = new Array<T>(src.length);
  for (let i = 0; i < src.length; i++) out[i] = src[i] as T;
  return out;
}

function toRow(s: Sample): TrainingRow {
  const row: TrainingRow = {
    rollout_id: s.rollout_id,
    group_id: s.group_id,
    tokens: toArray(s.tokens),
    loss_mask: toArray<0 | 1>(s.loss_mask),
    advantages: toArray(s.advantage as Float32Array),
    loss_weights: toArray(s.loss_weight as Float32Array),
    rollout_logprobs: toArray(s.rollout_logprobs),
  };
  if (s.parent) row.parent = toArray(s.parent);
  if (s.temperatures) row.temperatures = toArray(s.temperatures);
  return row;
}

/**
 * Flattens a batch of samples into B_train rows, in input order: row i is sample i.
 * Fails with a field-naming error when a sample lacks `advantage` or `loss_weight`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { flattenBatch } from "./flatten.ts";
 * assert.deepEqual(flattenBatch([]), []);
 * ```
 */
export function flattenBatch(samples: readonly Sample[]): TrainingRow[] {
  assertSamples(samples, { advantage: true, loss_weight: true });
  return samples.map(toRow);
}

/**
 * Validates rows received as JSON (from a file or the wire) and returns them typed; errors name
 * the row and field (`rows[3].loss_weights: expected 12 values (one per token), got 11`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseTrainingRows } from "./flatten.ts";
 * const rows = parseTrainingRows([{
 *   rollout_id: "r", group_id: "g", tokens: [1], loss_mask: [1], advantages: [0.5],
 *   loss_weights: [1], rollout_logprobs: [-0.1],
 * }]);
 * assert.equal(rows.length, 1);
 * ```
 */
export function parseTrainingRows(json: unknown): TrainingRow[] {
  if (!Array.isArray(json)) {
    return parseOrThrow(TrainingRowSchema.array(), json, "rows");
  }
  return json.map((row, i) => parseOrThrow(TrainingRowSchema, row, `rows[${i}]`));
}

/**
 * Total tokens and trained tokens of each rollout, in order of first appearance, with the
 * indices of its rows: the unit the step planner and balancers work with.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { rolloutUnits } from "./flatten.ts";
 * const units = rolloutUnits([
 *   { rollout_id: "a", tokens: [1, 2], loss_mask: [0, 1] },
 *   { rollout_id: "a", tokens: [3], loss_mask: [1] },
 * ]);
 * assert.deepEqual(units, [{ rollout_id: "a", tokens: 3, trained_tokens: 2, rows: [0, 1] }]);
 * ```
 */
export function rolloutUnits(
  rows: readonly { rollout_id: string; tokens: ArrayLike<number>; loss_mask: ArrayLike<number> }[],
): RolloutUnit[] {
  const byId = new Map<string, RolloutUnit>();
  rows.forEach((row, i) => {
    let unit = byId.get(row.rollout_id);
    if (!unit) {
      unit = { rollout_id: row.rollout_id, tokens: 0, trained_tokens: 0, rows: [] };
      byId.set(row.rollout_id, unit);
    }
    unit.tokens += row.tokens.length;
    for (let t = 0; t < row.loss_mask.length; t++) unit.trained_tokens += row.loss_mask[t];
    unit.rows.push(i);
  });
  return [...byId.values()];
}

/** A rollout as the planners see it: its token counts and its rows. */
export interface RolloutUnit {
  rollout_id: string;
  tokens: number;
  trained_tokens: number;
  /** Indices of the rollout's rows in the batch. */
  rows: number[];
}
