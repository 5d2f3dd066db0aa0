/**
 * Behaviour corrections for the training–inference mismatch, mirroring the worker's
 * `behaviour_correction` (`reins_worker/losses.py`): the detached per-token weight c_t that
 * multiplies the policy-gradient term because the engine that sampled (μ, the row's
 * `rollout_logprobs`) is not the trainer's π_old. With ρ_t = exp(old_t − behaviour_t):
 *
 * - `token_ratio_band` [lo, hi] (IcePop): c_t = 0 where ρ_t is outside the band;
 * - `seq_is_band` [lo, hi] (masked sequence-level IS): c_t = 0 on every token of a sequence
 *   whose geometric-mean ratio g = exp(mean over its trained tokens of log ρ) is outside;
 * - `tis_cap` C (truncated IS): the kept tokens weigh min(ρ_t, C); without it, 1.
 *
 * Bands include their ends. {@link policyLoss} (`./losses.ts`) applies it; it is exported for
 * notebooks that ask what a correction would cost on measured tokens.
 *
 * @module
 */
import { type LossConfig, ValidationError } from "../schema.ts";

/** A read-only per-token array. */
type Values = ArrayLike<number>;

/** The loss config fields a behaviour correction reads. */
export type CorrectionConfig = Pick<LossConfig, "tis_cap" | "seq_is_band" | "token_ratio_band">;

/** Per-token weights of {@link behaviourCorrection} and what they cost. */
export interface BehaviourCorrection {
  /** c_t per token (1 on context tokens, whose loss is 0 anyway). */
  weight: Float64Array;
  /** Trained tokens with c_t = 0 (masked by either band). */
  masked_tokens: number;
  /** Sequences (with trained tokens) the sequence band masked. */
  masked_sequences: number;
  /** (Σc)² / (n Σc²) over the n trained tokens: 1 when all weigh the same, 0 when all masked. */
  ess: number;
}

/** True when `cfg` asks for any behaviour correction. */
export function hasCorrection(cfg: CorrectionConfig): boolean {
  return cfg.tis_cap !== undefined || cfg.seq_is_band !== undefined ||
    cfg.token_ratio_band !== undefined;
}

/**
 * The behaviour-correction weights of one row. With `seq_is_band` it needs each token's
 * sequence geometric-mean ratio g (`sequence_ratio`, as `gspoRatios({logprobs: old,
 * old_logprobs: behaviour, …})` computes it) and its sequence (`sequence_index`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { behaviourCorrection } from "./correction.ts";
 * // ρ = [e^1, 1, e^-0.1]: IcePop's [0.5, 2] masks the first token only.
 * const out = behaviourCorrection({
 *   old_logprobs: [0, -1, -1.1], behaviour_logprobs: [-1, -1, -1], loss_mask: [1, 1, 1],
 * }, { token_ratio_band: [0.5, 2] });
 * assert.deepEqual(Array.from(out.weight), [0, 1, 1]);
 * assert.equal(out.masked_tokens, 1);
 * assert.ok(Math.abs(out.ess - 2 / 3) < 1e-12); // (0+1+1)² / (3 · 2)
 * ```
 */
export function behaviourCorrection(
  input: {
    old_logprobs: Values;
    behaviour_logprobs: Values;
    loss_mask: Values;
    /** Each token's sequence geometric-mean ratio g (with `seq_is_band`). */
    sequence_ratio?: Values;
    /** Each token's sequence (with `seq_is_band`, to count masked sequences). */
    sequence_index?: Values;
  },
  cfg: CorrectionConfig,
): BehaviourCorrection {
  const n = input.old_logprobs.length;
  const perToken = ["behaviour_logprobs", "loss_mask", "sequence_ratio", "sequence_index"] as const;
  for (const key of perToken) {
    const values = input[key];
    if (values !== undefined && values.length !== n) {
      throw new ValidationError(key, [
        `${key}: expected ${n} values (one per token), got ${values.length}`,
      ]);
    }
  }
  if (cfg.seq_is_band !== undefined) {
    for (const key of ["sequence_ratio", "sequence_index"] as const) {
      if (input[key] === undefined) {
        throw new ValidationError(key, [`${key}: required with seq_is_band (one per token)`]);
      }
    }
  }
  const inside = (x: number, band: readonly [number, number]) => x >= band[0] && x <= band[1];
  const weight = new Float64Array(n).fill(1);
  const maskedSequences = new Set<number>();
  let masked = 0;
  let trained = 0;
  let sum = 0;
  let square = 0;
  for (let t = 0; t < n; t++) {
    if (!input.loss_mask[t]) continue;
    trained += 1;
    const rho = Math.exp(input.old_logprobs[t] - input.behaviour_logprobs[t]);
    let keep = cfg.token_ratio_band === undefined || inside(rho, cfg.token_ratio_band);
    if (cfg.seq_is_band !== undefined) {
      const g = input.sequence_ratio![t];
      if (!inside(g, cfg.seq_is_band)) {
        keep = false;
        maskedSequences.add(input.sequence_index![t]);
      }
    }
    const c = !keep ? 0 : cfg.tis_cap !== undefined ? Math.min(rho, cfg.tis_cap) : 1;
    weight[t] = c;
    if (!keep) masked += 1;
    sum += c;
    square += c * c;
  }
  return {
    weight,
    masked_tokens: masked,
    masked_sequences: maskedSequences.size,
    ess: trained === 0 ? 1 : square > 0 ? (sum * sum) / (trained * square) : 0,
  };
}
