import assert from "node:assert/strict";
import { CanarySpecSchema, MISMATCH_CANARY } from "../experiments/canary.ts";
import { runMismatch, type SampledCall, summarizeCalls } from "../experiments/mismatch.ts";
import { MISMATCH_CONFIG } from "../experiments/mismatch.ts";

const call = (behaviour: number[], trainer: number[], prompt_index = 0): SampledCall => ({
  prompt_index,
  ids: behaviour.map((_, t) => t + 3),
  behaviour,
  trainer,
});

Deno.test("an engine that agrees with the trainer shows no mismatch and no correction cost", () => {
  const lp = [-0.2, -1.5, -0.05, -3, -0.7, -2.2];
  const s = summarizeCalls([call(lp, lp), call(lp, lp, 1)], [0, 2, 6]);
  assert.equal(s.pooled.tokens, 12);
  assert.equal(s.pooled.pearson, 1);
  assert.equal(s.pooled.probs_diff_mean, 0);
  assert.equal(s.pooled.k3_kl, 0);
  assert.equal(s.pooled.max_abs_dlogprob, 0);
  assert.equal(s.pooled.ess, 1);
  assert.deepEqual(s.corrections, {
    tis_clipped_share: 0,
    icepop_masked_share: 0,
    seq_is_masked_share: 0,
  });
  assert.deepEqual(s.by_length.map((b) => [b.from, b.to, b.tokens]), [[0, 2, 4], [2, 6, 8]]);
  assert.deepEqual(s.sequence.map((r) => r.geo_mean_in_band), [1, 1]);
});

Deno.test("the correction costs count exactly the tokens and calls outside each band", () => {
  const behaviour = [-1, -1, -1, -1];
  // Ratios π_trainer/π_engine: 3 (TIS clips, IcePop masks), 0.4 (IcePop masks), 1, 1.5.
  const trainer = [-1 + Math.log(3), -1 + Math.log(0.4), -1, -1 + Math.log(1.5)];
  const s = summarizeCalls([call(behaviour, trainer), call(behaviour, behaviour, 1)], [0, 4]);
  assert.equal(s.corrections.tis_clipped_share, 1 / 8);
  assert.equal(s.corrections.icepop_masked_share, 2 / 8);
  // The first call's geometric mean is (3·0.4·1·1.5)^(1/4) ≈ 1.16: outside [0.99, 1.01].
  assert.equal(s.corrections.seq_is_masked_share, 1 / 2);
  assert.equal(s.per_call.calls, 2);
  assert.ok(Math.abs(s.per_call.max_abs_dlogprob_max - Math.log(3)) < 1e-12);
  assert.equal(s.per_call.k3_kl_max > 0, true);
  assert.equal(s.pooled.max_abs_dlogprob, s.per_call.max_abs_dlogprob_max);
});

Deno.test("the sequence-level log-ratio accumulates over the prefix", () => {
  const behaviour = Array.from({ length: 8 }, () => -1);
  const trainer = behaviour.map((b) => b + 0.01); // every token's ratio e^0.01
  const s = summarizeCalls([call(behaviour, trainer)], [0, 2, 4, 8]);
  const sums = s.sequence.map((r) => r.mean_abs_log_ratio);
  assert.deepEqual(s.sequence.map((r) => r.prefix), [2, 4, 8]);
  [0.02, 0.04, 0.08].forEach((want, i) => assert.ok(Math.abs(sums[i] - want) < 1e-12));
  // A per-token ratio e^0.01 > 1.01: masked sequence-level IS drops the call at every length.
  assert.deepEqual(s.sequence.map((r) => r.geo_mean_in_band), [0, 0, 0]);
});

Deno.test("the mismatch canary's spec is valid and bad specs are refused by field", () => {
  assert.equal(CanarySpecSchema.safeParse(MISMATCH_CANARY).success, true);
  const bad = CanarySpecSchema.safeParse({ ...MISMATCH_CANARY, engines: ["bf16"] });
  assert.equal(bad.success, false);
  assert.deepEqual(bad.error?.issues[0].path.slice(0, 1), ["engines"]);
  const long = CanarySpecSchema.safeParse({ ...MISMATCH_CANARY, max_tokens: 4096 });
  assert.equal(long.success, false);
});

Deno.test({
  name:
    "llama.cpp's f32 export samples what the fp32 trainer scores; q8_0 measurably does not, q4_0 further off",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const seen: Record<string, SampledCall[]> = {};
    const study = await runMismatch({
      ...MISMATCH_CONFIG,
      sft_steps: [5],
      prompts: 2,
      max_tokens: 24,
      engines: ["f32", "q8_0", "q4_0"],
      length_buckets: [0, 12, 24],
    }, { onCalls: (_step, engine, calls) => (seen[engine] = calls) });
    assert.equal(study.cells.length, 3);
    const f32 = study.by_engine.f32;
    const q8 = study.by_engine.q8_0;
    assert.equal(f32.tokens, 48);
    // The f32 bound of issue #30 (≤ 1e-3), on tokens llama.cpp itself sampled.
    assert.ok(f32.max_abs_dlogprob <= 1e-3, `f32 max |Δlogprob| ${f32.max_abs_dlogprob}`);
    assert.ok(q8.max_abs_dlogprob > 10 * f32.max_abs_dlogprob);
    assert.ok(q8.k3_kl > f32.k3_kl);
    // 4-bit codes (16 levels per block against q8_0's 255) move every token's logprob further.
    const q4 = study.by_engine.q4_0;
    assert.ok(
      q4.mean_abs_dlogprob > q8.mean_abs_dlogprob,
      `q4_0 mean |Δlogprob| ${q4.mean_abs_dlogprob} vs q8_0 ${q8.mean_abs_dlogprob}`,
    );
    // The same seeds: every engine answered every prompt with the requested length.
    for (const engine of ["f32", "q8_0", "q4_0"]) {
      assert.deepEqual(seen[engine].map((c) => c.ids.length), [24, 24]);
    }
  },
});
