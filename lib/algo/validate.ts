/**
 * Shape checks for in-memory samples (typed arrays are not zod-validated on the way in).
 *
 * @module
 */
import { type Sample, ValidationError } from "../schema.ts";

function fail(field: string, message: string): never {
  throw new ValidationError(field, [`${field}: ${message}`]);
}

/** What {@link assertSamples} additionally requires. */
export interface SampleRequirements {
  /** `advantage` must be present (one value per token). */
  advantage?: boolean;
  /** `loss_weight` must be present (one value per token). */
  loss_weight?: boolean;
}

/**
 * Throws a {@link ValidationError} naming the first malformed field of `samples`
 * (e.g. `samples[2].loss_mask`): per-token arrays must match `tokens` in length, `loss_mask`
 * holds only 0/1, rewards are finite, and a rollout never changes group or reward.
 *
 * @example
 * ```ts
 * import { assertSamples } from "./validate.ts";
 * assertSamples([]); // nothing to check
 * ```
 */
export function assertSamples(
  samples: readonly Sample[],
  require: SampleRequirements = {},
  name = "samples",
): void {
  if (!Array.isArray(samples)) fail(name, "must be an array of samples");
  const rollouts = new Map<string, { group_id: string; reward: number; index: number }>();
  samples.forEach((s, i) => {
    const at = `${name}[${i}]`;
    if (typeof s !== "object" || s === null) fail(at, "must be a sample object");
    if (typeof s.rollout_id !== "string" || s.rollout_id === "") {
      fail(`${at}.rollout_id`, "must be a non-empty string");
    }
    if (typeof s.group_id !== "string" || s.group_id === "") {
      fail(`${at}.group_id`, "must be a non-empty string");
    }
    if (!(s.tokens instanceof Uint32Array)) fail(`${at}.tokens`, "must be a Uint32Array");
    const n = s.tokens.length;
    if (!(s.loss_mask instanceof Uint8Array)) fail(`${at}.loss_mask`, "must be a Uint8Array");
    if (s.loss_mask.length !== n) {
      fail(`${at}.loss_mask`, `expected ${n} values (one per token), got ${s.loss_mask.length}`);
    }
    for (let t = 0; t < n; t++) {
      if (s.loss_mask[t] > 1) {
        fail(`${at}.loss_mask[${t}]`, `must be 0 or 1, got ${s.loss_mask[t]}`);
      }
    }
    if (!(s.rollout_logprobs instanceof Float32Array)) {
      fail(`${at}.rollout_logprobs`, "must be a Float32Array");
    }
    if (s.rollout_logprobs.length !== n) {
      fail(
        `${at}.rollout_logprobs`,
        `expected ${n} values (one per token), got ${s.rollout_logprobs.length}`,
      );
    }
    if (typeof s.reward !== "number" || !Number.isFinite(s.reward)) {
      fail(`${at}.reward`, `must be a finite number, got ${String(s.reward)}`);
    }
    if (s.parent !== undefined && s.parent.length !== n) {
      fail(`${at}.parent`, `expected ${n} values (one per token), got ${s.parent.length}`);
    }
    for (const key of ["advantage", "loss_weight"] as const) {
      const values = s[key];
      if (values === undefined) {
        if (require[key]) fail(`${at}.${key}`, "is missing (run the algo step that fills it)");
        continue;
      }
      if (values.length !== n) {
        fail(`${at}.${key}`, `expected ${n} values (one per token), got ${values.length}`);
      }
      for (let t = 0; t < n; t++) {
        if (!Number.isFinite(values[t])) {
          fail(`${at}.${key}[${t}]`, `must be a finite number, got ${values[t]}`);
        }
      }
    }
    const seen = rollouts.get(s.rollout_id);
    if (!seen) {
      rollouts.set(s.rollout_id, { group_id: s.group_id, reward: s.reward, index: i });
    } else if (seen.group_id !== s.group_id) {
      fail(
        `${at}.group_id`,
        `rollout ${s.rollout_id} is in group ${seen.group_id} at ${name}[${seen.index}] ` +
          `but in ${s.group_id} here`,
      );
    } else if (seen.reward !== s.reward) {
      fail(
        `${at}.reward`,
        `rollout ${s.rollout_id} has reward ${seen.reward} at ${name}[${seen.index}] ` +
          `but ${s.reward} here (outcome rewards are per rollout)`,
      );
    }
  });
}

/** Number of trained tokens (`loss_mask` = 1) of a sample. */
export function trainedTokens(sample: Pick<Sample, "loss_mask">): number {
  let n = 0;
  const mask = sample.loss_mask;
  for (let t = 0; t < mask.length; t++) n += mask[t];
  return n;
}
