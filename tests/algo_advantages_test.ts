import assert from "node:assert/strict";
import { computeAdvantages, meanStd, summarizeAdvantages } from "../lib/algo/mod.ts";
import { ValidationError } from "../lib/schema.ts";
import { figure4, makeSample } from "./fixtures/algo/samples.ts";

const f32 = Math.fround;
const firstAdvantages = (samples: { advantage?: Float32Array }[]) =>
  samples.map((s) => s.advantage![0]);

Deno.test("Figure 4, rollout level: baseline 1/2, advantages +1/2 for all of rollout 1's samples and -1/2", () => {
  const { samples, groups } = computeAdvantages(figure4(), {
    level: "rollout",
    normalize_std: false,
  });
  assert.deepEqual(firstAdvantages(samples), [0.5, 0.5, 0.5, -0.5]);
  assert.equal(groups.length, 1);
  assert.equal(groups[0].reward_mean, 1 / 2);
  assert.equal(groups[0].n_members, 2);
  assert.equal(groups[0].n_rollouts, 2);
  assert.equal(groups[0].n_samples, 4);
});

Deno.test("Figure 4, sample level: baseline 3/4, advantages +1/4 for rollout 1's samples and -3/4", () => {
  const { samples, groups } = computeAdvantages(figure4(), {
    level: "sample",
    normalize_std: false,
  });
  assert.deepEqual(firstAdvantages(samples), [0.25, 0.25, 0.25, -0.75]);
  assert.equal(groups[0].reward_mean, 3 / 4);
  assert.equal(groups[0].n_members, 4);
});

Deno.test("every token of a sample carries its advantage, context tokens included", () => {
  const { samples } = computeAdvantages(figure4(), { level: "rollout", normalize_std: false });
  for (const s of samples) {
    assert.equal(s.advantage!.length, s.tokens.length);
    assert.ok(s.loss_mask.includes(0), "fixture has context tokens");
    assert.ok(s.advantage!.every((a) => a === s.advantage![0]));
  }
});

Deno.test("std normalisation divides by the group std plus epsilon; the default std is unbiased (n-1)", () => {
  const batch = figure4();
  const pop = computeAdvantages(batch, { level: "rollout", std: "population", epsilon: 0 });
  // Rewards {1, 0}: population std 1/2.
  assert.deepEqual(firstAdvantages(pop.samples), [1, 1, 1, -1]);
  assert.equal(pop.groups[0].reward_std, 0.5);

  const unb = computeAdvantages(batch, { level: "rollout", std: "unbiased", epsilon: 0 });
  const a = 0.5 / Math.SQRT1_2;
  assert.deepEqual(firstAdvantages(unb.samples), [f32(a), f32(a), f32(a), f32(-a)]);

  const dflt = computeAdvantages(batch, { level: "rollout" });
  const expected = 0.5 / (Math.SQRT1_2 + 1e-6);
  assert.deepEqual(firstAdvantages(dflt.samples), [
    f32(expected),
    f32(expected),
    f32(expected),
    f32(-expected),
  ]);

  const eps = computeAdvantages(batch, { level: "rollout", std: "population", epsilon: 0.5 });
  assert.deepEqual(firstAdvantages(eps.samples), [0.5, 0.5, 0.5, -0.5]);
});

Deno.test("sample-level std is taken over the group's samples", () => {
  const { samples, groups } = computeAdvantages(figure4(), {
    level: "sample",
    std: "population",
    epsilon: 0,
  });
  // Rewards {1, 1, 1, 0}: mean 3/4, population std sqrt(3)/4.
  const std = Math.sqrt(3) / 4;
  assert.equal(groups[0].reward_std, meanStd([1, 1, 1, 0], "population").std);
  assert.ok(Math.abs(groups[0].reward_std - std) < 1e-15);
  assert.deepEqual(firstAdvantages(samples), [
    f32(0.25 / std),
    f32(0.25 / std),
    f32(0.25 / std),
    f32(-0.75 / std),
  ]);
});

Deno.test("groups are independent: each has its own baseline", () => {
  const batch = [
    makeSample({ rollout_id: "a1", group_id: "A", reward: 1, trained: 2 }),
    makeSample({ rollout_id: "a2", group_id: "A", reward: 3, trained: 2 }),
    makeSample({ rollout_id: "b1", group_id: "B", reward: 10, trained: 2 }),
    makeSample({ rollout_id: "b2", group_id: "B", reward: 0, trained: 2 }),
    makeSample({ rollout_id: "b3", group_id: "B", reward: 5, trained: 2 }),
  ];
  const { samples, groups } = computeAdvantages(batch, { normalize_std: false });
  assert.deepEqual(firstAdvantages(samples), [-1, 1, 5, -5, 0]);
  assert.deepEqual(groups.map((g) => [g.group_id, g.reward_mean]), [["A", 2], ["B", 5]]);
});

Deno.test("zero-variance groups are kept with advantage 0 by default, or dropped with a counted reason", () => {
  const batch = [
    makeSample({ rollout_id: "a1", group_id: "A", reward: 1, trained: 2 }),
    makeSample({ rollout_id: "a1", group_id: "A", reward: 1, trained: 3 }),
    makeSample({ rollout_id: "a2", group_id: "A", reward: 1, trained: 2 }),
    makeSample({ rollout_id: "b1", group_id: "B", reward: 1, trained: 2 }),
    makeSample({ rollout_id: "b2", group_id: "B", reward: 0, trained: 2 }),
    makeSample({ rollout_id: "s1", group_id: "S", reward: 0.7, trained: 2 }),
    makeSample({ rollout_id: "s1", group_id: "S", reward: 0.7, trained: 2 }),
  ];
  const kept = computeAdvantages(batch);
  assert.equal(kept.samples.length, 7);
  assert.deepEqual(firstAdvantages(kept.samples).map((a) => a === 0), [
    true,
    true,
    true,
    false,
    false,
    true,
    true,
  ]);
  const a = kept.groups.find((g) => g.group_id === "A")!;
  assert.equal(a.zero_variance, true);
  assert.equal(a.dropped, false);
  const s = kept.groups.find((g) => g.group_id === "S")!;
  assert.equal(s.singleton, true);
  assert.deepEqual(kept.dropped.samples, { zero_variance: 0, singleton: 0 });

  const dropped = computeAdvantages(batch, { zero_variance: "drop" });
  assert.deepEqual(dropped.samples.map((x) => x.rollout_id), ["b1", "b2"]);
  assert.deepEqual(dropped.dropped, {
    groups: { zero_variance: 1, singleton: 1 },
    rollouts: { zero_variance: 2, singleton: 1 },
    samples: { zero_variance: 3, singleton: 2 },
  });
});

Deno.test("a singleton group gets advantage 0 at both levels, even with a nonzero reward", () => {
  const batch = [
    makeSample({ rollout_id: "r", reward: 5, trained: 3 }),
    makeSample({ rollout_id: "r", reward: 5, trained: 2 }),
  ];
  for (const level of ["rollout", "sample"] as const) {
    const { samples, groups } = computeAdvantages(batch, { level, normalize_std: false });
    assert.deepEqual(firstAdvantages(samples), [0, 0]);
    assert.equal(groups[0].singleton, true);
  }
});

Deno.test("rollouts without samples still count in the rollout-level baseline", () => {
  const batch = [makeSample({ rollout_id: "r1", reward: 1, trained: 2 })];
  const { samples, groups } = computeAdvantages(batch, { normalize_std: false }, [
    { rollout_id: "r2", group_id: "g", reward: 0 },
    { rollout_id: "r3", group_id: "g", reward: 0 },
  ]);
  assert.equal(f32(samples[0].advantage![0]), f32(1 - 1 / 3));
  assert.equal(groups[0].n_rollouts, 3);
  assert.equal(groups[0].n_samples, 1);
});

Deno.test("inputs are not modified", () => {
  const batch = figure4();
  computeAdvantages(batch);
  assert.ok(batch.every((s) => s.advantage === undefined));
});

Deno.test("bad input is rejected with an error naming the field", () => {
  const ok = figure4();
  const cases: [unknown, unknown, string][] = [
    [ok, { epsilon: -1 }, "options.epsilon"],
    [ok, { std: "sample" }, "options.std"],
    [ok, { level: "token" }, "options.level"],
    [[{ ...ok[0], reward: NaN }], {}, "samples[0].reward"],
    [[ok[0], { ...ok[1], reward: 0 }], {}, "samples[1].reward"],
    [[ok[0], { ...ok[1], group_id: "other" }], {}, "samples[1].group_id"],
    [[{ ...ok[0], loss_mask: new Uint8Array(1) }], {}, "samples[0].loss_mask"],
    [[{ ...ok[0], rollout_logprobs: new Float32Array(2) }], {}, "samples[0].rollout_logprobs"],
    [[{ ...ok[0], rollout_id: "" }], {}, "samples[0].rollout_id"],
  ];
  for (const [samples, options, field] of cases) {
    assert.throws(
      // deno-lint-ignore no-explicit-any
      () => computeAdvantages(samples as any, options as any),
      (e: unknown) =>
        e instanceof ValidationError && e.field === field && e.message.includes(field),
      `expected an error on ${field}`,
    );
  }
  assert.throws(
    () => computeAdvantages(ok, {}, [{ rollout_id: "r1", group_id: "g", reward: 0 }]),
    (e: unknown) => e instanceof ValidationError && e.field === "outcomes[0].reward",
  );
  assert.throws(
    () => computeAdvantages(ok, {}, [{ rollout_id: "r1", group_id: "h", reward: 1 }]),
    (e: unknown) => e instanceof ValidationError && e.field === "outcomes[0].group_id",
  );
});

Deno.test("per-rollout advantages and a step summary are reported", () => {
  const batch = [
    ...figure4(),
    makeSample({ rollout_id: "z1", group_id: "Z", reward: 1, trained: 2 }),
    makeSample({ rollout_id: "z2", group_id: "Z", reward: 1, trained: 2 }),
    makeSample({ rollout_id: "s1", group_id: "S", reward: 0, trained: 2 }),
  ];
  const result = computeAdvantages(batch, { normalize_std: false, zero_variance: "drop" }, [
    { rollout_id: "r3", group_id: "g", reward: 0.5 },
  ]);
  assert.deepEqual(
    result.rollouts.map((r) => [r.rollout_id, r.samples, r.advantage, r.dropped]),
    [
      ["r1", 3, 0.5, false],
      ["r2", 1, -0.5, false],
      ["r3", 0, 0, false],
      ["z1", 1, 0, true],
      ["z2", 1, 0, true],
      ["s1", 1, 0, true],
    ],
  );
  const summary = summarizeAdvantages(result);
  assert.equal(summary.groups, 3);
  assert.equal(summary.zero_variance_groups, 1);
  assert.equal(summary.singleton_groups, 1);
  assert.equal(summary.rollouts, 6);
  assert.equal(summary.samples, 4);
  assert.equal(summary.dropped_samples, 3);
  assert.equal(summary.reward_mean, (1 + 0 + 0.5 + 1 + 1 + 0) / 6);
  assert.equal(summary.advantage_mean, (0.5 * 3 - 0.5) / 4);
  assert.equal(summary.advantage_abs_mean, 0.5);
});
