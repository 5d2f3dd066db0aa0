/**
 * Summary statistics of a grid's results: per setting, the mean over seeds with a Student-t
 * 95% confidence interval (`lib/util/stats.ts`), and the verdict on the paper's ordering.
 *
 * @module
 */
import { type MeanCi, meanCi } from "../lib/util/stats.ts";
import { type CellResult, type EvalScoreKind, evalScoreKind, evalScores } from "./results.ts";

/** One setting's summary over its seeds. */
export interface SettingSummary {
  setting: string;
  seeds: number[];
  /**
   * The final score of each seed: the held-out evaluation reward when every cell measured it,
   * else the training questions' evaluation reward when measured, else the training reward.
   */
  scores: number[];
  score: MeanCi;
  /** Evaluation reward of the starting policy (before RL, same evaluation as the score). */
  start: MeanCi;
  /** Paired gain `final − start` of the evaluation reward, over the seeds that measured both. */
  gain: MeanCi;
  /** Mean over seeds of the last few steps' training reward (less noisy than the last one). */
  tail_reward: MeanCi;
  /** Std over steps of the entropy, mean over seeds (how steady the entropy curve is). */
  entropy_wobble: number;
  score_kind: "heldout_reward" | "val_reward" | "final_reward";
}

function num(x: unknown): number {
  return typeof x === "number" && Number.isFinite(x) ? x : Number.NaN;
}

/**
 * Groups cells by setting and summarises each (settings in first-seen order).
 *
 * @example
 * ```ts ignore
 * const rows = summarise(await readGridResults(dir, "ablation_quick"));
 * rows[0].score.mean;
 * ```
 */
export function summarise(
  results: CellResult[],
  tail = 3,
  kind: EvalScoreKind = evalScoreKind(results),
): SettingSummary[] {
  const groups = new Map<string, CellResult[]>();
  for (const r of results) {
    const list = groups.get(r.cell.setting) ?? [];
    list.push(r);
    groups.set(r.cell.setting, list);
  }
  const useVal = kind === "heldout" ||
    (results.length > 0 && results.every((r) => r.summary.final_val_reward !== null));
  const scoresOf = (c: CellResult) => evalScores(c.summary, kind);
  return [...groups].map(([setting, cells]) => {
    const scores = cells.map((c) => useVal ? scoresOf(c).final as number : c.summary.final_reward);
    const tails = cells.map((c) => {
      const xs = c.metrics.slice(-tail).map((m) => num(m.reward_mean)).filter(Number.isFinite);
      return xs.reduce((a, b) => a + b, 0) / Math.max(1, xs.length);
    });
    const wobbles = cells.map((c) => {
      const e = c.metrics.map((m) => num(m.entropy)).filter(Number.isFinite);
      return meanCi(e).std;
    }).filter(Number.isFinite);
    const measured = cells.map(scoresOf).filter((e) => e.start !== null && e.final !== null);
    return {
      setting,
      seeds: cells.map((c) => c.cell.seed),
      scores,
      score: meanCi(scores),
      start: meanCi(measured.map((e) => e.start as number)),
      gain: meanCi(measured.map((e) => (e.final as number) - (e.start as number))),
      tail_reward: meanCi(tails),
      entropy_wobble: wobbles.length ? wobbles.reduce((a, b) => a + b, 0) / wobbles.length : NaN,
      score_kind: kind === "heldout" ? "heldout_reward" : useVal ? "val_reward" : "final_reward",
    };
  });
}

/** The paper's three settings (sample adv + seq-mean-token-mean, rollout adv alone, both). */
export const PAPER_SETTINGS = {
  sample_smtm: "sample/seq_mean_token_mean",
  rollout_smtm: "rollout/seq_mean_token_mean",
  rollout_rtm: "rollout/rollout_token_mean",
} as const;

/** The paper's coding-run scores of those settings (Figure 9). */
export const PAPER_SCORES: Record<string, number> = {
  "sample/seq_mean_token_mean": 0.35,
  "rollout/seq_mean_token_mean": 0.331,
  "rollout/rollout_token_mean": 0.382,
};

/** The paper's ordering, best first. */
export const PAPER_ORDER: string[] = [
  "rollout/rollout_token_mean",
  "sample/seq_mean_token_mean",
  "rollout/seq_mean_token_mean",
];

/** Does the paper's ordering hold, and how strongly. */
export interface OrderingVerdict {
  /** The measured order of the paper's settings, best first. */
  measured: string[];
  /** Same order as the paper's. */
  reproduces: boolean;
  /** rollout_token_mean beats both other paper settings on the mean. */
  best_is_rollout_token_mean: boolean;
  /** Gap of rollout_token_mean to the best other paper setting, in units of their CIs. */
  margin: number;
  /** True when the CIs of rollout_token_mean and the runner-up do not overlap. */
  separated: boolean;
  sentence: string;
}

/**
 * Compares the measured scores with the paper's ordering.
 *
 * @example
 * ```ts ignore
 * orderingVerdict(summarise(results)).sentence;
 * ```
 */
export function orderingVerdict(summaries: SettingSummary[]): OrderingVerdict {
  const by = new Map(summaries.map((s) => [s.setting, s]));
  const present = PAPER_ORDER.filter((s) => by.has(s));
  if (present.length < PAPER_ORDER.length) {
    return {
      measured: present,
      reproduces: false,
      best_is_rollout_token_mean: false,
      margin: Number.NaN,
      separated: false,
      sentence: `cannot judge: the grid lacks ${PAPER_ORDER.filter((s) => !by.has(s)).join(", ")}`,
    };
  }
  const measured = [...present].sort((a, b) => by.get(b)!.score.mean - by.get(a)!.score.mean);
  const reproduces = measured.every((s, i) => s === PAPER_ORDER[i]);
  const best = by.get(PAPER_SETTINGS.rollout_rtm)!;
  const others = present.filter((s) => s !== PAPER_SETTINGS.rollout_rtm).map((s) => by.get(s)!);
  const runnerUp = others.sort((a, b) => b.score.mean - a.score.mean)[0];
  const gap = best.score.mean - runnerUp.score.mean;
  const spread = Math.max(1e-12, (best.score.ci95 || 0) + (runnerUp.score.ci95 || 0));
  const margin = gap / spread;
  const separated = gap > 0 && Number.isFinite(margin) && margin > 1;
  const kind = best.score_kind === "heldout_reward"
    ? "held-out evaluation reward"
    : best.score_kind === "val_reward"
    ? "validation reward"
    : "final training reward";
  const fmt = (s: SettingSummary) => `${s.setting} ${s.score.mean.toFixed(3)}`;
  const strength = separated
    ? "and the 95% confidence intervals of the best two do not overlap"
    : gap > 0
    ? "but the 95% confidence intervals overlap, so the difference is not significant here"
    : "";
  const sentence = reproduces
    ? `The paper's ordering reproduces on ${kind} (${
      measured.map((s) => fmt(by.get(s)!)).join(
        " > ",
      )
    }) ${strength}.`
    : `The paper's ordering does not reproduce on ${kind}: measured ${
      measured.map((s) => fmt(by.get(s)!)).join(" > ")
    }; rollout_token_mean is ${gap > 0 ? "best" : "not best"} (gap to the runner-up ${
      gap.toFixed(3)
    }, ${margin.toFixed(2)}× the summed CI half-widths)${
      gap > 0 && !separated ? ", within noise" : ""
    }.`;
  return {
    measured,
    reproduces,
    best_is_rollout_token_mean: gap > 0,
    margin,
    separated,
    sentence,
  };
}
