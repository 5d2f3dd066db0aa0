/**
 * Linear merging, the `prefix_merge` strategy (the default): a call extends an open sample when
 * its prompt starts with that sample's tokens exactly; otherwise a new sample starts and the
 * split is diagnosed. `buffer_substitute` (in `buffer_substitute.ts`) reuses this loop with a
 * repair step.
 *
 * @module
 */
import type { BreakDiagnosis } from "./schema.ts";
import { extendPlan, planOf, type SamplePlan } from "./build.ts";
import { type DecodeFn, diagnoseBreak } from "./diagnose.ts";
import { commonPrefixConcat, startsWithConcat } from "./token_seq.ts";
import type { ValidCall } from "./validate.ts";

/**
 * Tried when no open sample extends a call exactly: extends one of `open` with the call (by its
 * own rule) and returns it, or returns null to let the call start a new sample.
 */
export type LinearRepair = (open: readonly SamplePlan[], call: ValidCall) => SamplePlan | null;

/** Options of {@link planLinear}. */
export interface LinearPlanOptions {
  decode?: DecodeFn;
  evidenceTokens?: number;
  /** A repair step between exact extension and a split (`buffer_substitute`'s). */
  repair?: LinearRepair;
}

/** The linear samples of a rollout and its breaks. */
export interface LinearPlan {
  plans: SamplePlan[];
  breaks: BreakDiagnosis[];
}

/** The last call merged into `plan`. */
export function lastCall(plan: SamplePlan): ValidCall {
  return plan.calls[plan.calls.length - 1];
}

function touch(open: SamplePlan[], plan: SamplePlan): void {
  open.splice(open.indexOf(plan), 1);
  open.push(plan);
}

/** The open sample a non-extending call is most likely the continuation of. */
function predecessor(open: readonly SamplePlan[], call: ValidCall): SamplePlan | null {
  const seg = call.request.segment;
  if (seg && seg.opened_by === null) {
    for (let j = open.length - 1; j >= 0; j--) {
      if (lastCall(open[j]).request.segment?.conversation === seg.conversation) return open[j];
    }
  }
  let best: SamplePlan | null = null;
  let bestLen = -1;
  const p = call.request.prompt_token_ids;
  for (let j = open.length - 1; j >= 0; j--) {
    const last = lastCall(open[j]).request;
    const n = commonPrefixConcat(p, last.prompt_token_ids, last.response_token_ids);
    if (n > bestLen) {
      best = open[j];
      bestLen = n;
    }
  }
  return best;
}

/** The open sample with an earlier (not last) call that `call`'s prompt extends exactly. */
function findFork(
  open: readonly SamplePlan[],
  call: ValidCall,
): { plan: SamplePlan; from: ValidCall } | null {
  const p = call.request.prompt_token_ids;
  for (let j = open.length - 1; j >= 0; j--) {
    const calls = open[j].calls;
    for (let k = calls.length - 2; k >= 0; k--) {
      const r = calls[k].request;
      if (startsWithConcat(p, r.prompt_token_ids, r.response_token_ids)) {
        return { plan: open[j], from: calls[k] };
      }
    }
  }
  return null;
}

/**
 * Plans the linear samples of a rollout's calls (seq order). A call extends the most recent
 * open sample whose tokens (= last prompt ∥ last response) its prompt starts with exactly; the
 * delta is context, the response is trained. Every open sample is considered, so a main
 * conversation interleaved with a sub-agent's calls still merges.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { planLinear } from "./prefix_merge.ts";
 * assert.equal(planLinear([]).plans.length, 0);
 * ```
 */
export function planLinear(
  calls: readonly ValidCall[],
  options: LinearPlanOptions = {},
): LinearPlan {
  const plans: SamplePlan[] = [];
  const open: SamplePlan[] = [];
  const breaks: BreakDiagnosis[] = [];
  const diagnoseOptions = { decode: options.decode, evidenceTokens: options.evidenceTokens };
  outer: for (const call of calls) {
    const p = call.request.prompt_token_ids;
    for (let j = open.length - 1; j >= 0; j--) {
      const last = lastCall(open[j]).request;
      if (startsWithConcat(p, last.prompt_token_ids, last.response_token_ids)) {
        const covered = last.prompt_token_ids.length + last.response_token_ids.length;
        extendPlan(open[j], p.subarray(covered), call);
        touch(open, open[j]);
        continue outer;
      }
    }
    const repaired = options.repair?.(open, call);
    if (repaired) {
      touch(open, repaired);
      continue;
    }
    let split: BreakDiagnosis | null = null;
    if (plans.length > 0) {
      // The call is diagnosed against its own previous call on its branch, unless it forks
      // from an earlier point: an exact extension of an earlier call of some sample counts as a
      // fork only when that point explains the prompt at least as far as the branch's previous
      // call does. Otherwise every later call of a branch that split once would "extend" the
      // first sample's earlier calls and be compared with that sample's last call.
      const before = predecessor(open, call);
      let fork = findFork(open, call);
      if (fork && before) {
        const last = lastCall(before).request;
        const reach = commonPrefixConcat(p, last.prompt_token_ids, last.response_token_ids);
        const from = fork.from.request;
        if (from.prompt_token_ids.length + from.response_token_ids.length < reach) fork = null;
      }
      const prev = fork ? fork.plan : before;
      split = diagnoseBreak(prev ? lastCall(prev) : null, call, diagnoseOptions);
      // An exact extension of an earlier call is hard evidence of a fork (nothing was
      // replaced), even where a segment tag inferred from messages says compaction. It is not
      // evidence against a diagnosis that explains the split: a growing conversation always
      // extends its earlier calls, so a token-boundary split after a merge "extends" one too.
      if (fork && (split.reason === "compaction" || split.reason === "unknown")) {
        split = {
          ...split,
          reason: "branch",
          basis: "tokens",
          detail: `the prompt extends seq ${fork.from.seq} exactly, but its sample has moved on ` +
            `to seq ${lastCall(fork.plan).seq}: a fork from an earlier point`,
        };
      }
      breaks.push(split);
    }
    const plan = planOf(call, split);
    plans.push(plan);
    open.push(plan);
  }
  return { plans, breaks };
}
