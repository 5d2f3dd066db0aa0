/**
 * Data parallelism from TypeScript: `planRankMicroBatches` splits one optimizer step's rows over
 * ranks (Karmarkar–Karp) and packs each share; a 2-rank local worker (`startLocalWorker({ranks:
 * 2})`, gloo on the CPU) given that plan in one call gives the gradient, loss and logprobs that
 * one process gives on the plain per-micro-batch calls, and every rank holds the same weights
 * after the step — with plain and with shared-prefix packing. The exactness per loss (PPO with
 * π_prox, GSPO per call, CE) and the rank failures are covered by the worker's own tests
 * (`lib/trainer/worker/tests/test_parallel.py`).
 */
import assert from "node:assert/strict";
import {
  type MicroBatch,
  packMicroBatches,
  packSharedPrefix,
  planRankMicroBatches,
  segmentTokenIndex,
} from "../lib/batching/mod.ts";
import { ValidationError } from "../lib/schema.ts";
import type { BuiltinModelConfigInput, TrainingRow } from "../lib/schema.ts";
import type { LocalWorker } from "../lib/trainer/mod.ts";
import { mulberry32, randInt } from "./fixtures/algo/samples.ts";
import {
  groupedRows,
  maxAbsDiff,
  PPO,
  type SampleShape,
  startInitialised,
  TINY,
} from "./trainer_helpers.ts";

const CONFIG: BuiltinModelConfigInput = { ...TINY, max_seq_len: 128 };
const BUDGET = 96;

/** Groups of samples under one shared prompt, lengths spread 20..80 tokens. */
function makeRows(groups: number, perGroup: number, seed: number): TrainingRow[] {
  const rand = mulberry32(seed);
  const tok = () => randInt(rand, 1, CONFIG.vocab_size - 1);
  const shapes: SampleShape[] = [];
  for (let g = 0; g < groups; g++) {
    const prompt = Array.from({ length: randInt(rand, 8, 20) }, tok);
    for (let r = 0; r < perGroup; r++) {
      const response = Array.from({ length: randInt(rand, 6, 60) }, tok);
      shapes.push({
        tokens: [...prompt, ...response],
        mask: [...prompt.map(() => 0 as const), ...response.map(() => 1 as const)],
        group: g,
      });
    }
  }
  return groupedRows(shapes, {
    advantage: (i, group) => (i % 2 ? -1 : 1) * (0.5 + 0.1 * group),
    logprob: (_i, t) => -Math.log(CONFIG.vocab_size) + 0.1 * Math.sin(t),
  });
}

/** Every input row lands in exactly one segment, and the segments map back to its tokens. */
function assertCovers(rows: TrainingRow[], mbs: MicroBatch[]): void {
  const seen = new Map<number, number>();
  for (const mb of mbs) {
    for (const seg of mb.segments) {
      seen.set(seg.source, (seen.get(seg.source) ?? 0) + 1);
      const at = segmentTokenIndex(mb, seg);
      assert.deepEqual(Array.from(at, (i) => mb.row.tokens[i]), rows[seg.source].tokens);
    }
  }
  assert.equal(seen.size, rows.length);
  assert.ok([...seen.values()].every((n) => n === 1), "a row was packed twice");
}

Deno.test("planRankMicroBatches: each row once, balanced ranks, groups kept whole", () => {
  const rows = makeRows(6, 5, 1);
  const one = planRankMicroBatches(rows, { ranks: 1, token_budget: BUDGET });
  assert.deepEqual(
    one.micro_batches.map((m) => m.row),
    packMicroBatches(rows, { token_budget: BUDGET }).map((m) => m.row),
    "one rank is the plain packer",
  );
  for (const ranks of [2, 3, 4]) {
    const plan = planRankMicroBatches(rows, { ranks, token_budget: BUDGET });
    assertCovers(rows, plan.micro_batches);
    assert.deepEqual(plan.rank_of_row, [...plan.rank_of_row].sort((a, b) => a - b));
    assert.equal(plan.rank_tokens.length, ranks);
    assert.ok(plan.token_ratio <= 1.05, `${ranks} ranks: ${plan.rank_tokens}`);
    const shared = planRankMicroBatches(rows, {
      ranks,
      token_budget: BUDGET,
      pack: packSharedPrefix,
      keep_groups: true,
    });
    assertCovers(rows, shared.micro_batches);
    for (const [m, mb] of shared.micro_batches.entries()) {
      for (const seg of mb.segments) {
        const others = shared.micro_batches.filter((x, k) =>
          shared.rank_of_row[k] !== shared.rank_of_row[m] &&
          x.segments.some((s) => s.group_id === seg.group_id)
        );
        assert.equal(others.length, 0, `group ${seg.group_id} split over ranks`);
      }
    }
  }
  assert.throws(
    () => planRankMicroBatches(rows, { ranks: 0, token_budget: BUDGET }),
    (e: unknown) => e instanceof ValidationError && /ranks/.test(e.message),
  );
});

function startRanks(ranks: number): Promise<LocalWorker> {
  return startInitialised({ config: CONFIG, gradClip: 1, ranks, collectiveTimeoutS: 120 });
}

Deno.test({
  name: "trainer data parallel: 2 CPU ranks, one call per step = 1 process, per micro-batch",
  sanitizeResources: false,
  sanitizeOps: false,
}, async (t) => {
  const [single, dp] = await Promise.all([startRanks(1), startRanks(2)]);
  try {
    assert.equal((await dp.client.health()).world_size, 2);
    assert.equal((await single.client.health()).world_size, 1);
    for (const shared of [false, true]) {
      await t.step(shared ? "shared-prefix packing" : "plain packing", async () => {
        const rows = makeRows(4, 4, shared ? 3 : 2);
        const pack = shared ? packSharedPrefix : packMicroBatches;
        // One process: the loop's per-micro-batch calls.
        const mbs = pack(rows, { token_budget: BUDGET });
        let loss = 0;
        const lpOf = new Map<number, number[]>();
        for (const mb of mbs) {
          const out = await single.client.forwardBackward({
            rows: [mb.row],
            loss: PPO,
            return_logprobs: true,
          });
          loss += out.loss;
          for (const seg of mb.segments) {
            lpOf.set(
              seg.source,
              Array.from(segmentTokenIndex(mb, seg), (i) => out.logprobs![0][i]),
            );
          }
        }
        // Two ranks: one call with the plan.
        const plan = planRankMicroBatches(rows, {
          ranks: 2,
          token_budget: BUDGET,
          pack,
          keep_groups: shared,
        });
        const out = await dp.client.forwardBackward({
          rows: plan.micro_batches.map((m) => m.row),
          rank_of_row: plan.rank_of_row,
          loss: PPO,
          return_logprobs: true,
        });
        assert.deepEqual(out.rank_tokens, plan.rank_tokens);
        assert.ok(Math.abs(out.loss - loss) < 1e-6, `loss ${out.loss} vs ${loss}`);
        for (const [m, mb] of plan.micro_batches.entries()) {
          for (const seg of mb.segments) {
            const lp = Array.from(segmentTokenIndex(mb, seg), (i) => out.logprobs![m][i]);
            assert.ok(maxAbsDiff(lp, lpOf.get(seg.source)!) < 1e-5, `row ${seg.source}`);
          }
        }
        const [g1, g2] = await Promise.all([single.client.gradients(), dp.client.gradients()]);
        assert.ok(maxAbsDiff(g1.gradient, g2.gradient) < 1e-6, "same gradient");
        const [s1, s2] = await Promise.all([single.client.optimStep(), dp.client.optimStep()]);
        assert.ok(Math.abs(s1.grad_norm - s2.grad_norm) < 1e-6);
        const [st1, st2] = await Promise.all([single.client.state(), dp.client.state()]);
        assert.equal(st2.world_size, 2);
        assert.equal(st2.ranks?.length, 2);
        assert.equal(st2.ranks![0].param_checksum, st2.ranks![1].param_checksum);
        assert.ok(
          Math.abs(st1.param_checksum! - st2.param_checksum!) < 1e-6,
          `θ after the step: ${st1.param_checksum} vs ${st2.param_checksum}`,
        );
      });
    }
    await t.step("a plan naming a rank the worker lacks is refused, naming the field", async () => {
      const rows = makeRows(1, 2, 5);
      await assert.rejects(
        dp.client.forwardBackward({ rows, rank_of_row: [0, 2], loss: PPO }),
        (e: Error & { status?: number; field?: string }) =>
          e.status === 400 && e.field === "rank_of_row[1]",
      );
    });
  } finally {
    await Promise.all([single.close(), dp.close()]);
  }
});
