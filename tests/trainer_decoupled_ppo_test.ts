/**
 * Decoupled PPO through the real worker (issue #17): the update's first pass computes the
 * proximal policy π_prox; later epochs clip π_θ / π_prox and weigh by min(π_prox / μ, cap). The
 * TS reference losses give the worker's loss and metrics on that path, and GSPO's sequence
 * ratio per model call or per merged sample, from the same inputs.
 */
import assert from "node:assert/strict";
import { policyLoss, weightedSum } from "../lib/algo/mod.ts";
import { type UpdateOptions, updatePolicy } from "../lib/loop/mod.ts";
import type { ForwardBackwardRequest, LossConfigInput, TrainingRow } from "../lib/schema.ts";
import { parseOrThrow } from "../lib/schema.ts";
import { LoopConfigSchema } from "../lib/loop/schema.ts";
import type { TrainerClient } from "../lib/trainer/client.ts";
import { call, data } from "./support/loop_update.ts";
import { withWorker } from "./trainer_helpers.ts";

/** A packed row of two sequences; the behaviour logprobs are a stale policy's (off by ±0.3). */
function staleRow(): TrainingRow {
  const tokens = [1, 5, 9, 4, 7, 2, 11, 3, 2, 8, 6, 14, 10, 12];
  const mask = [0, 0, 1, 1, 1, 1, 1, 0, 0, 1, 1, 0, 1, 1] as (0 | 1)[];
  const n = mask.reduce<number>((a, m) => a + m, 0);
  return {
    rollout_id: "r",
    group_id: "g",
    tokens,
    loss_mask: mask,
    advantages: tokens.map((_, t) => (t < 7 ? 1 : -1)),
    loss_weights: mask.map((m) => m / n),
    rollout_logprobs: tokens.map((_, t) => -Math.log(32) + (t % 3 - 1) * 0.3),
    segment_starts: [0, 7],
  };
}

/** Runs epoch 1 (π_prox), a large step, then epoch 2 against π_prox; returns both passes. */
async function twoEpochs(client: TrainerClient, row: TrainingRow, loss: LossConfigInput) {
  const first = await client.forwardBackward({ rows: [row], loss, return_logprobs: true });
  await client.optimStep();
  const proximal = first.logprobs![0];
  const second = await client.forwardBackward({
    rows: [row],
    loss,
    return_logprobs: true,
    proximal_logprobs: [proximal],
  });
  await client.zeroGrad();
  return { first, second, proximal, current: second.logprobs![0] };
}

const near = (a: number, b: number, what: string, tol = 2e-5) =>
  assert.ok(Math.abs(a - b) <= tol * Math.max(1, Math.abs(b)), `${what}: TS ${a} vs worker ${b}`);

Deno.test("decoupled PPO: epoch 2 clips against π_prox and the TS reference equals the worker", async () => {
  await withWorker(async ({ client }) => {
    const row = staleRow();
    const loss: LossConfigInput = {
      kind: "ppo",
      old_logprobs: "recompute",
      tis_cap: 1.2,
      kl_coef: 0.05,
      dual_clip: 3,
    };
    const { first, second, proximal, current } = await twoEpochs(client, row, loss);
    assert.equal(first.metrics.clip_fraction, 0);
    assert.equal(first.metrics.ratio_max, 1);
    assert.ok(second.metrics.clip_fraction > 0, `clip ${second.metrics.clip_fraction}`);
    const ts = policyLoss({
      logprobs: current,
      old_logprobs: proximal,
      behaviour_logprobs: row.rollout_logprobs,
      advantages: row.advantages,
      loss_mask: row.loss_mask,
      segment_starts: row.segment_starts,
    }, loss);
    near(weightedSum(ts.loss, row.loss_weights), second.loss, "loss");
    near(ts.clip_fraction, second.metrics.clip_fraction, "clip_fraction");
    near(ts.ratio_mean, second.metrics.ratio_mean, "ratio_mean");
    near(ts.ratio_max, second.metrics.ratio_max, "ratio_max");
    near(ts.kl, second.metrics.kl, "kl");
    // The first epoch is the same reference with π_θ = π_prox (ratio 1, TIS only).
    const ts0 = policyLoss({
      logprobs: proximal,
      old_logprobs: proximal,
      behaviour_logprobs: row.rollout_logprobs,
      advantages: row.advantages,
      loss_mask: row.loss_mask,
    }, loss);
    near(weightedSum(ts0.loss, row.loss_weights), first.loss, "first-epoch loss");
  }, { lr: 0.05 });
});

Deno.test("GSPO per call vs per sample: worker and TS reference agree on both", async () => {
  await withWorker(async ({ client }) => {
    const base = staleRow();
    // One sample of two merged calls (trained tokens 2–6 | 9–13, as a prefix-merged sample).
    const row: TrainingRow = { ...base, segment_starts: undefined };
    delete row.segment_starts;
    const perCall = row.loss_mask.map((_, t) => (t < 7 ? 0 : 1));
    const results: number[] = [];
    for (const [mode, ids] of [["sample", undefined], ["call", perCall]] as const) {
      const loss: LossConfigInput = {
        kind: "gspo",
        old_logprobs: "recompute",
        gspo_clip_low: 0.05,
        gspo_clip_high: 0.05,
        tis_cap: 2,
        gspo_sequence: mode,
      };
      const r = ids ? { ...row, sequence_ids: ids } : row;
      const { second, proximal, current } = await twoEpochs(client, r, loss);
      const ts = policyLoss({
        logprobs: current,
        old_logprobs: proximal,
        behaviour_logprobs: r.rollout_logprobs,
        advantages: r.advantages,
        loss_mask: r.loss_mask,
        ...(ids ? { sequence_ids: ids } : {}),
      }, loss);
      near(weightedSum(ts.loss, r.loss_weights), second.loss, `${mode} loss`);
      near(ts.ratio_min, second.metrics.ratio_min, `${mode} ratio_min`);
      near(ts.ratio_max, second.metrics.ratio_max, `${mode} ratio_max`);
      near(ts.clip_fraction, second.metrics.clip_fraction, `${mode} clip_fraction`);
      results.push(ts.ratio_max - ts.ratio_min);
    }
    // One ratio per sample; two per call (they differ after a step).
    assert.ok(results[0] < 1e-12, `per-sample ratios differ: ${results[0]}`);
    assert.ok(results[1] > 1e-6, `per-call ratios are equal: ${results[1]}`);
  }, { lr: 0.05 });
});

Deno.test("decoupled PPO in the update: stale samples clip on epoch 2 (0 without π_prox)", async () => {
  const config = parseOrThrow(LoopConfigSchema, {
    name: "stale",
    tasks: [{ id: "t", input: {} }],
    harness: { name: "command", options: { command: ["true"] } },
    ppo_epochs: 2,
    share_prefix: false,
    schedule: { stale_policy: "tis", max_staleness: 1, tis_cap: 2 },
  });
  // Distinct responses per rollout (identical ones with opposite advantages would cancel).
  const stale = (id: string, group: string, reward: number, k: number) => {
    const d = data(id, group, reward, 4);
    d.events = [
      call(id, [1, 2, 3], [4 + k, 5 + k, 6 + k], 4),
      call(id, [1, 2, 3, 4 + k, 5 + k, 6 + k, 7], [8 + k, 9 + k], 4),
    ];
    return d;
  };
  const groups = () => [
    [stale("s1", "g1", 1, 0), stale("s2", "g1", 0, 7)],
    [stale("s3", "g2", 0, 14), stale("s4", "g2", 1, 20)],
  ];
  const run = (client: TrainerClient) => {
    // Sampled 3 updates (6 versions) before the one being trained: all under TIS.
    const options: UpdateOptions = { client, config, version: 10 };
    return updatePolicy(groups(), options);
  };
  const figures: Record<string, number> = {};
  await withWorker(async ({ client }) => {
    const result = await run(client);
    assert.equal(result.tis_samples, 4);
    assert.equal(result.clip_fraction_epochs[0], 0);
    assert.ok(result.clip_fraction_epochs[1] > 0, `${result.clip_fraction_epochs}`);
    figures.stale_epoch2_clip_fraction = result.clip_fraction_epochs[1];
  }, { lr: 0.05, seed: 3 });
  // The same update with π_prox withheld (what the worker did before: π_old = this pass).
  await withWorker(async ({ client }) => {
    const withheld = new Proxy(client, {
      get(target, key) {
        if (key !== "forwardBackward") {
          const value = Reflect.get(target, key);
          return typeof value === "function" ? value.bind(target) : value;
        }
        return (req: ForwardBackwardRequest) => {
          const { proximal_logprobs: _, ...rest } = req;
          return target.forwardBackward(rest);
        };
      },
    });
    const result = await run(withheld);
    assert.equal(result.clip_fraction_epochs[1], 0);
    figures.stale_epoch2_clip_fraction_without_proximal = result.clip_fraction_epochs[1];
  }, { lr: 0.05, seed: 3 });
  for (const [name, value] of Object.entries(figures)) console.log(`${name}: ${value}`);
});
