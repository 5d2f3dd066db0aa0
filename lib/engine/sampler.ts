/**
 * Token sampling done here, not by llama.cpp: the engine reads the model's full next-token
 * distribution (softmax of the raw logits, `controlledEvaluate` at temperature 0, which selects
 * greedily without rewriting the logits) and draws from it with a seeded Mersenne Twister
 * (`@stdlib/random-base-mt19937`). So temperature 1, top-k 0, top-p 1 and min-p 0 mean exactly
 * the model's distribution: none of llama.cpp's sampler defaults (top-k 40, top-p 0.95) can leak
 * in, and the reported logprob is that of the distribution actually sampled.
 *
 * The distribution sampled, as the torch worker's (`reins_worker/sampling.py`): logits / τ, then
 * the truncations in order top-k, top-p (the smallest prefix, by probability, whose mass reaches
 * p), min-p (tokens under min_p × the top probability dropped), renormalised. Temperature 0 is
 * greedy and reports the logprob under the untempered distribution (a point mass has no useful
 * logprob; the training side masks such calls anyway).
 *
 * @module
 */
import mt19937 from "@stdlib/random-base-mt19937";

/** How to sample one token. */
export interface SamplingParams {
  temperature: number;
  top_p: number;
  top_k: number;
  min_p: number;
}

/** The untruncated distribution at temperature 1 (what RL needs). */
export const PLAIN_SAMPLING: Readonly<SamplingParams> = {
  temperature: 1,
  top_p: 1,
  top_k: 0,
  min_p: 0,
};

/** A seeded uniform [0, 1) source, one per request. */
export type Uniform = () => number;

/**
 * A seeded uniform generator (a fresh seed when `seed` is null).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { seededUniform } from "./sampler.ts";
 * const a = seededUniform(7);
 * const b = seededUniform(7);
 * assert.equal(a(), b());
 * ```
 */
export function seededUniform(seed: number | null): Uniform {
  const s = seed === null ? Math.floor(Math.random() * 0xffffffff) : seed;
  // MT19937 takes a positive 32-bit seed; any integer maps onto one.
  const rand = mt19937.factory({ seed: ((s % 0xfffffffe) + 0xfffffffe) % 0xfffffffe + 1 });
  const span = rand.MAX + 1; // 2³²: uniform integers become floats in [0, 1)
  return () => rand() / span;
}

/** One sampled token and its logprob under the distribution it was drawn from. */
export interface SampledToken {
  token: number;
  logprob: number;
}

/**
 * Draws one token from `probs` (token → probability at temperature 1, the full vocabulary) under
 * `params`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { PLAIN_SAMPLING, sampleToken, seededUniform } from "./sampler.ts";
 * const probs = new Map([[3, 0.5], [4, 0.3], [5, 0.2]]);
 * const { token, logprob } = sampleToken(probs, PLAIN_SAMPLING, seededUniform(1));
 * assert.ok(Math.abs(logprob - Math.log(probs.get(token)!)) < 1e-12);
 * const greedy = sampleToken(probs, { ...PLAIN_SAMPLING, temperature: 0 }, seededUniform(1));
 * assert.deepEqual(greedy, { token: 3, logprob: Math.log(0.5) });
 * ```
 */
export function sampleToken(
  probs: ReadonlyMap<number, number>,
  params: SamplingParams,
  uniform: Uniform,
): SampledToken {
  const ids: number[] = [];
  const logits: number[] = [];
  for (const [id, p] of probs) {
    if (p > 0) {
      ids.push(id);
      logits.push(Math.log(p));
    }
  }
  if (ids.length === 0) throw new Error("sampler: the distribution has no token with p > 0");
  if (params.temperature === 0) {
    let best = 0;
    for (let i = 1; i < ids.length; i++) if (logits[i] > logits[best]) best = i;
    return { token: ids[best], logprob: logits[best] };
  }
  // Tempered log-probabilities, normalised (log-sum-exp from the max).
  let max = -Infinity;
  for (let i = 0; i < logits.length; i++) {
    logits[i] /= params.temperature;
    if (logits[i] > max) max = logits[i];
  }
  let order: number[] = ids.map((_, i) => i);
  const truncated = params.top_k > 0 || params.top_p < 1 || params.min_p > 0;
  if (truncated) {
    order.sort((a, b) => logits[b] - logits[a]);
    if (params.top_k > 0) order = order.slice(0, params.top_k);
    if (params.top_p < 1) {
      const norm = logSumExp(order.map((i) => logits[i]));
      let mass = 0;
      let keep = 0;
      // Keep the smallest prefix whose mass reaches top_p (always at least one token).
      while (keep < order.length && (keep === 0 || mass < params.top_p)) {
        mass += Math.exp(logits[order[keep]] - norm);
        keep++;
      }
      order = order.slice(0, keep);
    }
    if (params.min_p > 0) {
      const floor = logits[order[0]] + Math.log(params.min_p);
      order = order.filter((i) => logits[i] >= floor);
    }
  }
  const norm = logSumExp(order.map((i) => logits[i]));
  const u = uniform();
  let acc = 0;
  let pick = order[order.length - 1];
  for (const i of order) {
    acc += Math.exp(logits[i] - norm);
    if (u < acc) {
      pick = i;
      break;
    }
  }
  return { token: ids[pick], logprob: logits[pick] - norm };
}

function logSumExp(xs: readonly number[]): number {
  let max = -Infinity;
  for (const x of xs) if (x > max) max = x;
  let sum = 0;
  for (const x of xs) sum += Math.exp(x - max);
  return max + Math.log(sum);
}
