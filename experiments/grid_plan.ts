/**
 * Sizing the confirmation grid (issue #18, part 3): the pilot's noise, the testbed's predicted
 * effect, and the seeds per setting they call for.
 *
 * | quantity | how it is computed |
 * | -------- | ------------------ |
 * | σ (per-cell SD of the final evaluation reward) | pooled within-setting SD over the pilot's cells, df = cells − settings |
 * | pilot gain G | mean over the pilot's reference cells of final − start evaluation reward (paired, common random numbers) |
 * | testbed relative effect r_X | (final_X − final_ref) / (final_ref − start) in the testbed regime matched to the grid's environment |
 * | predicted effect δ_X | r_X · G — **assumption**: a setting changes what RL gains by the same fraction as in the testbed |
 * | seeds n | smallest n with power ≥ 0.8 for δ of the primary comparison, two-sided t-test at α = 0.05/3 (three comparisons with the reference) |
 * | predicted time | settings · n · (pilot's mean cell wall time) |
 *
 * The primary comparison is the paper's: its fix `rollout/rollout_token_mean` against its
 * starting point `sample/seq_mean_token_mean`.
 *
 * @module
 */
import { meanCi } from "../lib/util/stats.ts";
import type { MechanismStudy } from "./mechanism.ts";
import { detectableEffect, seedsFor } from "./power.ts";
import type { CellResult } from "./results.ts";

/** The setting the others are compared with. */
export const PLAN_REFERENCE = "rollout/rollout_token_mean";
/** The comparison the grid is sized for. */
export const PLAN_PRIMARY = "sample/seq_mean_token_mean";

/** One comparison with the reference. */
export interface PlannedComparison {
  setting: string;
  /** Testbed: (final − reference final) / reference gain. */
  testbed_relative_effect: number;
  /** r · pilot gain: the effect predicted on the grid. */
  predicted_effect: number;
  /** Seeds per setting for 80% power at α = 0.05/3 (null: no effect predicted). */
  seeds_needed: number | null;
}

/** The sizing of the grid. */
export interface GridPlan {
  regime: string;
  sd: number;
  sd_df: number;
  pilot_cells: number;
  pilot_gain: number;
  pilot_gain_ci95: number;
  comparisons: PlannedComparison[];
  primary: string;
  /** Seeds per setting the plan calls for (the primary comparison's, at least 2). */
  seeds_per_setting: number;
  cell_wall_s: number;
  predicted_wall_s: number;
  /** Seeds per setting that fit in `budget_s`, and the effect they detect at 80% power. */
  budget_s: number;
  seeds_in_budget: number;
  detectable_in_budget: number;
  /** One sentence per fact, for the notebook and the command's output. */
  lines: string[];
}

/** Options of {@link planGrid}. */
export interface PlanOptions {
  /** The testbed regime matched to the grid's environment (default `split_env_like…`). */
  regime?: string;
  settings?: number;
  comparisons?: number;
  power?: number;
  budget_s?: number;
}

/**
 * The pilot's pooled within-setting SD of a score.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { pooledSd } from "./grid_plan.ts";
 * const r = pooledSd(new Map([["a", [0, 2]], ["b", [1, 3]]]));
 * assert.equal(r.df, 2);
 * assert.equal(r.sd, Math.SQRT2);
 * ```
 */
export function pooledSd(groups: Map<string, number[]>): { sd: number; df: number } {
  let ss = 0;
  let df = 0;
  for (const xs of groups.values()) {
    if (xs.length < 2) continue;
    const m = xs.reduce((a, b) => a + b, 0) / xs.length;
    ss += xs.reduce((a, x) => a + (x - m) ** 2, 0);
    df += xs.length - 1;
  }
  return { sd: df > 0 ? Math.sqrt(ss / df) : Number.NaN, df };
}

/**
 * Sizes the grid from the pilot's cells and the testbed study.
 *
 * @example
 * ```ts ignore
 * const plan = planGrid(await readGridResults(dir, "ablation_pilot"), await readStudy(mech));
 * plan.seeds_per_setting;
 * ```
 */
export function planGrid(
  pilot: readonly CellResult[],
  study: MechanismStudy,
  options: PlanOptions = {},
): GridPlan {
  const regimeName = options.regime ??
    study.regimes.find((r) => r.regime.name.startsWith("split_env_like"))?.regime.name;
  const regime = study.regimes.find((r) => r.regime.name === regimeName);
  if (!regime) {
    throw new Error(
      `planGrid: the testbed study has no regime ${regimeName ?? "split_env_like*"} ` +
        "(run the full study: deno task ablation:mechanism)",
    );
  }
  const measured = pilot.filter((c) =>
    typeof c.summary.final_val_reward === "number" && typeof c.summary.start_val_reward === "number"
  );
  if (measured.length < 2) throw new Error("planGrid: the pilot has fewer than 2 evaluated cells");
  const bySetting = new Map<string, number[]>();
  for (const c of measured) {
    bySetting.set(c.cell.setting, [
      ...(bySetting.get(c.cell.setting) ?? []),
      c.summary.final_val_reward as number,
    ]);
  }
  const { sd, df } = pooledSd(bySetting);
  const gainOf = (c: CellResult) =>
    (c.summary.final_val_reward as number) - (c.summary.start_val_reward as number);
  const refCells = measured.filter((c) => c.cell.setting === PLAN_REFERENCE);
  const gain = meanCi((refCells.length ? refCells : measured).map(gainOf));
  const ref = regime.settings.find((s) => s.setting === PLAN_REFERENCE);
  if (!ref) throw new Error(`planGrid: the testbed study lacks ${PLAN_REFERENCE}`);
  const refGain = ref.final.mean - ref.curve[0].mean;
  const nComparisons = options.comparisons ?? 3;
  const target = options.power ?? 0.8;
  const comparisons = regime.settings.filter((s) => s.setting !== PLAN_REFERENCE).map((s) => {
    const r = s.diff.mean / refGain;
    const delta = r * gain.mean;
    const seeds = Number.isFinite(delta) && delta !== 0 && sd > 0
      ? seedsFor(delta, { sd, comparisons: nComparisons }, target)
      : null;
    return {
      setting: s.setting,
      testbed_relative_effect: r,
      predicted_effect: delta,
      seeds_needed: seeds,
    };
  });
  const primary = comparisons.find((c) => c.setting === PLAN_PRIMARY) ?? comparisons[0];
  const seedsPerSetting = Math.max(2, primary.seeds_needed ?? 2);
  const settings = options.settings ?? bySetting.size;
  const cellWall = measured.reduce((a, c) => a + c.summary.wall_s, 0) / measured.length;
  const budget = options.budget_s ?? 3600;
  const inBudget = Math.max(2, Math.floor(budget / (settings * cellWall)));
  const detectable = detectableEffect(inBudget, { sd, comparisons: nComparisons }, target);
  const fmt = (x: number, d = 3) => (x >= 0 ? "+" : "") + x.toFixed(d);
  const lines = [
    `pilot: ${measured.length} cells, per-cell SD of the final evaluation reward ${
      sd.toFixed(3)
    } (pooled, ${df} df); reference gain ${fmt(gain.mean)} ± ${gain.ci95.toFixed(3)}`,
    ...comparisons.map((c) =>
      `${c.setting} vs ${PLAN_REFERENCE}: testbed ${fmt(100 * c.testbed_relative_effect, 1)}% ` +
      `of the reference's gain → predicted ${fmt(c.predicted_effect, 4)} on the grid; ` +
      `${c.seeds_needed ?? "no"} seeds per setting for ${Math.round(target * 100)}% power`
    ),
    `plan: ${seedsPerSetting} seeds per setting (primary: ${primary.setting}), ${settings} ` +
    `settings × ${seedsPerSetting} = ${settings * seedsPerSetting} cells × ${
      cellWall.toFixed(0)
    } s ≈ ${(settings * seedsPerSetting * cellWall / 3600).toFixed(1)} h here`,
    `within ${budget / 60} min: ${inBudget} seeds per setting, detecting ${
      detectable.toFixed(3)
    } at ${Math.round(target * 100)}% power`,
  ];
  return {
    regime: regime.regime.name,
    sd,
    sd_df: df,
    pilot_cells: measured.length,
    pilot_gain: gain.mean,
    pilot_gain_ci95: gain.ci95,
    comparisons,
    primary: primary.setting,
    seeds_per_setting: seedsPerSetting,
    cell_wall_s: cellWall,
    predicted_wall_s: settings * seedsPerSetting * cellWall,
    budget_s: budget,
    seeds_in_budget: inBudget,
    detectable_in_budget: detectable,
    lines,
  };
}
