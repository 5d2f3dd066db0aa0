/**
 * One mean ± 95% interval for all of reins (lib/util/stats.ts): the Student-t interval, with one
 * rule for fewer than two observations, used by the loop's evaluation, the Live UI's bands and
 * the experiments alike.
 */
import assert from "node:assert/strict";
import tQuantile from "@stdlib/stats-base-dists-t-quantile";
import { ci95HalfWidth, meanCi, welchDiff } from "../lib/util/stats.ts";
import { mulberry32 } from "../lib/util/random.ts";
import { formatCi } from "../lib/loop/eval.ts";
import { rewardPoints } from "../lib/ui/overview.ts";

Deno.test("meanCi is the textbook t interval; the half-width from (std, n) is the same number", () => {
  const rand = mulberry32(11);
  for (let trial = 0; trial < 200; trial++) {
    const n = 2 + Math.floor(rand() * 60);
    const xs = Array.from({ length: n }, () => rand() * 10 - 5);
    const r = meanCi(xs);
    const mean = xs.reduce((a, b) => a + b, 0) / n;
    const sd = Math.sqrt(xs.reduce((a, x) => a + (x - mean) ** 2, 0) / (n - 1));
    assert.ok(Math.abs(r.mean - mean) < 1e-12);
    assert.ok(Math.abs(r.ci95 - tQuantile(0.975, n - 1) * sd / Math.sqrt(n)) < 1e-12);
    assert.equal(ci95HalfWidth(r.std, n), r.ci95);
  }
});

Deno.test("fewer than two observations: no interval (NaN), and the CLI shows the bare mean", () => {
  assert.deepEqual(Object.values(meanCi([])).map(Number.isNaN), [false, true, true, true]);
  const one = meanCi([0.5]);
  assert.equal(one.mean, 0.5);
  assert.ok(Number.isNaN(one.std) && Number.isNaN(one.ci95));
  assert.equal(formatCi(one), "0.500");
  assert.ok(Number.isNaN(ci95HalfWidth(1, 1)));
  assert.ok(Number.isNaN(welchDiff([1], [0, 1]).ci95));
});

Deno.test("the UI's reward band is the CLI's interval for the same numbers", () => {
  const rewards = [1, 0, 1, 1, 0, 1, 1, 0, 0, 1];
  const cli = meanCi(rewards);
  const [point] = rewardPoints([{
    step: 1,
    reward_mean: cli.mean,
    reward_std: cli.std,
    rollouts: rewards.length,
  }]);
  assert.ok(Math.abs((point.hi! - point.y) - cli.ci95) < 1e-12);
  assert.ok(Math.abs((point.y - point.lo!) - cli.ci95) < 1e-12);
});
