/**
 * Reference per-token policy losses, in TypeScript, mirroring the PyTorch worker
 * (`lib/trainer/worker/losses.py`) and reading the same config (`LossConfigSchema`).
 *
 * They exist for cross-checks (`tests/algo_losses_worker_test.ts` runs both on the same inputs)
 * and for notebooks; they are never on the training hot path. Every function takes per-token
 * arrays and returns per-token values; the batch loss is `Σ loss_weight · loss`
 * ({@link weightedSum}).
 *
 * Notation: `logprobs` = the policy being trained (π_θ), `old_logprobs` = π_old, the policy the
 * ratio is taken against, `behaviour_logprobs` = μ, the logprobs the inference engine reported
 * while sampling (a row's `rollout_logprobs`).
 *
 * Decoupled PPO (`old_logprobs: "recompute"` with `tis_cap`) keeps the three apart: the ratio
 * r = π_θ / π_prox is clipped against the proximal policy π_prox (the policy at the start of the
 * update, computed once by its first pass in the trainer's own numerics), and the behaviour
 * weight min(π_prox / μ, tis_cap) corrects for the samples having been drawn by μ. With
 * `old_logprobs: "rollout"`, π_old = μ and the weight is 1.
 *
 * @module
 */
import { behaviourCorrection, hasCorrection } from "./correction.ts";
import {
  type LossConfig,
  type LossConfigInput,
  LossConfigSchema,
  parseOrThrow,
  ValidationError,
} from "../schema.ts";

/** A read-only per-token array. */
export type Values = ArrayLike<number>;

function sameLength(name: string, values: Values, n: number): void {
  if (values.length !== n) {
    throw new ValidationError(name, [
      `${name}: expected ${n} values (one per token), got ${values.length}`,
    ]);
  }
}

/** Clip parameters of {@link clippedSurrogate}. */
export interface ClipParams {
  /** Lower clip: the ratio is clipped to at least 1 − low. */
  low: number;
  /** Upper clip: the ratio is clipped to at most 1 + high. */
  high: number;
  /** Dual-clip constant c > 1 (negative advantages only); null/undefined = off. */
  dual_clip?: number | null;
}

/** Per-token output of {@link clippedSurrogate}. */
export interface ClipOutput {
  loss: Float64Array;
  /** 1 where the clipped term was active or the dual clip capped the loss. */
  clipped: Uint8Array;
  /** 1 where the dual clip capped the loss. */
  dual_clipped: Uint8Array;
}

/**
 * The clipped surrogate on given ratios: ℓ = max(−A·r, −A·clip(r, 1 − low, 1 + high)), and with
 * dual clip c, for A < 0, ℓ = min(ℓ, −c·A).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { clippedSurrogate } from "./losses.ts";
 * assert.equal(clippedSurrogate([1.5], [1], { low: 0.2, high: 0.2 }).loss[0], -1.2);
 * ```
 */
export function clippedSurrogate(ratio: Values, advantages: Values, clip: ClipParams): ClipOutput {
  const n = ratio.length;
  sameLength("advantages", advantages, n);
  const loss = new Float64Array(n);
  const clipped = new Uint8Array(n);
  const dual = new Uint8Array(n);
  const lo = 1 - clip.low;
  const hi = 1 + clip.high;
  const c = clip.dual_clip ?? null;
  for (let t = 0; t < n; t++) {
    const a = advantages[t];
    const r = ratio[t];
    const unclipped = -a * r;
    const clippedTerm = -a * Math.min(Math.max(r, lo), hi);
    let l = Math.max(unclipped, clippedTerm);
    if (clippedTerm > unclipped) clipped[t] = 1;
    if (c !== null && a < 0 && l > -a * c) {
      l = -a * c;
      clipped[t] = 1;
      dual[t] = 1;
    }
    loss[t] = l;
  }
  return { loss, clipped, dual_clipped: dual };
}

/**
 * PPO/GRPO clipped loss per token with r = exp(logprob − old_logprob).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ppoClipLoss } from "./losses.ts";
 * const out = ppoClipLoss(
 *   { logprobs: [Math.log(1.5)], old_logprobs: [0], advantages: [1] },
 *   { low: 0.2, high: 0.2 },
 * );
 * assert.equal(out.loss[0], -1.2); // ratio 1.5 clipped to 1.2
 * ```
 */
export function ppoClipLoss(
  input: { logprobs: Values; old_logprobs: Values; advantages: Values },
  clip: ClipParams,
): ClipOutput & { ratio: Float64Array } {
  const n = input.logprobs.length;
  sameLength("old_logprobs", input.old_logprobs, n);
  const ratio = new Float64Array(n);
  for (let t = 0; t < n; t++) ratio[t] = Math.exp(input.logprobs[t] - input.old_logprobs[t]);
  return { ...clippedSurrogate(ratio, input.advantages, clip), ratio };
}

/**
 * GSPO sequence ratios: for each sequence (a row, each `segment_starts` segment of a packed
 * row, or, when given, each distinct `sequence_ids` value — the worker's rule), s = exp(mean
 * over its trained tokens of logprob − old_logprob), broadcast to its tokens (1 on tokens of a
 * sequence without trained tokens). `sequence` lists one ratio per segment, or per id in
 * increasing id order.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { gspoRatios } from "./losses.ts";
 * const input = { logprobs: [0.1, 0.3, 0.5], old_logprobs: [0, 0, 0], loss_mask: [1, 1, 1] };
 * assert.equal(gspoRatios(input).sequence[0], Math.exp(0.3));
 * // Per model call: tokens 0–1 are one call, token 2 another.
 * const calls = gspoRatios({ ...input, sequence_ids: [0, 0, 1] }).sequence;
 * assert.deepEqual(Array.from(calls), [Math.exp(0.2), Math.exp(0.5)]);
 * ```
 */
export function gspoRatios(input: {
  logprobs: Values;
  old_logprobs: Values;
  loss_mask: Values;
  segment_starts?: readonly number[];
  sequence_ids?: Values;
}): { per_token: Float64Array; sequence: Float64Array } {
  const n = input.logprobs.length;
  sameLength("old_logprobs", input.old_logprobs, n);
  sameLength("loss_mask", input.loss_mask, n);
  if (input.sequence_ids !== undefined) return gspoRatiosById(input, input.sequence_ids);
  const starts = checkSegmentStarts(input.segment_starts ?? [0], n);
  const perToken = new Float64Array(n);
  const seq = new Float64Array(starts.length);
  for (let k = 0; k < starts.length; k++) {
    const begin = starts[k];
    const end = k + 1 < starts.length ? starts[k + 1] : n;
    let sum = 0;
    let count = 0;
    for (let t = begin; t < end; t++) {
      if (input.loss_mask[t]) {
        sum += input.logprobs[t] - input.old_logprobs[t];
        count += 1;
      }
    }
    seq[k] = count ? Math.exp(sum / count) : 1;
    perToken.fill(seq[k], begin, end);
  }
  return { per_token: perToken, sequence: seq };
}

function gspoRatiosById(
  input: { logprobs: Values; old_logprobs: Values; loss_mask: Values },
  ids: Values,
): { per_token: Float64Array; sequence: Float64Array } {
  const n = input.logprobs.length;
  sameLength("sequence_ids", ids, n);
  const sums = new Map<number, { sum: number; count: number }>();
  for (let t = 0; t < n; t++) {
    const id = ids[t];
    if (!Number.isInteger(id) || id < 0) {
      throw new ValidationError(`sequence_ids[${t}]`, [
        `sequence_ids[${t}]: expected a non-negative integer, got ${id}`,
      ]);
    }
    const entry = sums.get(id) ?? { sum: 0, count: 0 };
    if (input.loss_mask[t]) {
      entry.sum += input.logprobs[t] - input.old_logprobs[t];
      entry.count += 1;
    }
    sums.set(id, entry);
  }
  const ratioOf = new Map<number, number>();
  for (const [id, e] of sums) ratioOf.set(id, e.count ? Math.exp(e.sum / e.count) : 1);
  const perToken = new Float64Array(n);
  for (let t = 0; t < n; t++) perToken[t] = ratioOf.get(ids[t])!;
  const order = [...ratioOf.keys()].sort((a, b) => a - b);
  return { per_token: perToken, sequence: Float64Array.from(order, (id) => ratioOf.get(id)!) };
}

function checkSegmentStarts(starts: readonly number[], n: number): readonly number[] {
  if (n === 0) return [0];
  if (starts.length === 0 || starts[0] !== 0) {
    throw new ValidationError("segment_starts", ["segment_starts: must start with 0"]);
  }
  for (let k = 1; k < starts.length; k++) {
    if (!(starts[k] > starts[k - 1]) || starts[k] >= n) {
      throw new ValidationError(`segment_starts[${k}]`, [
        `segment_starts[${k}]: must be strictly increasing and below ${n}, got ${starts[k]}`,
      ]);
    }
  }
  return starts;
}

/**
 * Truncated importance sampling weight per token: min(exp(old_logprob − behaviour_logprob), cap).
 * It corrects for the inference engine (μ) and the trainer (π_old) disagreeing on the same
 * weights; the cap bounds its variance. The worker treats it as a constant (no gradient).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { tisWeights } from "./losses.ts";
 * assert.deepEqual(tisWeights([0, 0], [Math.log(0.5), 0], 1.5), new Float64Array([1.5, 1]));
 * ```
 */
export function tisWeights(
  old_logprobs: Values,
  behaviour_logprobs: Values,
  cap: number,
): Float64Array {
  if (!(cap > 0) || !Number.isFinite(cap)) {
    throw new ValidationError("cap", [`cap: must be a positive finite number, got ${cap}`]);
  }
  const n = old_logprobs.length;
  sameLength("behaviour_logprobs", behaviour_logprobs, n);
  const out = new Float64Array(n);
  for (let t = 0; t < n; t++) {
    out[t] = Math.min(Math.exp(old_logprobs[t] - behaviour_logprobs[t]), cap);
  }
  return out;
}

/**
 * k3 estimator of KL(π ‖ ref) per token, on tokens sampled from π (the GRPO form): with
 * x = ref_logprob − logprob, k3 = eˣ − x − 1 (unbiased, always ≥ 0). The worker reports it with
 * ref = π_old as the `kl` metric, and penalises it with ref = π_ref under `kl_estimator: "k3"`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { k3Kl } from "./losses.ts";
 * assert.equal(k3Kl([-1], [-1])[0], 0);
 * ```
 */
export function k3Kl(logprobs: Values, ref_logprobs: Values): Float64Array {
  const n = logprobs.length;
  sameLength("ref_logprobs", ref_logprobs, n);
  const out = new Float64Array(n);
  for (let t = 0; t < n; t++) {
    const x = ref_logprobs[t] - logprobs[t];
    out[t] = Math.expm1(x) - x;
  }
  return out;
}

/** A name of {@link KL_ESTIMATORS} (`loss.kl_estimator`). */
export type KlEstimatorName = LossConfig["kl_estimator"];

/**
 * Schulman's per-token estimators of KL(π ‖ ref) on tokens sampled from π, with
 * x = ref_logprob − logprob: `k1` = −x (unbiased, can be negative), `k2` = x²/2 (biased, low
 * variance), `k3` = eˣ − x − 1 (unbiased and ≥ 0). The worker's `KL_ESTIMATORS` is the same
 * table (tests/algo_losses_worker_test.ts compares them).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { KL_ESTIMATORS } from "./losses.ts";
 * // x = ref − logprob = 0.5
 * assert.deepEqual(KL_ESTIMATORS.k1([-1.5], [-1]), new Float64Array([-0.5]));
 * assert.deepEqual(KL_ESTIMATORS.k2([-1.5], [-1]), new Float64Array([0.125]));
 * ```
 */
export const KL_ESTIMATORS: Record<
  KlEstimatorName,
  (logprobs: Values, ref_logprobs: Values) => Float64Array
> = {
  k1: (logprobs, ref) => perToken(logprobs, ref, (x) => -x),
  k2: (logprobs, ref) => perToken(logprobs, ref, (x) => 0.5 * x * x),
  k3: k3Kl,
};

function perToken(logprobs: Values, ref: Values, f: (x: number) => number): Float64Array {
  sameLength("ref_logprobs", ref, logprobs.length);
  const out = new Float64Array(logprobs.length);
  for (let t = 0; t < logprobs.length; t++) out[t] = f(ref[t] - logprobs[t]);
  return out;
}

/**
 * Cross-entropy (negative log-likelihood) per token, for SFT warm starts.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { crossEntropyLoss } from "./losses.ts";
 * assert.ok(Math.abs(crossEntropyLoss([Math.log(0.5)])[0] - Math.LN2) < 1e-12); // ln 2 ≈ 0.693
 * ```
 */
export function crossEntropyLoss(logprobs: Values): Float64Array {
  const out = new Float64Array(logprobs.length);
  for (let t = 0; t < logprobs.length; t++) out[t] = -logprobs[t];
  return out;
}

/** Inputs of {@link policyLoss}: per-token arrays of one (possibly packed) row. */
export interface PolicyLossInput {
  logprobs: Values;
  /** μ: the row's `rollout_logprobs`; π_old too when the config says `old_logprobs: "rollout"`. */
  behaviour_logprobs: Values;
  /**
   * π_prox, the proximal policy (the policy at the start of the update, as the trainer computes
   * it); required when the config says `old_logprobs: "recompute"`.
   */
  old_logprobs?: Values;
  advantages: Values;
  loss_mask: Values;
  segment_starts?: readonly number[];
  /** GSPO sequences by id, as a row's `sequence_ids` (overrides `segment_starts`). */
  sequence_ids?: Values;
  /** π_ref, the frozen reference policy; required when the config's `kl_coef` > 0. */
  reference_logprobs?: Values;
}

/** Output of {@link policyLoss}; metrics are over trained tokens, as the worker reports them. */
export interface PolicyLossOutput {
  /** Per-token loss, 0 on context tokens: tis·pg + kl_coef·k (pg = −logprob for `ce`, k the
   * `kl_estimator` of KL(π_θ ‖ π_ref)). */
  loss: Float64Array;
  tokens: number;
  /** Share of trained tokens whose clipped term (or dual clip) was active. */
  clip_fraction: number;
  ratio_mean: number;
  ratio_min: number;
  ratio_max: number;
  /** Mean k3 KL(π_θ ‖ π_old) over trained tokens (a diagnostic; not in the loss). */
  kl: number;
  /** Mean `kl_estimator` estimate of KL(π_θ ‖ π_ref) over trained tokens (0 when `kl_coef` is
   * 0). */
  kl_ref_mean: number;
  /** Behaviour correction (`tis_cap`, `seq_is_band`, `token_ratio_band`): trained tokens and
   * sequences masked, and the ESS of the weights (1 without a correction). */
  is_masked_tokens: number;
  is_masked_sequences: number;
  is_ess: number;
}

/** Each token's sequence: its `sequence_ids` value, else its `segment_starts` segment. */
function sequenceIndex(input: PolicyLossInput, n: number): Float64Array {
  if (input.sequence_ids !== undefined) return Float64Array.from(input.sequence_ids);
  const out = new Float64Array(n);
  const starts = input.segment_starts ?? [0];
  for (let k = 1; k < starts.length; k++) out.fill(k, starts[k]);
  return out;
}

/**
 * The per-token loss the worker computes for a row under a `LossConfig` (`kind` `ppo`, `gspo`
 * or `ce`; clip, dual clip, GSPO clip, the behaviour correction — truncated IS, IcePop token
 * masking, masked sequence-level IS, `./correction.ts` — and KL(π_θ ‖ π_ref) to a reference
 * policy): ℓ = c · surrogate + kl_coef · k on trained tokens, k = `KL_ESTIMATORS[kl_estimator]`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { policyLoss, weightedSum } from "./losses.ts";
 * const out = policyLoss({
 *   logprobs: [-1, -2], behaviour_logprobs: [-1, -2], advantages: [0.5, 0.5],
 *   loss_mask: [1, 1],
 * }, { kind: "ppo" });
 * assert.equal(weightedSum(out.loss, [0.5, 0.5]), -0.5);
 * ```
 */
export function policyLoss(input: PolicyLossInput, config: LossConfigInput): PolicyLossOutput {
  const cfg = parseOrThrow(LossConfigSchema, config, "config");
  const n = input.logprobs.length;
  sameLength("behaviour_logprobs", input.behaviour_logprobs, n);
  sameLength("loss_mask", input.loss_mask, n);
  sameLength("advantages", input.advantages, n);
  let old: Values = input.behaviour_logprobs;
  if (cfg.old_logprobs === "recompute") {
    if (input.old_logprobs === undefined) {
      throw new ValidationError("old_logprobs", [
        'old_logprobs: required when config.old_logprobs is "recompute"',
      ]);
    }
    sameLength("old_logprobs", input.old_logprobs, n);
    old = input.old_logprobs;
  }
  let ratio: Float64Array;
  if (cfg.kind === "gspo") {
    ratio = gspoRatios({ ...input, old_logprobs: old }).per_token;
  } else {
    ratio = new Float64Array(n);
    for (let t = 0; t < n; t++) ratio[t] = Math.exp(input.logprobs[t] - old[t]);
  }
  let surrogate: Float64Array;
  let clipped: Uint8Array = new Uint8Array(n);
  if (cfg.kind === "ce") {
    surrogate = crossEntropyLoss(input.logprobs);
  } else {
    const gspo = cfg.kind === "gspo";
    const out = clippedSurrogate(ratio, input.advantages, {
      low: gspo ? cfg.gspo_clip_low : cfg.clip_low,
      high: gspo ? cfg.gspo_clip_high : cfg.clip_high,
      dual_clip: cfg.dual_clip,
    });
    surrogate = out.loss;
    clipped = out.clipped;
  }
  const correction = hasCorrection(cfg)
    ? behaviourCorrection({
      old_logprobs: old,
      behaviour_logprobs: input.behaviour_logprobs,
      loss_mask: input.loss_mask,
      ...(cfg.seq_is_band !== undefined
        ? {
          sequence_ratio: gspoRatios({
            logprobs: old,
            old_logprobs: input.behaviour_logprobs,
            loss_mask: input.loss_mask,
            ...(input.segment_starts ? { segment_starts: input.segment_starts } : {}),
            ...(input.sequence_ids ? { sequence_ids: input.sequence_ids } : {}),
          }).per_token,
          sequence_index: sequenceIndex(input, n),
        }
        : {}),
    }, cfg)
    : null;
  const tis = correction?.weight ?? null;
  const kl = k3Kl(input.logprobs, old);
  let klRef: Float64Array | null = null;
  if (cfg.kl_coef > 0) {
    if (input.reference_logprobs === undefined) {
      throw new ValidationError("reference_logprobs", [
        "reference_logprobs: required when config.kl_coef > 0",
      ]);
    }
    klRef = KL_ESTIMATORS[cfg.kl_estimator](input.logprobs, input.reference_logprobs);
  }
  const loss = new Float64Array(n);
  let tokens = 0;
  let clipN = 0;
  let klSum = 0;
  let klRefSum = 0;
  let rSum = 0;
  let rMin = Infinity;
  let rMax = -Infinity;
  for (let t = 0; t < n; t++) {
    if (!input.loss_mask[t]) continue;
    tokens += 1;
    clipN += clipped[t];
    klSum += kl[t];
    rSum += ratio[t];
    if (ratio[t] < rMin) rMin = ratio[t];
    if (ratio[t] > rMax) rMax = ratio[t];
    let l = surrogate[t];
    if (tis) l *= tis[t];
    if (klRef) {
      l += cfg.kl_coef * klRef[t];
      klRefSum += klRef[t];
    }
    loss[t] = l;
  }
  return {
    loss,
    tokens,
    clip_fraction: tokens ? clipN / tokens : 0,
    ratio_mean: tokens ? rSum / tokens : 1,
    ratio_min: tokens ? rMin : 1,
    ratio_max: tokens ? rMax : 1,
    kl: tokens ? klSum / tokens : 0,
    kl_ref_mean: tokens ? klRefSum / tokens : 0,
    is_masked_tokens: correction?.masked_tokens ?? 0,
    is_masked_sequences: correction?.masked_sequences ?? 0,
    is_ess: correction?.ess ?? 1,
  };
}

/**
 * Σ weights·loss in float64 — the batch (or micro-batch) loss.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { weightedSum } from "./losses.ts";
 * assert.equal(weightedSum([1, 2, 3], [0, 0.5, 0.5]), 2.5);
 * ```
 */
export function weightedSum(loss: Values, weights: Values): number {
  sameLength("weights", weights, loss.length);
  let sum = 0;
  for (let t = 0; t < loss.length; t++) sum += weights[t] * loss[t];
  return sum;
}
