/**
 * Gradient correctness of `forward_backward`: micro-batch split invariance, tree rows vs the
 * same paths unpacked, packed rows vs unpacked rows.
 */
import assert from "node:assert/strict";
import type { LossConfigInput, TrainingRow } from "../lib/schema.ts";
import type { TrainerClient } from "../lib/trainer/mod.ts";
import { packMicroBatches } from "../lib/batching/packing.ts";
import { maxAbs, maxAbsDiff, PPO, row, withWorker } from "./trainer_helpers.ts";

/** Loss and flattened gradient of one optimizer step's worth of calls (grads zeroed first). */
async function lossAndGrad(
  client: TrainerClient,
  calls: TrainingRow[][],
  loss: LossConfigInput = PPO,
): Promise<{ loss: number; grad: number[] }> {
  await client.zeroGrad();
  let total = 0;
  for (const rows of calls) total += (await client.forwardBackward({ rows, loss })).loss;
  const { gradient } = await client.gradients();
  await client.zeroGrad();
  return { loss: total, grad: gradient };
}

function assertSameGrad(a: number[], b: number[], what: string) {
  const scale = maxAbs(a);
  assert.ok(scale > 1e-6, `${what}: gradient must not vanish (max |g| = ${scale})`);
  const diff = maxAbsDiff(a, b);
  assert.ok(diff <= 1e-5 * scale + 1e-8, `${what}: max |Δg| = ${diff} (scale ${scale})`);
}

/** Rows with behaviour logprobs a little off the current policy, so that ratios ≠ 1. */
async function makeRows(client: TrainerClient): Promise<TrainingRow[]> {
  const seqs = [
    [1, 4, 7, 2, 9, 11],
    [3, 3, 5, 8, 13, 21, 2, 6, 10],
    [2, 30, 17],
    [5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16],
  ];
  const prompts = [2, 3, 1, 4];
  const { logprobs } = await client.logprobs(seqs);
  const totalTokens = seqs.reduce((n, s, i) => n + s.length - prompts[i], 0);
  return seqs.map((tokens, i) =>
    row(tokens, {
      rollout_id: `r${i}`,
      loss_mask: tokens.map((_, t) => (t >= prompts[i] ? 1 : 0)),
      advantages: tokens.map((_, t) => (t >= prompts[i] ? (i % 2 ? -1 : 1) * (1 + 0.1 * t) : 0)),
      loss_weights: tokens.map((_, t) => (t >= prompts[i] ? 1 / totalTokens : 0)),
      rollout_logprobs: logprobs[i].map((lp, t) => (t >= prompts[i] ? lp + 0.15 * Math.sin(t) : 0)),
    })
  );
}

Deno.test("trainer gradients: forward_backward is exact under any split, tree and packing", async (t) => {
  await withWorker(async ({ client }) => {
    const rows = await makeRows(client);

    await t.step("one batch equals the sum over any micro-batch split", async () => {
      for (const loss of [PPO, { kind: "gspo" as const }, { kind: "ce" as const }]) {
        const whole = await lossAndGrad(client, [rows], loss);
        for (const split of [[[0, 1], [2, 3]], [[0], [1], [2], [3]], [[3, 0], [2, 1]]]) {
          const parts = await lossAndGrad(
            client,
            split.map((idx) => idx.map((i) => rows[i])),
            loss,
          );
          assert.ok(Math.abs(whole.loss - parts.loss) < 1e-5, `${loss.kind} loss ${split}`);
          assertSameGrad(whole.grad, parts.grad, `${loss.kind} split ${JSON.stringify(split)}`);
        }
      }
    });

    await t.step("gradients accumulate until zero_grad and vanish after it", async () => {
      const once = await lossAndGrad(client, [rows]);
      const twice = await lossAndGrad(client, [rows, rows]);
      assertSameGrad(once.grad.map((g) => 2 * g), twice.grad, "twice the same batch");
      assert.equal((await client.gradients()).norm, 0);
    });

    await t.step("a tree row equals its root-to-leaf paths unpacked", async () => {
      // Shared prompt [1, 4, 7, 2] with two continuations; token 2 (index 3) is trained in
      // both paths, so the tree carries it once with twice the weight.
      const prompt = [1, 4, 7, 2];
      const b1 = [9, 11, 5];
      const b2 = [6, 13, 21, 8];
      const { logprobs } = await client.logprobs([[...prompt, ...b1], [...prompt, ...b2]]);
      const beh1 = logprobs[0].map((lp) => lp - 0.1);
      // The shared prefix has one behaviour logprob, whichever path carries it.
      const beh2 = logprobs[1].map((lp, i) => (i < prompt.length ? beh1[i] : lp + 0.2));
      const w = 0.05;
      const path = (branch: number[], beh: number[], adv: number) =>
        row([...prompt, ...branch], {
          loss_mask: [0, 0, 0, 1, ...branch.map(() => 1 as const)],
          advantages: [0, 0, 0, 0.5, ...branch.map(() => adv)],
          loss_weights: [0, 0, 0, w, ...branch.map(() => w)],
          rollout_logprobs: beh,
        });
      const unpacked = [path(b1, beh1, 1), path(b2, beh2, -1)];
      const n = prompt.length;
      const tree = row([...prompt, ...b1, ...b2], {
        parent: [-1, 0, 1, 2, 3, n, n + 1, 3, n + b1.length, n + b1.length + 1, n + b1.length + 2],
        loss_mask: [0, 0, 0, 1, ...b1.map(() => 1 as const), ...b2.map(() => 1 as const)],
        advantages: [0, 0, 0, 0.5, ...b1.map(() => 1), ...b2.map(() => -1)],
        loss_weights: [0, 0, 0, 2 * w, ...b1.map(() => w), ...b2.map(() => w)],
        rollout_logprobs: [...beh1, ...beh2.slice(n)],
      });
      const a = await lossAndGrad(client, [unpacked]);
      const b = await lossAndGrad(client, [[tree]]);
      assert.ok(Math.abs(a.loss - b.loss) < 1e-5, `loss ${a.loss} vs ${b.loss}`);
      assertSameGrad(a.grad, b.grad, "tree vs unpacked");
    });

    await t.step(
      "packed rows (position reset, no cross attention) equal unpacked rows",
      async () => {
        for (
          const loss of [PPO, { kind: "gspo" as const, gspo_clip_high: 10, gspo_clip_low: 0.9 }]
        ) {
          const [r0, r1, r2] = rows;
          const packed = row([...r0.tokens, ...r1.tokens, ...r2.tokens], {
            segment_starts: [0, r0.tokens.length, r0.tokens.length + r1.tokens.length],
            loss_mask: [...r0.loss_mask, ...r1.loss_mask, ...r2.loss_mask],
            advantages: [...r0.advantages, ...r1.advantages, ...r2.advantages],
            loss_weights: [...r0.loss_weights, ...r1.loss_weights, ...r2.loss_weights],
            rollout_logprobs: [
              ...r0.rollout_logprobs,
              ...r1.rollout_logprobs,
              ...r2.rollout_logprobs,
            ],
          });
          const a = await lossAndGrad(client, [[r0, r1, r2]], loss);
          const b = await lossAndGrad(client, [[packed, rows[3]]], loss);
          const c = await lossAndGrad(client, [[rows[3]]], loss);
          assert.ok(Math.abs(a.loss + c.loss - b.loss) < 1e-5, `${loss.kind} packed loss`);
          assertSameGrad(a.grad.map((g, i) => g + c.grad[i]), b.grad, `${loss.kind} packed`);
        }
      },
    );

    await t.step(
      "lib/batching's packed micro-batches (tree + linear rows) equal unpacked rows",
      async () => {
        const tree = row([1, 4, 7, 9, 11, 6, 13], {
          parent: [-1, 0, 1, 2, 3, 2, 5],
          loss_mask: [0, 0, 0, 1, 1, 1, 1],
          advantages: [0, 0, 0, 1, 1, -1, -1],
          loss_weights: [0, 0, 0, 0.05, 0.05, 0.05, 0.05],
          rollout_logprobs: [0, 0, 0, -3.3, -3.4, -3.5, -3.6],
        });
        const all = [...rows, tree];
        const micro = packMicroBatches(all, { token_budget: 24 });
        assert.ok(micro.length >= 2 && micro.some((m) => m.row.parent !== undefined));
        const a = await lossAndGrad(client, [all]);
        const b = await lossAndGrad(client, micro.map((m) => [m.row]));
        assert.ok(Math.abs(a.loss - b.loss) < 1e-5, `loss ${a.loss} vs ${b.loss}`);
        assertSameGrad(a.grad, b.grad, "packed micro-batches");
      },
    );

    await t.step("the packing test can fail: without position reset the loss differs", async () => {
      const [r0, r1] = rows;
      const concatenated = row([...r0.tokens, ...r1.tokens], {
        loss_mask: [...r0.loss_mask, ...r1.loss_mask],
        advantages: [...r0.advantages, ...r1.advantages],
        loss_weights: [...r0.loss_weights, ...r1.loss_weights],
        rollout_logprobs: [...r0.rollout_logprobs, ...r1.rollout_logprobs],
      });
      const a = await lossAndGrad(client, [[r0, r1]]);
      const b = await lossAndGrad(client, [[concatenated]]);
      assert.ok(maxAbsDiff(a.grad, b.grad) > 1e-4 * maxAbs(a.grad));
    });
  });
});
