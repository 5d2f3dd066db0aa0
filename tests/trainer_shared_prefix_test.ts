/**
 * Shared-prefix packing is exact on the real worker: the same RL-like batch (groups of samples
 * under one system prompt, multi-turn responses) packed plainly on one worker and with shared
 * prefixes on an identically initialised second worker gives the same loss, the same logprobs
 * at every trained token, the same gradient and grad norm, and the same policy after
 * `optim_step` — for PPO, GSPO (sequence-level ratios) and CE. A negative control shows the
 * comparison can fail: without `sequence_ids` a shared row merges its samples into one GSPO
 * sequence.
 */
import assert from "node:assert/strict";
import {
  type MicroBatch,
  packMicroBatches,
  packSharedPrefix,
  segmentTokenIndex,
} from "../lib/batching/mod.ts";
import type { BuiltinModelConfigInput, LossConfigInput, TrainingRow } from "../lib/schema.ts";
import type { TrainerClient } from "../lib/trainer/mod.ts";
import { mulberry32, randInt } from "./fixtures/algo/samples.ts";
import {
  groupedRows,
  maxAbs,
  maxAbsDiff,
  PPO,
  type SampleShape,
  startInitialised,
  TINY,
} from "./trainer_helpers.ts";

const CONFIG: BuiltinModelConfigInput = { ...TINY, max_seq_len: 128 };
const BUDGET = 160;

/**
 * Three groups of four samples: a 14-token system prompt shared by all, a 5-token task per
 * group, then two trained turns with an untrained tool output between them. Behaviour
 * logprobs are the policy's own, shifted a little so that ratios ≠ 1 and some tokens clip.
 */
async function makeRows(client: TrainerClient): Promise<TrainingRow[]> {
  const rand = mulberry32(11);
  const tok = () => randInt(rand, 1, CONFIG.vocab_size - 1);
  const system = Array.from({ length: 14 }, tok);
  const shapes: SampleShape[] = [];
  for (let g = 0; g < 3; g++) {
    const prompt = [...system, ...Array.from({ length: 5 }, tok)];
    for (let r = 0; r < 4; r++) {
      const tokens = [...prompt];
      const mask: (0 | 1)[] = prompt.map(() => 0);
      const push = (n: number, m: 0 | 1) => {
        for (let k = 0; k < n; k++) tokens.push(tok()), mask.push(m);
      };
      push(randInt(rand, 2, 6), 1);
      push(randInt(rand, 1, 3), 0);
      push(randInt(rand, 1, 4), 1);
      shapes.push({ tokens, mask, group: g });
    }
  }
  const { logprobs } = await client.logprobs(shapes.map((s) => s.tokens));
  return groupedRows(shapes, {
    advantage: (i, group) => (i % 2 ? -1 : 1) * (1 + 0.1 * group),
    logprob: (i, t) => logprobs[i][t] + 0.25 * Math.sin(3 * t + i),
  });
}

interface Pass {
  loss: number;
  tokens: number;
  clipped: number;
  /** Per source row: the trainer logprob of each trained token, in order. */
  trainedLogprobs: number[][];
}

/** forward_backward over the micro-batches (gradients accumulate), reading logprobs back. */
async function runPass(
  client: TrainerClient,
  mbs: MicroBatch[],
  rows: TrainingRow[],
  loss: LossConfigInput,
): Promise<Pass> {
  const pass: Pass = { loss: 0, tokens: 0, clipped: 0, trainedLogprobs: rows.map(() => []) };
  for (const mb of mbs) {
    const out = await client.forwardBackward({ rows: [mb.row], loss, return_logprobs: true });
    pass.loss += out.loss;
    pass.tokens += out.metrics.tokens;
    pass.clipped += Math.round(out.metrics.clip_fraction * out.metrics.tokens);
    const lp = out.logprobs![0];
    for (const seg of mb.segments) {
      const at = segmentTokenIndex(mb, seg);
      const mask = rows[seg.source].loss_mask;
      pass.trainedLogprobs[seg.source] = Array.from(at).filter((_, t) => mask[t]).map((i) => lp[i]);
    }
  }
  return pass;
}

function assertClose(a: number, b: number, tol: number, what: string) {
  assert.ok(Math.abs(a - b) <= tol, `${what}: ${a} vs ${b} (|Δ| ${Math.abs(a - b)} > ${tol})`);
}

Deno.test("shared-prefix packing trains exactly like plain packing on the real worker", async (t) => {
  const [plainWorker, sharedWorker] = await Promise.all([
    startInitialised({ config: CONFIG }),
    startInitialised({ config: CONFIG }),
  ]);
  try {
    const plain = plainWorker.client;
    const shared = sharedWorker.client;
    const rows = await makeRows(plain);
    const plainMbs = packMicroBatches(rows, { token_budget: BUDGET });
    const sharedMbs = packSharedPrefix(rows, { token_budget: BUDGET });
    const plainTokens = plainMbs.reduce((n, m) => n + m.tokens, 0);
    const sharedTokens = sharedMbs.reduce((n, m) => n + m.tokens, 0);
    assert.ok(sharedMbs.some((m) => m.segments.some((s) => (s.shared ?? 0) > 0)));
    assert.ok(
      sharedTokens < 0.6 * plainTokens,
      `shared ${sharedTokens} vs plain ${plainTokens} tokens`,
    );
    assert.ok(sharedMbs.length < plainMbs.length);
    assert.equal((await plain.state()).param_checksum, (await shared.state()).param_checksum);

    const losses: [string, LossConfigInput][] = [
      ["ppo", PPO],
      ["gspo", { kind: "gspo", gspo_clip_low: 0.02, gspo_clip_high: 0.03 }],
      ["ce", { kind: "ce" }],
    ];
    for (const [name, loss] of losses) {
      await t.step(
        `${name}: loss, trained logprobs, gradient, grad norm, next policy`,
        async () => {
          const a = await runPass(plain, plainMbs, rows, loss);
          const b = await runPass(shared, sharedMbs, rows, loss);
          assertClose(a.loss, b.loss, 1e-5, `${name} loss`);
          assert.equal(a.tokens, b.tokens);
          assert.equal(a.clipped, b.clipped, `${name} clipped tokens`);
          rows.forEach((r, i) => {
            const n = r.loss_mask.reduce((s: number, m) => s + m, 0);
            assert.equal(a.trainedLogprobs[i].length, n);
            const d = maxAbsDiff(a.trainedLogprobs[i], b.trainedLogprobs[i]);
            assert.ok(d <= 1e-5, `${name} sample ${i}: max |Δ logprob| ${d}`);
          });

          const ga = (await plain.gradients()).gradient;
          const gb = (await shared.gradients()).gradient;
          const scale = maxAbs(ga);
          assert.ok(scale > 1e-6, `${name}: the gradient must not vanish (max |g| ${scale})`);
          const dg = maxAbsDiff(ga, gb);
          assert.ok(dg <= 1e-5 * scale + 1e-8, `${name}: max |Δg| ${dg} (scale ${scale})`);

          const sa = await plain.optimStep();
          const sb = await shared.optimStep();
          assertClose(sa.grad_norm, sb.grad_norm, 1e-5 * sa.grad_norm, `${name} grad_norm`);
          assert.equal(sa.policy_version, sb.policy_version);
          const seqs = rows.map((r) => r.tokens);
          const [la, lb] = await Promise.all([plain.logprobs(seqs), shared.logprobs(seqs)]);
          const d = Math.max(...la.logprobs.map((lp, i) => maxAbsDiff(lp, lb.logprobs[i])));
          assert.ok(d <= 1e-5, `${name}: after optim_step the policies differ by ${d}`);
        },
      );
    }

    await t.step(
      "negative control: without sequence_ids GSPO merges the shared samples",
      async () => {
        const loss: LossConfigInput = { kind: "gspo", gspo_clip_low: 0.02, gspo_clip_high: 0.03 };
        const merged = sharedMbs.map((mb) => {
          const { sequence_ids: _, ...rest } = mb.row;
          return { ...mb, row: rest };
        });
        const a = await runPass(plain, plainMbs, rows, loss);
        const b = await runPass(shared, merged, rows, loss);
        await plain.zeroGrad();
        await shared.zeroGrad();
        assert.ok(Math.abs(a.loss - b.loss) > 1e-4, `losses ${a.loss} and ${b.loss} must differ`);
        // The logprobs themselves do not depend on sequence ids.
        rows.forEach((_, i) => {
          assert.ok(maxAbsDiff(a.trainedLogprobs[i], b.trainedLogprobs[i]) <= 1e-5);
        });
      },
    );
  } finally {
    await Promise.all([plainWorker.close(), sharedWorker.close()]);
  }
});
