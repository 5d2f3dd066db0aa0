/**
 * Trainer benchmark (CPU): forward_backward and generate throughput of a small built-in model,
 * rollout–training alignment at one policy version, and the training time per step of a
 * realistic toy RL batch packed plainly vs with shared prefixes.
 *
 * Run: `deno task bench:trainer`. The last four lines are the figures contract:
 * `cpu_forward_backward_tok_per_s`, `cpu_generate_tok_per_s`, `same_version_prob_pearson`,
 * `shared_prefix_train_speedup`.
 *
 * @module
 */
import type { TrainingRow } from "../lib/schema.ts";
import { alignmentMetrics } from "../lib/algo/mod.ts";
import {
  type MicroBatch,
  packMicroBatches,
  packSharedPrefix,
  segmentTokenIndex,
} from "../lib/batching/mod.ts";
import { loadCharTokenizer } from "../lib/tokens/mod.ts";
import { toyArithmeticTasks, toyModel, toySftRows } from "../lib/loop/mod.ts";
import { describeCpu, startLocalWorker, type TrainerClient } from "../lib/trainer/mod.ts";
import { mulberry32 } from "../lib/util/random.ts";

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

const rng = mulberry32;

/**
 * The demo's RL batch (scripts/demo.ts): 3 groups × 8 rollouts of the toy arithmetic task, each
 * rollout the tool-using trajectory (442 tokens, 65 trained) or the guess (371 tokens, 17
 * trained); all share a 336-token system prompt + tools, a group 353 tokens. Behaviour logprobs
 * are the policy's own, shifted a little; weights are rollout-token-mean.
 */
async function toyRlBatch(client: TrainerClient, rand: () => number): Promise<TrainingRow[]> {
  const tokenizer = await loadCharTokenizer();
  const tasks = toyArithmeticTasks().filter((_, i) => i % 40 === 7).slice(0, 3);
  const demos = toySftRows(tokenizer, tasks, { guesses: 1 });
  const picked = tasks.flatMap((_, g) =>
    Array.from({ length: 8 }, () => demos[rand() < 0.5 ? g : tasks.length + g])
  );
  const { logprobs } = await client.logprobs(picked.map((r) => r.tokens));
  const trained = picked.reduce((n, r) => n + r.loss_mask.reduce((a: number, m) => a + m, 0), 0);
  return picked.map((r, i) => ({
    ...r,
    rollout_id: `g${Math.floor(i / 8)}-r${i % 8}`,
    group_id: `g${Math.floor(i / 8)}`,
    advantages: r.loss_mask.map((m) => (m ? (rand() < 0.5 ? -1 : 1) : 0)),
    loss_weights: r.loss_mask.map((m) => (m ? 1 / trained : 0)),
    rollout_logprobs: logprobs[i].map((lp, t) => (r.loss_mask[t] ? lp - 0.05 : 0)),
  }));
}

/**
 * One optimizer step over packed micro-batches (or, with `step: false`, its forward_backward
 * calls only, gradients dropped); returns its wall time, loss and trained logprobs.
 */
async function trainStep(
  client: TrainerClient,
  mbs: MicroBatch[],
  rows: TrainingRow[],
  step = true,
) {
  const t0 = performance.now();
  let loss = 0;
  const trained: number[][] = rows.map(() => []);
  for (const mb of mbs) {
    const out = await client.forwardBackward({
      rows: [mb.row],
      loss: { kind: "ppo" },
      return_logprobs: true,
    });
    loss += out.loss;
    const lp = out.logprobs![0];
    for (const seg of mb.segments) {
      const at = segmentTokenIndex(mb, seg);
      trained[seg.source] = Array.from(at).filter((_, t) => rows[seg.source].loss_mask[t]).map(
        (i) => lp[i],
      );
    }
  }
  if (step) await client.optimStep();
  else await client.zeroGrad();
  return { ms: performance.now() - t0, loss, trained };
}

const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];

// One torch and one BLAS thread: stable on a shared machine (extra BLAS threads spin against
// the other processes) and what the demo and the loop tests use.
const worker = await startLocalWorker({ threads: 1 });
try {
  const { client } = worker;
  const state = await client.init({
    model: { kind: "builtin", config: CONFIG, seed: 0 },
    optimizer: { lr: 1e-3 },
    device: "cpu",
    dtype: "float32",
  });
  console.log(`model: ${state.parameter_count} parameters, torch ${state.torch_version}, cpu`);
  // The throughput below is only as good as the BLAS under torch (README: set-up).
  console.log(`worker: ${describeCpu(worker.health)}`);

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

  // Shared-prefix packing: the demo's model and batch, at the demo's and the loop's budgets.
  const tokenizer = await loadCharTokenizer();
  const toy = toyModel(tokenizer, { d_model: 64, n_layers: 2, max_seq_len: 512 });
  const speedups: Record<number, number> = {};
  for (const budget of [1024, 4096]) {
    await client.init({
      model: toy,
      optimizer: { lr: 3e-4 },
      device: "cpu",
      dtype: "float32",
    });
    const batch = await toyRlBatch(client, rng(7));
    const plainMbs = packMicroBatches(batch, { token_budget: budget });
    const sharedMbs = packSharedPrefix(batch, { token_budget: budget });
    const count = (mbs: MicroBatch[]) => mbs.reduce((n, m) => n + m.tokens, 0);
    // Exactness at the same weights (gradients dropped), which also warms both paths up.
    const a = await trainStep(client, plainMbs, batch, false);
    const b = await trainStep(client, sharedMbs, batch, false);
    const times: { plain: number[]; shared: number[] } = { plain: [], shared: [] };
    for (let k = 0; k < 3; k++) {
      times.plain.push((await trainStep(client, plainMbs, batch)).ms);
      times.shared.push((await trainStep(client, sharedMbs, batch)).ms);
    }
    const plainMs = median(times.plain);
    const sharedMs = median(times.shared);
    speedups[budget] = plainMs / sharedMs;
    const dLp = Math.max(
      ...a.trained.map((lp, i) => Math.max(...lp.map((x, t) => Math.abs(x - b.trained[i][t])))),
    );
    const dLoss = Math.abs(a.loss - b.loss);
    console.log(
      [
        `shared prefix, budget ${budget}, ${batch.length} samples:`,
        `plain ${count(plainMbs)} tokens in ${plainMbs.length} micro-batches,`,
        `${plainMs.toFixed(0)} ms/step;`,
        `shared ${count(sharedMbs)} tokens in ${sharedMbs.length},`,
        `${sharedMs.toFixed(0)} ms/step; speedup ${speedups[budget].toFixed(2)}x;`,
        `|Δloss| ${dLoss.toExponential(1)}, max |Δ trained logprob| ${dLp.toExponential(1)}`,
      ].join(" "),
    );
  }

  console.log(`cpu_forward_backward_tok_per_s: ${fbTokPerS.toFixed(0)}`);
  console.log(`cpu_generate_tok_per_s: ${genTokPerS.toFixed(0)}`);
  console.log(`same_version_prob_pearson: ${aligned.pearson_prob?.toFixed(6) ?? "null"}`);
  console.log(`shared_prefix_train_speedup: ${speedups[1024].toFixed(2)}`);
} finally {
  await worker.close();
}
