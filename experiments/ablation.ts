/**
 * `deno task ablation [--pilot]`: the confirmation grid of the normalization/advantage ablation
 * (the paper's Figure 9 analogue) on the full stack — the four settings
 * ({@link ABLATION_SETTINGS}) as training-loop runs on the split-arithmetic environment
 * (`loop_cell.ts`), every cell evaluated on 200 rollouts with common random numbers before RL
 * (shared) and after its last step.
 *
 * - `--pilot` (alias `--quick`): 2 seeds per setting → `experiments/results/ablation_pilot/`.
 * - default: the sized grid → `experiments/results/ablation/`, with as many seeds per setting
 *   as the power calculation (`grid_plan.ts`) asks for, from the committed pilot and testbed
 *   results (checked against the current code: a difference is printed as a warning, since a
 *   plan only forecasts), or as many as fit `--budget-min` at the pilot's cell time when that
 *   is fewer (said in the output); `--seeds <n>` overrides it, `--plan` prints the plan and the
 *   predicted time and stops.
 *
 * Finished cells are never rerun; a grid whose cells other code produced is not resumed (see
 * `runner.ts`). Ends with one line per setting,
 * `cell <advantage>/<normalization>: final_reward=<mean> ± <95% CI half-width>`, and one line
 * per comparison with the reference, `effect <setting> − rollout/rollout_token_mean: <d> ± <ci>`.
 *
 * Flags: `--pilot`, `--plan`, `--seeds <n>`, `--results <dir>`, `--limit <n>` (run at most n
 * cells now, resume later), `--concurrency <n>` (harness processes), `--budget-min <m>`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { meanCi } from "../lib/util/stats.ts";
import { ABLATION_SETTINGS, expandGrid, type GridSpecInput, settingLabel } from "./grid.ts";
import { gridEffects, readEvaluationVariances, readStartRewards } from "./grid_effects.ts";
import { type GridPlan, PLAN_PRIMARY, PLAN_REFERENCE, planGrid } from "./grid_plan.ts";
import { CELL_SETTINGS, startLoopCells } from "./loop_cell.ts";
import { readStudy, studyDir } from "./mechanism.ts";
import { codeFingerprint, type CodeSpecInput, StaleResultsError } from "./provenance.ts";
import { DEFAULT_RESULTS_DIR, readGridResults } from "./results.ts";
import { LOOP_CELL_CANARY, recordCanary } from "./canary.ts";
import { resultStatus } from "./results_status.ts";
import { runGrid } from "./runner.ts";
import { orderingVerdict, summarise } from "./stats.ts";

/**
 * What produces a grid's results: the cell runner (loop, stack, environment, evaluation), the
 * grid runner, the harness process it spawns and the worker's Python. Not this command's
 * planning code: it picks the number of seeds, recorded in `grid.json`, and computes no result.
 */
export const ABLATION_CODE: CodeSpecInput = {
  entries: ["experiments/loop_cell.ts", "experiments/runner.ts", "lib/harness/builtin/main.ts"],
  extra: ["lib/trainer/worker/reins_worker/*.py"],
  data: ["data/tokenizers/char/*.json"],
};

/** Seeds per setting of the pilot. */
export const PILOT_SEEDS = 2;

/**
 * The ablation grid: the pilot (`pilot`) or the sized grid with `seeds` seeds per setting.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ablationGrid } from "./ablation.ts";
 * assert.equal(ablationGrid(true).name, "ablation_pilot");
 * assert.equal(ablationGrid(false, 5).seeds?.length, 5);
 * ```
 */
export function ablationGrid(pilot: boolean, seeds = PILOT_SEEDS): GridSpecInput {
  // Cells run settings first, seeds within: the pilot starts with the two settings of the
  // primary comparison, so a pilot stopped half-way still measures both.
  const first = [PLAN_REFERENCE, PLAN_PRIMARY];
  const order = [...ABLATION_SETTINGS].sort((a, b) =>
    rank(first, settingLabel(a)) - rank(first, settingLabel(b))
  );
  return {
    name: pilot ? "ablation_pilot" : "ablation",
    settings: pilot ? order : [...ABLATION_SETTINGS],
    merge: ["prefix_merge"],
    seeds: Array.from({ length: pilot ? PILOT_SEEDS : seeds }, (_, i) => i),
    env: ["split-arithmetic"],
    base: { ...CELL_SETTINGS },
    // The sized grid runs seed by seed, so a run stopped early has its seeds balanced.
    order: pilot ? "settings" : "seeds",
  };
}

function rank(first: string[], label: string): number {
  const i = first.indexOf(label);
  return i < 0 ? first.length : i;
}

/**
 * The figures-contract line of one setting.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cellLine } from "./ablation.ts";
 * assert.equal(cellLine("rollout/token_mean", 0.5, 0.1), "cell rollout/token_mean: final_reward=0.500 ± 0.100");
 * ```
 */
export function cellLine(setting: string, mean: number, ci95: number): string {
  const ci = Number.isFinite(ci95) ? ci95 : 0;
  return `cell ${setting}: final_reward=${mean.toFixed(3)} ± ${ci.toFixed(3)}`;
}

/**
 * Checks that results in `dir` may size a grid: null when they are current or confirmed by
 * their canary (`results_status.ts`), else why not, said in words. A plan is a forecast:
 * results of other code still estimate the noise and the cost, so planning uses them with the
 * difference stated (plots mark them stale). Throws {@link StaleResultsError} when nothing says
 * which code produced them.
 *
 * @example
 * ```ts ignore
 * const difference = await planningProvenance("experiments/results/ablation_pilot");
 * ```
 */
export async function planningProvenance(dir: string): Promise<string | null> {
  const status = await resultStatus(dir);
  if (!status.provenance) throw new StaleResultsError(dir, status.reason, null);
  return status.state === "stale" ? status.reason : null;
}

/**
 * The power plan of the sized grid from the committed pilot and testbed results, after
 * checking that the current code produced both.
 */
export async function loadPlan(
  resultsDir: string,
  budget_s = 3600,
  warn: (line: string) => void = console.warn,
): Promise<GridPlan> {
  const pilot = ablationGrid(true);
  for (const dir of [`${resultsDir}/${pilot.name}`, studyDir(resultsDir, false)]) {
    const difference = await planningProvenance(dir);
    if (difference) warn(`[plan] warning: ${difference}`);
  }
  return planGrid(
    await readGridResults(resultsDir, pilot.name),
    await readStudy(studyDir(resultsDir, false)),
    { budget_s, settings: ABLATION_SETTINGS.length },
  );
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      pilot: { type: "boolean", default: false },
      quick: { type: "boolean", default: false },
      plan: { type: "boolean", default: false },
      seeds: { type: "string" },
      results: { type: "string", default: DEFAULT_RESULTS_DIR },
      limit: { type: "string" },
      concurrency: { type: "string", default: "16" },
      "budget-min": { type: "string", default: "60" },
    },
  });
  const pilot = values.pilot || values.quick;
  const limit = values.limit === undefined ? undefined : Number(values.limit);
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 0)) {
    throw new Error("--limit: expected an integer ≥ 0");
  }
  let seeds = PILOT_SEEDS;
  if (!pilot) {
    const plan = await loadPlan(values.results, Number(values["budget-min"]) * 60);
    for (const line of plan.lines) console.log(`[plan] ${line}`);
    console.log(`power_seeds_per_setting: ${plan.seeds_per_setting}`);
    console.log(`predicted_wall_min: ${(plan.predicted_wall_s / 60).toFixed(0)}`);
    // A plan can ask for thousands of hours; without --seeds the grid runs what fits the budget.
    seeds = Math.min(plan.seeds_per_setting, plan.seeds_in_budget);
    if (seeds < plan.seeds_per_setting && values.seeds === undefined) {
      console.log(
        `[plan] running ${seeds} seeds per setting (what fits ${values["budget-min"]} min at the ` +
          `pilot's cell time), not the ${plan.seeds_per_setting} the plan asks for; ` +
          "--seeds <n> chooses",
      );
    }
  }
  if (values.seeds !== undefined) {
    seeds = Number(values.seeds);
    if (!Number.isInteger(seeds) || seeds < 2) throw new Error("--seeds: expected an integer ≥ 2");
  }
  if (values.plan) return;
  const grid = ablationGrid(pilot, seeds);
  const command = `deno task ablation${pilot ? " --pilot" : ` --seeds ${seeds}`}`;
  const t0 = performance.now();
  const done = new Set((await readGridResults(values.results, grid.name)).map((r) => r.cell.id));
  const pending = expandGrid(grid).filter((c) => !done.has(c.id)).length;
  if (pending > 0 && limit !== 0) {
    const code = await codeFingerprint(ABLATION_CODE);
    await using cells = await startLoopCells({
      concurrency: Number(values.concurrency),
      cacheTag: code.hash.slice(0, 12),
      log: (line) => console.log(line),
    });
    await runGrid(grid, cells.runner, {
      resultsDir: values.results,
      code: ABLATION_CODE,
      command,
      ...(limit !== undefined ? { limit } : {}),
    });
    // The canary is recorded on the code that ran the cells (runGrid checked it did not move).
    await recordCanary(`${values.results}/${grid.name}`, LOOP_CELL_CANARY);
  } else {
    console.log(`[grid] ${grid.name}: every cell already done; reading the stored results`);
    const status = await resultStatus(`${values.results}/${grid.name}`);
    console.log(`[grid] ${grid.name}: ${status.state} — ${status.reason}`);
    if (status.canary_failed) throw new StaleResultsError(status.dir, status.reason, status.diff);
  }
  const results = await readGridResults(values.results, grid.name);
  const summaries = summarise(results);
  console.log(
    `${grid.name}: ${results.length} cells in ${((performance.now() - t0) / 1000).toFixed(1)}s ` +
      `(score = ${summaries[0]?.score_kind ?? "none"})`,
  );
  console.log(orderingVerdict(summaries).sentence);
  for (const s of summaries) console.log(cellLine(s.setting, s.score.mean, s.score.ci95));
  const hasReference = summaries.some((s) => s.setting === PLAN_REFERENCE);
  if (hasReference) {
    const effects = gridEffects(
      results,
      PLAN_REFERENCE,
      await readEvaluationVariances(values.results, grid.name, results),
      await readStartRewards(values.results, grid.name) ?? undefined,
    );
    for (const s of effects.settings) {
      if (!s.diff) continue;
      const sign = s.diff.mean >= 0 ? "+" : "";
      console.log(
        `effect ${s.setting} − ${PLAN_REFERENCE}: ${sign}${s.diff.mean.toFixed(3)} ± ${
          s.diff.ci95.toFixed(3)
        } (95%; ± ${s.diff.ci_family.toFixed(3)} family-wise: ${s.verdict})`,
      );
    }
    for (const c of effects.contrasts) {
      console.log(
        `factor ${c.name}: ${c.mean >= 0 ? "+" : ""}${c.mean.toFixed(3)} ± ${
          c.ci95.toFixed(3)
        } (${c.verdict})`,
      );
    }
    console.log(effects.power_line);
    console.log(`detectable_effect: ${effects.detectable.toFixed(3)}`);
  }
  const gains = results.filter((r) =>
    typeof r.summary.start_val_reward === "number" && r.summary.final_val_reward !== null
  ).map((r) => (r.summary.final_val_reward as number) - (r.summary.start_val_reward as number));
  const g = meanCi(gains);
  console.log(`gain_all_cells: ${g.mean.toFixed(3)} ± ${g.ci95.toFixed(3)} (n=${g.n})`);
}

export { ABLATION_SETTINGS };

if (import.meta.main) await main();
