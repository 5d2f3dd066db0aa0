import assert from "node:assert/strict";
import { computeAdvantages } from "../lib/algo/mod.ts";
import { planTrainingBatch } from "../lib/batching/mod.ts";
import { ValidationError } from "../lib/schema.ts";
import { figure5, makeSample } from "./fixtures/algo/samples.ts";

const close = (a: number, b: number, tol = 1e-12) =>
  assert.ok(Math.abs(a - b) <= tol, `expected ${b}, got ${a}`);

function batch() {
  return computeAdvantages(figure5(), { normalize_std: false }).samples;
}

Deno.test("one step, one rank: Figure 5 weights land on the packed rows", () => {
  const plan = planTrainingBatch(batch(), {
    normalization: { mode: "rollout_token_mean" },
    micro_token_budget: 4096,
  });
  assert.equal(plan.steps.length, 1);
  const [step] = plan.steps;
  assert.deepEqual(step.weights.sample_weights, [
    1 / 450,
    1 / 450,
    1 / 270,
    1 / 270,
    1 / 270,
    1 / 120,
  ]);
  assert.equal(step.ranks.length, 1);
  const [mb] = step.ranks[0].micro_batches;
  assert.equal(mb.segments.length, 6);
  assert.deepEqual(mb.segments.map((s) => s.source), [0, 1, 2, 3, 4, 5]);
  const total = mb.row.loss_weights.reduce((a, w) => a + w, 0);
  close(total, 1, 1e-6);
  assert.equal(plan.stats.trained_tokens, 280);
  assert.equal(plan.stats.rollouts, 3);
});

Deno.test("weights come from each step's own denominators by default, or the whole batch's", () => {
  const samples = batch();
  const perStep = planTrainingBatch(samples, {
    normalization: { mode: "token_mean" },
    steps: { num_steps: 2 },
    micro_token_budget: 4096,
  });
  assert.equal(perStep.steps.length, 2);
  for (const step of perStep.steps) {
    const trained = step.samples.reduce(
      (a, i) => a + samples[i].loss_mask.reduce((x, m) => x + m, 0),
      0,
    );
    assert.equal(step.weights.tokens, trained);
    close(step.weights.total_weight, 1);
  }
  const whole = planTrainingBatch(samples, {
    normalization: { mode: "token_mean" },
    weight_scope: "batch",
    steps: { num_steps: 2 },
    micro_token_budget: 4096,
  });
  for (const step of whole.steps) assert.equal(step.weights.sample_weights[0], 1 / 280);
});

Deno.test("ranks are balanced by workload a·L + L² and their imbalance is reported", () => {
  const samples = computeAdvantages(
    Array.from({ length: 64 }, (_, i) =>
      makeSample({
        rollout_id: `r${i}`,
        group_id: `g${i % 8}`,
        reward: i % 3,
        trained: 20 + ((i * 37) % 300),
        context: 10 + ((i * 53) % 900),
        seed: i + 1,
      })),
  ).samples;
  const plan = planTrainingBatch(samples, { ranks: 4, micro_token_budget: 2048 });
  const [step] = plan.steps;
  assert.equal(step.ranks.length, 4);
  const loads = step.ranks.map((r) => r.workload);
  const mean = loads.reduce((a, b) => a + b, 0) / 4;
  close(step.rank_imbalance, Math.max(...loads) / mean - 1);
  assert.ok(step.rank_imbalance < 0.01, `imbalance ${step.rank_imbalance}`);
  assert.equal(plan.stats.max_rank_imbalance, step.rank_imbalance);
  const expected = samples.reduce(
    (a, s) => a + 6144 * s.tokens.length + s.tokens.length ** 2,
    0,
  );
  assert.equal(loads.reduce((a, b) => a + b, 0), expected);
});

Deno.test("oversized rows and rollouts are reported, not cut", () => {
  const samples = computeAdvantages([
    makeSample({ rollout_id: "small", trained: 10, context: 10, reward: 1 }),
    makeSample({ rollout_id: "huge", trained: 500, context: 100, reward: 0 }),
  ]).samples;
  const plan = planTrainingBatch(samples, { steps: { step_tokens: 100 }, micro_token_budget: 64 });
  assert.deepEqual(plan.oversized_rollouts, ["huge"]);
  assert.equal(plan.stats.oversized_rows, 1);
  assert.equal(plan.steps.length, 2);
});

Deno.test("bad plan options and samples name the field", () => {
  const samples = batch();
  const cases: [() => unknown, string][] = [
    // deno-lint-ignore no-explicit-any
    [() => planTrainingBatch(samples, {} as any), "options.micro_token_budget"],
    [() => planTrainingBatch(samples, { micro_token_budget: 10, ranks: 0 }), "options.ranks"],
    [
      () =>
        planTrainingBatch(samples, {
          micro_token_budget: 10,
          normalization: { mode: "seq_sum_const" },
        }),
      "options.normalization.constant",
    ],
    [
      () => planTrainingBatch(figure5(), { micro_token_budget: 10 }),
      "samples[0].advantage",
    ],
  ];
  for (const [fn, field] of cases) {
    assert.throws(fn, (e: unknown) => e instanceof ValidationError && e.field === field, field);
  }
});
