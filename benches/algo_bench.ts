/**
 * Benchmarks of the RL math and batching: advantages, loss weights, flattening and a full
 * training plan on a realistic agentic batch (64 groups × 8 rollouts, 1–6 samples per rollout,
 * contexts up to 16k tokens), plus data-parallel balancing quality (printed once).
 *
 * Run: `deno bench -A benches/algo_bench.ts` (also part of `deno task bench`).
 *
 * @module
 */
import { alignmentMetrics, computeAdvantages, computeLossWeights } from "../lib/algo/mod.ts";
import {
  balance,
  flattenBatch,
  packMicroBatches,
  planTrainingBatch,
  workload,
} from "../lib/batching/mod.ts";
import type { Sample } from "../lib/schema.ts";
import { mulberry32 } from "../tests/fixtures/algo/samples.ts";

function agenticBatch(seed: number, groups: number, perGroup: number, maxLen: number): Sample[] {
  const rand = mulberry32(seed);
  const out: Sample[] = [];
  for (let g = 0; g < groups; g++) {
    for (let r = 0; r < perGroup; r++) {
      const reward = rand() < 0.5 ? 1 : 0;
      const n = 1 + Math.floor(rand() * rand() * 6);
      for (let j = 0; j < n; j++) {
        const len = 256 + Math.floor(rand() * (maxLen - 256));
        const tokens = new Uint32Array(len);
        const mask = new Uint8Array(len);
        const lp = new Float32Array(len);
        // Alternating context and response blocks, ~25% of tokens trained.
        for (let t = 0; t < len; t++) {
          tokens[t] = (t * 2654435761) >>> 16;
          if ((t >> 9) % 4 === 3) {
            mask[t] = 1;
            lp[t] = -rand() * 2;
          }
        }
        out.push({
          rollout_id: `g${g}-r${r}`,
          group_id: `g${g}`,
          tokens,
          loss_mask: mask,
          rollout_logprobs: lp,
          reward,
          policy_version: 0,
          provenance: {
            request_seqs: [j],
            split_reason: j ? "compaction" : null,
            strategy: "prefix_merge",
            off_policy: false,
            response_starts: [],
          },
        });
      }
    }
  }
  return out;
}

const batch = agenticBatch(7, 64, 8, 16384);
const tokens = batch.reduce((a, s) => a + s.tokens.length, 0);
const withAdv = computeAdvantages(batch).samples;
const weighted = computeLossWeights(withAdv, { mode: "rollout_token_mean" }).samples;
const rows = flattenBatch(weighted);
console.log(
  `batch: ${batch.length} samples, 512 rollouts, ${(tokens / 1e6).toFixed(2)}M tokens`,
);

// Balancing quality on this batch's rows (printed once; the figures of docs/algo.md).
for (const ranks of [8, 64]) {
  const costs = rows.map((r) => workload(r.tokens.length, 6144));
  const kk = balance(costs, ranks, "kk");
  const lpt = balance(costs, ranks, "lpt");
  console.log(
    `ranks=${ranks}: imbalance kk=${(kk.imbalance * 100).toFixed(3)}% ` +
      `lpt=${(lpt.imbalance * 100).toFixed(3)}%`,
  );
}

Deno.bench(
  "computeAdvantages (rollout level, 512 rollouts)",
  { group: "algo", n: 5, warmup: 1 },
  () => {
    computeAdvantages(batch);
  },
);

Deno.bench("computeLossWeights (rollout_token_mean)", { group: "algo", n: 5, warmup: 1 }, () => {
  computeLossWeights(withAdv, { mode: "rollout_token_mean" });
});

Deno.bench("alignmentMetrics (all trained tokens)", { group: "algo", n: 5, warmup: 1 }, () => {
  alignmentMetrics(batch.map((s) => ({
    rollout_logprobs: s.rollout_logprobs,
    trainer_logprobs: s.rollout_logprobs,
    loss_mask: s.loss_mask,
  })));
});

Deno.bench(
  "flattenBatch (Sample[] → TrainingRow[])",
  { group: "batching", n: 5, warmup: 1 },
  () => {
    flattenBatch(weighted);
  },
);

Deno.bench("balance rows over 8 ranks (kk)", { group: "batching", n: 5, warmup: 1 }, () => {
  balance(rows.map((r) => workload(r.tokens.length, 6144)), 8, "kk");
});

Deno.bench("packMicroBatches (16k-token budget)", { group: "batching", n: 5, warmup: 1 }, () => {
  packMicroBatches(rows, { token_budget: 16384 });
});

Deno.bench(
  "planTrainingBatch (4 steps × 8 ranks, 16k micro-batches)",
  { group: "batching", n: 5, warmup: 1 },
  () => {
    planTrainingBatch(withAdv, {
      steps: { num_steps: 4 },
      ranks: 8,
      micro_token_budget: 16384,
    });
  },
);
