/**
 * The worker's losses against hand-computed values. Behaviour logprobs are set to
 * `current − log r`, so every token's ratio r is chosen by the test and the expected loss
 * follows from the formulas of docs/architecture.md#algorithms by hand.
 */
import assert from "node:assert/strict";
import type { LossConfigInput } from "../lib/schema.ts";
import type { TrainerClient } from "../lib/trainer/mod.ts";
import { row, withWorker } from "./trainer_helpers.ts";

const SEQ = [1, 5, 9, 13, 17];
const MASK = [0, 1, 1, 1, 1] as const;
const W = [0, 0.25, 0.25, 0.25, 0.25];

/** Runs one forward_backward whose trained tokens have the given ratios π/π_old. */
async function lossWithRatios(
  client: TrainerClient,
  ratios: number[],
  advantages: number[],
  loss: LossConfigInput,
) {
  const { logprobs } = await client.logprobs([SEQ]);
  const lp = logprobs[0];
  const result = await client.forwardBackward({
    rows: [row(SEQ, {
      loss_mask: [...MASK],
      advantages: [0, ...advantages],
      loss_weights: W,
      rollout_logprobs: lp.map((v, i) => (i === 0 ? 0 : v - Math.log(ratios[i - 1]))),
    })],
    loss,
  });
  await client.zeroGrad();
  return { ...result, lp };
}

function close(actual: number, expected: number, what: string, tol = 2e-5) {
  assert.ok(Math.abs(actual - expected) <= tol, `${what}: got ${actual}, expected ${expected}`);
}

Deno.test("trainer losses: PPO, dual clip, GSPO, TIS, KL and CE match hand-computed values", async (t) => {
  await withWorker(async ({ client }) => {
    await t.step("PPO clips on both sides (clip_low 0.2, clip_high 0.28)", async () => {
      // r = 1.5, A = +1 → max(−1.5, −1.28) = −1.28 (clipped high)
      // r = 0.5, A = −1 → max(0.5, 0.8) = 0.8 (clipped low)
      // r = 1.1, A = +1 → −1.1;  r = 0.7, A = +2 → max(−1.4, −1.6) = −1.4 (unclipped)
      // loss = 0.25 · (−1.28 + 0.8 − 1.1 − 1.4) = −0.745
      const out = await lossWithRatios(client, [1.5, 0.5, 1.1, 0.7], [1, -1, 1, 2], {
        kind: "ppo",
        clip_low: 0.2,
        clip_high: 0.28,
      });
      close(out.loss, -0.745, "loss");
      close(out.metrics.clip_fraction, 0.5, "clip_fraction");
      close(out.metrics.ratio_mean, 0.95, "ratio_mean");
      close(out.metrics.ratio_max, 1.5, "ratio_max");
      close(out.metrics.ratio_min, 0.5, "ratio_min");
      assert.equal(out.metrics.tokens, 4);
      assert.ok(out.metrics.entropy > 0 && out.metrics.entropy <= Math.log(32) + 1e-6);
    });

    await t.step("dual clip caps negative-advantage losses at c·|A|", async () => {
      // r = 5, A = −1 → max(5, 0.8) = 5 → min(5, 3) = 3;  r = 2, A = −1 → 2 (under the cap)
      // r = 4, A = +1 → −1.2 (dual clip ignores A > 0);  r = 1, A = 0 → 0
      // loss = 0.25 · (3 + 2 − 1.2 + 0) = 0.95
      const out = await lossWithRatios(client, [5, 2, 4, 1], [-1, -1, 1, 0], {
        kind: "ppo",
        clip_low: 0.2,
        clip_high: 0.2,
        dual_clip: 3,
      });
      close(out.loss, 0.95, "loss");
      // clipped: the r = 5 token (dual) and the r = 4 token (high side)
      close(out.metrics.clip_fraction, 0.5, "clip_fraction");
    });

    await t.step(
      "GSPO uses the sequence ratio exp(mean log r) with its own clip range",
      async () => {
        // log r = [0.1, −0.3, 0.2, 0.4] → s = e^0.1 ≈ 1.10517 → clipped to 1 + 4e−4;
        // every token carries −A·s = −1.0004, Σw = 1 → loss = −1.0004
        const big = await lossWithRatios(
          client,
          [0.1, -0.3, 0.2, 0.4].map(Math.exp),
          [1, 1, 1, 1],
          { kind: "gspo", gspo_clip_low: 3e-4, gspo_clip_high: 4e-4 },
        );
        close(big.loss, -1.0004, "clipped loss");
        close(big.metrics.clip_fraction, 1, "clip_fraction");
        close(big.metrics.ratio_mean, Math.exp(0.1), "sequence ratio");
        // log r = [1e−4, −1e−4, 2e−4, 2e−4] → s = e^(1e−4), inside the clip range;
        // A = −2 → loss = 2·s ≈ 2.0002
        const small = await lossWithRatios(
          client,
          [1e-4, -1e-4, 2e-4, 2e-4].map(Math.exp),
          [-2, -2, -2, -2],
          { kind: "gspo", gspo_clip_low: 3e-4, gspo_clip_high: 4e-4 },
        );
        close(small.loss, 2 * Math.exp(1e-4), "unclipped loss");
        close(small.metrics.clip_fraction, 0, "clip_fraction");
      },
    );

    await t.step("TIS weights each token by min(exp(old − behaviour), cap)", async () => {
      // old = recomputed (ratio 1); exp(old − behaviour) = q = [0.5, 3, 1.5, 10], cap 2
      // → tis = [0.5, 2, 1.5, 2]; ℓ = −A·tis with A = [1, 1, −1, 2] → [−0.5, −2, 1.5, −4]
      // loss = 0.25 · (−5) = −1.25
      const out = await lossWithRatios(client, [0.5, 3, 1.5, 10], [1, 1, -1, 2], {
        kind: "ppo",
        old_logprobs: "recompute",
        tis_cap: 2,
      });
      close(out.loss, -1.25, "loss");
      close(out.metrics.ratio_mean, 1, "ratio against the recomputed policy");
      close(out.metrics.kl, 0, "kl");
    });

    await t.step(
      "the KL penalty adds kl_coef · (1/r − 1 + log r) per token (k3, x = −log r)",
      async () => {
        const ratios = [1.5, 0.5, 1.1, 0.7];
        const k3 = ratios.reduce((s, r) => s + (1 / r - 1 + Math.log(r)), 0);
        const out = await lossWithRatios(client, ratios, [1, -1, 1, 2], {
          kind: "ppo",
          clip_low: 0.2,
          clip_high: 0.28,
          kl_coef: 0.1,
        });
        close(out.loss, -0.745 + 0.25 * 0.1 * k3, "loss");
        close(out.metrics.kl, k3 / 4, "kl metric");
      },
    );

    await t.step("CE is −Σ w·logprob of the trained tokens", async () => {
      const out = await lossWithRatios(client, [1, 1, 1, 1], [0, 0, 0, 0], { kind: "ce" });
      const expected = -0.25 * (out.lp[1] + out.lp[2] + out.lp[3] + out.lp[4]);
      close(out.loss, expected, "loss");
      assert.ok(out.loss > 0, "a random 32-token model has positive cross-entropy");
    });

    await t.step("untrained tokens do not count, whatever their weight or advantage", async () => {
      const { logprobs } = await client.logprobs([SEQ]);
      const out = await client.forwardBackward({
        rows: [row(SEQ, {
          loss_mask: [0, 0, 1, 0, 0],
          advantages: [5, 5, 1, 5, 5],
          loss_weights: [1, 1, 1, 1, 1],
          rollout_logprobs: logprobs[0],
        })],
        loss: { kind: "ppo" },
      });
      await client.zeroGrad();
      close(out.loss, -1, "loss");
      assert.equal(out.metrics.tokens, 1);
    });
  });
});
