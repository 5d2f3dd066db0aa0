/**
 * The mismatch grid's summary (`experiments/mismatch_grid.ts`): settings are compared with the
 * reference paired by seed, the verdict follows the paired interval, the corrections' costs add
 * up over steps and seeds, the power calculation sizes seeds from the paired spread, and the stored
 * cells split into the sized q4_0 grid, the q8_0 comparison and the q8_0 pilot.
 */
import assert from "node:assert/strict";
import {
  cellPath,
  CORRECTIONS,
  type MismatchCellResult,
  PILOT_SETTINGS,
  planSeeds,
  type Precision,
  SECOND_SETTINGS,
  settingName,
  SETTINGS,
  summariseGrid,
  summariseStored,
} from "../experiments/mismatch_grid.ts";
import { CanarySpecSchema, MISMATCH_GRID_CANARY } from "../experiments/canary.ts";
import type { LoopStepMetrics } from "../lib/loop/schema.ts";
import { detectableEffect } from "../experiments/power.ts";

function step(reward: number, masked = 0, ess = 1): LoopStepMetrics {
  return {
    reward_mean: reward,
    trained_tokens: 100,
    is_masked_tokens: masked,
    is_masked_sequences: masked > 0 ? 1 : 0,
    is_ess: ess,
    alignment_tokens: 100,
    alignment_corr: 0.99999,
    alignment_mean_abs_dp: 1e-4,
    alignment_k3_kl: 1e-6,
    alignment_max_abs_dlogprob: 0.05,
  } as LoopStepMetrics;
}

function cell(setting: string, seed: number, heldout: number, train: number, masked = 0) {
  const [engine, correction] = setting.split("/");
  return {
    setting,
    engine,
    correction,
    seed,
    seconds: 100,
    start_heldout_reward: 0,
    final_heldout_reward: heldout,
    start_val_reward: 0.4,
    final_val_reward: train,
    metrics: [step(0.5, masked, masked ? 0.9 : 1), step(0.7, masked, masked ? 0.8 : 1)],
  } as MismatchCellResult;
}

Deno.test("mismatch grid: paired differences, verdicts and the corrections' costs", () => {
  const cells = [
    cell("f32/none", 0, 0.10, 0.50),
    cell("f32/none", 1, 0.20, 0.60),
    cell("f32/none", 2, 0.30, 0.70),
    // Lower by 0.1 on every seed (a tiny spread): detectably lower.
    cell("q8_0/none", 0, 0.00, 0.40),
    cell("q8_0/none", 1, 0.11, 0.50),
    cell("q8_0/none", 2, 0.19, 0.61),
    // Up on one seed, down on another: no detectable difference; masks 10 tokens a step.
    cell("q8_0/icepop", 0, 0.30, 0.50, 10),
    cell("q8_0/icepop", 1, 0.00, 0.60, 10),
    cell("q8_0/icepop", 2, 0.30, 0.70, 10),
  ];
  const g = summariseGrid(cells);
  assert.equal(g.reference, "f32/none");
  assert.deepEqual(g.settings.map((s) => s.setting), ["f32/none", "q8_0/none", "q8_0/icepop"]);
  const [ref, q8, ice] = g.settings;
  assert.equal(ref.diff, null);
  assert.ok(Math.abs(q8.diff!.mean - -0.1) < 1e-12);
  assert.equal(q8.verdict, "lower than the reference");
  assert.equal(q8.verdict_train_questions, "lower than the reference");
  assert.equal(ice.verdict, "no detectable difference");
  assert.equal(ice.masked_tokens, 60); // 10 per step × 2 steps × 3 seeds
  assert.equal(ice.trained_tokens, 600);
  assert.equal(ice.masked_share, 0.1);
  assert.ok(Math.abs(ice.ess_mean - 0.85) < 1e-12);
  assert.equal(ice.ess_min, 0.8);
  assert.equal(q8.masked_tokens, 0);
  assert.equal(q8.identical_to_uncorrected, null); // uncorrected itself
  assert.equal(ice.identical_to_uncorrected, false);
  const twin = summariseGrid([
    ...cells,
    ...cells.filter((c) => c.setting === "q8_0/none").map((c) => ({
      ...c,
      setting: "q8_0/seq_is",
    })),
  ]).settings.find((s) => s.setting === "q8_0/seq_is")!;
  assert.equal(twin.identical_to_uncorrected, true);
  assert.deepEqual(ref.curve.map((c) => Number(c.mean.toFixed(12))), [0.5, 0.7]);
  assert.equal(g.seeds, 3);
  assert.ok(g.detectable_effect! > 0 && g.paired_sd! > 0);
  // Between-seed SD pooled within settings: SS 0.02 + 0.0182 + 0.06 over 6 degrees of freedom.
  assert.ok(Math.abs(g.seed_sd.heldout! - Math.sqrt((0.02 + 0.0182 + 0.06) / 6)) < 1e-12);
  assert.equal(
    g.detectable_effect_unpaired.heldout,
    detectableEffect(3, { sd: g.seed_sd.heldout!, comparisons: 2 }),
  );
  assert.match(g.power_line, /with 3 seeds per setting/);
  const plan = planSeeds(g, 0.05, 1500);
  // 100 s per cell × 3 settings = 300 s per seed: 5 seeds fit 1500 s.
  assert.equal(plan.seeds_in_budget, 5);
  assert.ok((plan.seeds_for_effect["held-out"] ?? 0) > 3);
});

Deno.test("mismatch grid: a setting without paired seeds gets no verdict", () => {
  const g = summariseGrid([cell("f32/none", 0, 0.1, 0.5), cell("q8_0/tis", 0, 0.1, 0.5)]);
  assert.equal(g.settings[1].diff, null);
  assert.equal(g.settings[1].verdict, "too few paired seeds");
  assert.equal(g.power_line, "power: not enough paired seeds");
});

Deno.test("mismatch grid: the stored cells split into the sized q4_0 grid, the q8_0 comparison and the pilot", async () => {
  const root = await Deno.makeTempDir({ prefix: "reins_mismatch_grid_test_" });
  try {
    const put = async (c: MismatchCellResult) => {
      const [engine, correction] = c.setting.split("/");
      const dir = cellPath(root, { engine: engine as Precision, correction }, c.seed);
      await Deno.mkdir(dir, { recursive: true });
      await Deno.writeTextFile(`${dir}/result.json`, JSON.stringify(c));
    };
    for (let seed = 0; seed < 4; seed++) {
      await put(cell("f32/none", seed, 0.1 + seed / 10, 0.5));
      for (const correction of ["none", "tis", "seq_is", "icepop"]) {
        await put(
          cell(`q4_0/${correction}`, seed, seed / 10, 0.4, correction === "icepop" ? 5 : 0),
        );
      }
    }
    // The second comparison ran 3 seeds; the pilot's corrected q8_0 settings only seeds 0–1.
    for (let seed = 0; seed < 3; seed++) await put(cell("q8_0/none", seed, 0.1 + seed / 10, 0.5));
    for (const correction of ["tis", "seq_is", "icepop"]) {
      for (let seed = 0; seed < 2; seed++) {
        await put(cell(`q8_0/${correction}`, seed, 0.1 + seed / 10, 0.5));
      }
    }
    const { cells, summary, second, pilot } = await summariseStored(root);
    assert.deepEqual(summary.settings.map((s) => s.setting), SETTINGS.map(settingName));
    assert.equal(cells.length, 20);
    assert.equal(summary.seeds, 4);
    // One family of 4 comparisons: the detectable effect is the one α 0.05 / 4 gives at 4 seeds.
    assert.equal(
      summary.detectable_effect,
      detectableEffect(4, { sd: summary.paired_sd!, design: "paired", comparisons: 4 }),
    );
    const [, none, , , icepop] = summary.settings;
    assert.ok(Math.abs(none.diff!.mean - -0.1) < 1e-12);
    assert.equal(none.verdict, "lower than the reference");
    assert.equal(icepop.masked_tokens, 40); // 5 per step × 2 steps × 4 seeds
    assert.deepEqual(second.settings.map((s) => [s.setting, s.seeds]), [
      ["f32/none", 3],
      ["q8_0/none", 3],
    ]);
    assert.equal(second.settings[1].verdict, "no detectable difference");
    assert.deepEqual(
      pilot.settings.map((s) => [s.setting, s.seeds]),
      ["f32/none", ...PILOT_SETTINGS.map(settingName)].map((name) => [name, 2]),
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("mismatch grid: the sized grid is q4_0 under every correction, with the bands the study names", () => {
  assert.deepEqual(SETTINGS.map(settingName), [
    "f32/none",
    "q4_0/none",
    "q4_0/tis",
    "q4_0/seq_is",
    "q4_0/icepop",
  ]);
  assert.deepEqual(CORRECTIONS.tis, { tis_cap: 2 });
  assert.deepEqual(CORRECTIONS.seq_is, { seq_is_band: [0.99, 1.01] });
  assert.deepEqual(CORRECTIONS.icepop, { token_ratio_band: [0.5, 2] });
  assert.deepEqual(SECOND_SETTINGS.map(settingName), ["q8_0/none"]);
  assert.equal(CanarySpecSchema.safeParse(MISMATCH_GRID_CANARY).success, true);
  assert.equal(
    MISMATCH_GRID_CANARY.kind === "mismatch_grid" && MISMATCH_GRID_CANARY.engine,
    "q4_0",
  );
});
