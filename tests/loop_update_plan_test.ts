/**
 * The update's pure plan (issue 28, item 5): selection, advantages, loss weights, the
 * decoupled-PPO split and packing, computed without a worker — and exactly what
 * `updatePolicy` then sends to one.
 */
import assert from "node:assert/strict";
import { parseOrThrow } from "../lib/schema.ts";
import { LoopConfigSchema } from "../lib/loop/schema.ts";
import { planUpdate, updatePolicy } from "../lib/loop/mod.ts";
import { data, fakeClient } from "./support/loop_update.ts";

const config = parseOrThrow(LoopConfigSchema, {
  name: "plan",
  tasks: [{ id: "t", input: {} }],
  harness: { name: "command", options: { command: ["true"] } },
  schedule: { mode: "collocated_async", max_staleness: 1, stale_policy: "tis", tis_cap: 2 },
});

const groups = () => [
  // g1: r1 split into two samples (a branch) with reward 1, r2 one sample with reward 0.
  [data("r1", "g1", 1, 7, { split: true }), data("r2", "g1", 0, 7)],
  // g2: sampled two versions behind 7: trained with decoupled PPO in a part of its own.
  [data("s1", "g2", 1, 5), data("s2", "g2", 0, 5)],
  // g3: no reward yet: left out, counted.
  [data("u1", "g3", null, 7)],
];

Deno.test("update plan: selection, advantages, weights, the TIS split and packing, no worker", () => {
  const plan = planUpdate(groups(), { config, version: 7, ranks: 1 });
  assert.equal(plan.untrained.filtered.no_reward, 1);
  assert.deepEqual(plan.kept.map((s) => s.rollout_id), ["r1", "r1", "r2", "s1", "s2"]);
  // Rollout-level GRPO: rewards 1 and 0 → ±1/√2 with the unbiased std, +ε.
  const a = 0.5 / (Math.SQRT1_2 + 1e-6);
  for (const s of plan.kept) {
    const expected = s.reward === 1 ? a : -a;
    assert.ok(Math.abs(s.advantage![0] - expected) < 1e-6, `${s.rollout_id}: ${s.advantage![0]}`);
  }
  const batches = plan.batches!;
  assert.equal(batches.tis_samples, 2);
  const [fresh, stale] = batches.parts;
  assert.deepEqual(fresh.samples.map((s) => s.rollout_id), ["r1", "r1", "r2"]);
  assert.equal(fresh.loss.old_logprobs, "rollout");
  assert.deepEqual(stale.samples.map((s) => s.rollout_id), ["s1", "s2"]);
  assert.equal(stale.loss.old_logprobs, "recompute");
  assert.equal(stale.loss.tis_cap, 2);
  // rollout_token_mean: the weights of the whole batch's trained tokens sum to 1.
  let total = 0;
  for (const s of batches.weighted) {
    for (let t = 0; t < s.loss_mask.length; t++) total += s.loss_mask[t] * s.loss_weight![t];
  }
  assert.ok(Math.abs(total - 1) < 1e-6, `Σ w = ${total}`);
  // One process: one call per micro-batch; every sample sits in exactly one micro-batch.
  for (const part of batches.parts) {
    assert.deepEqual(part.calls, part.mbs.map((_, m) => [m]));
    assert.equal(part.rankOf, undefined);
    const placed = part.mbs.flatMap((mb) => mb.segments.map((seg) => seg.source)).sort();
    assert.deepEqual(placed, part.samples.map((_, i) => i));
  }
});

Deno.test("update plan: a data-parallel worker gets each part in one call, rows spread over ranks", () => {
  const plan = planUpdate(groups(), { config, version: 7, ranks: 2 });
  for (const part of plan.batches!.parts) {
    assert.deepEqual(part.calls, [part.mbs.map((_, m) => m)]);
    assert.equal(part.rankOf!.length, part.mbs.length);
    assert.ok(part.rankOf!.every((r) => r === 0 || r === 1));
  }
});

Deno.test("update plan: nothing to train gives no batches and the update sends nothing", async () => {
  const none = [[data("u1", "g3", null, 7)]];
  const plan = planUpdate(none, { config, version: 7, ranks: 1 });
  assert.equal(plan.batches, null);
  const { client, requests } = fakeClient(7);
  const result = await updatePolicy(none, { client, config, version: 7 });
  assert.equal(result.updated, false);
  assert.equal(requests.length, 0);
  assert.deepEqual(result.filtered, plan.untrained.filtered);
});

Deno.test("update plan: updatePolicy sends exactly the planned rows and losses", async () => {
  const plan = planUpdate(groups(), { config, version: 7, ranks: 1 });
  const { client, requests } = fakeClient(7);
  const result = await updatePolicy(groups(), { client, config, version: 7 });
  const planned = plan.batches!.parts.flatMap((part) =>
    part.calls.map((call) => ({ rows: call.map((m) => part.mbs[m].row), loss: part.loss }))
  );
  assert.equal(requests.length, planned.length);
  requests.forEach((req, i) => {
    assert.deepEqual(req.rows, planned[i].rows);
    assert.deepEqual(req.loss, planned[i].loss);
  });
  assert.equal(result.trained_samples, plan.batches!.weighted.length);
  assert.equal(result.tis_samples, plan.batches!.tis_samples);
  assert.equal(result.kl_ref_mean, 0, "no KL penalty asked for");
});

Deno.test("update: kl_ref_mean is the token-weighted first-epoch mean the worker reports", async () => {
  const { client } = fakeClient(7);
  const forward = client.forwardBackward.bind(client);
  let call = 0;
  const perCall: { tokens: number; kl: number }[] = [];
  client.forwardBackward = async (req) => {
    const out = await forward(req);
    const kl = [0.1, 0.4, 0.2, 0.3][call++ % 4];
    perCall.push({ tokens: out.metrics.tokens, kl });
    return { ...out, metrics: { ...out.metrics, kl_ref_mean: kl } };
  };
  const klConfig = { ...config, ppo_epochs: 2, loss: { ...config.loss, kl_coef: 0.1 } };
  const result = await updatePolicy(groups(), { client, config: klConfig, version: 7 });
  const first = perCall.slice(0, perCall.length / 2);
  const tokens = first.reduce((a, c) => a + c.tokens, 0);
  const expected = first.reduce((a, c) => a + c.kl * c.tokens, 0) / tokens;
  assert.ok(Math.abs(result.kl_ref_mean - expected) < 1e-12, `${result.kl_ref_mean}`);
  assert.ok(result.kl_ref_mean > 0);
});
