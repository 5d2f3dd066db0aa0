/**
 * The mismatch grid's summary (`experiments/mismatch_grid.ts`): settings are compared with the
 * reference paired by seed, the verdict follows the paired interval, the corrections' costs add
 * up over steps and seeds, and the power calculation sizes seeds from the paired spread.
 */
import assert from "node:assert/strict";
import { type MismatchCellResult, planSeeds, summariseGrid } from "../experiments/mismatch_grid.ts";
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
