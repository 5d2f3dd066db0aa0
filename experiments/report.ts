/**
 * The numbers `docs/experiments.md` quotes, rendered from the committed results rather than
 * typed in: `deno task ablation:report` rewrites every block between
 * `<!-- generated:NAME -->` and `<!-- /generated:NAME -->` in the doc, and a test checks that
 * the doc equals what the results render to.
 *
 * Blocks: `mechanism_quick` (the headline regime), `mechanism_sweep` (every regime's verdicts),
 * `pilot` (the pilot's cells and the power plan), `grid` (the sized grid's effects and power),
 * `grid_train` (the same grid on the training questions, when `grid` is the held-out score).
 * A block whose results are absent says so.
 *
 * @module
 */
import { ablationGrid } from "./ablation.ts";
import { type GridEffects, readGridEffects } from "./grid_effects.ts";
import { type CellResult, evalScoreKind } from "./results.ts";
import { PLAN_REFERENCE, planGrid } from "./grid_plan.ts";
import { type MechanismStudy, readStudy, studyDir } from "./mechanism.ts";
import { readProvenance } from "./provenance.ts";
import { DEFAULT_RESULTS_DIR, readGridResults } from "./results.ts";

const f3 = (x: number) => x.toFixed(3);
const signed = (x: number, d = 3) => (x >= 0 ? "+" : "−") + Math.abs(x).toFixed(d);

async function studyOrNull(dir: string): Promise<MechanismStudy | null> {
  try {
    return await readStudy(dir);
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return null;
    throw error;
  }
}

async function codeLine(dir: string): Promise<string> {
  const p = await readProvenance(dir);
  return p
    ? `(\`${p.command}\`, code ${p.code.hash.slice(0, 12)}, ${p.created_at.slice(0, 10)})`
    : "(no provenance recorded)";
}

/** The `mechanism_quick` block. */
export async function renderMechanismQuick(resultsDir: string): Promise<string> {
  const dir = studyDir(resultsDir, true);
  const study = await studyOrNull(dir);
  if (!study) return "_Not run yet: `deno task ablation:mechanism --quick`._";
  const r = study.regimes[0];
  const rows = r.settings.map((s) =>
    `| ${s.setting} | ${f3(s.curve[0].mean)} | ${f3(s.final.mean)} ± ${f3(s.final.ci95)} | ${
      s.verdict === "reference" ? "—" : `${signed(s.diff.mean)} ± ${f3(s.diff.ci95)} (${s.verdict})`
    } | ${f3(s.split_share)} | ${f3(s.split_weight_share)} |`
  );
  return [
    `Headline regime \`${r.regime.name}\`, ${study.seeds} seeds per setting ${await codeLine(
      dir,
    )}:`,
    "",
    "| setting | success at start | final success (95% CI) | paired difference to rollout/rollout_token_mean | rollouts that split | their share of the weight |",
    "| --- | --- | --- | --- | --- | --- |",
    ...rows,
  ].join("\n");
}

/** The `mechanism_sweep` block. */
export async function renderMechanismSweep(resultsDir: string): Promise<string> {
  const dir = studyDir(resultsDir, false);
  const study = await studyOrNull(dir);
  if (!study) return "_Not run yet: `deno task ablation:mechanism`._";
  const names = study.regimes[0].settings.map((s) => s.setting).filter((s) =>
    s !== "rollout/rollout_token_mean"
  );
  const rows = study.regimes.map((r) => {
    const ref = r.settings.find((s) => s.verdict === "reference")!;
    const cells = names.map((n) => {
      const s = r.settings.find((x) => x.setting === n)!;
      return `${signed(s.diff.mean)} ± ${f3(s.diff.ci95)} ${s.verdict}`;
    });
    return `| ${r.regime.name} | ${f3(ref.final.mean)} | ${cells.join(" | ")} |`;
  });
  return [
    `${study.regimes.length} regimes × 4 settings × ${study.seeds} seeds ${await codeLine(dir)}; ` +
    "each cell: paired difference of final success to rollout/rollout_token_mean (95% CI) and " +
    "whether the setting wins, loses or ties against it.",
    "",
    `| regime | rollout/rollout_token_mean | ${names.join(" | ")} |`,
    `| --- | --- | ${names.map(() => "---").join(" | ")} |`,
    ...rows,
  ].join("\n");
}

/** The `pilot` block: the pilot's cells and the power plan. */
export async function renderPilot(resultsDir: string): Promise<string> {
  const grid = ablationGrid(true);
  const dir = `${resultsDir}/${grid.name}`;
  const cells = await readGridResults(resultsDir, grid.name);
  if (cells.length === 0) return "_Not run yet: `deno task ablation --pilot`._";
  // A pilot with the held-out evaluation shows it first (the primary score), then the
  // training questions' (the second figure).
  const heldout = evalScoreKind(cells) === "heldout";
  const rows = cells.map((c) =>
    `| ${c.cell.setting} | ${c.cell.seed} | ${
      heldout
        ? `${f3(c.summary.start_heldout_reward ?? NaN)} | ${
          f3(c.summary.final_heldout_reward ?? NaN)
        } | `
        : ""
    }${f3(c.summary.start_val_reward ?? NaN)} | ${f3(c.summary.final_val_reward ?? NaN)} | ${
      c.summary.wall_s.toFixed(0)
    } | ${c.summary.cpu_s?.toFixed(0) ?? "—"} |`
  );
  const out = [
    `${cells.length} of ${grid.settings!.length * grid.seeds!.length} pilot cells ${await codeLine(
      dir,
    )}:`,
    "",
    heldout
      ? "| setting | seed | held-out evaluation before RL (shared) | after RL | training questions before RL (shared) | after RL | wall s | CPU s |"
      : "| setting | seed | evaluation before RL (shared) | after RL | wall s | CPU s |",
    heldout
      ? "| --- | --- | --- | --- | --- | --- | --- | --- |"
      : "| --- | --- | --- | --- | --- | --- |",
    ...rows,
  ];
  const study = await studyOrNull(studyDir(resultsDir, false));
  if (study && cells.length >= 2) {
    try {
      const plan = planGrid(cells, study, { settings: 4 });
      out.push("", "Power plan (`grid_plan.ts`):", "", ...plan.lines.map((l) => `- ${l}`));
    } catch (error) {
      out.push("", `Power plan: ${(error as Error).message}`);
    }
  }
  return out.join("\n");
}

/**
 * The `grid` block: the sized grid's effects and the power it had (`grid_effects.ts`), on its
 * primary score; `score: "train"` (the `grid_train` block) renders the same cells on the
 * training questions' evaluation, the second figure of a grid scored on held-out questions.
 */
export async function renderGrid(resultsDir: string, score?: "train"): Promise<string> {
  const grid = ablationGrid(false);
  const dir = `${resultsDir}/${grid.name}`;
  const primary = await readGridEffects(resultsDir, grid.name, PLAN_REFERENCE);
  if (primary.cells.length === 0) return "_Not run yet: `deno task ablation`._";
  if (score === "train" && primary.effects.score_kind !== "heldout") {
    return "_This grid has no held-out evaluation: the table above is the training questions' score._";
  }
  const { cells, effects } = score === "train"
    ? await readGridEffects(resultsDir, grid.name, PLAN_REFERENCE, "train")
    : primary;
  const finalHeader = score === "train"
    ? "final evaluation reward on the training questions (95% CI)"
    : effects.score_kind === "heldout"
    ? "final held-out evaluation reward (95% CI)"
    : "final evaluation reward (95% CI)";
  const rows = effects.settings.map((s) =>
    `| ${s.setting} | ${s.seeds} | ${f3(s.final.mean)} ± ${f3(s.final.ci95)} | ${
      signed(s.gain.mean)
    } ± ${s.gain_with_start_ci95 === null ? f3(s.gain.ci95) : f3(s.gain_with_start_ci95)} | ${
      s.diff
        ? `${signed(s.diff.mean)} ± ${f3(s.diff.ci95)} (± ${f3(s.diff.ci_family)}: ${s.verdict})`
        : "—"
    } |`
  );
  const wall = cells.reduce((a, c) => a + c.summary.wall_s, 0);
  return [
    `${cells.length} cells ${await codeLine(dir)}, ${(wall / 60).toFixed(0)} min of cell time:`,
    "",
    `| setting | seeds | ${finalHeader} | paired gain over RL (95% CI with the shared start evaluation's noise) | difference to ${PLAN_REFERENCE} (Welch 95% CI; family-wise CI over the ${effects.comparisons} comparisons: verdict) |`,
    "| --- | --- | --- | --- | --- |",
    ...rows,
    "",
    "Per factor (Welch 95% CIs of the finals of two settings that differ in one factor):",
    "",
    ...effects.contrasts.map((c) =>
      `- ${c.label}: ${signed(c.mean)} ± ${f3(c.ci95)} — ${
        c.verdict === "tie" ? "no difference detected" : `${c.higher} ${c.verdict}`
      }.`
    ),
    `- ${effects.power_line}.`,
    score === "train"
      ? "- Evaluation: the same cells, scored on 200 fresh rollouts of the two training questions " +
        "(common random numbers, the same seeds in every cell): what RL learned on them."
      : `- Evaluation: ${evaluationWords(cells, effects)}`,
  ].join("\n");
}

/** What a grid's evaluation scored: which score the figures use, and the second figure. */
function evaluationWords(cells: readonly CellResult[], effects: GridEffects): string {
  if (effects.score_kind === "heldout") {
    const settings = cells[0]?.config.settings as { heldout_tasks?: number } | undefined;
    return `every figure above is the held-out score: ${
      settings?.heldout_tasks ?? "the"
    } rollouts per cell on questions of the same environment never trained on, the same ` +
      "questions and seeds in every cell (`heldoutTasks`). Second figure, the " +
      "evaluation on the training questions (final, 95% CI): " +
      effects.second!.map((s) => `${s.setting} ${f3(s.final.mean)} ± ${f3(s.final.ci95)}`)
        .join("; ") +
      ".";
  }
  const tasks = String(cells[0]?.config.tasks ?? "");
  return tasks.includes("evaluation on the training questions")
    ? "200 fresh rollouts of the two training questions (not held-out questions: this grid " +
      "measures what RL learned on them, not transfer; the next grid run adds a held-out score)."
    : tasks.includes("held-out")
    ? "held-out questions of the same environment."
    : "as recorded in each cell's config.";
}

/** Every block, by name. */
export async function renderBlocks(resultsDir = DEFAULT_RESULTS_DIR): Promise<Map<string, string>> {
  return new Map([
    ["mechanism_quick", await renderMechanismQuick(resultsDir)],
    ["mechanism_sweep", await renderMechanismSweep(resultsDir)],
    ["pilot", await renderPilot(resultsDir)],
    ["grid", await renderGrid(resultsDir)],
    ["grid_train", await renderGrid(resultsDir, "train")],
  ]);
}

/**
 * Replaces each generated block of `text` with its rendering.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { fillBlocks } from "./report.ts";
 * const doc = "a\n<!-- generated:x -->\nold\n<!-- /generated:x -->\nb";
 * assert.equal(fillBlocks(doc, new Map([["x", "new"]])),
 *   "a\n<!-- generated:x -->\nnew\n<!-- /generated:x -->\nb");
 * ```
 */
export function fillBlocks(text: string, blocks: Map<string, string>): string {
  return text.replace(
    /<!-- generated:([a-z_]+) -->\n[\s\S]*?<!-- \/generated:\1 -->/g,
    (whole, name: string) => {
      const body = blocks.get(name);
      if (body === undefined) return whole;
      return `<!-- generated:${name} -->\n${body}\n<!-- /generated:${name} -->`;
    },
  );
}

/** The doc the blocks go into. */
export const EXPERIMENTS_DOC: string = decodeURIComponent(
  new URL("../docs/experiments.md", import.meta.url).pathname,
);

if (import.meta.main) {
  const { cliMain, parseFlags } = await import("../lib/flags.ts");
  await cliMain("report", async () => {
    const usage = "usage: deno task ablation:report\n" +
      "  rewrites the generated blocks of docs/experiments.md from experiments/results (no flags)";
    if (!parseFlags(Deno.args, {}, usage)) return;
    const text = await Deno.readTextFile(EXPERIMENTS_DOC);
    await Deno.writeTextFile(EXPERIMENTS_DOC, fillBlocks(text, await renderBlocks()));
    console.log(`rewrote the generated blocks of ${EXPERIMENTS_DOC}`);
  });
}
