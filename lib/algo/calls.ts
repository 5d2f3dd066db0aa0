/**
 * A sample's model calls: under `prefix_merge` one merged sample holds the responses of several
 * calls (`provenance.request_seqs`, each response starting at `provenance.response_starts`).
 * These helpers say which call each trained token came from, for what is measured or optimised
 * per call: GSPO's sequence ratio with `gspo_sequence: "call"`, and rollout–training alignment
 * per call.
 *
 * A trained token belongs to the call whose response starts last at or before it (the tokens
 * between two responses — tool results, the next prompt — are context, never trained).
 *
 * @module
 */
import { type Sample, ValidationError } from "../schema.ts";
import type { AlignmentMetrics } from "./schema.ts";
import { alignmentMetrics } from "./alignment.ts";

/**
 * Per token, the index (into `provenance.request_seqs`) of the call it belongs to; −1 before
 * the first response.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { callIndex } from "./calls.ts";
 * const sample = {
 *   tokens: new Uint32Array(7), loss_mask: new Uint8Array([0, 1, 1, 0, 0, 1, 1]),
 *   provenance: { request_seqs: [11, 14], response_starts: [1, 5] },
 * };
 * assert.deepEqual(Array.from(callIndex(sample)), [-1, 0, 0, 0, 0, 1, 1]);
 * ```
 */
export function callIndex(
  sample: Pick<Sample, "tokens"> & {
    provenance: Pick<Sample["provenance"], "request_seqs" | "response_starts">;
  },
): Int32Array {
  const { request_seqs: seqs, response_starts: starts } = sample.provenance;
  if (starts.length !== seqs.length) {
    throw new ValidationError("provenance.response_starts", [
      `provenance.response_starts: expected one start per call (${seqs.length}), got ` +
      `${starts.length}`,
    ]);
  }
  const n = sample.tokens.length;
  const order = starts.map((start, k) => ({ start, k })).sort((a, b) => a.start - b.start);
  const out = new Int32Array(n).fill(-1);
  order.forEach(({ start, k }, j) => {
    const end = j + 1 < order.length ? order[j + 1].start : n;
    out.fill(k, Math.max(0, start), Math.min(n, end));
  });
  return out;
}

/** Alignment of one model call's trained tokens. */
export interface CallAlignment {
  /** The call's `seq` (its model_request event). */
  request_seq: number;
  metrics: AlignmentMetrics;
}

/**
 * {@link alignmentMetrics} per model call of a sample: the call's trained tokens, behaviour
 * logprobs (`rollout_logprobs`) against the trainer's (`trainerLogprobs`, one per sample token).
 * `include(seq)` picks the calls to measure (the loop measures calls sampled at exactly the
 * version being trained; for others the policy moved in between).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { callAlignments } from "./calls.ts";
 * const sample = {
 *   tokens: new Uint32Array(6), loss_mask: new Uint8Array([0, 1, 1, 0, 1, 1]),
 *   rollout_logprobs: new Float32Array([0, -0.5, -1, 0, -0.25, -2]),
 *   provenance: { request_seqs: [3, 7], response_starts: [1, 4] },
 * };
 * const trainer = [0, -0.5, -1, 0, -2, -0.25]; // call 7's two tokens swapped
 * const [first, second] = callAlignments(sample, trainer);
 * assert.equal(first.request_seq, 3);
 * assert.equal(first.metrics.pearson_prob, 1);
 * assert.equal(second.metrics.pearson_prob, -1);
 * assert.equal(second.metrics.max_abs_dlogprob, 1.75);
 * ```
 */
export function callAlignments(
  sample: Pick<Sample, "tokens" | "loss_mask" | "rollout_logprobs"> & {
    provenance: Pick<Sample["provenance"], "request_seqs" | "response_starts">;
  },
  trainerLogprobs: ArrayLike<number>,
  include: (requestSeq: number) => boolean = () => true,
): CallAlignment[] {
  const n = sample.tokens.length;
  if (trainerLogprobs.length !== n) {
    throw new ValidationError("trainerLogprobs", [
      `trainerLogprobs: expected ${n} values (one per sample token), got ${trainerLogprobs.length}`,
    ]);
  }
  const index = callIndex(sample);
  const seqs = sample.provenance.request_seqs;
  const perCall = seqs.map(() => ({ rollout: [] as number[], trainer: [] as number[] }));
  for (let t = 0; t < n; t++) {
    const k = index[t];
    if (k < 0 || !sample.loss_mask[t]) continue;
    perCall[k].rollout.push(sample.rollout_logprobs[t]);
    perCall[k].trainer.push(trainerLogprobs[t]);
  }
  const out: CallAlignment[] = [];
  perCall.forEach((c, k) => {
    if (c.rollout.length === 0 || !include(seqs[k])) return;
    out.push({
      request_seq: seqs[k],
      metrics: alignmentMetrics([{ rollout_logprobs: c.rollout, trainer_logprobs: c.trainer }]),
    });
  });
  return out;
}
