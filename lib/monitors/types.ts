/**
 * The monitor contract: a named check over one finished rollout and its events that returns
 * findings with evidence.
 *
 * @module
 */
import type { Rollout, RolloutEvent } from "../schema.ts";
import type { FlagEvidence, FlagSeverity, MonitorFlag } from "../schema/ui.ts";

/** What a monitor looks at. */
export interface MonitorInput {
  rollout: Rollout;
  /** The rollout's events in seq order (every type). */
  events: readonly RolloutEvent[];
}

/** A finding before the runner stamps the monitor's name on it. */
export interface Finding {
  severity: FlagSeverity;
  message: string;
  evidence: FlagEvidence[];
}

/**
 * The candidate findings that have evidence: a check states one finding per kind of evidence and
 * reports those where it found some.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { withEvidence } from "./types.ts";
 * const found = [{ seq: 3, source: "response", excerpt: "…" }];
 * const findings = withEvidence([
 *   { severity: "warn", message: "1 found", evidence: found },
 *   { severity: "alert", message: "0 found", evidence: [] },
 * ]);
 * assert.deepEqual(findings.map((f) => f.message), ["1 found"]);
 * ```
 */
export function withEvidence(candidates: readonly Finding[]): Finding[] {
  return candidates.filter((f) => f.evidence.length > 0);
}

/**
 * A pluggable check. `check` must not mutate its input; it may be async (e.g. call a service).
 *
 * @example
 * ```ts
 * import type { Monitor } from "./types.ts";
 * export const longRollouts: Monitor = {
 *   name: "many_calls",
 *   check: ({ events }) => {
 *     const calls = events.filter((e) => e.type === "model_request").length;
 *     return calls > 50
 *       ? [{ severity: "warn", message: `${calls} model calls`, evidence: [] }]
 *       : [];
 *   },
 * };
 * ```
 */
export interface Monitor {
  /** Short snake_case name, stored with every flag it raises. */
  readonly name: string;
  check(input: MonitorInput): Finding[] | Promise<Finding[]>;
}

export type { FlagEvidence, FlagSeverity, MonitorFlag };
