import assert from "node:assert/strict";
import {
  balance,
  imbalance,
  partitionKk,
  partitionLpt,
  planOptimizerSteps,
  workload,
} from "../lib/batching/mod.ts";
import { ValidationError } from "../lib/schema.ts";
import { mulberry32, randInt } from "./fixtures/algo/samples.ts";

function assertPartition(parts: number[][], n: number) {
  const all = parts.flat().sort((a, b) => a - b);
  assert.deepEqual(all, Array.from({ length: n }, (_, i) => i), "every item exactly once");
}

Deno.test("workload is a·L + L²", () => {
  assert.equal(workload(100, 6144), 614400 + 10000);
  assert.equal(workload(0, 6144), 0);
});

Deno.test("LPT and Karmarkar–Karp on a textbook instance {8, 7, 6, 5, 4} into 2 parts", () => {
  const costs = [8, 7, 6, 5, 4];
  const lpt = partitionLpt(costs, 2);
  assertPartition(lpt.parts, 5);
  assert.deepEqual([...lpt.loads].sort(), [13, 17]);
  const kk = partitionKk(costs, 2);
  assertPartition(kk.parts, 5);
  // Differencing: 8-7=1, 6-5=1, 4-1=3, 3-1=2 → loads 16 and 14.
  assert.deepEqual([...kk.loads].sort(), [14, 16]);
  assert.equal(kk.imbalance, 16 / 15 - 1);
});

Deno.test("Karmarkar–Karp k-way balances random workloads within 2% and beats LPT on average", () => {
  const rand = mulberry32(11);
  let kkWins = 0;
  let lptWins = 0;
  let worstKk = 0;
  for (let trial = 0; trial < 40; trial++) {
    const n = randInt(rand, 40, 300);
    const k = randInt(rand, 2, 8);
    const lengths = Array.from({ length: n }, () => randInt(rand, 50, 8000));
    const costs = lengths.map((L) => workload(L, 6144));
    const kk = balance(costs, k, "kk");
    const lpt = balance(costs, k, "lpt");
    assertPartition(kk.parts, n);
    assertPartition(lpt.parts, n);
    assert.equal(kk.parts.length, k);
    worstKk = Math.max(worstKk, kk.imbalance);
    if (kk.imbalance < lpt.imbalance) kkWins++;
    else if (lpt.imbalance < kk.imbalance) lptWins++;
  }
  assert.ok(worstKk < 0.02, `worst KK imbalance ${worstKk}`);
  assert.ok(kkWins > lptWins, `KK better in ${kkWins}, LPT better in ${lptWins}`);
});

Deno.test("more parts than items leaves parts empty; one part takes everything; nothing in, nothing out", () => {
  const kk = partitionKk([5, 3], 4);
  assertPartition(kk.parts, 2);
  assert.equal(kk.parts.filter((p) => p.length === 0).length, 2);
  assert.deepEqual(partitionLpt([5, 3, 1], 1).parts, [[0, 1, 2]]);
  assert.deepEqual(partitionKk([], 3).parts, [[], [], []]);
  assert.equal(imbalance([0, 0]), 0);
});

Deno.test("bad balancing input names the field", () => {
  assert.throws(
    () => partitionKk([1, -2], 2),
    (e: unknown) => e instanceof ValidationError && e.field === "costs[1]",
  );
  assert.throws(
    () => partitionLpt([1], 0),
    (e: unknown) => e instanceof ValidationError && e.field === "parts",
  );
});

Deno.test("optimizer steps by count: whole rollouts, balanced token counts", () => {
  const units = [60, 50, 40, 30, 20, 10].map((tokens, i) => ({ rollout_id: `r${i}`, tokens }));
  const plan = planOptimizerSteps(units, { num_steps: 3 });
  assert.equal(plan.steps.length, 3);
  assert.deepEqual(plan.steps.map((s) => s.tokens), [70, 70, 70]);
  assert.deepEqual(plan.steps.flatMap((s) => s.rollout_ids).sort(), units.map((u) => u.rollout_id));
  assert.equal(plan.imbalance, 0);
  assert.equal(planOptimizerSteps(units.slice(0, 2), { num_steps: 5 }).steps.length, 2);
  assert.equal(planOptimizerSteps(units).steps.length, 1);
  assert.deepEqual(planOptimizerSteps([], { num_steps: 2 }).steps, []);
});

Deno.test("optimizer steps by token budget: filled in order, an oversized rollout gets its own step", () => {
  const units = [40, 30, 50, 200, 10, 20].map((tokens, i) => ({ rollout_id: `r${i}`, tokens }));
  const plan = planOptimizerSteps(units, { step_tokens: 100 });
  assert.deepEqual(plan.steps.map((s) => s.rollout_ids), [
    ["r0", "r1"],
    ["r2"],
    ["r3"],
    ["r4", "r5"],
  ]);
  assert.deepEqual(plan.oversized, ["r3"]);
});

Deno.test("bad step plans name the field", () => {
  const units = [{ rollout_id: "a", tokens: 5 }];
  assert.throws(
    () => planOptimizerSteps(units, { num_steps: 2, step_tokens: 10 }),
    (e: unknown) => e instanceof ValidationError && e.field === "options.step_tokens",
  );
  assert.throws(
    () => planOptimizerSteps(units, { num_steps: 0 }),
    (e: unknown) => e instanceof ValidationError && e.field === "options.num_steps",
  );
  assert.throws(
    () => planOptimizerSteps([...units, ...units]),
    (e: unknown) => e instanceof ValidationError && e.field === "units[1].rollout_id",
  );
  assert.throws(
    () => planOptimizerSteps([{ rollout_id: "a", tokens: 1.5 }]),
    (e: unknown) => e instanceof ValidationError && e.field === "units[0].tokens",
  );
});
