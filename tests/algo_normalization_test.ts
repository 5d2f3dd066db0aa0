import assert from "node:assert/strict";
import { computeLossWeights, planLossWeights, rolloutShares } from "../lib/algo/mod.ts";
import { NormalizationModeSchema, ValidationError } from "../lib/schema.ts";
import { figure5, makeSample } from "./fixtures/algo/samples.ts";

const close = (a: number, b: number, tol = 1e-12) =>
  assert.ok(Math.abs(a - b) <= tol, `expected ${b}, got ${a}`);

Deno.test("Figure 5, token_mean: w = 1/280 on every trained token; rollout shares 150/280, 90/280, 40/280", () => {
  const plan = planLossWeights(figure5(), { mode: "token_mean" });
  assert.deepEqual(plan.sample_weights, new Array(6).fill(1 / 280));
  assert.equal(plan.tokens, 280);
  close(plan.rollout_shares.A, 150 / 280);
  close(plan.rollout_shares.B, 90 / 280);
  close(plan.rollout_shares.C, 40 / 280);
  close(plan.total_weight, 1);
});

Deno.test("Figure 5, seq_mean_token_mean: w = 1/(6 L); rollout shares 2/6, 3/6, 1/6 (B weighs 3x C)", () => {
  const plan = planLossWeights(figure5(), { mode: "seq_mean_token_mean" });
  assert.deepEqual(plan.sample_weights, [
    1 / (6 * 50),
    1 / (6 * 100),
    1 / (6 * 30),
    1 / (6 * 30),
    1 / (6 * 30),
    1 / (6 * 40),
  ]);
  assert.equal(plan.samples, 6);
  close(plan.rollout_shares.A, 2 / 6);
  close(plan.rollout_shares.B, 3 / 6);
  close(plan.rollout_shares.C, 1 / 6);
  close(plan.rollout_shares.B / plan.rollout_shares.C, 3);
});

Deno.test("Figure 5, rollout_token_mean: w_A = 1/450, w_B = 1/270, w_C = 1/120, each rollout 1/3", () => {
  const plan = planLossWeights(figure5(), { mode: "rollout_token_mean" });
  assert.deepEqual(plan.sample_weights, [1 / 450, 1 / 450, 1 / 270, 1 / 270, 1 / 270, 1 / 120]);
  assert.equal(plan.rollouts, 3);
  for (const id of ["A", "B", "C"]) close(plan.rollout_shares[id], 1 / 3);
});

Deno.test("Figure 5, seq_mean_token_sum: w = 1/6; seq_sum_const with C = 200: w = 1/1200", () => {
  const sum = planLossWeights(figure5(), { mode: "seq_mean_token_sum" });
  assert.deepEqual(sum.sample_weights, new Array(6).fill(1 / 6));
  close(sum.total_weight, 280 / 6);
  const dr = planLossWeights(figure5(), { mode: "seq_sum_const", constant: 200 });
  assert.deepEqual(dr.sample_weights, new Array(6).fill(1 / 1200));
  assert.equal(dr.constant, 200);
  close(dr.rollout_shares.A, 150 / 1200);
});

Deno.test("weights are written per token: the sample's weight on trained tokens, 0 on context", () => {
  for (const mode of NormalizationModeSchema.options) {
    const { samples, plan } = computeLossWeights(figure5(), { mode, constant: 100 });
    samples.forEach((s, i) => {
      assert.equal(s.loss_weight!.length, s.tokens.length);
      for (let t = 0; t < s.tokens.length; t++) {
        assert.equal(s.loss_weight![t], s.loss_mask[t] ? Math.fround(plan.sample_weights[i]) : 0);
      }
    });
    const shares = rolloutShares(samples);
    for (const id of ["A", "B", "C"]) close(shares[id], plan.rollout_shares[id], 1e-6);
  }
});

Deno.test("context tokens never count in any denominator", () => {
  const a = figure5();
  const b = figure5().map((s) =>
    makeSample({
      rollout_id: s.rollout_id,
      trained: s.loss_mask.reduce((x, y) => x + y, 0),
      context: 500,
      turns: 4,
    })
  );
  for (const mode of NormalizationModeSchema.options) {
    assert.deepEqual(
      planLossWeights(a, { mode, constant: 64 }).sample_weights,
      planLossWeights(b, { mode, constant: 64 }).sample_weights,
      mode,
    );
  }
});

Deno.test("samples and rollouts without trained tokens get no weight and are not counted", () => {
  const batch = [
    ...figure5(),
    makeSample({ rollout_id: "A", trained: 0, context: 20 }),
    makeSample({ rollout_id: "D", trained: 0, context: 20 }),
  ];
  const plan = planLossWeights(batch, { mode: "seq_mean_token_mean" });
  assert.equal(plan.samples, 6);
  assert.equal(plan.sample_weights[6], 0);
  const rtm = planLossWeights(batch, { mode: "rollout_token_mean" });
  assert.equal(rtm.rollouts, 3);
  assert.equal(rtm.sample_weights[0], 1 / 450);
  assert.equal(rtm.rollout_shares.D, 0);
});

Deno.test("an empty batch has no weights", () => {
  const plan = planLossWeights([], { mode: "token_mean" });
  assert.deepEqual(plan.sample_weights, []);
  assert.equal(plan.total_weight, 0);
});

Deno.test("bad options and samples are rejected naming the field", () => {
  assert.throws(
    () => planLossWeights(figure5(), { mode: "seq_sum_const" }),
    (e: unknown) => e instanceof ValidationError && e.field === "options.constant",
  );
  assert.throws(
    () => planLossWeights(figure5(), { mode: "seq_sum_const", constant: -3 }),
    (e: unknown) => e instanceof ValidationError && e.field === "options.constant",
  );
  assert.throws(
    // deno-lint-ignore no-explicit-any
    () => planLossWeights(figure5(), { mode: "token_sum" as any }),
    (e: unknown) => e instanceof ValidationError && e.field === "options.mode",
  );
  const bad = figure5();
  bad[2] = { ...bad[2], loss_mask: bad[2].loss_mask.map((m) => m * 2) };
  assert.throws(
    () => planLossWeights(bad, {}),
    (e: unknown) => e instanceof ValidationError && e.field.startsWith("samples[2].loss_mask"),
  );
  assert.throws(
    () => rolloutShares(figure5()),
    (e: unknown) => e instanceof ValidationError && e.field === "samples[0].loss_weight",
  );
});
