/**
 * Named advantage estimators (issue 28, item 3): each is one function in
 * `ADVANTAGE_ESTIMATORS`; GRPO (std-normalised), mean-centred GRPO, RLOO and Dr. GRPO give the
 * worked values below, and the options that existed before the registry give bit-identical
 * results to the pre-registry implementation (frozen in fixtures/algo/advantages_golden.json).
 */
import assert from "node:assert/strict";
import {
  ADVANTAGE_ESTIMATORS,
  AdvantageEstimatorSchema,
  computeAdvantages,
  estimatorName,
} from "../lib/algo/mod.ts";
import { ValidationError } from "../lib/schema.ts";
import { advantageCases, resultNumbers } from "./fixtures/algo/advantage_cases.ts";
import { makeSample } from "./fixtures/algo/samples.ts";

const sample = (rollout_id: string, reward: number) =>
  makeSample({ rollout_id, group_id: "g", reward, trained: 2, context: 1 });

/** Rewards 1, 0, 0 (one sample each): mean 1/3, unbiased std √(1/3). */
const group = () => [sample("a", 1), sample("b", 0), sample("c", 0)];

function advantages(estimator: string, batch = group(), level: "rollout" | "sample" = "rollout") {
  const out = computeAdvantages(batch, {
    estimator: estimator as never,
    level,
    epsilon: 0,
  });
  return out.samples.map((s) => s.advantage![1]);
}

const f32 = (x: number) => Math.fround(x);

Deno.test("advantage estimators: one registry entry per name the schema allows", () => {
  assert.deepEqual(
    Object.keys(ADVANTAGE_ESTIMATORS).sort(),
    [...AdvantageEstimatorSchema.options].sort(),
  );
  for (const e of Object.values(ADVANTAGE_ESTIMATORS)) assert.ok(e.description.length > 0);
});

Deno.test("advantage estimators: worked values on rewards 1, 0, 0", () => {
  // GRPO: (r − 1/3) / √(1/3).
  const s = Math.sqrt(1 / 3);
  assert.deepEqual(advantages("grpo"), [f32((2 / 3) / s), f32((-1 / 3) / s), f32((-1 / 3) / s)]);
  // Mean-centred GRPO and Dr. GRPO: r − 1/3.
  assert.deepEqual(advantages("grpo_mean"), [f32(2 / 3), f32(-1 / 3), f32(-1 / 3)]);
  assert.deepEqual(advantages("dr_grpo"), [f32(2 / 3), f32(-1 / 3), f32(-1 / 3)]);
  // RLOO: r − mean of the others → 1 − 0 = 1, 0 − (1 + 0)/2 = −0.5.
  assert.deepEqual(advantages("rloo"), [1, -0.5, -0.5]);
  // RLOO is (n / (n − 1)) times the mean-centred advantage.
  const centred = advantages("grpo_mean");
  advantages("rloo").forEach((a, i) => assert.ok(Math.abs(a - 1.5 * centred[i]) < 1e-6));
});

Deno.test("advantage estimators: RLOO at the sample level leaves one sample out", () => {
  // Figure 4: rollout r1 (reward 1) split into 3 samples, r2 (reward 0) one sample.
  const batch = [sample("r1", 1), sample("r1", 1), sample("r1", 1), sample("r2", 0)];
  // Sample level: members [1, 1, 1, 0]; r1's baseline (1 + 1 + 0)/3, r2's (1 + 1 + 1)/3.
  assert.deepEqual(advantages("rloo", batch, "sample"), [f32(1 / 3), f32(1 / 3), f32(1 / 3), -1]);
  // Rollout level: members [1, 0] → ±1, each sample carrying its rollout's.
  assert.deepEqual(advantages("rloo", batch, "rollout"), [1, 1, 1, -1]);
});

Deno.test("advantage estimators: flat and one-member groups get 0 under every estimator", () => {
  for (const name of AdvantageEstimatorSchema.options) {
    assert.deepEqual(advantages(name, [sample("a", 1), sample("b", 1)]), [0, 0], name);
    assert.deepEqual(advantages(name, [sample("a", 1)]), [0], name);
  }
});

Deno.test("advantage estimators: the old options keep their meaning; a bad name is refused", () => {
  assert.equal(estimatorName({}), "grpo");
  assert.equal(estimatorName({ normalize_std: false }), "grpo_mean");
  assert.equal(estimatorName({ normalize_std: true, estimator: "dr_grpo" }), "dr_grpo");
  assert.throws(
    () => computeAdvantages(group(), { estimator: "ppo" as never }),
    (e) => e instanceof ValidationError && e.field === "options.estimator",
  );
});

Deno.test("advantage estimators: pre-registry options give bit-identical results", async () => {
  const golden = JSON.parse(
    await Deno.readTextFile(new URL("./fixtures/algo/advantages_golden.json", import.meta.url)),
  ) as number[][];
  const cases = advantageCases();
  assert.equal(cases.length, golden.length);
  cases.forEach((c, i) => {
    const got = resultNumbers(c);
    assert.equal(got.length, golden[i].length, `case ${i}`);
    got.forEach((v, k) => {
      assert.ok(
        Object.is(v, golden[i][k]),
        `case ${i} (${JSON.stringify(c.options)}) [${k}]: ${v} vs ${golden[i][k]}`,
      );
    });
  });
});
