/**
 * Sampling with the worker and rollout–training alignment: the logprobs `generate` reports
 * are the ones `logprobs` recomputes at the same policy version, and stop being so after a
 * step. Also the generate protocol: seeds, streaming, stop ids, batching, top-p, aborts.
 */
import assert from "node:assert/strict";
import { alignmentMetrics } from "../lib/algo/mod.ts";
import type { TrainerClient } from "../lib/trainer/mod.ts";
import { maxAbsDiff, row, TINY, withWorker } from "./trainer_helpers.ts";

const PROMPTS = [[1, 2, 3], [4, 5], [6], [7, 8, 9, 10], [11, 12], [13], [14, 15, 16], [17]];

async function sampleAll(client: TrainerClient, seed0: number) {
  return await Promise.all(
    PROMPTS.map((prompt_ids, i) =>
      client.generate({ prompt_ids, max_tokens: 24, temperature: 1, seed: seed0 + i })
    ),
  );
}

/** Behaviour vs recomputed logprobs on every sampled token. */
async function alignment(
  client: TrainerClient,
  samples: Awaited<ReturnType<typeof sampleAll>>,
) {
  const { logprobs } = await client.logprobs(PROMPTS.map((p, i) => [...p, ...samples[i].ids]));
  const behaviour: number[] = [];
  const trainer: number[] = [];
  samples.forEach((s, i) => {
    behaviour.push(...s.logprobs);
    trainer.push(...logprobs[i].slice(PROMPTS[i].length));
  });
  return align(behaviour, trainer);
}

/** Rollout–training alignment (lib/algo) of behaviour vs trainer logprobs on the same tokens. */
function align(behaviour: number[], trainer: number[]) {
  const m = alignmentMetrics([{ rollout_logprobs: behaviour, trainer_logprobs: trainer }]);
  return { ...m, pearson_prob: m.pearson_prob ?? 0 };
}

Deno.test("trainer alignment: generate and logprobs agree at one version, not after a step", async (t) => {
  await withWorker(async ({ client }) => {
    const samples = await sampleAll(client, 100);

    await t.step("same version: Pearson(p) ≥ 0.999 and tiny |Δlogprob|", async () => {
      for (const s of samples) {
        assert.equal(s.policy_version, 0);
        assert.equal(s.ids.length, s.logprobs.length);
      }
      const report = await alignment(client, samples);
      assert.ok(report.tokens >= PROMPTS.length * 10, `sampled ${report.tokens} tokens`);
      assert.ok(report.pearson_prob >= 0.999, `pearson ${report.pearson_prob}`);
      assert.ok(report.max_abs_dlogprob < 1e-3, `max |Δlp| ${report.max_abs_dlogprob}`);
    });

    await t.step("after an optimizer step the correlation drops measurably", async () => {
      const before = await alignment(client, samples);
      const rows = samples.map((s, i) => {
        const n = PROMPTS[i].length;
        const tokens = [...PROMPTS[i], ...s.ids];
        return row(tokens, {
          loss_mask: tokens.map((_, t) => (t >= n ? 1 : 0)),
          advantages: tokens.map((_, t) => (t >= n ? (i % 2 ? 1 : -1) : 0)),
          loss_weights: tokens.map((_, t) => (t >= n ? 0.05 : 0)),
          rollout_logprobs: tokens.map((_, t) => (t >= n ? s.logprobs[t - n] : 0)),
        });
      });
      const fb = await client.forwardBackward({
        rows,
        loss: { kind: "ppo" },
        return_logprobs: true,
      });
      // The training pass sees the same logprobs as the sampler (tree/packing aside).
      const trained = fb.logprobs!.flatMap((lp, i) => lp.slice(PROMPTS[i].length));
      const inPass = align(samples.flatMap((s) => s.logprobs), trained);
      assert.ok(inPass.max_abs_dlogprob < 1e-3, `in-pass max |Δlp| ${inPass.max_abs_dlogprob}`);
      assert.deepEqual(fb.logprobs!.map((lp) => lp.length), rows.map((r) => r.tokens.length));
      const step = await client.optimStep();
      assert.equal(step.policy_version, 1);
      assert.ok(step.grad_norm > 0);
      const after = await alignment(client, samples);
      assert.ok(after.pearson_prob < before.pearson_prob - 1e-3, `after ${after.pearson_prob}`);
      assert.ok(after.max_abs_dlogprob > 0.05, `max |Δlp| after ${after.max_abs_dlogprob}`);
      const fresh = await client.generate({ prompt_ids: [1], max_tokens: 2, seed: 1 });
      assert.equal(fresh.policy_version, 1);
    });
  }, { lr: 0.03 });
});

Deno.test("trainer generate: seeds, greedy, stop ids, top-p, streaming, batching, aborts", async (t) => {
  await withWorker(async ({ client, url }) => {
    await t.step("a seed reproduces the sample; another seed gives another", async () => {
      const req = { prompt_ids: [1, 2, 3], max_tokens: 20, temperature: 1, seed: 42 };
      const a = await client.generate(req);
      const b = await client.generate(req);
      const c = await client.generate({ ...req, seed: 43 });
      assert.deepEqual(a.ids, b.ids);
      assert.deepEqual(a.logprobs, b.logprobs);
      assert.notDeepEqual(a.ids, c.ids);
      assert.equal(a.finish_reason, "length");
      assert.equal(a.ids.length, 20);
    });

    await t.step("batched concurrent requests sample what they would alone", async () => {
      const reqs = PROMPTS.map((prompt_ids, i) => ({ prompt_ids, max_tokens: 12, seed: 7 + i }));
      const together = await Promise.all(reqs.map((r) => client.generate(r)));
      for (const [i, r] of reqs.entries()) {
        const alone = await client.generate(r);
        assert.deepEqual(together[i].ids, alone.ids);
        assert.ok(maxAbsDiff(together[i].logprobs, alone.logprobs) < 1e-4);
      }
    });

    await t.step("greedy decoding is deterministic and reports untempered logprobs", async () => {
      const a = await client.generate({ prompt_ids: [5, 6], max_tokens: 8, temperature: 0 });
      const b = await client.generate({ prompt_ids: [5, 6], max_tokens: 8, temperature: 0 });
      assert.deepEqual(a.ids, b.ids);
      const { logprobs } = await client.logprobs([[5, 6, ...a.ids]]);
      assert.ok(maxAbsDiff(a.logprobs, logprobs[0].slice(2)) < 1e-4);
    });

    await t.step("the stop id that ends generation is included", async () => {
      const all = Array.from({ length: 32 }, (_, i) => i);
      const out = await client.generate({
        prompt_ids: [3],
        max_tokens: 10,
        stop_ids: all,
        seed: 1,
      });
      assert.equal(out.ids.length, 1);
      assert.equal(out.finish_reason, "stop");
      assert.ok(all.includes(out.ids[0]));
    });

    await t.step(
      "top-p logprobs are renormalised over the nucleus (≥ the full-softmax ones)",
      async () => {
        const out = await client.generate({ prompt_ids: [9], max_tokens: 16, top_p: 0.5, seed: 3 });
        const { logprobs } = await client.logprobs([[9, ...out.ids]]);
        const full = logprobs[0].slice(1);
        let strictlyHigher = 0;
        for (const [i, lp] of out.logprobs.entries()) {
          assert.ok(lp >= full[i] - 1e-5, `token ${i}: ${lp} < ${full[i]}`);
          if (lp > full[i] + 1e-3) strictlyHigher++;
        }
        assert.ok(strictlyHigher > 0);
      },
    );

    await t.step("streaming yields the same tokens as a plain call, then a done line", async () => {
      const req = { prompt_ids: [2, 4], max_tokens: 10, seed: 5 };
      const plain = await client.generate(req);
      const ids: number[] = [];
      const logprobs: number[] = [];
      let done: unknown;
      for await (const line of client.generateStream(req)) {
        if ("ids" in line) {
          ids.push(...line.ids);
          logprobs.push(...line.logprobs);
        } else done = line;
      }
      assert.deepEqual(ids, plain.ids);
      assert.deepEqual(logprobs, plain.logprobs);
      assert.deepEqual(done, { done: true, finish_reason: "length", policy_version: 0 });
    });

    await t.step("closing the connection mid-stream aborts, the worker keeps serving", async () => {
      const controller = new AbortController();
      const response = await fetch(`${url}/generate`, {
        method: "POST",
        body: JSON.stringify({ prompt_ids: [1], max_tokens: 60, stream: true, seed: 1 }),
        signal: controller.signal,
      });
      assert.equal(response.headers.get("content-type"), "application/x-ndjson");
      const reader = response.body!.getReader();
      await reader.read();
      controller.abort();
      await reader.cancel().catch(() => {});
      const after = await client.generate({ prompt_ids: [1], max_tokens: 3, seed: 1 });
      assert.equal(after.ids.length, 3);
    });

    await t.step("generation stops at max_seq_len with finish_reason length", async () => {
      const prompt = Array.from({ length: 60 }, (_, i) => i % 32);
      const out = await client.generate({ prompt_ids: prompt, max_tokens: 50, seed: 2 });
      assert.equal(out.ids.length, 4);
      assert.equal(out.finish_reason, "length");
    });

    await t.step(
      "bf16 compute (the GPU default) keeps same-version alignment ≥ 0.999",
      async () => {
        const state = await client.init({
          model: { kind: "builtin", config: TINY, seed: 0 },
          device: "cpu",
          dtype: "bfloat16",
        });
        assert.equal(state.dtype, "bfloat16");
        const report = await alignment(client, await sampleAll(client, 500));
        assert.ok(report.pearson_prob >= 0.999, `bf16 pearson ${report.pearson_prob}`);
        assert.ok(report.max_abs_dlogprob < 0.05, `bf16 max |Δlp| ${report.max_abs_dlogprob}`);
      },
    );
  });
});

Deno.test("trainer generate: continuous batching and one policy version per response", async (t) => {
  await withWorker(async ({ client }) => {
    // Long enough (hundreds of decode steps) that the other requests surely arrive meanwhile.
    const longRequest = { prompt_ids: [1], max_tokens: 400, seed: 1 };

    await t.step("short requests join a running batch and finish before a long one", async () => {
      const alone = await client.generate({ prompt_ids: [2, 3], max_tokens: 3, seed: 2 });
      const stream = client.generateStream(longRequest);
      const first = await stream.next(); // the long generation is running
      assert.ok(!first.done && "ids" in first.value);
      const short = await client.generate({ prompt_ids: [2, 3], max_tokens: 3, seed: 2 });
      const shortAt = performance.now();
      let longDoneAt = 0;
      const longIds = [...(first.value as { ids: number[] }).ids];
      for await (const line of stream) {
        if ("ids" in line) longIds.push(...line.ids);
        if ("done" in line) longDoneAt = performance.now();
      }
      assert.ok(shortAt < longDoneAt, "the short request must not wait for the long one");
      assert.equal(longIds.length, 400);
      // Joining, compaction and cache growth did not change what the long request sampled.
      assert.deepEqual(longIds, (await client.generate(longRequest)).ids);
      assert.deepEqual(short.ids, alone.ids);
      assert.ok(maxAbsDiff(short.logprobs, alone.logprobs) < 1e-4);
    });

    await t.step(
      "optim_step waits for in-flight responses; queued ones get the new version",
      async () => {
        const stream = client.generateStream(longRequest);
        await stream.next();
        const tokens = [1, 2, 3, 4];
        await client.forwardBackward({
          rows: [row(tokens, {
            loss_mask: [0, 1, 1, 1],
            advantages: [0, 1, 1, 1],
            loss_weights: [0, 1, 1, 1],
            rollout_logprobs: [0, -3, -3, -3],
          })],
          loss: { kind: "ppo" },
        });
        const stepPromise = client.optimStep();
        while (!(await client.health()).weights_pending) {
          await new Promise((resolve) => setTimeout(resolve, 5));
        }
        const queued = client.generate({ prompt_ids: [4], max_tokens: 2, seed: 3 });
        let done: { policy_version: number } | undefined;
        for await (const line of stream) {
          if ("done" in line) done = { policy_version: line.policy_version };
        }
        const step = await stepPromise;
        assert.equal(done?.policy_version, 0);
        assert.equal(step.policy_version, 1);
        // Arrival order on two connections says little on a loaded machine; the worker reports
        // what it waited for before changing the weights.
        assert.equal(step.waited_generations, 1, "the step waited for the in-flight response");
        assert.equal((await queued).policy_version, 1);
        // The worker counts a generation finished just after its last bytes are sent.
        let health = await client.health();
        for (let i = 0; i < 100 && health.generating > 0; i++) {
          await new Promise((resolve) => setTimeout(resolve, 20));
          health = await client.health();
        }
        assert.equal(health.generating, 0);
        assert.equal(health.weights_pending, false);
      },
    );
  }, { config: { ...TINY, max_seq_len: 512 } });
});
