/**
 * `deno task ablation [--quick]`: the normalization/advantage ablation (the paper's Figure 9
 * analogue) on the split-arithmetic environment, CPU-sized. Four settings — sample-level
 * advantage + `seq_mean_token_mean`, rollout-level advantage + `seq_mean_token_mean`
 * (rollout-level advantage alone), rollout-level advantage + `rollout_token_mean` (the
 * paper's choice), and rollout-level advantage + `token_mean` — × 3 seeds, one training-loop
 * run per cell. Results go to `experiments/results/ablation_quick/` (`--quick`) or
 * `experiments/results/ablation/`; finished cells are never rerun (delete a cell's folder to
 * rerun it). Ends with one line per setting:
 * `cell <advantage>/<normalization>: final_reward=<mean> ± <95% CI half-width>`.
 *
 * Flags: `--quick` (CI-sized grid), `--seeds <n>` (default 3), `--results <dir>`,
 * `--limit <n>` (run at most n cells now, resume later), `--concurrency <n>` (harness
 * processes).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { ABLATION_SETTINGS, expandGrid, type GridSpecInput } from "./grid.ts";
import { FULL_SETTINGS, QUICK_SETTINGS, startLoopCells } from "./loop_cell.ts";
import { DEFAULT_RESULTS_DIR, readGridResults } from "./results.ts";
import { runGrid } from "./runner.ts";
import { orderingVerdict, summarise } from "./stats.ts";

/**
 * The ablation grid (`quick`: the CI-sized one).
 *
 * @example
 * ```ts
 * import { ablationGrid } from "./ablation.ts";
 * ablationGrid(true).name; // "ablation_quick"
 * ```
 */
export function ablationGrid(quick: boolean, seeds = 3): GridSpecInput {
  const settings = quick ? QUICK_SETTINGS : FULL_SETTINGS;
  return {
    name: quick ? "ablation_quick" : "ablation",
    settings: [...ABLATION_SETTINGS],
    merge: ["prefix_merge"],
    seeds: Array.from({ length: seeds }, (_, i) => i),
    env: ["split-arithmetic"],
    base: { ...settings },
  };
}

/** The figures-contract line of one setting. */
export function cellLine(setting: string, mean: number, ci95: number): string {
  const ci = Number.isFinite(ci95) ? ci95 : 0;
  return `cell ${setting}: final_reward=${mean.toFixed(3)} ± ${ci.toFixed(3)}`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      quick: { type: "boolean", default: false },
      seeds: { type: "string", default: "3" },
      results: { type: "string", default: DEFAULT_RESULTS_DIR },
      limit: { type: "string" },
      concurrency: { type: "string", default: "16" },
    },
  });
  const seeds = Number(values.seeds);
  if (!Number.isInteger(seeds) || seeds < 1) throw new Error("--seeds: expected an integer ≥ 1");
  const limit = values.limit === undefined ? undefined : Number(values.limit);
  if (limit !== undefined && (!Number.isInteger(limit) || limit < 0)) {
    throw new Error("--limit: expected an integer ≥ 0");
  }
  const grid = ablationGrid(values.quick, seeds);
  const t0 = performance.now();
  const pending = await pendingCells(values.results, grid);
  if (pending > 0 && limit !== 0) {
    await using cells = await startLoopCells({
      concurrency: Number(values.concurrency),
      log: (line) => console.log(line),
    });
    await runGrid(grid, cells.runner, {
      resultsDir: values.results,
      ...(limit !== undefined ? { limit } : {}),
    });
  } else {
    console.log(`[grid] ${grid.name}: every cell already done; reading the stored results`);
  }
  const results = await readGridResults(values.results, grid.name);
  const summaries = summarise(results);
  console.log(
    `${grid.name}: ${results.length} cells in ${((performance.now() - t0) / 1000).toFixed(1)}s ` +
      `(score = ${summaries[0]?.score_kind ?? "none"})`,
  );
  console.log(orderingVerdict(summaries).sentence);
  for (const s of summaries) console.log(cellLine(s.setting, s.score.mean, s.score.ci95));
}

async function pendingCells(resultsDir: string, grid: GridSpecInput): Promise<number> {
  const done = new Set((await readGridResults(resultsDir, grid.name)).map((r) => r.cell.id));
  return expandGrid(grid).filter((c) => !done.has(c.id)).length;
}

export { ABLATION_SETTINGS };

if (import.meta.main) await main();
