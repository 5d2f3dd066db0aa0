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
  wall_s: number;
  /** CPU seconds of the cell (this process, its harness processes, the worker), when measured. */
  cpu_s?: number;
  finished_at: string;
  /** Code fingerprint (`provenance.ts`) of the run that produced the cell, when recorded. */
  code_hash?: string;
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
