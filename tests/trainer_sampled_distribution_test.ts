/**
 * Logprobs of the distribution actually sampled: a harness that asks for temperature 0.7 gets
 * behaviour logprobs of softmax(z / 0.7); the proxy records the call's sampling, assembly puts
 * the temperature on the call's tokens, and the worker recomputes at it — so alignment stays
 * ≥ 0.999 where recomputing at temperature 1 (what the trainer did before) is measurably off.
 * Calls sampled with a truncation (top-p < 1) or greedily are masked: context, not trained.
 */
import assert from "node:assert/strict";
import { alignmentMetrics } from "../lib/algo/mod.ts";
import { flattenBatch } from "../lib/batching/mod.ts";
import { buildModelRequestEvent } from "../lib/proxy/capture.ts";
import { assembleRollout } from "../lib/samples/mod.ts";
import {
  type CallSampling,
  modelRequestFromWire,
  ModelRequestWireSchema,
  parseOrThrow,
  type RolloutEvent,
  type Sample,
} from "../lib/schema.ts";
import { withWorker } from "./trainer_helpers.ts";

const PROMPTS = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10], [11, 12], [13], [14, 15, 16], [17]];

/** A stored model_request event as the proxy's recorder writes it. */
function callEvent(
  seq: number,
  rollout: string,
  prompt: number[],
  out: { ids: number[]; logprobs: number[]; policy_version: number },
  sampling: CallSampling,
): RolloutEvent {
  const input = buildModelRequestEvent({
    callId: `${rollout}-${seq}`,
    flavor: "generate",
    body: {},
    messages: null,
    promptIds: prompt,
    responseIds: out.ids,
    responseLogprobs: out.logprobs,
    responseText: "",
    policyVersion: out.policy_version,
    finishReason: "length",
    upstream: null,
    latencyMs: 1,
    retryCount: 0,
    httpStatus: 200,
    error: null,
    segment: null,
    mode: "faithful",
    clientDisconnected: false,
    sampling,
  });
  assert.equal(input.type, "model_request");
  const payload = parseOrThrow(ModelRequestWireSchema, input.payload);
  return {
    type: "model_request",
    seq,
    rollout_id: rollout,
    attempt_id: `${rollout}-a`,
    event_key: null,
    created_at: 0,
    payload: modelRequestFromWire(payload),
  };
}

function trainable(samples: Sample[]): Sample[] {
  return samples.map((s) => ({
    ...s,
    advantage: new Float32Array(s.tokens.length).fill(1),
    loss_weight: Float32Array.from(s.loss_mask, (m) => m * 0.01),
  }));
}

Deno.test("a harness at temperature 0.7 keeps rollout–trainer alignment ≥ 0.999", async () => {
  await withWorker(async ({ client }) => {
    const sampling = { temperature: 0.7, top_p: 1, top_k: 0, min_p: 0 };
    const samples: Sample[] = [];
    for (const [i, prompt] of PROMPTS.entries()) {
      // Two turns: the second call's prompt extends the first (one prefix-merged sample).
      const first = await client.generate({
        prompt_ids: prompt,
        max_tokens: 12,
        temperature: 0.7,
        seed: 10 + i,
      });
      const prompt2 = [...prompt, ...first.ids, 20];
      const second = await client.generate({
        prompt_ids: prompt2,
        max_tokens: 12,
        temperature: 0.7,
        seed: 50 + i,
      });
      const events = [
        callEvent(1, `r${i}`, prompt, first, sampling),
        callEvent(2, `r${i}`, prompt2, second, sampling),
      ];
      const assembled = assembleRollout(events, { strategy: "prefix_merge" });
      assert.equal(assembled.samples.length, 1);
      assert.deepEqual(assembled.masked_calls, []);
      samples.push(...assembled.samples);
    }
    for (const s of samples) {
      const temps = s.temperatures!;
      for (let t = 0; t < s.tokens.length; t++) {
        assert.equal(temps[t], s.loss_mask[t] ? Math.fround(0.7) : 1);
      }
    }
    const rows = flattenBatch(trainable(samples));
    const measure = async (rowsToSend: typeof rows) => {
      const fb = await client.forwardBackward({
        rows: rowsToSend,
        loss: { kind: "ppo" },
        return_logprobs: true,
      });
      await client.zeroGrad();
      return alignmentMetrics(rows.map((r, i) => ({
        rollout_logprobs: r.rollout_logprobs,
        trainer_logprobs: fb.logprobs![i],
        loss_mask: r.loss_mask,
      })));
    };
    const aligned = await measure(rows);
    assert.ok(aligned.tokens >= PROMPTS.length * 20, `${aligned.tokens} trained tokens`);
    assert.ok(aligned.pearson_prob! >= 0.999, `Pearson ${aligned.pearson_prob}`);
    assert.ok(aligned.max_abs_dlogprob < 1e-3, `max |Δlogprob| ${aligned.max_abs_dlogprob}`);
    // The same rows recomputed at temperature 1 (the trainer before): measurably off.
    const biased = await measure(rows.map(({ temperatures: _t, ...r }) => r));
    assert.ok(biased.max_abs_dlogprob > 0.05, `max |Δlogprob| ${biased.max_abs_dlogprob}`);
    assert.ok(biased.k3_kl > 100 * aligned.k3_kl + 1e-4, `k3 ${biased.k3_kl} vs ${aligned.k3_kl}`);
  });
});

Deno.test("calls sampled with top-p < 1 or greedily are masked, not trained", async () => {
  await withWorker(async ({ client }) => {
    const prompt = [1, 2, 3];
    const nucleus = await client.generate({
      prompt_ids: prompt,
      max_tokens: 6,
      temperature: 1,
      top_p: 0.9,
      seed: 1,
    });
    const prompt2 = [...prompt, ...nucleus.ids, 20];
    const plain = await client.generate({ prompt_ids: prompt2, max_tokens: 6, seed: 2 });
    const prompt3 = [...prompt2, ...plain.ids, 21];
    const greedy = await client.generate({ prompt_ids: prompt3, max_tokens: 6, temperature: 0 });
    const events = [
      callEvent(1, "r", prompt, nucleus, { temperature: 1, top_p: 0.9, top_k: 0, min_p: 0 }),
      callEvent(2, "r", prompt2, plain, { temperature: 1, top_p: 1, top_k: 0, min_p: 0 }),
      callEvent(3, "r", prompt3, greedy, { temperature: 0, top_p: 1, top_k: 0, min_p: 0 }),
    ];
    const result = assembleRollout(events, { strategy: "prefix_merge" });
    assert.deepEqual(result.masked_calls, [
      { seq: 1, reason: "top_p 0.9 < 1" },
      { seq: 3, reason: "greedy (temperature 0)" },
    ]);
    const [sample] = result.samples;
    assert.equal(sample.temperatures, undefined); // the trained call ran at temperature 1
    const trained = [...sample.loss_mask.entries()].filter(([, m]) => m).map(([t]) => t);
    const start = prompt2.length;
    assert.deepEqual(trained, plain.ids.map((_, k) => start + k));
    // Masked tokens stay in the sample as context: later calls were conditioned on them.
    assert.deepEqual(Array.from(sample.tokens), [...prompt3, ...greedy.ids]);
    assert.equal(result.metrics.tokens_trained, plain.ids.length);
  });
});
