/**
 * Results layout of a grid, one folder per cell:
 *
 * ```
 * <results>/<grid name>/grid.json           the grid as run
 * <results>/<grid name>/<cell id>/cell.json  the cell, its seed and the full run config
 * <results>/<grid name>/<cell id>/metrics.jsonl  one line per RL step (the loop's metrics)
 * <results>/<grid name>/<cell id>/metrics.parquet  the same rows (nodejs-polars)
 * <results>/<grid name>/<cell id>/done.json  written last: the cell finished (summary)
 * ```
 *
 * A cell counts as done only when `done.json` exists, so a cell killed half-way is rerun.
 *
 * @module
 */
import pl from "nodejs-polars";
import type { JsonObject } from "../lib/schema.ts";
import type { Cell } from "./grid.ts";

/** Where results go unless told otherwise (`experiments/results`). */
export const DEFAULT_RESULTS_DIR: string = decodeURIComponent(
  new URL("./results", import.meta.url).pathname,
);

/** One step's metrics row, as a cell runner reports it (flat JSON values). */
export type MetricsRow = Record<string, number | string | boolean | null | JsonObject>;

/** What a finished cell recorded in `done.json`. */
export interface CellSummary {
  id: string;
  setting: string;
  seed: number;
  steps: number;
  /** The last step's training reward. */
  final_reward: number;
  /** Evaluation reward after the last step (null: not measured). */
  final_val_reward: number | null;
  /** The same evaluation before the first RL step (null or absent: not measured). */
  start_val_reward?: number | null;
  /**
   * Evaluation reward on held-out questions after the last step (absent: the grid had no
   * held-out evaluation; see {@link evalScoreKind}).
   */
  final_heldout_reward?: number | null;
  /** The same held-out evaluation before the first RL step. */
  start_heldout_reward?: number | null;
  wall_s: number;
  /** CPU seconds of the cell (this process, its harness processes, the worker), when measured. */
  cpu_s?: number;
  finished_at: string;
  /** Code fingerprint (`provenance.ts`) of the run that produced the cell, when recorded. */
  code_hash?: string;
}

/**
 * Which evaluation a grid is scored on: `heldout` (questions never trained on) when every cell
 * measured it, else `train` (the evaluation on the training questions, `final_val_reward`).
 */
export type EvalScoreKind = "heldout" | "train";

/**
 * The evaluation a grid is scored on: held-out when every cell recorded a held-out final
 * score, otherwise (a grid from before the held-out evaluation, or a mix) the training
 * questions'.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { evalScoreKind } from "./results.ts";
 * const cell = (summary: object) => ({ summary }) as never;
 * assert.equal(evalScoreKind([cell({ final_val_reward: 0.5 })]), "train");
 * assert.equal(evalScoreKind([cell({ final_val_reward: 0.5, final_heldout_reward: 0.2 })]), "heldout");
 * assert.equal(evalScoreKind([]), "train");
 * ```
 */
export function evalScoreKind(results: readonly Pick<CellResult, "summary">[]): EvalScoreKind {
  return results.length > 0 &&
      results.every((r) => typeof r.summary.final_heldout_reward === "number")
    ? "heldout"
    : "train";
}

/**
 * A cell's evaluation scores of one kind, before and after RL (null: not measured).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { evalScores } from "./results.ts";
 * const summary = { final_val_reward: 0.6, start_val_reward: 0.4, final_heldout_reward: 0.2 };
 * assert.deepEqual(evalScores(summary as never, "heldout"), { final: 0.2, start: null });
 * assert.deepEqual(evalScores(summary as never, "train"), { final: 0.6, start: 0.4 });
 * ```
 */
export function evalScores(
  summary: CellSummary,
  kind: EvalScoreKind,
): { final: number | null; start: number | null } {
  const num = (x: unknown) => typeof x === "number" ? x : null;
  return kind === "heldout"
    ? { final: num(summary.final_heldout_reward), start: num(summary.start_heldout_reward) }
    : { final: num(summary.final_val_reward), start: num(summary.start_val_reward) };
}

/** A cell's stored results. */
export interface CellResult {
  cell: Cell;
  config: JsonObject;
  metrics: MetricsRow[];
  summary: CellSummary;
}

/** The folder of one cell. */
export function cellDir(resultsDir: string, grid: string, cell: Pick<Cell, "id">): string {
  return `${resultsDir}/${grid}/${cell.id}`;
}

async function exists(path: string): Promise<boolean> {
  try {
    await Deno.stat(path);
    return true;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return false;
    throw error;
  }
}

/** True when the cell finished (its `done.json` exists). */
export function isDone(resultsDir: string, grid: string, cell: Pick<Cell, "id">): Promise<boolean> {
  return exists(`${cellDir(resultsDir, grid, cell)}/done.json`);
}

/**
 * Writes a finished cell: config, metrics (JSONL, and Parquet when `parquet`), then
 * `done.json` last.
 *
 * @example
 * ```ts ignore
 * await writeCell("experiments/results", "quick", cell, config, rows, summary);
 * ```
 */
export async function writeCell(
  resultsDir: string,
  grid: string,
  result: CellResult,
  options: { parquet?: boolean } = {},
): Promise<void> {
  const dir = cellDir(resultsDir, grid, result.cell);
  await Deno.mkdir(dir, { recursive: true });
  await Deno.remove(`${dir}/done.json`).catch(() => undefined);
  await Deno.writeTextFile(
    `${dir}/cell.json`,
    JSON.stringify({ cell: result.cell, seed: result.cell.seed, config: result.config }, null, 2) +
      "\n",
  );
  await Deno.writeTextFile(
    `${dir}/metrics.jsonl`,
    result.metrics.map((m) => JSON.stringify(m) + "\n").join(""),
  );
  if (options.parquet && result.metrics.length > 0) {
    toFrame(result.metrics).writeParquet(`${dir}/metrics.parquet`);
  }
  await Deno.writeTextFile(`${dir}/done.json`, JSON.stringify(result.summary, null, 2) + "\n");
}

/** Metrics rows as a polars frame: nested objects become `<key>.<field>` columns. */
export function toFrame(rows: MetricsRow[]): pl.DataFrame {
  const flat = rows.map((row) => {
    const out: Record<string, number | string | boolean | null> = {};
    for (const [key, value] of Object.entries(row)) {
      if (value !== null && typeof value === "object") {
        for (const [k, v] of Object.entries(value)) {
          out[`${key}.${k}`] = typeof v === "number" || typeof v === "string" ? v : null;
        }
      } else out[key] = value;
    }
    return out;
  });
  return pl.readRecords(flat);
}

/**
 * Reads every finished cell of a grid (unfinished ones are left out).
 *
 * @example
 * ```ts ignore
 * const cells = await readGridResults("experiments/results", "ablation_quick");
 * cells.map((c) => c.summary.final_reward);
 * ```
 */
export async function readGridResults(resultsDir: string, grid: string): Promise<CellResult[]> {
  const root = `${resultsDir}/${grid}`;
  if (!(await exists(root))) return [];
  const out: CellResult[] = [];
  for await (const entry of Deno.readDir(root)) {
    if (!entry.isDirectory) continue;
    const dir = `${root}/${entry.name}`;
    if (!(await exists(`${dir}/done.json`))) continue;
    const stored = JSON.parse(await Deno.readTextFile(`${dir}/cell.json`)) as {
      cell: Cell;
      config: JsonObject;
    };
    const metrics = (await Deno.readTextFile(`${dir}/metrics.jsonl`)).split("\n")
      .filter((line) => line.trim() !== "")
      .map((line) => JSON.parse(line) as MetricsRow);
    const summary = JSON.parse(await Deno.readTextFile(`${dir}/done.json`)) as CellSummary;
    out.push({ cell: stored.cell, config: stored.config, metrics, summary });
  }
  return out.sort((a, b) => a.cell.id.localeCompare(b.cell.id));
}
