/**
 * Experiment grids: advantage level × normalization mode × merge strategy × seeds ×
 * environment, expanded into cells with stable ids (a cell's id names its results folder, so
 * a rerun finds what is already done).
 *
 * @module
 */
import { z } from "zod";
import {
  AdvantageLevelSchema,
  MergeStrategySchema,
  NormalizationModeSchema,
  parseOrThrow,
} from "../lib/schema.ts";

/** One (advantage level, normalization mode) pair; a grid lists the pairs it compares. */
export const SettingSchema = z.object({
  advantage: AdvantageLevelSchema,
  normalization: NormalizationModeSchema,
});
/** One (advantage, normalization) pair. */
export type Setting = z.infer<typeof SettingSchema>;

/**
 * The ablation's four settings: the paper's three — sample-level advantage +
 * `seq_mean_token_mean`, rollout-level advantage + `seq_mean_token_mean` ("rollout-level
 * advantage alone"), rollout-level advantage + `rollout_token_mean` (its choice) — plus
 * rollout-level advantage + `token_mean`.
 */
export const ABLATION_SETTINGS: readonly Setting[] = [
  { advantage: "sample", normalization: "seq_mean_token_mean" },
  { advantage: "rollout", normalization: "seq_mean_token_mean" },
  { advantage: "rollout", normalization: "rollout_token_mean" },
  { advantage: "rollout", normalization: "token_mean" },
];

/**
 * The label of a setting, `<advantage>/<normalization>`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { settingLabel } from "./grid.ts";
 * assert.equal(settingLabel({ advantage: "rollout", normalization: "token_mean" }), "rollout/token_mean");
 * ```
 */
export function settingLabel(s: Setting): string {
  return `${s.advantage}/${s.normalization}`;
}

/**
 * A grid. `settings` lists the (advantage, normalization) pairs explicitly (the paper's
 * settings are not a full product); when absent, `advantage × normalization` is used.
 */
export const GridSpecSchema = z.object({
  /** Results go to `<results dir>/<name>/`. */
  name: z.string().regex(/^[A-Za-z0-9_.-]+$/, "letters, digits, _ . - only"),
  settings: z.array(SettingSchema).min(1).optional(),
  advantage: z.array(AdvantageLevelSchema).min(1).default(["rollout"]),
  normalization: z.array(NormalizationModeSchema).min(1).default(["rollout_token_mean"]),
  merge: z.array(MergeStrategySchema).min(1).default(["prefix_merge"]),
  seeds: z.array(z.number().int().min(0)).min(1).default([0, 1, 2]),
  env: z.array(z.string().regex(/^[A-Za-z0-9_-]+$/)).min(1).default(["split-arithmetic"]),
  /** Free-form settings every cell shares (steps, model size, …), recorded with each cell. */
  base: z.record(z.string(), z.json()).default({}),
  /**
   * Run order: `settings` (every seed of a setting, then the next setting) or `seeds` (seed 0
   * of every setting, then seed 1, …), so that a grid stopped early has seeds balanced over
   * its settings.
   */
  order: z.enum(["settings", "seeds"]).default("settings"),
});
/** A grid (parsed). */
export type GridSpec = z.infer<typeof GridSpecSchema>;
/** A grid as a caller writes it. */
export type GridSpecInput = z.input<typeof GridSpecSchema>;

/** One run of a grid. */
export interface Cell {
  /** `<advantage>-<normalization>-<merge>-<env>-s<seed>`: the results folder name. */
  id: string;
  /** `<advantage>/<normalization>`: the label seeds are grouped under. */
  setting: string;
  advantage: Setting["advantage"];
  normalization: Setting["normalization"];
  merge: GridSpec["merge"][number];
  env: string;
  seed: number;
}

/**
 * The cell id of a configuration.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cellId } from "./grid.ts";
 * const id = cellId({
 *   advantage: "rollout", normalization: "rollout_token_mean", merge: "prefix_merge",
 *   env: "split-arithmetic", seed: 2,
 * });
 * assert.equal(id, "rollout-rollout_token_mean-prefix_merge-split-arithmetic-s2");
 * ```
 */
export function cellId(cell: Omit<Cell, "id" | "setting">): string {
  return `${cell.advantage}-${cell.normalization}-${cell.merge}-${cell.env}-s${cell.seed}`;
}

/**
 * Expands a grid into its cells: settings outermost, seeds innermost (so a partial run has
 * every seed of the first settings rather than one seed of all).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { expandGrid } from "./grid.ts";
 * const cells = expandGrid({
 *   name: "demo",
 *   advantage: ["sample", "rollout"],
 *   normalization: ["token_mean"],
 *   seeds: [0, 1],
 * });
 * assert.equal(cells.length, 4);
 * assert.equal(cells[0].id, "sample-token_mean-prefix_merge-split-arithmetic-s0");
 * assert.equal(cells[1].id, "sample-token_mean-prefix_merge-split-arithmetic-s1");
 * // Seed by seed: every setting's seed 0 first.
 * const bySeed = expandGrid({
 *   name: "demo",
 *   advantage: ["sample", "rollout"],
 *   normalization: ["token_mean"],
 *   seeds: [0, 1],
 *   order: "seeds",
 * });
 * assert.deepEqual(bySeed.map((c) => `${c.advantage}-s${c.seed}`), [
 *   "sample-s0",
 *   "rollout-s0",
 *   "sample-s1",
 *   "rollout-s1",
 * ]);
 * ```
 */
export function expandGrid(input: GridSpecInput): Cell[] {
  const grid = parseOrThrow(GridSpecSchema, input, "grid");
  const settings = grid.settings ??
    grid.advantage.flatMap((advantage) =>
      grid.normalization.map((normalization) => ({ advantage, normalization }))
    );
  const cells: Cell[] = [];
  const seen = new Set<string>();
  for (const env of grid.env) {
    for (const s of settings) {
      for (const merge of grid.merge) {
        for (const seed of grid.seeds) {
          const base = { ...s, merge, env, seed };
          const id = cellId(base);
          if (seen.has(id)) throw new Error(`grid: cell ${id} appears twice (duplicate setting)`);
          seen.add(id);
          cells.push({ id, setting: `${s.advantage}/${s.normalization}`, ...base });
        }
      }
    }
  }
  if (grid.order === "seeds") {
    const rank = new Map(grid.seeds.map((seed, i) => [seed, i]));
    // Array.prototype.sort is stable: within a seed, cells keep the settings' order.
    cells.sort((a, b) => rank.get(a.seed)! - rank.get(b.seed)!);
  }
  return cells;
}
