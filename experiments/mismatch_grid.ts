/**
 * The training–inference mismatch grid (issue #34, item 2): the loop cells of the ablation grid
 * (`loop_cell.ts`, split arithmetic, SFT warm start, held-out CRN evaluation) sampling through
 * the llama.cpp engine at a GGUF precision, trained under a behaviour correction, against the
 * f32 engine without correction as the reference.
 *
 * Settings: `f32/none` (reference), `q4_0/none`, `q4_0/tis` (TIS cap 2), `q4_0/seq_is` (masked
 * sequence-level IS, [0.99, 1.01]), `q4_0/icepop` (token masking outside [0.5, 2]) — the sized
 * grid, one family of 4 comparisons —; `q8_0/none` as a second comparison, and the pilot's q8_0
 * settings (2 seeds, where no token left the bands) summarised apart; every cell
 * uses `old_logprobs: "recompute"` (π_old is the trainer's own π_prox, μ the engine's logprobs,
 * so the corrections see the mismatch). Common random numbers: cell seed s seeds the training
 * rollouts (`rollout_seeds`) and the evaluation rollouts the same in every setting, llama.cpp
 * runs 1 slot and 1 thread (bit-reproducible batches), so two settings of one seed differ only
 * by the engine's numerics and the correction, and are compared paired by seed.
 *
 * ```sh
 * deno task mismatch:grid --pilot     # 2 seeds per setting → experiments/results/mismatch_grid/
 * deno task mismatch:grid --check     # seed 0 of q4_0/seq_is and q4_0/icepop: do the masks act?
 * deno task mismatch:grid --plan      # the power calculation on what is stored
 * deno task mismatch:grid --seeds 4   # extend to 4 seeds (done cells are kept)
 * deno task mismatch:grid --summarise # rewrite results.json, provenance and canary from the cells
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { meanCi } from "../lib/util/stats.ts";
import type { LossConfig } from "../lib/schema.ts";
import type { LoopStepMetrics } from "../lib/loop/schema.ts";
import { CELL_SETTINGS, type LoopCellSettings, startLoopCells } from "./loop_cell.ts";
import { codeFingerprint, type CodeSpecInput, writeProvenance } from "./provenance.ts";
import { DEFAULT_RESULTS_DIR } from "./results.ts";
import { detectableEffect, seedsFor } from "./power.ts";
import type { Cell } from "./grid.ts";

/** The engine precisions the grid samples at. */
export type Precision = "f32" | "f16" | "q8_0" | "q4_0";

/** The behaviour corrections, as loss fields (all with `old_logprobs: "recompute"`). */
export const CORRECTIONS: Record<string, Partial<LossConfig>> = {
  none: {},
  tis: { tis_cap: 2 },
  seq_is: { seq_is_band: [0.99, 1.01] },
  icepop: { token_ratio_band: [0.5, 2] },
};

/** One setting of the grid: the engine's precision and the correction. */
export interface MismatchSetting {
  engine: Precision;
  correction: keyof typeof CORRECTIONS;
}

/** The reference: the f32 engine (the trainer's numerics up to kernel order), no correction. */
export const REFERENCE: MismatchSetting = { engine: "f32", correction: "none" };

/**
 * The sized grid: the reference and q4_0 under every correction. The pilot ran at q8_0, where
 * llama.cpp was so close to the trainer that no token left the correction bands (the corrected
 * cells trained bit-identically to the uncorrected one): q4_0 is the regime where they act.
 */
export const SETTINGS: readonly MismatchSetting[] = [
  REFERENCE,
  { engine: "q4_0", correction: "none" },
  { engine: "q4_0", correction: "tis" },
  { engine: "q4_0", correction: "seq_is" },
  { engine: "q4_0", correction: "icepop" },
];

/**
 * The pilot's q8_0 settings (2 seeds, kept as stored and summarised apart from the sized grid,
 * paired with the same reference cells): the regime where the corrections never acted.
 */
export const PILOT_SETTINGS: readonly MismatchSetting[] = [
  { engine: "q8_0", correction: "none" },
  { engine: "q8_0", correction: "tis" },
  { engine: "q8_0", correction: "seq_is" },
  { engine: "q8_0", correction: "icepop" },
];

/**
 * The second comparison, run after the sized grid's settings at each seed (when the budget
 * allows): q8_0 without correction against the same reference, its own family of one test.
 */
export const SECOND_SETTINGS: readonly MismatchSetting[] = [{ engine: "q8_0", correction: "none" }];

/** The cells `--check` runs first (seed 0): do the masking corrections act at q4_0? */
export const CHECK_SETTINGS: readonly MismatchSetting[] = [
  { engine: "q4_0", correction: "seq_is" },
  { engine: "q4_0", correction: "icepop" },
];

/**
 * `<engine>/<correction>`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { REFERENCE, settingName } from "./mismatch_grid.ts";
 * assert.equal(settingName(REFERENCE), "f32/none");
 * ```
 */
export function settingName(s: MismatchSetting): string {
  return `${s.engine}/${s.correction}`;
}

/**
 * The cells, cut to the CPU this grid may use (about 40 CPU-minutes next to another grid on 2
 * cores): the ablation cells' recipe (SFT 300 steps, 2 training questions, 2 groups × 8
 * rollouts, 4 PPO epochs, lr 3e-4 after a 12-step warmup) for 6 RL steps, and 64 CRN
 * evaluation rollouts on held-out questions (the primary score) and 64 on the training ones,
 * before RL and after the last step.
 */
export const GRID_BASE: Partial<LoopCellSettings> = {
  steps: 6,
  heldout_tasks: 64,
  val_tasks: 64,
};

/** The code behind the results (`provenance.ts`). */
export const MISMATCH_GRID_CODE: CodeSpecInput = {
  entries: ["experiments/mismatch_grid.ts"],
  extra: ["lib/trainer/worker/reins_worker/*.py"],
  data: ["data/tokenizers/char/*.json"],
};

/**
 * The SFT warm start's cache tag: the warm start is the loop cells' (`loop_cell.ts`) and the
 * worker's, not this file's, so editing the grid's summary code does not retrain it.
 */
const SFT_CACHE_TAG = "mismatch-grid";

const TOKENIZER_DIR = decodeURIComponent(
  new URL("../data/tokenizers/char/", import.meta.url).pathname,
);

/** A finished cell as stored in `<engine>/<correction>-s<seed>/result.json`. */
export interface MismatchCellResult {
  setting: string;
  engine: Precision;
  correction: string;
  seed: number;
  seconds: number;
  start_heldout_reward: number | null;
  final_heldout_reward: number | null;
  start_val_reward: number | null;
  final_val_reward: number | null;
  metrics: LoopStepMetrics[];
}

function cellOf(s: MismatchSetting, seed: number): Cell {
  return {
    id: `${s.correction}-s${seed}`,
    setting: settingName(s),
    advantage: "rollout",
    normalization: "rollout_token_mean",
    merge: "prefix_merge",
    seed,
    env: "split-arithmetic",
  } as Cell;
}

/**
 * Where a cell's files go: `<root>/<engine>/<correction>-s<seed>`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cellPath } from "./mismatch_grid.ts";
 * assert.equal(cellPath("r", { engine: "q8_0", correction: "tis" }, 1), "r/q8_0/tis-s1");
 * ```
 */
export function cellPath(root: string, s: MismatchSetting, seed: number): string {
  return `${root}/${s.engine}/${s.correction}-s${seed}`;
}

async function readCell(path: string): Promise<MismatchCellResult | null> {
  try {
    return JSON.parse(await Deno.readTextFile(`${path}/result.json`)) as MismatchCellResult;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return null;
    throw error;
  }
}

/** Every stored cell of `settings` (default: the sized grid's and f16's) under `root`. */
export async function readMismatchGrid(
  root: string,
  settings: readonly MismatchSetting[] = [...SETTINGS, ...F16_SETTINGS],
): Promise<MismatchCellResult[]> {
  const out: MismatchCellResult[] = [];
  for (const s of settings) {
    for (let seed = 0; seed < 64; seed++) {
      const r = await readCell(cellPath(root, s, seed));
      if (r) out.push(r);
    }
  }
  return out;
}

/** The f16 settings, run only with `--f16` (when the budget allows). */
export const F16_SETTINGS: readonly MismatchSetting[] = [{ engine: "f16", correction: "none" }];

/** Options of {@link runCells}. */
export interface RunCellsOptions {
  root: string;
  settings: readonly MismatchSetting[];
  seeds: readonly number[];
  base?: Partial<LoopCellSettings>;
  cacheTag?: string;
  /** Stop starting cells after this many seconds. */
  budgetS?: number;
  log?: (line: string) => void;
}

/**
 * Runs the pending cells seed by seed (seed 0 of every setting, then seed 1, …, so that a grid
 * stopped early stays balanced), one engine stack per precision at a time, one cell at a time.
 */
export async function runCells(options: RunCellsOptions): Promise<MismatchCellResult[]> {
  const log = options.log ?? (() => {});
  const base = { ...GRID_BASE, ...options.base };
  const t0 = performance.now();
  const done: MismatchCellResult[] = [];
  for (const seed of options.seeds) {
    for (const engine of new Set(options.settings.map((s) => s.engine))) {
      const pending = [];
      for (const s of options.settings.filter((x) => x.engine === engine)) {
        if (!(await readCell(cellPath(options.root, s, seed)))) pending.push(s);
      }
      if (pending.length === 0) continue;
      if (options.budgetS !== undefined && (performance.now() - t0) / 1000 > options.budgetS) {
        log(`[mismatch-grid] budget of ${options.budgetS}s spent: stopping before seed ${seed}`);
        return done;
      }
      for (const s of pending) {
        // A stack per cell: every cell restarts the policy from the warm start's version, and the
        // engine refuses to go back to an older version than the one it serves.
        await using cells = await startLoopCells({
          concurrency: 8,
          threads: 1,
          rolloutSeeds: true,
          engine: {
            kind: "llama_cpp",
            tokenizerDir: TOKENIZER_DIR,
            type: engine,
            slots: 1,
            threads: 1,
          },
          cellLoss: (cell) => {
            const correction = cell.id.replace(/-s\d+$/, "");
            return { old_logprobs: "recompute", ...CORRECTIONS[correction] };
          },
          ...(options.cacheTag ? { cacheTag: options.cacheTag } : {}),
          log,
        });
        const dir = cellPath(options.root, s, seed);
        await Deno.mkdir(dir, { recursive: true });
        const started = performance.now();
        const out = await cells.runner(cellOf(s, seed), {
          grid: { name: `mm-${engine}`, base } as unknown as Parameters<
            typeof cells.runner
          >[1]["grid"],
          dir,
        });
        const result: MismatchCellResult = {
          setting: settingName(s),
          engine: s.engine,
          correction: s.correction,
          seed,
          seconds: (performance.now() - started) / 1000,
          start_heldout_reward: out.start_heldout_reward ?? null,
          final_heldout_reward: out.final_heldout_reward ?? null,
          start_val_reward: out.start_val_reward ?? null,
          final_val_reward: out.final_val_reward ?? null,
          metrics: out.metrics as unknown as LoopStepMetrics[],
        };
        await Deno.writeTextFile(`${dir}/config.json`, JSON.stringify(out.config) + "\n");
        await Deno.writeTextFile(`${dir}/result.json`, JSON.stringify(result) + "\n");
        log(
          `[mismatch-grid] ${
            settingName(s)
          } seed ${seed}: held-out ${result.final_heldout_reward} ` +
            `(start ${result.start_heldout_reward}) in ${result.seconds.toFixed(0)}s`,
        );
        done.push(result);
      }
    }
  }
  return done;
}

/** A paired difference to the reference over seeds. */
export interface PairedDiff {
  mean: number;
  ci95: number;
  sd: number;
  n: number;
}

/** A setting's summary: final scores, the paired difference to the reference, the costs. */
export interface SettingSummary {
  setting: string;
  seeds: number;
  heldout: { mean: number; ci95: number };
  train_questions: { mean: number; ci95: number };
  /** Final held-out reward minus the reference's, paired by seed (null: the reference). */
  diff: PairedDiff | null;
  verdict: string;
  /** The same on the training questions' evaluation (the second score). */
  diff_train_questions: PairedDiff | null;
  verdict_train_questions: string;
  /** Corrections' costs over every step of every seed. */
  masked_tokens: number;
  trained_tokens: number;
  masked_share: number;
  masked_sequences: number;
  ess_mean: number;
  ess_min: number;
  /** The engine–trainer mismatch the cells trained under (mean over steps and seeds). */
  pearson_prob: number;
  mean_abs_dp: number;
  k3_kl: number;
  max_abs_dlogprob: number;
  /**
   * Whether every seed of this correction trained exactly as the same engine without correction
   * (every step's reward, loss and gradient norm, and both final scores equal): what a mask
   * that never acts gives under common random numbers. Null for uncorrected settings or without
   * a shared seed.
   */
  identical_to_uncorrected: boolean | null;
  /** Mean per-step reward (training rollouts) by step, with its CI over seeds. */
  curve: { mean: number; ci95: number }[];
}

/** The summary of the grid. */
export interface GridSummary {
  reference: string;
  settings: SettingSummary[];
  /** Pooled SD of the paired differences (settings vs reference) and its power. */
  paired_sd: number | null;
  seeds: number;
  detectable_effect: number | null;
  /** The same for the training questions' score. */
  paired_sd_train_questions: number | null;
  detectable_effect_train_questions: number | null;
  /**
   * The between-seed SD of the final held-out and training-question scores (pooled within
   * settings) and the effect an unpaired design would detect with it: the bound that still holds
   * when the paired differences are all 0 (the settings sampled the same tokens).
   */
  seed_sd: { heldout: number | null; train_questions: number | null };
  detectable_effect_unpaired: { heldout: number | null; train_questions: number | null };
  cell_seconds_mean: number;
  power_line: string;
}

const mean = (xs: readonly number[]) => xs.reduce((a, x) => a + x, 0) / Math.max(1, xs.length);

/** Summarises the cells (pairs by seed against the reference). */
export function summariseGrid(cells: readonly MismatchCellResult[]): GridSummary {
  const names = [...new Set(cells.map((c) => c.setting))];
  const ref = settingName(REFERENCE);
  type Score = "final_heldout_reward" | "final_val_reward";
  const diffs: Record<Score, number[][]> = { final_heldout_reward: [], final_val_reward: [] };
  const paired = (mine: MismatchCellResult[], score: Score): [PairedDiff | null, string] => {
    const refBySeed = new Map(
      cells.filter((c) => c.setting === ref).map((c) => [c.seed, c[score]]),
    );
    const d = mine.flatMap((c) => {
      const r = refBySeed.get(c.seed);
      const x = c[score];
      return r !== undefined && r !== null && x !== null ? [x - r] : [];
    });
    if (d.length < 2) return [null, "too few paired seeds"];
    const m = meanCi(d);
    diffs[score].push(d);
    const verdict = Math.abs(m.mean) > m.ci95
      ? (m.mean > 0 ? "higher than the reference" : "lower than the reference")
      : "no detectable difference";
    return [{ mean: m.mean, ci95: m.ci95, sd: m.std, n: d.length }, verdict];
  };
  const settings = names.map((name): SettingSummary => {
    const mine = cells.filter((c) => c.setting === name).sort((a, b) => a.seed - b.seed);
    const finals = mine.map((c) => c.final_heldout_reward).filter((x): x is number => x !== null);
    const trainQ = mine.map((c) => c.final_val_reward).filter((x): x is number => x !== null);
    const h = meanCi(finals);
    const t = meanCi(trainQ);
    const [diff, verdict] = name === ref
      ? [null, "reference"]
      : paired(mine, "final_heldout_reward");
    const [diffTrain, verdictTrain] = name === ref
      ? [null, "reference"]
      : paired(mine, "final_val_reward");
    const steps = mine.flatMap((c) => c.metrics);
    const masked = steps.reduce((a, m) => a + (m.is_masked_tokens ?? 0), 0);
    const trained = steps.reduce((a, m) => a + m.trained_tokens, 0);
    const nSteps = Math.max(0, ...mine.map((c) => c.metrics.length));
    const curve = Array.from({ length: nSteps }, (_, k) => {
      const c = meanCi(mine.flatMap((x) => (x.metrics[k] ? [x.metrics[k].reward_mean] : [])));
      return { mean: c.mean, ci95: c.ci95 };
    });
    const aligned = steps.filter((m) => m.alignment_tokens > 0);
    const [engine, correction] = name.split("/");
    const plain = cells.filter((c) => c.setting === `${engine}/none`);
    const shared = mine.flatMap((c) => {
      const p = plain.find((x) => x.seed === c.seed);
      return p ? [[c, p] as const] : [];
    });
    const sameRun = (a: MismatchCellResult, b: MismatchCellResult) =>
      a.final_heldout_reward === b.final_heldout_reward &&
      a.final_val_reward === b.final_val_reward && a.metrics.length === b.metrics.length &&
      a.metrics.every((m, k) =>
        m.reward_mean === b.metrics[k].reward_mean && m.loss === b.metrics[k].loss &&
        m.grad_norm === b.metrics[k].grad_norm
      );
    const identical = correction === "none" || shared.length === 0
      ? null
      : shared.every(([a, b]) => sameRun(a, b));
    return {
      setting: name,
      seeds: mine.length,
      heldout: { mean: h.mean, ci95: h.ci95 },
      train_questions: { mean: t.mean, ci95: t.ci95 },
      diff,
      verdict,
      diff_train_questions: diffTrain,
      verdict_train_questions: verdictTrain,
      masked_tokens: masked,
      trained_tokens: trained,
      masked_share: trained > 0 ? masked / trained : 0,
      masked_sequences: steps.reduce((a, m) => a + (m.is_masked_sequences ?? 0), 0),
      ess_mean: mean(steps.map((m) => m.is_ess ?? 1)),
      ess_min: Math.min(1, ...steps.map((m) => m.is_ess ?? 1)),
      pearson_prob: mean(aligned.map((m) => m.alignment_corr ?? 1)),
      mean_abs_dp: mean(aligned.map((m) => m.alignment_mean_abs_dp)),
      k3_kl: mean(aligned.map((m) => m.alignment_k3_kl)),
      max_abs_dlogprob: Math.max(0, ...aligned.map((m) => m.alignment_max_abs_dlogprob)),
      identical_to_uncorrected: identical,
      curve,
    };
  });
  // Pooled SD of the paired differences (each setting's deviations from its own mean).
  const pooled = (groups: number[][]) => {
    let ss = 0;
    let df = 0;
    for (const d of groups) {
      const m = mean(d);
      ss += d.reduce((a, x) => a + (x - m) ** 2, 0);
      df += d.length - 1;
    }
    return df > 0 ? Math.sqrt(ss / df) : null;
  };
  const seeds = Math.min(...settings.map((s) => s.seeds));
  const comparisons = Math.max(1, settings.length - 1);
  const detect = (sd: number | null) =>
    sd !== null && seeds >= 2
      ? detectableEffect(seeds, { sd, design: "paired", comparisons })
      : null;
  const bySetting = (score: Score) =>
    names.map((n) =>
      cells.filter((c) => c.setting === n).map((c) => c[score]).filter((x): x is number =>
        x !== null
      )
    ).filter((xs) => xs.length >= 2);
  const seedSd = {
    heldout: pooled(bySetting("final_heldout_reward")),
    train_questions: pooled(bySetting("final_val_reward")),
  };
  const unpaired = (sd: number | null) =>
    sd !== null && seeds >= 2 ? detectableEffect(seeds, { sd, comparisons }) : null;
  const detectableUnpaired = {
    heldout: unpaired(seedSd.heldout),
    train_questions: unpaired(seedSd.train_questions),
  };
  const pairedSd = pooled(diffs.final_heldout_reward);
  const pairedSdTrain = pooled(diffs.final_val_reward);
  const detectable = detect(pairedSd);
  const detectableTrain = detect(pairedSdTrain);
  const powerLine = pairedSd === null || detectable === null || pairedSdTrain === null ||
      detectableTrain === null
    ? "power: not enough paired seeds"
    : `power: with ${seeds} seeds per setting, paired by seed, at 80% power and α = 0.05 / ` +
      `${comparisons} comparisons the grid detects a difference to the reference of ` +
      `${detectable.toFixed(3)} in final held-out reward (paired SD ${pairedSd.toFixed(3)}) and ` +
      `${detectableTrain.toFixed(3)} on the training questions (paired SD ${
        pairedSdTrain.toFixed(3)
      }); an unpaired design would detect ${
        detectableUnpaired.heldout?.toFixed(3) ?? "n/a"
      } held-out and ${
        detectableUnpaired.train_questions?.toFixed(3) ?? "n/a"
      } on the training questions (between-seed SD ${seedSd.heldout?.toFixed(3) ?? "n/a"} and ${
        seedSd.train_questions?.toFixed(3) ?? "n/a"
      })`;
  return {
    reference: ref,
    settings,
    paired_sd: pairedSd,
    seeds,
    detectable_effect: detectable,
    paired_sd_train_questions: pairedSdTrain,
    detectable_effect_train_questions: detectableTrain,
    seed_sd: seedSd,
    detectable_effect_unpaired: detectableUnpaired,
    cell_seconds_mean: mean(cells.map((c) => c.seconds)),
    power_line: powerLine,
  };
}

/**
 * The power calculation on the pilot: seeds for 80% power at the smallest effect worth
 * detecting (`effect`, default 0.05 held-out reward), and what fits `budgetS` of cell time.
 */
export function planSeeds(
  summary: GridSummary,
  effect = 0.05,
  budgetS = 40 * 60,
): { seeds_for_effect: Record<string, number | null>; seeds_in_budget: number; lines: string[] } {
  const comparisons = Math.max(1, summary.settings.length - 1);
  const perSeed = summary.cell_seconds_mean * summary.settings.length;
  const inBudget = Math.max(2, Math.floor(budgetS / Math.max(1, perSeed)));
  const lines = [
    `cell ${summary.cell_seconds_mean.toFixed(0)} s; seeds that fit ${(budgetS / 60).toFixed(0)} ` +
    `min of cells: ${inBudget} (${perSeed.toFixed(0)} s per seed over ${summary.settings.length} ` +
    "settings)",
  ];
  const forEffect: Record<string, number | null> = {};
  for (
    const [score, sd] of [
      ["held-out", summary.paired_sd],
      ["training questions", summary.paired_sd_train_questions],
    ] as const
  ) {
    let n: number | null = null;
    if (sd !== null && sd > 0) {
      try {
        n = seedsFor(effect, { sd, design: "paired", comparisons }, 0.8, 100_000);
      } catch {
        n = null;
      }
    }
    forEffect[score] = n;
    lines.push(
      `${score}: pilot paired SD ${sd?.toFixed(4) ?? "n/a"}; seeds for 80% power at ${effect} ` +
        `(α 0.05 / ${comparisons}): ${n ?? (sd === 0 ? "2 (no spread)" : "n/a")}; with ` +
        `${inBudget} seeds the detectable effect is ${
          sd !== null
            ? detectableEffect(inBudget, { sd, design: "paired", comparisons }).toFixed(3)
            : "n/a"
        }`,
    );
  }
  for (
    const [score, sd] of [
      ["held-out", summary.seed_sd.heldout],
      ["training questions", summary.seed_sd.train_questions],
    ] as const
  ) {
    if (sd === null || !(sd > 0)) continue;
    let n: number | null = null;
    try {
      n = seedsFor(effect, { sd, comparisons }, 0.8, 100_000);
    } catch {
      n = null;
    }
    forEffect[`${score} (unpaired)`] = n;
    lines.push(
      `${score}, unpaired: between-seed SD ${sd.toFixed(4)}; seeds for 80% power at ${effect}: ` +
        `${n ?? "n/a"}; with ${inBudget} seeds the detectable effect is ${
          detectableEffect(inBudget, { sd, comparisons }).toFixed(3)
        }`,
    );
  }
  return { seeds_for_effect: forEffect, seeds_in_budget: inBudget, lines };
}

/** The grid's results folder. */
export function mismatchGridDir(results: string = DEFAULT_RESULTS_DIR): string {
  return `${results}/mismatch_grid`;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      pilot: { type: "boolean", default: false },
      check: { type: "boolean", default: false },
      plan: { type: "boolean", default: false },
      summarise: { type: "boolean", default: false },
      quick: { type: "boolean", default: false },
      seeds: { type: "string" },
      f16: { type: "boolean", default: false },
      "no-q8": { type: "boolean", default: false },
      "budget-min": { type: "string", default: "40" },
      results: { type: "string", default: DEFAULT_RESULTS_DIR },
    },
  });
  const root = mismatchGridDir(values.results);
  const code = await codeFingerprint(MISMATCH_GRID_CODE);
  const log = (l: string) => console.log(l);
  if (values.quick) {
    const quickRoot = await Deno.makeTempDir({ prefix: "reins_mismatch_grid_" });
    const out = await runCells({
      root: quickRoot,
      settings: [{ engine: "q8_0", correction: "seq_is" }],
      seeds: [0],
      base: { steps: 2, heldout_tasks: 8, val_tasks: 8 },
      cacheTag: SFT_CACHE_TAG,
      log,
    });
    console.log(JSON.stringify(summariseGrid(out).settings[0], null, 1));
    return;
  }
  if (values.check) {
    // Seed 0 of the masking corrections, in the grid's own folder (the sized run keeps them).
    const out = await runCells({
      root,
      settings: CHECK_SETTINGS,
      seeds: [0],
      cacheTag: SFT_CACHE_TAG,
      log,
    });
    const cells = await readMismatchGrid(root, CHECK_SETTINGS.map((s) => s));
    for (const s of summariseGrid(cells.filter((c) => c.seed === 0)).settings) {
      console.log(
        `[check] ${s.setting} seed 0: masked ${s.masked_tokens}/${s.trained_tokens} tokens ` +
          `(share ${s.masked_share.toFixed(4)}), ${s.masked_sequences} sequences, ESS mean ` +
          `${s.ess_mean.toFixed(5)} min ${s.ess_min.toFixed(5)}, Pearson ${
            s.pearson_prob.toFixed(5)
          }, mean |Δp| ${s.mean_abs_dp.toFixed(5)}, k3 ${s.k3_kl.toExponential(3)}`,
      );
    }
    void out;
    return;
  }
  const settings = [...SETTINGS, ...(values.f16 ? F16_SETTINGS : [])];
  if (!values.plan && !values.summarise) {
    const n = values.pilot ? 2 : Number(values.seeds ?? "2");
    if (!Number.isInteger(n) || n < 2) throw new Error("--seeds: expected an integer ≥ 2");
    await runCells({
      root,
      settings: [...settings, ...(values["no-q8"] ? [] : SECOND_SETTINGS)],
      seeds: Array.from({ length: n }, (_, i) => i),
      cacheTag: SFT_CACHE_TAG,
      budgetS: Number(values["budget-min"]) * 60,
      log,
    });
  }
  const { cells, summary, second, pilot } = await summariseStored(root);
  const plan = planSeeds(summary, 0.05, Number(values["budget-min"]) * 60);
  for (const line of plan.lines.filter(Boolean)) console.log(`[plan] ${line}`);
  if (!values.plan) {
    const base = { ...CELL_SETTINGS, ...GRID_BASE };
    await Deno.writeTextFile(
      `${root}/results.json`,
      JSON.stringify({ summary, q8_0: second, q8_0_pilot: pilot, plan, base }, null, 1) + "\n",
    );
    const seeds = Math.max(...cells.map((c) => c.seed)) + 1;
    await writeProvenance(root, {
      command: `deno task mismatch:grid ${values.pilot ? "--pilot" : `--seeds ${seeds}`}`,
      config: {
        settings,
        second: SECOND_SETTINGS,
        pilot: PILOT_SETTINGS,
        corrections: CORRECTIONS,
        base,
      },
      code,
      ...(values.summarise
        ? {
          note:
            "summarised from the stored cells (`--summarise`); the canary checks the cells' code",
        }
        : {}),
    });
    const { MISMATCH_GRID_CANARY, recordCanary } = await import("./canary.ts");
    await recordCanary(root, MISMATCH_GRID_CANARY);
    console.log(`[mismatch-grid] results, provenance and canary in ${root}`);
  }
  for (
    const [name, g] of [["sized grid", summary], ["q8_0", second], ["q8_0 pilot", pilot]] as const
  ) {
    console.log(`-- ${name}`);
    printSummary(g);
  }
}

/**
 * The three summaries of the stored cells: the sized grid (reference and q4_0, one family of
 * comparisons), the second comparison (q8_0/none against the same reference cells, every seed it
 * has) and the pilot as it ran (seeds 0–1 of the reference and the four q8_0 settings).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { summariseStored } from "./mismatch_grid.ts";
 * const empty = await summariseStored(await Deno.makeTempDir());
 * assert.equal(empty.cells.length, 0);
 * assert.equal(empty.summary.power_line, "power: not enough paired seeds");
 * ```
 */
export async function summariseStored(root: string): Promise<{
  cells: MismatchCellResult[];
  summary: GridSummary;
  second: GridSummary;
  pilot: GridSummary;
}> {
  const cells = await readMismatchGrid(root);
  const second = await readMismatchGrid(root, [REFERENCE, ...SECOND_SETTINGS]);
  const seeds = new Set(
    second.filter((c) => c.setting !== settingName(REFERENCE)).map((c) => c.seed),
  );
  const pilot = await readMismatchGrid(root, [REFERENCE, ...PILOT_SETTINGS]);
  return {
    cells,
    summary: summariseGrid(cells),
    second: summariseGrid(second.filter((c) => seeds.has(c.seed))),
    pilot: summariseGrid(pilot.filter((c) => c.seed < 2)),
  };
}

function printSummary(summary: GridSummary): void {
  for (const s of summary.settings) {
    const d = s.diff
      ? ` diff ${s.diff.mean >= 0 ? "+" : ""}${s.diff.mean.toFixed(3)} ± ${s.diff.ci95.toFixed(3)}`
      : "";
    const dt = s.diff_train_questions
      ? ` diff ${s.diff_train_questions.mean >= 0 ? "+" : ""}${
        s.diff_train_questions.mean.toFixed(3)
      } ± ${s.diff_train_questions.ci95.toFixed(3)}`
      : "";
    console.log(
      `${s.setting}: held-out ${s.heldout.mean.toFixed(3)} ± ${s.heldout.ci95.toFixed(3)} ` +
        `(n=${s.seeds})${d} — ${s.verdict}; training questions ` +
        `${s.train_questions.mean.toFixed(3)} ± ${s.train_questions.ci95.toFixed(3)}${dt} — ` +
        `${s.verdict_train_questions}; masked ${s.masked_tokens}/${s.trained_tokens} tokens ` +
        `(${s.masked_sequences} sequences), ESS ${s.ess_mean.toFixed(5)} (min ${
          s.ess_min.toFixed(5)
        }); Pearson ${s.pearson_prob.toFixed(6)}, mean |Δp| ${s.mean_abs_dp.toExponential(3)}, ` +
        `k3 ${s.k3_kl.toExponential(3)}, max |Δlogprob| ${s.max_abs_dlogprob.toFixed(4)}`,
    );
  }
  console.log(summary.power_line);
}

if (import.meta.main) {
  try {
    await main();
    Deno.exit(0); // llama.cpp's addon keeps the event loop alive
  } catch (error) {
    console.error(`error: ${error instanceof Error ? error.stack : error}`);
    Deno.exit(2);
  }
}
