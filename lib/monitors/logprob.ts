/**
 * The logprob monitor: flags impossible or missing behaviour logprobs, policy versions going
 * backwards and low rollout–training alignment.
 *
 * @module
 */
import { isReinsEvent, type RolloutEvent } from "../schema.ts";
import { type Finding, type Monitor, withEvidence } from "./types.ts";

/** Options of {@link logprobMonitor}. */
export interface LogprobOptions {
  /** Logprobs below this are implausible for sampled tokens (default -30). */
  minLogprob?: number;
  /** A response at least this long whose logprobs are all exactly 0 looks uncaptured (16). */
  zeroRunMin?: number;
  /**
   * `alignment` custom events (one per trained model call, posted by the training loop) whose
   * `data.corr` — the Pearson correlation of the call's token probabilities under the inference
   * engine and the trainer, same policy version — is below this raise a flag (default 0.99).
   */
  minAlignment?: number;
}

/**
 * Flags logprob and alignment anomalies: positive logprobs (impossible), implausibly low ones,
 * responses whose logprobs are all 0 (not captured), policy versions going backwards within
 * an attempt, and `alignment` custom events whose correlation is below target.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { logprobMonitor } from "./logprob.ts";
 * assert.equal(logprobMonitor({ minLogprob: -20 }).name, "logprob");
 * ```
 */
export function logprobMonitor(options: LogprobOptions = {}): Monitor {
  const minLogprob = options.minLogprob ?? -30;
  const zeroRunMin = options.zeroRunMin ?? 16;
  const minAlignment = options.minAlignment ?? 0.99;
  return {
    name: "logprob",
    check({ events }) {
      const positive = [];
      const low = [];
      const zeros = [];
      const backwards = [];
      const lastVersion = new Map<string, { seq: number; version: number }>();
      for (const event of events) {
        if (event.type !== "model_request") continue;
        const lp = event.payload.response_logprobs;
        let max = -Infinity;
        let min = Infinity;
        let allZero = lp.length > 0;
        for (let i = 0; i < lp.length; i++) {
          if (lp[i] > max) max = lp[i];
          if (lp[i] < min) min = lp[i];
          if (lp[i] !== 0) allZero = false;
        }
        if (max > 1e-4) {
          positive.push({
            seq: event.seq,
            source: "logprobs",
            excerpt: `max logprob ${max.toFixed(4)} > 0`,
          });
        }
        if (min < minLogprob) {
          low.push({
            seq: event.seq,
            source: "logprobs",
            excerpt: `min logprob ${min.toFixed(2)} < ${minLogprob}`,
          });
        }
        if (allZero && lp.length >= zeroRunMin) {
          zeros.push({
            seq: event.seq,
            source: "logprobs",
            excerpt: `all ${lp.length} logprobs are exactly 0`,
          });
        }
        const previous = lastVersion.get(event.attempt_id);
        if (previous && event.payload.policy_version < previous.version) {
          backwards.push({
            seq: event.seq,
            source: "policy_version",
            excerpt:
              `version ${event.payload.policy_version} after ${previous.version} (seq ${previous.seq})`,
          });
        }
        lastVersion.set(event.attempt_id, {
          seq: event.seq,
          version: event.payload.policy_version,
        });
      }
      return [
        ...alignmentFindings(events, minAlignment),
        ...withEvidence([
          {
            severity: "alert",
            message: `${positive.length} response(s) with positive logprobs`,
            evidence: positive,
          },
          {
            severity: "alert",
            message: `${zeros.length} response(s) with all-zero logprobs (not captured?)`,
            evidence: zeros,
          },
          {
            severity: "warn",
            message: `${low.length} response(s) with implausibly low logprobs`,
            evidence: low,
          },
          {
            severity: "warn",
            message: `policy version went backwards ${backwards.length} time(s)`,
            evidence: backwards,
          },
        ]),
      ];
    },
  };
}

/**
 * The alignment part of {@link logprobMonitor}: one `alert` listing every model call whose
 * `alignment` event (posted by the training loop, one per trained call) has a probability
 * correlation `corr` below `minAlignment`; the evidence points at the call's seq. The loop runs
 * it on the events it posts, since those arrive after the rollout was first checked. Only the
 * loop's own events count (reserved `reins:` keys): an agent's token may post custom events of
 * any name but never under a reserved key.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { alignmentFindings } from "./logprob.ts";
 * const event = (seq: number, corr: number) => ({
 *   type: "custom" as const, seq, rollout_id: "r", attempt_id: "a",
 *   event_key: `reins:alignment:${seq - 100}`, created_at: 0,
 *   payload: { name: "alignment", data: { request_seq: seq - 100, corr } },
 * });
 * const [finding] = alignmentFindings([event(101, 0.9995), event(102, 0.62)], 0.99);
 * assert.deepEqual(finding.evidence.map((e) => e.seq), [2]);
 * ```
 */
export function alignmentFindings(
  events: readonly RolloutEvent[],
  minAlignment = 0.99,
): Finding[] {
  const misaligned = [];
  let lowest = Infinity;
  for (const event of events) {
    if (!isReinsEvent(event, "alignment")) continue;
    const data = event.payload.data;
    const record = typeof data === "object" && data !== null && !Array.isArray(data) ? data : {};
    const corr = record.corr;
    if (typeof corr !== "number" || corr >= minAlignment) continue;
    lowest = Math.min(lowest, corr);
    const call = typeof record.request_seq === "number" ? record.request_seq : null;
    const dl = typeof record.max_abs_dlogprob === "number"
      ? `, max |Δlogprob| ${record.max_abs_dlogprob.toFixed(4)}`
      : "";
    misaligned.push({
      seq: call ?? event.seq,
      source: "custom:alignment",
      excerpt: `${call !== null ? `call seq ${call}: ` : ""}probability Pearson ${
        corr.toFixed(4)
      } < ${minAlignment}${dl}`,
    });
  }
  if (misaligned.length === 0) return [];
  return [{
    severity: "alert",
    message: `rollout/trainer probability correlation ${lowest.toFixed(4)} < ${minAlignment}` +
      ` (lowest of ${misaligned.length} model call(s) below it)`,
    evidence: misaligned,
  }];
}
