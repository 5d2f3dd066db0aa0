/**
 * The mismatch monitor: engine–trainer numerical mismatch per model call, as the field measures
 * it. It reads the `alignment` events the training loop posts (one per trained call, same
 * policy version on both sides) and flags every call that breaks a threshold of lib/algo's
 * `MISMATCH_THRESHOLDS`: mean |Δp| (verl's `rollout_probs_diff_mean`, healthy < 0.005), max
 * |Δlogprob| (IcePop's ratio band), the k3 KL estimate and the effective sample size of the
 * importance weights. The probability correlation (LEGO-RL's ≥ 0.99) is the logprob monitor's.
 *
 * @module
 */
import {
  MISMATCH_THRESHOLDS,
  mismatchBreaches,
  type MismatchThresholds,
} from "../algo/alignment.ts";
import { isReinsEvent, type RolloutEvent } from "../schema.ts";
import type { Finding, Monitor } from "./types.ts";

const num = (record: Record<string, unknown>, key: string, fallback: number): number => {
  const v = record[key];
  return typeof v === "number" && Number.isFinite(v) ? v : fallback;
};

/**
 * One `warn` listing every call whose `alignment` event breaks a mismatch threshold (the
 * probability correlation is left to the logprob monitor). Only the loop's own events count
 * (reserved `reins:` keys).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { mismatchFindings } from "./mismatch.ts";
 * const event = (seq: number, mean_abs_dp: number) => ({
 *   type: "custom" as const, seq, rollout_id: "r", attempt_id: "a",
 *   event_key: `reins:alignment:${seq - 100}`, created_at: 0,
 *   payload: { name: "alignment", data: { request_seq: seq - 100, tokens: 40, mean_abs_dp } },
 * });
 * const [finding] = mismatchFindings([event(101, 0.001), event(102, 0.02)]);
 * assert.deepEqual(finding.evidence.map((e) => e.seq), [2]);
 * assert.match(finding.evidence[0].excerpt, /mean \|Δp\| 0\.0200 > 0\.005/);
 * ```
 */
export function mismatchFindings(
  events: readonly RolloutEvent[],
  thresholds: Partial<MismatchThresholds> = {},
): Finding[] {
  const evidence = [];
  for (const event of events) {
    if (!isReinsEvent(event, "alignment")) continue;
    const data = event.payload.data;
    if (typeof data !== "object" || data === null || Array.isArray(data)) continue;
    const record = data as Record<string, unknown>;
    const breaches = mismatchBreaches({
      tokens: num(record, "tokens", 0),
      pearson_prob: null, // the logprob monitor's
      mean_abs_dp: num(record, "mean_abs_dp", 0),
      max_abs_dlogprob: num(record, "max_abs_dlogprob", 0),
      k3_kl: num(record, "k3_kl", 0),
      ess: num(record, "ess", 1),
    }, thresholds);
    if (breaches.length === 0) continue;
    const call = typeof record.request_seq === "number" ? record.request_seq : null;
    evidence.push({
      seq: call ?? event.seq,
      source: "custom:alignment",
      excerpt: `${call !== null ? `call seq ${call}: ` : ""}${breaches.join("; ")}`,
    });
  }
  if (evidence.length === 0) return [];
  return [{
    severity: "warn",
    message: `${evidence.length} model call(s) beyond the engine–trainer mismatch thresholds`,
    evidence,
  }];
}

/**
 * The mismatch monitor over a finished rollout's `alignment` events.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { mismatchMonitor } from "./mismatch.ts";
 * assert.equal(mismatchMonitor({ mean_abs_dp_max: 0.01 }).name, "mismatch");
 * ```
 */
export function mismatchMonitor(thresholds: Partial<MismatchThresholds> = {}): Monitor {
  const t = { ...MISMATCH_THRESHOLDS, ...thresholds };
  return { name: "mismatch", check: ({ events }) => mismatchFindings(events, t) };
}
