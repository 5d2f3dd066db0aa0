/**
 * The README's tour, run on the paper's Figure 4 group: rollout A (reward 1) whose calls split
 * into 3 samples, rollout B (reward 0) one sample. Keeps the README's code honest.
 */
import assert from "node:assert/strict";
import {
  assembleRollout,
  computeAdvantages,
  computeLossWeights,
  flattenBatch,
  type RolloutEvent,
  summarizeAssembly,
} from "../mod.ts";
import { callEvent, rewardEvent } from "./fixtures/samples/events.ts";

/** Three calls whose prompts never extend each other: three samples. */
const rolloutA: RolloutEvent[] = [
  callEvent(1, [1, 2], [3, 4], { rollout_id: "A" }),
  callEvent(2, [5, 6], [7], { rollout_id: "A" }),
  callEvent(3, [8, 9], [10, 11, 12], { rollout_id: "A" }),
  { ...rewardEvent(4, 1), rollout_id: "A" },
];
const rolloutB: RolloutEvent[] = [
  callEvent(5, [1, 2], [13], { rollout_id: "B" }),
  callEvent(6, [1, 2, 13, 14], [15], { rollout_id: "B" }),
  { ...rewardEvent(7, 0), rollout_id: "B" },
];

Deno.test("README tour: assemble, summarize, advantages, weights, rows (Figure 4 group)", () => {
  const rollouts = [
    { rollout: { group_id: "g" }, events: rolloutA },
    { rollout: { group_id: "g" }, events: rolloutB },
  ];
  const results = rollouts.map(({ rollout, events }) =>
    assembleRollout(events, { strategy: "prefix_merge", group_id: rollout.group_id })
  );
  const summary = summarizeAssembly(results.map((r) => r.metrics));
  assert.equal(summary.samples_per_rollout_mean, 2, "A splits into 3 samples, B stays 1");

  const samples = results.flatMap((r) => r.samples);
  const rolloutLevel = computeAdvantages(samples, { level: "rollout", normalize_std: false });
  assert.deepEqual(rolloutLevel.samples.map((s) => s.advantage![0]), [0.5, 0.5, 0.5, -0.5]);
  const sampleLevel = computeAdvantages(samples, { level: "sample", normalize_std: false });
  assert.deepEqual(sampleLevel.samples.map((s) => s.advantage![0]), [0.25, 0.25, 0.25, -0.75]);

  const { samples: weighted } = computeLossWeights(rolloutLevel.samples, {
    mode: "rollout_token_mean",
  });
  const rows = flattenBatch(weighted);
  const share = (id: string) =>
    rows.filter((r) => r.rollout_id === id).reduce(
      (sum, r) => sum + r.loss_weights.reduce((a, w) => a + w, 0),
      0,
    );
  assert.ok(Math.abs(share("A") - 0.5) < 1e-6, "each rollout carries half of the gradient");
  assert.ok(Math.abs(share("B") - 0.5) < 1e-6);
});
