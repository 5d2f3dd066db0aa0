/**
 * The repetition monitor: flags repeated identical calls and responses that end in a repeating
 * cycle (a degenerate policy).
 *
 * @module
 */
import { excerpt, extractActions } from "./actions.ts";
import type { Finding, Monitor } from "./types.ts";

/** Options of {@link repetitionMonitor}. */
export interface RepetitionOptions {
  /** Identical consecutive tool calls (or identical responses) that raise a flag (default 3). */
  minRepeats?: number;
  /** Repetitions of a short token cycle at a response's end that raise a flag (default 8). */
  minCycles?: number;
}

/**
 * Flags an agent stuck in a loop: the same tool call (name and arguments) several times in a
 * row, the same response tokens to different prompts, or a response ending in a short token
 * cycle repeated many times (degenerate sampling).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { repetitionMonitor } from "./repetition.ts";
 * assert.equal(repetitionMonitor({ minRepeats: 4 }).name, "repetition");
 * ```
 */
export function repetitionMonitor(options: RepetitionOptions = {}): Monitor {
  const minRepeats = options.minRepeats ?? 3;
  const minCycles = options.minCycles ?? 8;
  return {
    name: "repetition",
    check({ events }) {
      const findings: Finding[] = [];
      const { toolCalls } = extractActions(events);
      let run = 1;
      for (let i = 1; i <= toolCalls.length; i++) {
        const same = i < toolCalls.length && toolCalls[i].name === toolCalls[i - 1].name &&
          toolCalls[i].arguments === toolCalls[i - 1].arguments;
        if (same) {
          run++;
          continue;
        }
        if (run >= minRepeats) {
          const calls = toolCalls.slice(i - run, i);
          findings.push({
            severity: "warn",
            message: `the same tool call ${calls[0].name} was made ${run} times in a row`,
            evidence: calls.map((c) => ({
              seq: c.seq,
              source: `tool_call:${c.name}`,
              excerpt: excerpt(c.arguments),
            })),
          });
        }
        run = 1;
      }
      const byResponse = new Map<string, number[]>();
      for (const event of events) {
        if (event.type !== "model_request" || event.payload.response_token_ids.length === 0) {
          continue;
        }
        const ids = event.payload.response_token_ids;
        const key = ids.join(",");
        const list = byResponse.get(key) ?? [];
        list.push(event.seq);
        byResponse.set(key, list);
        const cycle = trailingCycle(ids, minCycles);
        if (cycle) {
          findings.push({
            severity: "warn",
            message:
              `response ends in a ${cycle.period}-token cycle repeated ${cycle.cycles} times`,
            evidence: [{
              seq: event.seq,
              source: "response",
              excerpt: `ids ${Array.from(ids.subarray(ids.length - cycle.period)).join(" ")}`,
            }],
          });
        }
      }
      for (const seqs of byResponse.values()) {
        if (seqs.length < minRepeats) continue;
        findings.push({
          severity: "warn",
          message: `${seqs.length} calls returned the identical response`,
          evidence: seqs.map((seq) => ({
            seq,
            source: "response",
            excerpt: "identical response tokens",
          })),
        });
      }
      return findings;
    },
  };
}

/** The shortest period (≤ 32) whose cycle repeats at least `minCycles` times at the end. */
function trailingCycle(
  ids: Uint32Array,
  minCycles: number,
): { period: number; cycles: number } | null {
  for (let period = 1; period <= 32; period++) {
    if (ids.length < period * minCycles) break;
    let n = period;
    while (n < ids.length && ids[ids.length - 1 - n] === ids[ids.length - 1 - (n % period)]) n++;
    const cycles = Math.floor(n / period);
    if (cycles >= minCycles && period * cycles >= 16) return { period, cycles };
  }
  return null;
}
