import assert from "node:assert/strict";
import {
  crossEntropyLoss,
  gspoRatios,
  k3Kl,
  policyLoss,
  ppoClipLoss,
  tisWeights,
  weightedSum,
} from "../lib/algo/mod.ts";
import { ValidationError } from "../lib/schema.ts";

const close = (a: number, b: number, tol = 1e-12) =>
  assert.ok(Math.abs(a - b) <= tol, `expected ${b}, got ${a}`);
const ln = Math.log;

Deno.test("PPO clip: the pessimistic term wins on both sides of the clip range", () => {
  // ratio r = exp(logprob - old_logprob); clip range [0.8, 1.2].
  const out = ppoClipLoss({
    logprobs: [ln(1.5), ln(0.5), ln(0.5), ln(1.5), ln(1.1)],
    old_logprobs: [0, 0, 0, 0, 0],
    advantages: [1, 1, -1, -1, 2],
  }, { low: 0.2, high: 0.2 });
  close(out.loss[0], -1.2); // A > 0, r above 1 + eps: clipped, no incentive to push further
  close(out.loss[1], -0.5); // A > 0, r below 1 - eps: unclipped (pessimistic)
  close(out.loss[2], 0.8); // A < 0, r below 1 - eps: clipped
  close(out.loss[3], 1.5); // A < 0, r above 1 + eps: unclipped
  close(out.loss[4], -2.2); // inside the range: -A r
  assert.deepEqual([...out.clipped], [1, 0, 1, 0, 0]);
  close(out.ratio[0], 1.5);
});

Deno.test("PPO clip: asymmetric clip-higher (DAPO) uses clip_high above and clip_low below", () => {
  const out = ppoClipLoss({
    logprobs: [ln(1.5), ln(0.5)],
    old_logprobs: [0, 0],
    advantages: [1, -1],
  }, { low: 0.1, high: 0.28 });
  close(out.loss[0], -1.28);
  close(out.loss[1], 0.9);
});

Deno.test("dual clip caps a negative-advantage token's loss at c|A| and leaves others alone", () => {
  const out = ppoClipLoss({
    logprobs: [ln(5), ln(2.5), ln(5)],
    old_logprobs: [0, 0, 0],
    advantages: [-1, -2, 1],
  }, { low: 0.2, high: 0.2, dual_clip: 3 });
  close(out.loss[0], 3); // -A r = 5 > c|A| = 3
  close(out.loss[1], 5); // -A r = 5 < c|A| = 6
  close(out.loss[2], -1.2); // positive advantage: ordinary clip
  assert.deepEqual([...out.dual_clipped], [1, 0, 0]);
  assert.deepEqual([...out.clipped], [1, 0, 1]);
  const without = ppoClipLoss({ logprobs: [ln(5)], old_logprobs: [0], advantages: [-1] }, {
    low: 0.2,
    high: 0.2,
  });
  close(without.loss[0], 5);
});

Deno.test("GSPO: one ratio per sequence, exp(mean log r) over its trained tokens, with its own clip", () => {
  const input = {
    // sequence 1: trained log r = 0.1, 0.3 (context token ignored); sequence 2: -0.2, -0.4
    logprobs: [0.1, 0.3, 9, -0.2, -0.4],
    behaviour_logprobs: [0, 0, 0, 0, 0],
    advantages: [1, 1, 1, -1, -1],
    loss_mask: [1, 1, 0, 1, 1],
    segment_starts: [0, 3],
  };
  const ratios = gspoRatios({ ...input, old_logprobs: input.behaviour_logprobs });
  close(ratios.sequence[0], Math.exp(0.2));
  close(ratios.sequence[1], Math.exp(-0.3));
  const wide = policyLoss(input, { kind: "gspo", gspo_clip_low: 0.5, gspo_clip_high: 0.5 });
  close(wide.loss[0], -Math.exp(0.2));
  close(wide.loss[1], -Math.exp(0.2));
  assert.equal(wide.loss[2], 0);
  close(wide.loss[3], Math.exp(-0.3));
  assert.equal(wide.clip_fraction, 0);

  // Defaults 3e-4 / 4e-4: sequence 1 (A > 0, s > 1) clips at 1.0004, sequence 2 (A < 0, s < 1)
  // clips at 0.9997.
  const narrow = policyLoss(input, { kind: "gspo" });
  close(narrow.loss[0], -1.0004);
  close(narrow.loss[4], 0.9997);
  assert.equal(narrow.clip_fraction, 1);
});

Deno.test("truncated IS weight is min(exp(old - behaviour), cap)", () => {
  const w = tisWeights([0, 0, 0], [ln(0.5), 0, ln(4)], 1.5);
  close(w[0], 1.5); // 2 capped
  close(w[1], 1);
  close(w[2], 0.25);
  assert.throws(() => tisWeights([0], [0], 0), (e: unknown) => e instanceof ValidationError);
});

Deno.test("k3 KL(π ‖ ref) is exp(x) - x - 1 with x = ref - logprob, zero when equal", () => {
  const kl = k3Kl([ln(0.5), -1], [ln(0.25), -1]);
  close(kl[0], 0.5 - ln(0.5) - 1);
  assert.equal(kl[1], 0);
  assert.ok(k3Kl([-3], [-0.1])[0] > 0);
});

Deno.test("cross-entropy is -logprob", () => {
  assert.deepEqual([...crossEntropyLoss([ln(0.5), 0])], [-ln(0.5), -0]);
});

Deno.test("policyLoss composes tis x surrogate + kl_coef x k3 on trained tokens only", () => {
  const input = {
    logprobs: [ln(1.5), -1, -2],
    old_logprobs: [0, -1, -2],
    behaviour_logprobs: [ln(0.5), -1, -2],
    // π_ref, the reference policy of the KL penalty (here equal to π_old).
    reference_logprobs: [0, -1, -2],
    advantages: [1, 1, 1],
    loss_mask: [1, 1, 0],
  };
  const out = policyLoss(input, {
    kind: "ppo",
    tis_cap: 1.5,
    kl_coef: 0.1,
    old_logprobs: "recompute",
  });
  const k3 = 1 / 1.5 + ln(1.5) - 1; // x = old - new = -ln 1.5
  close(out.loss[0], 1.5 * -1.2 + 0.1 * k3); // TIS exp(0 - ln 0.5) = 2, capped at 1.5
  close(out.loss[1], 1 * -1);
  assert.equal(out.loss[2], 0);
  assert.equal(out.tokens, 2);
  close(out.clip_fraction, 0.5);
  close(out.kl, k3 / 2);
  close(out.kl_ref_mean, k3 / 2);
  close(out.ratio_max, 1.5);
  close(out.ratio_min, 1);
  close(out.ratio_mean, 1.25);
  close(weightedSum(out.loss, [0.5, 0.5, 0.5]), 0.5 * (out.loss[0] + out.loss[1]));

  // Default old_logprobs "rollout": the ratio is taken against the behaviour logprobs.
  const rollout = policyLoss(input, { kind: "ppo" });
  close(rollout.ratio_max, 3);
  close(rollout.loss[0], -1.2);

  const sft = policyLoss({ ...input, loss_mask: [1, 0, 0] }, { kind: "ce" });
  close(sft.loss[0], -ln(1.5));
  assert.equal(sft.loss[1], 0);
});

Deno.test("bad loss inputs name the field", () => {
  const ok = { logprobs: [0], behaviour_logprobs: [0], advantages: [0], loss_mask: [1] };
  const cases: [() => unknown, string][] = [
    [
      () =>
        ppoClipLoss({ logprobs: [0], old_logprobs: [0], advantages: [] }, { low: 0.2, high: 0.2 }),
      "advantages",
    ],
    [
      () =>
        ppoClipLoss({ logprobs: [0], old_logprobs: [], advantages: [0] }, { low: 0.2, high: 0.2 }),
      "old_logprobs",
    ],
    [() => policyLoss(ok, { kind: "ppo", clip_low: 2 }), "config.clip_low"],
    [() => policyLoss(ok, { kind: "ppo", dual_clip: 0.5 }), "config.dual_clip"],
    // deno-lint-ignore no-explicit-any
    [() => policyLoss(ok, { kind: "grpo" } as any), "config.kind"],
    [() => policyLoss(ok, { kind: "ppo", old_logprobs: "recompute" }), "old_logprobs"],
    [() => policyLoss({ ...ok, loss_mask: [] }, { kind: "ppo" }), "loss_mask"],
    [
      () =>
        gspoRatios({
          logprobs: [0, 0],
          old_logprobs: [0, 0],
          loss_mask: [1, 1],
          segment_starts: [0, 5],
        }),
      "segment_starts[1]",
    ],
    [() => weightedSum([1, 2], [1]), "weights"],
  ];
  for (const [fn, field] of cases) {
    assert.throws(
      fn,
      (e: unknown) => e instanceof ValidationError && e.field === field,
      `expected an error on ${field}`,
    );
  }
});

Deno.test("policyLoss: kl_coef · k of KL(π_θ ‖ π_ref) with Schulman's k1, k2, k3", () => {
  // x = ref − new = [0.5, −1]; k1 = −x, k2 = x²/2, k3 = eˣ − x − 1.
  const input = {
    logprobs: [-1.5, -0.5],
    behaviour_logprobs: [-1.5, -0.5], // ratio 1: the surrogate is −A = 0 with A = 0
    reference_logprobs: [-1, -1.5],
    advantages: [0, 0],
    loss_mask: [1, 1],
  };
  const expected = {
    k1: [-0.5, 1],
    k2: [0.125, 0.5],
    k3: [Math.exp(0.5) - 1.5, Math.exp(-1)],
  } as const;
  for (const [name, k] of Object.entries(expected)) {
    const out = policyLoss(input, {
      kind: "ppo",
      kl_coef: 0.2,
      kl_estimator: name as keyof typeof expected,
    });
    close(out.loss[0], 0.2 * k[0]);
    close(out.loss[1], 0.2 * k[1]);
    close(out.kl_ref_mean, (k[0] + k[1]) / 2);
    assert.equal(out.kl, 0, "the kl metric is against π_old, not π_ref");
  }
  // Off (kl_coef 0, the default): no reference needed, nothing added.
  const off = policyLoss({ ...input, reference_logprobs: undefined }, { kind: "ppo" });
  assert.deepEqual([...off.loss], [-0, -0]);
  assert.equal(off.kl_ref_mean, 0);
  assert.throws(
    () => policyLoss({ ...input, reference_logprobs: undefined }, { kind: "ppo", kl_coef: 0.1 }),
    (e) => e instanceof ValidationError && e.field === "reference_logprobs",
  );
});
