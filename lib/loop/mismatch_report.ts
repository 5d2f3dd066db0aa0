/**
 * The engine–trainer mismatch of a run in words: one line per step (as `deno task train` and the
 * demo print it after each update) and the end-of-run summary over every step, as `name: value`
 * lines. Both judge the figures by {@link MISMATCH_THRESHOLDS} (LEGO-RL's Pearson of
 * probabilities, verl's mean |Δp|, IcePop's |Δlogprob| bound, k3 KL, ESS of the importance
 * weights); the metrics themselves come from the step metrics (`alignment_*`), measured on the
 * tokens sampled by the policy version that was trained on them.
 *
 * @module
 */
import { MISMATCH_THRESHOLDS, mismatchBreaches } from "../algo/alignment.ts";
import type { LoopStepMetrics } from "./schema.ts";

/** The step-metric fields the mismatch report reads. */
export type MismatchStep = Pick<
  LoopStepMetrics,
  | "step"
  | "alignment_tokens"
  | "alignment_corr"
  | "alignment_mean_abs_dp"
  | "alignment_max_abs_dlogprob"
  | "alignment_k1_kl"
  | "alignment_k3_kl"
  | "alignment_ess"
  | "timings_ms"
>;

const exp = (x: number) => x.toExponential(2);

function breachesOf(m: MismatchStep): string[] {
  return mismatchBreaches({
    tokens: m.alignment_tokens,
    pearson_prob: m.alignment_corr,
    mean_abs_dp: m.alignment_mean_abs_dp,
    max_abs_dlogprob: m.alignment_max_abs_dlogprob,
    k3_kl: m.alignment_k3_kl,
    ess: m.alignment_ess,
  });
}

/**
 * One step's engine–trainer mismatch, with the thresholds it is judged by (and the weight-sync
 * time when the step synced an engine).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { mismatchLine } from "./mismatch_report.ts";
 * const line = mismatchLine({
 *   step: 0, alignment_tokens: 120, alignment_corr: 0.9999, alignment_mean_abs_dp: 4e-4,
 *   alignment_max_abs_dlogprob: 0.01, alignment_k1_kl: 1e-5, alignment_k3_kl: 2e-6,
 *   alignment_ess: 0.999, timings_ms: { sync: 412 },
 * });
 * assert.match(line, /^step 1 mismatch \(120 tokens\): Pearson\(p\) 0\.999900 /);
 * assert.match(line, /— healthy; sync 412 ms$/);
 * ```
 */
export function mismatchLine(m: MismatchStep): string {
  if (m.alignment_tokens === 0) return `step ${m.step + 1} mismatch: no same-version tokens`;
  const breaches = breachesOf(m);
  return `step ${m.step + 1} mismatch (${m.alignment_tokens} tokens): Pearson(p) ` +
    `${(m.alignment_corr ?? NaN).toFixed(6)} mean|Δp| ${exp(m.alignment_mean_abs_dp)} ` +
    `max|Δlogprob| ${exp(m.alignment_max_abs_dlogprob)} k1 ${exp(m.alignment_k1_kl)} ` +
    `k3 ${exp(m.alignment_k3_kl)} ESS ${m.alignment_ess.toFixed(6)}` +
    (breaches.length ? ` — BEYOND: ${breaches.join("; ")}` : " — healthy") +
    (m.timings_ms.sync !== undefined ? `; sync ${m.timings_ms.sync.toFixed(0)} ms` : "");
}

/**
 * The run's mismatch over every step that measured any (steps whose tokens were all sampled by
 * an older version measure none): a sentence, then `name: value` lines — the worst Pearson(p),
 * the worst and the token-weighted mean of the per-step mean |Δp|, the worst max |Δlogprob|,
 * k1 and k3 KL, the lowest ESS, how many steps broke a threshold, and the sync time range when
 * an engine was synced. `sampler` names who sampled (`torch_worker`, `llama_cpp`): for the
 * worker the figures are a self-check (sampler and trainer are the same fp32 process, so
 * anything beyond rounding is a bug); for an engine they are the numerical mismatch.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { mismatchSummary } from "./mismatch_report.ts";
 * const step = (i: number, corr: number, dp: number) => ({
 *   step: i, alignment_tokens: 100, alignment_corr: corr, alignment_mean_abs_dp: dp,
 *   alignment_max_abs_dlogprob: 1e-4, alignment_k1_kl: 1e-7, alignment_k3_kl: 1e-9,
 *   alignment_ess: 0.9999, timings_ms: {},
 * });
 * const lines = mismatchSummary([step(0, 0.99999, 2e-6), step(1, 0.9999, 4e-6)], "llama_cpp");
 * assert.ok(lines.includes("mismatch_pearson_min: 0.9999"));
 * assert.ok(lines.includes("mismatch_mean_abs_dp_mean: 3.00e-6"));
 * assert.ok(lines.includes("mismatch_steps_beyond: 0"));
 * ```
 */
export function mismatchSummary(metrics: MismatchStep[], sampler: string): string[] {
  const measured = metrics.filter((m) => m.alignment_tokens > 0);
  const head = `sampler: ${sampler}`;
  if (measured.length === 0) {
    return [head, `mismatch: no same-version tokens in any of ${metrics.length} step(s)`];
  }
  const max = (f: (m: MismatchStep) => number) => Math.max(...measured.map(f));
  const min = (f: (m: MismatchStep) => number) => Math.min(...measured.map(f));
  const corrs = measured.map((m) => m.alignment_corr).filter((c): c is number => c !== null);
  const pearsonMin = corrs.length ? Math.min(...corrs) : NaN;
  const tokens = measured.reduce((a, m) => a + m.alignment_tokens, 0);
  const dpMean = measured.reduce((a, m) => a + m.alignment_mean_abs_dp * m.alignment_tokens, 0) /
    tokens;
  const dpMax = max((m) => m.alignment_mean_abs_dp);
  const dlogprobMax = max((m) => m.alignment_max_abs_dlogprob);
  const k3Max = max((m) => m.alignment_k3_kl);
  const essMin = min((m) => m.alignment_ess);
  const beyond = measured.filter((m) => breachesOf(m).length > 0).length;
  const syncs = metrics.map((m) => m.timings_ms.sync).filter((s): s is number => s !== undefined);
  const t = MISMATCH_THRESHOLDS;
  return [
    head,
    `mismatch over ${measured.length} of ${metrics.length} step(s), ${tokens} tokens (worst ` +
    `step): Pearson(p) ${pearsonMin.toFixed(6)} (≥ ${t.pearson_prob_min}), mean|Δp| ` +
    `${exp(dpMax)} (< ${t.mean_abs_dp_max}; ${exp(dpMean)} over all tokens), max|Δlogprob| ` +
    `${exp(dlogprobMax)} (≤ ln 2), k3 ${exp(k3Max)} (≤ ${t.k3_kl_max}), ESS ` +
    `${essMin.toFixed(6)} (≥ ${t.ess_min}) — ` +
    (beyond ? `${beyond} step(s) BEYOND a threshold` : "healthy at every step"),
    `mismatch_steps_measured: ${measured.length}`,
    `mismatch_pearson_min: ${pearsonMin}`,
    `mismatch_mean_abs_dp_max: ${exp(dpMax)}`,
    `mismatch_mean_abs_dp_mean: ${exp(dpMean)}`,
    `mismatch_max_abs_dlogprob_max: ${exp(dlogprobMax)}`,
    `mismatch_k1_kl_max: ${exp(max((m) => m.alignment_k1_kl))}`,
    `mismatch_k3_kl_max: ${exp(k3Max)}`,
    `mismatch_ess_min: ${essMin}`,
    `mismatch_steps_beyond: ${beyond}`,
    ...(syncs.length
      ? [
        `sync_ms_min: ${Math.min(...syncs).toFixed(0)}`,
        `sync_ms_max: ${Math.max(...syncs).toFixed(0)}`,
      ]
      : []),
  ];
}
