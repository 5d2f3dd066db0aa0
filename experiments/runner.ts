/**
 * The experiment runner: expands a grid into cells, runs each unfinished cell through a
 * {@link CellRunner} (the training loop on CPU by default, see `loop_cell.ts`; a remote GPU
 * worker through the trainer client when configured), stores each cell's metrics, config and
 * seed under `<results>/<grid>/<cell>/`, and resumes a partly finished grid without rerunning
 * done cells. A progress line shows cells done, running and the ETA.
 *
 * @example
 * ```ts ignore
 * import { runGrid } from "./runner.ts";
 * const report = await runGrid(
 *   { name: "demo", advantage: ["sample", "rollout"], seeds: [0, 1, 2] },
 *   async (cell) => ({ config: { seed: cell.seed }, metrics: [{ step: 0, reward_mean: 0.5 }] }),
 * );
 * report.ran.length; // 6 the first time, 0 when run again
 * ```
 *
 * @module
 */
import type { JsonObject } from "../lib/schema.ts";
import {
  type Cell,
  expandGrid,
  type GridSpec,
  type GridSpecInput,
  GridSpecSchema,
} from "./grid.ts";
import { cpuSeconds, type GridProgress, lineProgress } from "./progress.ts";
import {
  type CellResult,
  type CellSummary,
  DEFAULT_RESULTS_DIR,
  isDone,
  type MetricsRow,
  readGridResults,
  writeCell,
} from "./results.ts";
import { parseOrThrow } from "../lib/schema.ts";
import {
  type CodeFingerprint,
  codeFingerprint,
  type CodeSpecInput,
  diffFingerprints,
  readProvenance,
  StaleResultsError,
  writeProvenance,
} from "./provenance.ts";

/** Refuses to add cells to a grid whose finished cells other code produced. */
async function assertResumable(gridDir: string, code: CodeFingerprint): Promise<void> {
  const stored = await readProvenance(gridDir);
  let doneHashes: (string | undefined)[] = [];
  try {
    for await (const entry of Deno.readDir(gridDir)) {
      if (!entry.isDirectory) continue;
      try {
        const done = JSON.parse(await Deno.readTextFile(`${gridDir}/${entry.name}/done.json`));
        doneHashes.push(done.code_hash);
      } catch (error) {
        if (!(error instanceof Deno.errors.NotFound)) throw error;
      }
    }
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return;
    throw error;
  }
  doneHashes = doneHashes.filter((h) => h !== code.hash);
  if (doneHashes.length === 0) return;
  const diff = stored ? diffFingerprints(stored.code, code) : null;
  const what = diff
    ? [...diff.changed, ...diff.added, ...diff.removed].join(", ") || "npm packages"
    : "no provenance recorded";
  throw new StaleResultsError(
    gridDir,
    `${gridDir}: ${doneHashes.length} finished cell(s) were produced by other code than this ` +
      `checkout (${what}); a grid is not resumed across code changes — delete ${gridDir} to ` +
      "run it again",
    diff,
  );
}

/** What a cell runner returns for one cell. */
export interface CellOutput {
  /** The full config the cell ran with (recorded next to its metrics). */
  config: JsonObject;
  /** One row per RL step; `reward_mean` is the training reward of the step. */
  metrics: MetricsRow[];
  /** Evaluation reward after the last step, when the runner measured it. */
  final_val_reward?: number | null;
  /** The same evaluation of the starting policy (before any RL step), when measured. */
  start_val_reward?: number | null;
  /** Evaluation reward on held-out questions after the last step, when measured. */
  final_heldout_reward?: number | null;
  /** The same held-out evaluation before any RL step, when measured. */
  start_heldout_reward?: number | null;
}

/** CPU seconds a cell used (`cpuSeconds` before and after), when the platform tells. */
function cpuSince(start: number | null): number | null {
  const now = cpuSeconds();
  return start === null || now === null ? null : now - start;
}

/** Runs one cell; `dir` is the cell's results folder (scratch files may go elsewhere). */
export type CellRunner = (cell: Cell, context: { grid: GridSpec; dir: string }) => Promise<
  CellOutput
>;

/** Options of {@link runGrid}. */
export interface RunGridOptions {
  /** Results root (default `experiments/results`). */
  resultsDir?: string;
  /** Cells run at once (default 1: a CPU cell already uses the machine). */
  concurrency?: number;
  /** Also write `metrics.parquet` (default true). */
  parquet?: boolean;
  progress?: GridProgress;
  /** Run only the first `limit` unfinished cells (the rest stay for a later resume). */
  limit?: number;
  /**
   * The experiment's code (`provenance.ts`): fingerprinted when the grid starts, recorded in
   * `<grid>/provenance.json` with the grid and `command`, and stamped on every cell. A grid
   * whose finished cells were produced by other code is not resumed (mixing them would make
   * its results belong to no code): the run throws, naming the files that changed.
   */
  code?: CodeSpecInput;
  /** The command that reproduces the grid (recorded with the provenance). */
  command?: string;
  /** Repository root the `code` paths are relative to (default: this checkout's). */
  codeRoot?: string;
}

/** What {@link runGrid} did. */
export interface GridReport {
  grid: GridSpec;
  cells: Cell[];
  /** Cells found done and not rerun. */
  skipped: string[];
  /** Cells run now. */
  ran: string[];
  /** Every finished cell's stored results (done before and now). */
  results: CellResult[];
  wall_s: number;
}

/**
 * Runs every unfinished cell of a grid and returns all finished cells' results. A cell that
 * throws is reported and fails the grid (after the cells already running finish); the cells
 * done so far stay done.
 */
export async function runGrid(
  input: GridSpecInput,
  runCell: CellRunner,
  options: RunGridOptions = {},
): Promise<GridReport> {
  const t0 = performance.now();
  const grid = parseOrThrow(GridSpecSchema, input, "grid");
  const resultsDir = options.resultsDir ?? DEFAULT_RESULTS_DIR;
  const concurrency = options.concurrency ?? 1;
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new Error(`options.concurrency: expected a positive integer, got ${concurrency}`);
  }
  const cells = expandGrid(grid);
  const gridDir = `${resultsDir}/${grid.name}`;
  const code = options.code ? await codeFingerprint(options.code, options.codeRoot) : null;
  if (code) await assertResumable(gridDir, code);
  await Deno.mkdir(gridDir, { recursive: true });
  // Written now (a grid stopped half-way still says which code its cells come from; each
  // cell also carries the hash) and checked again when the grid ends.
  const provenance = code
    ? () =>
      writeProvenance(gridDir, {
        command: options.command ?? `runGrid(${grid.name})`,
        config: grid,
        code,
      }, options.codeRoot)
    : () => Promise.resolve();
  await provenance();
  await Deno.writeTextFile(
    `${resultsDir}/${grid.name}/grid.json`,
    JSON.stringify(grid, null, 2) + "\n",
  );
  const skipped: string[] = [];
  let todo: Cell[] = [];
  for (const cell of cells) {
    if (await isDone(resultsDir, grid.name, cell)) skipped.push(cell.id);
    else todo.push(cell);
  }
  if (options.limit !== undefined) todo = todo.slice(0, options.limit);
  const progress = options.progress ?? lineProgress();
  progress.start({ total: cells.length, done: skipped.length, todo: todo.length });

  const ran: string[] = [];
  const errors: string[] = [];
  let next = 0;
  const worker = async () => {
    while (next < todo.length && errors.length === 0) {
      const cell = todo[next++];
      const dir = `${resultsDir}/${grid.name}/${cell.id}`;
      progress.cellStarted(cell);
      const started = performance.now();
      const cpu0 = concurrency === 1 ? cpuSeconds() : null;
      try {
        const out = await runCell(cell, { grid, dir });
        const cpu_s = cpuSince(cpu0);
        const wall_s = (performance.now() - started) / 1000;
        const last = out.metrics.at(-1);
        const summary: CellSummary = {
          id: cell.id,
          setting: cell.setting,
          seed: cell.seed,
          steps: out.metrics.length,
          final_reward: typeof last?.reward_mean === "number" ? last.reward_mean : Number.NaN,
          final_val_reward: out.final_val_reward ?? null,
          start_val_reward: out.start_val_reward ?? null,
          ...(out.final_heldout_reward !== undefined || out.start_heldout_reward !== undefined
            ? {
              final_heldout_reward: out.final_heldout_reward ?? null,
              start_heldout_reward: out.start_heldout_reward ?? null,
            }
            : {}),
          wall_s,
          ...(cpu_s !== null ? { cpu_s } : {}),
          finished_at: new Date().toISOString(),
          ...(code ? { code_hash: code.hash } : {}),
        };
        await writeCell(resultsDir, grid.name, {
          cell,
          config: out.config,
          metrics: out.metrics,
          summary,
        }, { parquet: options.parquet ?? true });
        ran.push(cell.id);
        progress.cellDone(cell, summary);
      } catch (error) {
        const message = error instanceof Error ? error.message : String(error);
        errors.push(`${cell.id}: ${message}`);
        progress.cellFailed(cell, message);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.min(concurrency, todo.length) }, worker));
  progress.finish();
  if (errors.length > 0) {
    throw new Error(`grid ${grid.name}: ${errors.length} cell(s) failed:\n${errors.join("\n")}`);
  }
  await provenance();
  return {
    grid,
    cells,
    skipped,
    ran,
    results: await readGridResults(resultsDir, grid.name),
    wall_s: (performance.now() - t0) / 1000,
  };
}

export { type Cell, cellId, expandGrid, type GridSpec, type GridSpecInput } from "./grid.ts";
export { type GridProgress, lineProgress, silentGridProgress } from "./progress.ts";
export {
  type CellResult,
  type CellSummary,
  DEFAULT_RESULTS_DIR,
  type MetricsRow,
  readGridResults,
  toFrame,
} from "./results.ts";
