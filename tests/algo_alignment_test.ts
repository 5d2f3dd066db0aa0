import assert from "node:assert/strict";
import { alignmentFromSamples, alignmentMetrics } from "../lib/algo/mod.ts";
import { ValidationError } from "../lib/schema.ts";
import { makeSample, mulberry32 } from "./fixtures/algo/samples.ts";

const close = (a: number, b: number, tol = 1e-12) =>
  assert.ok(Math.abs(a - b) <= tol, `expected ${b}, got ${a}`);

function randomLogprobs(n: number, seed: number): Float32Array {
  const rand = mulberry32(seed);
  // A realistic spread: most tokens confident, some not.
  return Float32Array.from({ length: n }, () => Math.log(Math.max(1e-6, rand() ** 3)));
}

Deno.test("identical rollout and trainer logprobs: correlations 1, no deltas, zero KL", () => {
  const lp = randomLogprobs(2000, 1);
  const m = alignmentMetrics([{ rollout_logprobs: lp, trainer_logprobs: lp }]);
  assert.equal(m.tokens, 2000);
  close(m.pearson_prob!, 1);
  close(m.pearson_logprob!, 1);
  assert.equal(m.mean_abs_dp, 0);
  assert.equal(m.max_abs_dp, 0);
  assert.equal(m.max_abs_dlogprob, 0);
  assert.equal(m.k3_kl, 0);
});

Deno.test("small numeric noise keeps the correlation above 0.99", () => {
  const lp = randomLogprobs(2000, 2);
  const rand = mulberry32(3);
  const noisy = lp.map((x) => x + (rand() - 0.5) * 0.02);
  const m = alignmentMetrics([{ rollout_logprobs: lp, trainer_logprobs: noisy }]);
  assert.ok(m.pearson_prob! > 0.99 && m.pearson_prob! < 1, `${m.pearson_prob}`);
  assert.ok(m.max_abs_dlogprob <= 0.01 + 1e-6);
  assert.ok(m.k3_kl > 0 && m.k3_kl < 1e-4);
});

Deno.test("a shuffled or shifted trainer side (token misalignment) gives a clearly lower correlation", () => {
  const lp = randomLogprobs(2000, 4);
  const rand = mulberry32(5);
  const shuffled = lp.slice();
  for (let i = shuffled.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [shuffled[i], shuffled[j]] = [shuffled[j], shuffled[i]];
  }
  const shifted = Float32Array.from(lp, (_, i) => lp[(i + 1) % lp.length]);
  for (const other of [shuffled, shifted]) {
    const m = alignmentMetrics([{ rollout_logprobs: lp, trainer_logprobs: other }]);
    assert.ok(Math.abs(m.pearson_prob!) < 0.2, `pearson_prob ${m.pearson_prob}`);
    assert.ok(Math.abs(m.pearson_logprob!) < 0.2, `pearson_logprob ${m.pearson_logprob}`);
    assert.ok(m.mean_abs_dp > 0.1);
    assert.ok(m.k3_kl > 0.1);
  }
});

Deno.test("hand-computed metrics on two tokens", () => {
  const a = [Math.log(0.5), Math.log(0.25)];
  const b = [Math.log(0.25), Math.log(0.5)];
  const m = alignmentMetrics([{ rollout_logprobs: a, trainer_logprobs: b }]);
  close(m.pearson_prob!, -1);
  close(m.pearson_logprob!, -1);
  close(m.mean_abs_dp, 0.25);
  close(m.max_abs_dp, 0.25);
  close(m.mean_abs_dlogprob, Math.log(2));
  // x = trainer - rollout = -ln 2, then +ln 2: k3 = (1/2 + ln 2 - 1 + 2 - ln 2 - 1) / 2
  close(m.k3_kl, (0.5 + Math.log(2) - 1 + 2 - Math.log(2) - 1) / 2);
});

Deno.test("only trained tokens count; correlation is null when undefined", () => {
  const s = makeSample({ rollout_id: "r", trained: 50, context: 30, turns: 3, seed: 9 });
  const trainer = s.rollout_logprobs.map((x, t) => (s.loss_mask[t] ? x : -20));
  const m = alignmentFromSamples([s], [trainer]);
  assert.equal(m.tokens, 50);
  close(m.pearson_prob!, 1);
  const flat = alignmentMetrics([{ rollout_logprobs: [-1, -1], trainer_logprobs: [-1, -2] }]);
  assert.equal(flat.pearson_prob, null);
  assert.equal(alignmentMetrics([]).tokens, 0);
  assert.equal(alignmentMetrics([]).pearson_logprob, null);
});

Deno.test("mismatched or non-finite inputs are rejected naming the field", () => {
  assert.throws(
    () => alignmentMetrics([{ rollout_logprobs: [-1, -2], trainer_logprobs: [-1] }]),
    (e: unknown) => e instanceof ValidationError && e.field === "sequences[0].trainer_logprobs",
  );
  assert.throws(
    () => alignmentMetrics([{ rollout_logprobs: [-1, NaN], trainer_logprobs: [-1, -1] }]),
    (e: unknown) => e instanceof ValidationError && e.field === "sequences[0].rollout_logprobs[1]",
  );
  assert.throws(
    () => alignmentFromSamples([makeSample({ rollout_id: "r", trained: 2 })], []),
    (e: unknown) => e instanceof ValidationError && e.field === "trainerLogprobs",
  );
});
