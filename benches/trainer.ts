/**
 * Trainer benchmark (CPU): forward_backward and generate throughput of a small built-in model,
 * and rollout–training alignment at one policy version.
 *
 * Run: `deno task bench:trainer`. The last three lines are the figures contract:
 * `cpu_forward_backward_tok_per_s`, `cpu_generate_tok_per_s`, `same_version_prob_pearson`.
 *
 * @module
 */
import type { TrainingRow } from "../lib/schema.ts";
import { alignmentMetrics } from "../lib/algo/mod.ts";
import { startLocalWorker } from "../lib/trainer/mod.ts";

const CONFIG = {
  vocab_size: 512,
  d_model: 128,
  n_layers: 4,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 384,
  max_seq_len: 256,
};
const ROWS = 8;
const ROW_LEN = 128;
const GEN_REQUESTS = 8;
const GEN_TOKENS = 64;

function rng(seed: number) {
  let s = seed >>> 0;
  return () => {
    s = (s * 1664525 + 1013904223) >>> 0;
    return s / 2 ** 32;
  };
}

const worker = await startLocalWorker();
try {
  const { client } = worker;
  const state = await client.init({
    model: { kind: "builtin", config: CONFIG, seed: 0 },
    optimizer: { lr: 1e-3 },
    device: "cpu",
    dtype: "float32",
  });
  console.log(`model: ${state.parameter_count} parameters, torch ${state.torch_version}, cpu`);

  const rand = rng(1);
  const rows: TrainingRow[] = Array.from({ length: ROWS }, (_, i) => {
    const tokens = Array.from({ length: ROW_LEN }, () => Math.floor(rand() * CONFIG.vocab_size));
    const prompt = 32;
    return {
      rollout_id: `r${i}`,
      group_id: "g",
      tokens,
      loss_mask: tokens.map((_, t) => (t >= prompt ? 1 : 0)),
      advantages: tokens.map((_, t) => (t >= prompt ? (i % 2 ? 1 : -1) : 0)),
      loss_weights: tokens.map((_, t) => (t >= prompt ? 1 / (ROWS * (ROW_LEN - prompt)) : 0)),
      rollout_logprobs: tokens.map((_, t) => (t >= prompt ? -6.2 : 0)),
    };
  });

  // forward_backward: warm up once, then time.
  await client.forwardBackward({ rows, loss: { kind: "ppo" } });
  await client.zeroGrad();
  const fbIters = 5;
  let t0 = performance.now();
  for (let i = 0; i < fbIters; i++) await client.forwardBackward({ rows, loss: { kind: "ppo" } });
  const fbMs = (performance.now() - t0) / fbIters;
  t0 = performance.now();
  await client.optimStep();
  const stepMs = performance.now() - t0;
  const fbTokPerS = (ROWS * ROW_LEN) / (fbMs / 1000);
  console.log(`forward_backward: ${ROWS}×${ROW_LEN} tokens in ${fbMs.toFixed(1)} ms/call`);
  console.log(`optim_step: ${stepMs.toFixed(1)} ms`);

  // generate: one stream alone, then a concurrent batch.
  const prompts = Array.from(
    { length: GEN_REQUESTS },
    (_, i) => Array.from({ length: 16 }, (_, t) => (i * 31 + t * 7) % CONFIG.vocab_size),
  );
  await client.generate({ prompt_ids: prompts[0], max_tokens: 8, seed: 0 });
  t0 = performance.now();
  const single = await client.generate({ prompt_ids: prompts[0], max_tokens: GEN_TOKENS, seed: 1 });
  const singleTokPerS = single.ids.length / ((performance.now() - t0) / 1000);
  t0 = performance.now();
  const outs = await Promise.all(
    prompts.map((prompt_ids, i) =>
      client.generate({ prompt_ids, max_tokens: GEN_TOKENS, seed: 100 + i })
    ),
  );
  const genS = (performance.now() - t0) / 1000;
  const genTokens = outs.reduce((n, o) => n + o.ids.length, 0);
  const genTokPerS = genTokens / genS;
  console.log(
    `generate: 1 stream ${singleTokPerS.toFixed(0)} tok/s; ` +
      `${GEN_REQUESTS} concurrent: ${genTokens} tokens in ${genS.toFixed(2)} s`,
  );

  // Alignment at the same version.
  const { logprobs } = await client.logprobs(prompts.map((p, i) => [...p, ...outs[i].ids]));
  const behaviour = outs.flatMap((o) => o.logprobs);
  const trainer = logprobs.flatMap((lp, i) => lp.slice(prompts[i].length));
  const aligned = alignmentMetrics([{ rollout_logprobs: behaviour, trainer_logprobs: trainer }]);
  console.log(
    `alignment: ${aligned.tokens} tokens, max |Δlogprob| ${
      aligned.max_abs_dlogprob.toExponential(2)
    }, ` +
      `logprob pearson ${aligned.pearson_logprob?.toFixed(6)}`,
  );

  console.log(`cpu_forward_backward_tok_per_s: ${fbTokPerS.toFixed(0)}`);
  console.log(`cpu_generate_tok_per_s: ${genTokPerS.toFixed(0)}`);
  console.log(`same_version_prob_pearson: ${aligned.pearson_prob?.toFixed(6) ?? "null"}`);
} finally {
  await worker.close();
}
