/**
 * Data-parallel benchmark (CPU, gloo): gradient agreement of 2 ranks with one process, how
 * evenly Karmarkar–Karp spreads a step's tokens over ranks compared with dealing the loop's
 * micro-batches round-robin, and the step time of 2 ranks against 1.
 *
 * Run: `deno task bench:dp`. The last four lines are the figures contract:
 * `dp_grad_max_abs_diff` (max |g₂ − g₁| over all parameters, fp32, same rows),
 * `dp_rank_imbalance_kk` and `dp_rank_imbalance_naive` (max / mean packed tokens per rank, 2
 * ranks, on the long-tailed batch; the demo's batch and 4 and 8 ranks are printed above), and
 * `dp2_step_speedup` (1-process step time / 2-rank step time, one torch thread per rank: on a
 * machine with fewer free cores than ranks this is below 1).
 *
 * Assumptions, named: the long-tailed batch is 64 samples with lognormal lengths (median 300,
 * σ = 1, cut at 4096, seed 7) for the balance figures, and 32 such samples (median 120, cut at
 * 512) for the timed step, which runs a 0.8M-parameter built-in model in fp32; the demo's
 * batch is the demo's step shape (3 groups × 8 rollouts, budget 1024) with the toy task's real
 * rendered rows, half calculator transcripts and half guesses.
 *
 * @module
 */
import type { TrainingRow } from "../lib/schema.ts";
import { packMicroBatches, planRankMicroBatches } from "../lib/batching/mod.ts";
import { loadCharTokenizer } from "../lib/tokens/mod.ts";
import { toyArithmeticTasks, toySftRows } from "../lib/loop/mod.ts";
import { mulberry32 } from "../lib/util/random.ts";
import type { LocalWorker } from "../lib/trainer/mod.ts";
import { startInitialised } from "../tests/trainer_helpers.ts";

const CONFIG = {
  vocab_size: 256,
  d_model: 128,
  n_layers: 4,
  n_heads: 4,
  n_kv_heads: 2,
  d_ff: 384,
  max_seq_len: 1024,
};
const LOSS = { kind: "ppo" as const, clip_low: 0.2, clip_high: 0.28 };

/** Normal(0, 1) by Box–Muller. */
function normal(rand: () => number): number {
  return Math.sqrt(-2 * Math.log(1 - rand())) * Math.cos(2 * Math.PI * rand());
}

/** `n` rows with lognormal lengths, a 16-token untrained prompt, weights over the batch. */
function longTailRows(n: number, cap: number, seed: number, median = 300): TrainingRow[] {
  const rand = mulberry32(seed);
  const lengths = Array.from(
    { length: n },
    () => Math.max(24, Math.min(cap, Math.round(median * Math.exp(normal(rand))))),
  );
  const trained = lengths.reduce((a, l) => a + l - 16, 0);
  return lengths.map((len, i) => {
    const mask = Array.from({ length: len }, (_, t) => (t < 16 ? 0 : 1) as 0 | 1);
    return {
      rollout_id: `r${i}`,
      group_id: `g${Math.floor(i / 8)}`,
      tokens: Array.from({ length: len }, () => 1 + Math.floor(rand() * (CONFIG.vocab_size - 1))),
      loss_mask: mask,
      advantages: mask.map((m) => (m ? (i % 2 ? -1 : 1) : 0)),
      loss_weights: mask.map((m) => (m ? 1 / trained : 0)),
      rollout_logprobs: mask.map((m) => (m ? -Math.log(CONFIG.vocab_size) : 0)),
    };
  });
}

/** The demo's step: 3 groups × 8 rollouts, half calculator transcripts, half guesses. */
async function demoRows(): Promise<TrainingRow[]> {
  const tokenizer = await loadCharTokenizer();
  const tasks = toyArithmeticTasks().slice(0, 3);
  const sft = toySftRows(tokenizer, tasks, { guesses: 1 });
  const rows: TrainingRow[] = [];
  tasks.forEach((_, g) => {
    for (let r = 0; r < 8; r++) {
      const base = sft[r % 2 === 0 ? g : tasks.length + g];
      rows.push({ ...base, rollout_id: `g${g}-r${r}`, group_id: `g${g}` });
    }
  });
  return rows;
}

/** Max / mean tokens per rank of the loop's micro-batches dealt round-robin to ranks. */
function naiveRatio(rows: TrainingRow[], ranks: number, budget: number): number {
  const tokens = new Array<number>(ranks).fill(0);
  packMicroBatches(rows, { token_budget: budget }).forEach((mb, i) => {
    tokens[i % ranks] += mb.tokens;
  });
  const total = tokens.reduce((a, b) => a + b, 0);
  return Math.max(...tokens) / (total / ranks);
}

function balanceFigures(name: string, rows: TrainingRow[], budget: number) {
  const out: Record<number, { kk: number; naive: number }> = {};
  for (const ranks of [2, 4, 8]) {
    const kk = planRankMicroBatches(rows, { ranks, token_budget: budget }).token_ratio;
    const naive = naiveRatio(rows, ranks, budget);
    out[ranks] = { kk, naive };
    console.log(`${name}_${ranks}ranks: kk ${kk.toFixed(4)}, naive ${naive.toFixed(4)}`);
  }
  return out;
}

function start(ranks: number): Promise<LocalWorker> {
  return startInitialised({ config: CONFIG, lr: 1e-4, gradClip: 1, ranks });
}

/** One optimizer step's gradient: one process (a call per micro-batch) or 2 ranks (one call). */
async function accumulate(worker: LocalWorker, rows: TrainingRow[], ranks: number) {
  if (ranks === 1) {
    for (const mb of packMicroBatches(rows, { token_budget: 1024 })) {
      await worker.client.forwardBackward({ rows: [mb.row], loss: LOSS });
    }
    return;
  }
  const plan = planRankMicroBatches(rows, { ranks, token_budget: 1024 });
  await worker.client.forwardBackward({
    rows: plan.micro_batches.map((m) => m.row),
    rank_of_row: plan.rank_of_row,
    loss: LOSS,
  });
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.floor(s.length / 2)];
}

const demo = balanceFigures("demo_batch", await demoRows(), 1024);
const tail = balanceFigures("long_tail_batch", longTailRows(64, 4096, 7), 4096);

const timed = longTailRows(32, 512, 7, 120);
const [one, two] = [await start(1), await start(2)];
let gradDiff = 0;
const times: Record<number, number[]> = { 1: [], 2: [] };
try {
  await accumulate(one, timed, 1);
  await accumulate(two, timed, 2);
  const [g1, g2] = [await one.client.gradients(), await two.client.gradients()];
  for (let i = 0; i < g1.gradient.length; i++) {
    gradDiff = Math.max(gradDiff, Math.abs(g1.gradient[i] - g2.gradient[i]));
  }
  console.log(`gradient: ${g1.gradient.length} parameters, |g| ${g1.norm.toFixed(6)}`);
  await Promise.all([one.client.zeroGrad(), two.client.zeroGrad()]);
  // Alternate the two so that background load hits both alike; the first round warms up.
  for (let round = 0; round < 3; round++) {
    for (const [ranks, worker] of [[1, one], [2, two]] as const) {
      const t0 = performance.now();
      await accumulate(worker, timed, ranks);
      await worker.client.optimStep();
      if (round > 0) times[ranks].push(performance.now() - t0);
    }
  }
} finally {
  await Promise.all([one.close(), two.close()]);
}
const tokens = timed.reduce((a, r) => a + r.tokens.length, 0);
console.log(
  `step (${tokens} tokens): 1 process ${median(times[1]).toFixed(0)} ms, ` +
    `2 ranks ${median(times[2]).toFixed(0)} ms (median of ${times[1].length}); ` +
    `cores available: ${navigator.hardwareConcurrency}`,
);
console.log(`dp_rank_imbalance_kk_demo: ${demo[2].kk.toFixed(4)}`);
console.log(`dp_rank_imbalance_naive_demo: ${demo[2].naive.toFixed(4)}`);
console.log(`dp_grad_max_abs_diff: ${gradDiff.toExponential(3)}`);
console.log(`dp_rank_imbalance_kk: ${tail[2].kk.toFixed(4)}`);
console.log(`dp_rank_imbalance_naive: ${tail[2].naive.toFixed(4)}`);
console.log(`dp2_step_speedup: ${(median(times[1]) / median(times[2])).toFixed(3)}`);
