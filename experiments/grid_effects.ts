/**
 * What a finished ablation grid measured (issue #18, part 3): each setting's final evaluation
 * reward and paired gain with 95% CIs, each setting's difference to the reference with its CI,
 * and the power the grid had — the pooled per-cell SD and the smallest difference its seeds
 * detect at 80% power.
 *
 * | quantity | how it is computed |
 * | -------- | ------------------ |
 * | final (per setting) | mean ± t-CI over the setting's cells of the final evaluation reward |
 * | gain (per setting) | mean ± t-CI over its cells of final − start evaluation reward (paired: common random numbers); this CI takes the one shared before-RL evaluation as exact |
 * | gain with the start's noise | the same mean; SE² = var(gains)/cells + var(start rewards)/rollouts (the shared start evaluation is a finite sample too), Welch–Satterthwaite df |
 * | contrast per factor | Welch's t-CI of two settings' finals that differ in one factor: the advantage level (`rollout/seq_mean_token_mean` − `sample/seq_mean_token_mean`) and the normalization among rollout-level settings |
 * | difference to the reference | Welch's t-CI of the two settings' finals (cells are independent runs): the 95% CI, and the family-wise one (Bonferroni over the comparisons with the reference: level 1 − 0.05/comparisons) |
 * | verdict | `higher` / `lower` when the family-wise CI of the difference excludes 0, else `tie` (the level the power calculation uses) |
 * | σ | pooled within-setting SD of the final evaluation reward (df = cells − settings) |
 * | detectable | smallest difference found with 80% power by a two-sided t-test at α = 0.05/(settings − 1), n = the fewest seeds of any setting |
 * | evaluation share | mean over cells of the evaluation's own variance (reward variance / rollouts), as a share of σ²: how much of the seed-to-seed spread is the finite evaluation rather than training |
 *
 * Every quantity uses one evaluation ({@link evalScoreKind}): the held-out questions' when
 * every cell measured it (`final_heldout_reward`, `start_heldout_eval.json`, `eval.json`'s
 * `heldout_final`), else the training questions' (`final_val_reward`, `start_eval.json`,
 * `eval.json`'s `final`); {@link GridEffects.score_kind} says which. With held-out scores, the
 * training-question finals are kept as a second figure ({@link GridEffects.second}).
 *
 * @module
 */
import tQuantile from "@stdlib/stats-base-dists-t-quantile";
import { type MeanCi, meanCi, welchDiff } from "../lib/util/stats.ts";
import { pooledSd } from "./grid_plan.ts";
import { detectableEffect } from "./power.ts";
import {
  cellDir,
  type CellResult,
  type EvalScoreKind,
  evalScoreKind,
  evalScores,
  readGridResults,
} from "./results.ts";
import { summarise } from "./stats.ts";

/** One setting's results in the grid. */
export interface SettingEffect {
  setting: string;
  seeds: number;
  final: MeanCi;
  gain: MeanCi;
  /**
   * 95% CI half-width of the gain counting the shared start evaluation's sampling noise (null
   * without the start evaluation's rewards).
   */
  gain_with_start_ci95: number | null;
  /**
   * Difference of the finals to the reference (null for the reference itself): 95% CI
   * half-width, and the family-wise one (Bonferroni over the comparisons).
   */
  diff: { mean: number; ci95: number; ci_family: number; se: number; df: number } | null;
  verdict: "reference" | "higher" | "lower" | "tie";
}

/** The grid's effects and the power it had. */
export interface GridEffects {
  reference: string;
  /** The evaluation every figure uses: held-out questions, or the training questions. */
  score_kind: EvalScoreKind;
  /** {@link GridEffects.score_kind} in words. */
  score_label: string;
  /**
   * With held-out scores: each setting's final evaluation reward on the training questions
   * (the second figure); null when the grid is scored on the training questions.
   */
  second: { setting: string; final: MeanCi }[] | null;
  settings: SettingEffect[];
  sd: number;
  sd_df: number;
  /** Fewest seeds of any setting (the power calculation's n). */
  seeds_per_setting: number;
  /** Smallest difference detected with 80% power at α = 0.05/comparisons. */
  detectable: number;
  comparisons: number;
  /** Share of σ² that the finite evaluation alone explains (null without evaluation variances). */
  evaluation_share: number | null;
  /** The power sentence (σ, the detectable difference, the evaluation's share). */
  power_line: string;
  /** Per-factor contrasts present in the grid (see {@link FACTOR_CONTRASTS}). */
  contrasts: FactorContrast[];
  /** One sentence per setting, then {@link GridEffects.power_line}. */
  lines: string[];
}

/** A contrast of two settings that differ in one factor. */
export interface FactorContrast {
  name: string;
  /** What the factor is, in words. */
  label: string;
  higher: string;
  lower: string;
  mean: number;
  ci95: number;
  verdict: "higher" | "lower" | "tie";
}

/** The grid's one-factor contrasts: `[name, label, setting, minus setting]`. */
export const FACTOR_CONTRASTS: readonly (readonly [string, string, string, string])[] = [
  [
    "advantage_level",
    "advantage level (rollout vs sample, both seq_mean_token_mean)",
    "rollout/seq_mean_token_mean",
    "sample/seq_mean_token_mean",
  ],
  [
    "normalization_rtm_vs_smtm",
    "normalization at rollout level (rollout_token_mean vs seq_mean_token_mean)",
    "rollout/rollout_token_mean",
    "rollout/seq_mean_token_mean",
  ],
  [
    "normalization_token_mean_vs_rtm",
    "normalization at rollout level (token_mean vs rollout_token_mean)",
    "rollout/token_mean",
    "rollout/rollout_token_mean",
  ],
];

/**
 * 95% CI half-width of a mean gain whose every term subtracts one shared start estimate: the
 * gains' own variance of the mean plus the start's (`startRewards`' variance over their count),
 * Welch–Satterthwaite df.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { gainWithStartCi } from "./grid_effects.ts";
 * const exact = gainWithStartCi([0.1, 0.2, 0.3], [0.5, 0.5, 0.5, 0.5]);
 * assert.equal(exact.toFixed(4), "0.2484"); // a start without noise adds nothing
 * assert.ok(gainWithStartCi([0.1, 0.2, 0.3], [0, 1, 0, 1]) > exact);
 * ```
 */
export function gainWithStartCi(gains: readonly number[], startRewards: readonly number[]): number {
  const g = meanCi([...gains]);
  const s = meanCi([...startRewards]);
  const a = g.std ** 2 / g.n;
  const b = s.std ** 2 / s.n;
  if (b === 0) return g.ci95;
  const df = (a + b) ** 2 / (a ** 2 / (g.n - 1) + b ** 2 / (s.n - 1));
  return tQuantile(0.975, df) * Math.sqrt(a + b);
}

/**
 * The difference verdict of a CI.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { verdictOf } from "./grid_effects.ts";
 * assert.equal(verdictOf({ mean: 0.1, ci95: 0.05 }), "higher");
 * assert.equal(verdictOf({ mean: -0.1, ci95: 0.05 }), "lower");
 * assert.equal(verdictOf({ mean: 0.1, ci95: 0.2 }), "tie");
 * ```
 */
export function verdictOf(d: { mean: number; ci95: number }): "higher" | "lower" | "tie" {
  if (d.mean - d.ci95 > 0) return "higher";
  if (d.mean + d.ci95 < 0) return "lower";
  return "tie";
}

/** The words for an evaluation kind. */
export const SCORE_LABELS: Record<EvalScoreKind, string> = {
  heldout: "held-out evaluation reward (questions never trained on)",
  train: "evaluation reward on the training questions",
};

/**
 * Effects of a grid against `reference`, with the power it had, on the held-out evaluation
 * when every cell has it, else on the training questions' ({@link evalScoreKind}).
 * `evalVariance`, when given, is each cell's evaluation variance of the mean (reward variance
 * / rollouts), by cell id, and `startRewards` the shared start evaluation's rewards: both of
 * the same evaluation ({@link readGridEffects} reads them so).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { gridEffects } from "./grid_effects.ts";
 * const cell = (setting: string, seed: number, final: number) => ({
 *   cell: { id: `${setting}-${seed}`, setting, seed },
 *   summary: { start_val_reward: 0.4, final_val_reward: final, final_reward: final, wall_s: 1 },
 *   metrics: [],
 * });
 * const cells = [cell("a", 0, 0.5), cell("a", 1, 0.7), cell("b", 0, 0.4), cell("b", 1, 0.6)];
 * // deno-lint-ignore no-explicit-any
 * const g = gridEffects(cells as any, "a");
 * assert.equal(g.settings[1].diff!.mean.toFixed(3), "-0.100");
 * assert.equal(g.settings[1].verdict, "tie");
 * assert.equal(g.sd.toFixed(4), "0.1414");
 * assert.equal(g.seeds_per_setting, 2);
 * ```
 */
export function gridEffects(
  results: readonly CellResult[],
  reference: string,
  evalVariance?: ReadonlyMap<string, number>,
  startRewards?: readonly number[],
  kind: EvalScoreKind = evalScoreKind(results),
): GridEffects {
  const scores = (c: CellResult) => evalScores(c.summary, kind);
  const measured = results.filter((c) => scores(c).final !== null && scores(c).start !== null);
  const summaries = summarise([...measured], 3, kind);
  const ref = summaries.find((s) => s.setting === reference);
  if (!ref) throw new Error(`gridEffects: the grid has no cell of the reference ${reference}`);
  const comparisons = Math.max(1, summaries.length - 1);
  const settings: SettingEffect[] = summaries.map((s) => {
    const welch = s === ref ? null : welchDiff(s.scores, ref.scores);
    const diff = welch && {
      ...welch,
      ci_family: welch.se * tQuantile(1 - 0.025 / comparisons, welch.df),
    };
    return {
      setting: s.setting,
      seeds: s.scores.length,
      final: s.score,
      gain: s.gain,
      gain_with_start_ci95: startRewards?.length
        ? gainWithStartCi(
          measured.filter((c) => c.cell.setting === s.setting).map((c) =>
            (scores(c).final as number) - (scores(c).start as number)
          ),
          startRewards,
        )
        : null,
      diff,
      verdict: diff === null ? "reference" : verdictOf({ mean: diff.mean, ci95: diff.ci_family }),
    };
  });
  const { sd, df } = pooledSd(new Map(summaries.map((s) => [s.setting, s.scores])));
  const n = Math.min(...settings.map((s) => s.seeds));
  const detectable = n >= 2 && Number.isFinite(sd)
    ? detectableEffect(n, { sd, comparisons })
    : Number.NaN;
  const variances = evalVariance
    ? measured.map((c) => evalVariance.get(c.cell.id)).filter((v): v is number =>
      typeof v === "number"
    )
    : [];
  const evaluationShare = variances.length
    ? variances.reduce((a, b) => a + b, 0) / variances.length / sd ** 2
    : null;
  const f3 = (x: number) => x.toFixed(3);
  const signed = (x: number) => (x >= 0 ? "+" : "−") + Math.abs(x).toFixed(3);
  const powerLine =
    `power: σ ${
      f3(sd)
    } per cell (pooled, ${df} df); with ${n} seeds per setting the grid detects ` +
    `a difference of ${f3(detectable)} at 80% power (α = 0.05/${comparisons})` +
    (evaluationShare === null
      ? ""
      : `; the finite evaluation explains ${(100 * evaluationShare).toFixed(0)}% of σ²`);
  const contrasts: FactorContrast[] = [];
  for (const [name, label, higher, lower] of FACTOR_CONTRASTS) {
    const x = summaries.find((s) => s.setting === higher);
    const y = summaries.find((s) => s.setting === lower);
    if (!x || !y || x.scores.length < 2 || y.scores.length < 2) continue;
    const d = welchDiff(x.scores, y.scores);
    contrasts.push({
      name,
      label,
      higher,
      lower,
      mean: d.mean,
      ci95: d.ci95,
      verdict: verdictOf(d),
    });
  }
  const lines = [
    ...settings.map((s) =>
      `${s.setting}: final ${f3(s.final.mean)} ± ${f3(s.final.ci95)}, gain ${
        signed(s.gain.mean)
      } ± ${f3(s.gain.ci95)}${
        s.gain_with_start_ci95 === null
          ? ""
          : ` (± ${f3(s.gain_with_start_ci95)} with the start evaluation's noise)`
      } over ${s.seeds} seeds` +
      (s.diff
        ? `; vs ${reference} ${signed(s.diff.mean)} ± ${f3(s.diff.ci95)} (95%), ± ${
          f3(s.diff.ci_family)
        } family-wise: ${s.verdict}`
        : "")
    ),
    ...contrasts.map((c) =>
      `factor ${c.label}: ${signed(c.mean)} ± ${f3(c.ci95)} (95%): ${
        c.verdict === "tie" ? "no difference detected" : `${c.higher} ${c.verdict}`
      }`
    ),
  ];
  const second = kind === "heldout"
    ? summaries.map((s) => ({
      setting: s.setting,
      final: meanCi(
        measured.filter((c) => c.cell.setting === s.setting).map((c) =>
          evalScores(c.summary, "train").final
        ).filter((x): x is number => x !== null),
      ),
    }))
    : null;
  if (second) {
    lines.push(
      `second figure, ${SCORE_LABELS.train}: ` +
        second.map((s) => `${s.setting} ${f3(s.final.mean)} ± ${f3(s.final.ci95)}`).join(", "),
    );
  }
  lines.push(powerLine);
  return {
    reference,
    score_kind: kind,
    score_label: SCORE_LABELS[kind],
    second,
    settings,
    sd,
    sd_df: df,
    seeds_per_setting: n,
    detectable,
    comparisons,
    evaluation_share: evaluationShare,
    power_line: powerLine,
    contrasts,
    lines,
  };
}

/**
 * A cell's evaluation variance of the mean: sample variance of its final evaluation rewards
 * over their count.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { evaluationVariance } from "./grid_effects.ts";
 * assert.equal(evaluationVariance([0, 1, 0, 1]), 1 / 3 / 4);
 * ```
 */
export function evaluationVariance(rewards: readonly number[]): number {
  const s = meanCi([...rewards]);
  return s.std ** 2 / s.n;
}

/** The file of a grid's shared before-RL evaluation of a kind. */
const START_FILES: Record<EvalScoreKind, string> = {
  heldout: "start_heldout_eval.json",
  train: "start_eval.json",
};

/**
 * The rewards of the grid's shared before-RL evaluation of `kind` (`start_heldout_eval.json`
 * or `start_eval.json`; null when absent). Without `kind`: the held-out one when the grid
 * recorded it, else the training questions' (as {@link gridEffects} picks for a grid whose
 * cells all ran one code).
 *
 * @example
 * ```ts ignore
 * const start = await readStartRewards("experiments/results", "ablation", "train");
 * ```
 */
export async function readStartRewards(
  resultsDir: string,
  grid: string,
  kind?: EvalScoreKind,
): Promise<number[] | null> {
  for (const k of kind ? [kind] : (["heldout", "train"] as const)) {
    try {
      const e = JSON.parse(await Deno.readTextFile(`${resultsDir}/${grid}/${START_FILES[k]}`));
      return Array.isArray(e?.rewards) ? e.rewards : null;
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
    }
  }
  return null;
}

/**
 * Every cell's evaluation variance of the mean, from its `eval.json` (cells without one are
 * left out): of the held-out evaluation (`heldout_final`) or the training questions' (`final`),
 * by default the one {@link gridEffects} scores the cells on.
 *
 * @example
 * ```ts ignore
 * const v = await readEvaluationVariances(dir, "ablation", await readGridResults(dir, "ablation"));
 * ```
 */
export async function readEvaluationVariances(
  resultsDir: string,
  grid: string,
  cells: readonly CellResult[],
  kind: EvalScoreKind = evalScoreKind(cells),
): Promise<Map<string, number>> {
  const out = new Map<string, number>();
  const key = kind === "heldout" ? "heldout_final" : "final";
  for (const c of cells) {
    try {
      const e = JSON.parse(
        await Deno.readTextFile(`${cellDir(resultsDir, grid, c.cell)}/eval.json`),
      );
      const rewards = e?.[key]?.rewards;
      if (Array.isArray(rewards)) out.set(c.cell.id, evaluationVariance(rewards));
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
    }
  }
  return out;
}

/**
 * A stored grid's cells and effects against `reference`, every figure from one evaluation: the
 * held-out one when every cell has it, else the training questions' (`effects.score_kind`);
 * `kind: "train"` asks for the training questions' whatever the grid has (the second figure,
 * with its own CIs, contrasts and power).
 *
 * @example
 * ```ts ignore
 * const { cells, effects } = await readGridEffects("experiments/results", "ablation", "rollout/rollout_token_mean");
 * effects.score_kind; // "heldout" or "train"
 * ```
 */
export async function readGridEffects(
  resultsDir: string,
  grid: string,
  reference: string,
  score?: EvalScoreKind,
): Promise<{ cells: CellResult[]; effects: GridEffects }> {
  const cells = await readGridResults(resultsDir, grid);
  const kind = score ?? evalScoreKind(cells);
  const effects = gridEffects(
    cells,
    reference,
    await readEvaluationVariances(resultsDir, grid, cells, kind),
    await readStartRewards(resultsDir, grid, kind) ?? undefined,
    kind,
  );
  return { cells, effects };
}
