/**
 * Checkpoints you can trust: a run resumed from a checkpoint takes exactly the step an
 * uninterrupted run takes (same weights, optimizer, learning-rate schedule and random draws,
 * bit for bit on the CPU), and the checkpoint files kept are the last K plus the best by
 * held-out score.
 */
import assert from "node:assert/strict";
import { loadState, restoreWorker, saveCheckpoint } from "../lib/loop/checkpoint.ts";
import type { OptimizerConfig, TrainingRow } from "../lib/schema.ts";
import type { TrainerClient } from "../lib/trainer/client.ts";
import type { LocalWorker } from "../lib/trainer/mod.ts";
import { groupedRows, PPO, startInitialised, TINY } from "./trainer_helpers.ts";

const OPTIMIZER: OptimizerConfig = {
  lr: 1e-2,
  betas: [0.9, 0.999],
  weight_decay: 0.01,
  eps: 1e-8,
  grad_clip: 0,
  warmup_steps: 3,
};

/** A batch of two groups whose advantages and behaviour logprobs depend on `step`. */
function batch(step: number): TrainingRow[] {
  const shapes = [0, 1, 2, 3].map((i) => ({
    tokens: Array.from({ length: 12 }, (_, t) => (3 + 5 * i + 7 * t + step) % 32),
    mask: Array.from({ length: 12 }, (_, t) => (t >= 4 ? 1 : 0)) as (0 | 1)[],
    group: i % 2,
  }));
  return groupedRows(shapes, {
    advantage: (i) => (i % 2 === 0 ? 1 : -1) * (1 + step / 10),
    logprob: (i, t) => -2 - 0.01 * (i + t),
  });
}

/** One RL step on the worker; what the next run must reproduce. */
async function step(worker: LocalWorker, k: number) {
  const fb = await worker.client.forwardBackward({ rows: batch(k), loss: PPO });
  await worker.client.optimStep();
  // No seed: the worker draws the sampling seed from its own (checkpointed) generator.
  const sampled = await worker.client.generate({ prompt_ids: [1, 2, 3], max_tokens: 16 });
  const state = await worker.client.state();
  return {
    loss: fb.loss,
    params: state.param_checksum,
    optimizer: state.optimizer_checksum,
    version: state.policy_version,
    sampled: sampled.ids,
  };
}

Deno.test("a run resumed from its checkpoint takes the same next step, bit for bit", async () => {
  const outDir = await Deno.makeTempDir({ prefix: "reins-ckpt-" });
  const uninterrupted = await startInitialised({ lr: OPTIMIZER.lr });
  let resumed: LocalWorker | null = null;
  try {
    await uninterrupted.client.init({
      model: { kind: "builtin", config: TINY, seed: 3 },
      optimizer: OPTIMIZER,
      device: "cpu",
      dtype: "float32",
    });
    await step(uninterrupted, 0);
    await step(uninterrupted, 1);
    const saved = await saveCheckpoint(uninterrupted.client, outDir, {
      name: "exact",
      next_step: 2,
      policy_version: (await uninterrupted.client.state()).policy_version,
      next_group: 4,
      consumed_groups: ["exact-g0", "exact-g1", "exact-g2", "exact-g3"],
      base_version: 0,
      reward_before: null,
    });
    const expected = [await step(uninterrupted, 2), await step(uninterrupted, 3)];

    // A fresh worker process: nothing survives but the checkpoint.
    resumed = await startInitialised({ seed: 99 });
    const state = await loadState(outDir);
    assert.deepEqual(state, saved);
    const version = await restoreWorker(resumed.client, state!, OPTIMIZER);
    assert.equal(version, saved.policy_version);
    const got = [await step(resumed, 2), await step(resumed, 3)];
    // Bit-exact: the same float64 checksums of every weight and AdamW moment, the same loss,
    // and the same unseeded samples (warmup position and RNG states came back too).
    assert.deepEqual(got, expected);
    assert.notEqual(expected[0].params, expected[1].params); // the steps did change the policy
  } finally {
    await uninterrupted.close();
    await resumed?.close();
    await Deno.remove(outDir, { recursive: true });
  }
});

Deno.test("without its RNG states a resumed worker would sample differently", async () => {
  // The control for the test above: two fresh workers restored from the same weights but not
  // from the checkpoint's generators draw different unseeded samples, so equal samples there
  // are the restored RNG at work, not a coincidence.
  const a = await startInitialised({ seed: 1 });
  const b = await startInitialised({ seed: 1 });
  try {
    const prompt = { prompt_ids: [1, 2, 3], max_tokens: 24 };
    const [x, y] = [await a.client.generate(prompt), await b.client.generate(prompt)];
    assert.notDeepEqual(x.ids, y.ids);
  } finally {
    await a.close();
    await b.close();
  }
});

/** A worker that only saves: files with the step in them. */
function savingClient(): TrainerClient {
  return {
    save: async (path: string) => {
      await Deno.writeTextFile(path, path);
      return { path, policy_version: 0 };
    },
  } as unknown as TrainerClient;
}

Deno.test("checkpoints kept: the last K and the best by held-out score", async () => {
  const outDir = await Deno.makeTempDir({ prefix: "reins-keep-" });
  try {
    const client = savingClient();
    const scores = [0.2, 0.7, 0.4, null, 0.5, 0.3];
    for (const [i, score] of scores.entries()) {
      await saveCheckpoint(client, outDir, {
        name: "keep",
        next_step: i + 1,
        policy_version: i + 1,
        next_group: i + 1,
        consumed_groups: [],
        base_version: 0,
        reward_before: null,
      }, { keepLast: 2, score });
    }
    const state = (await loadState(outDir))!;
    const files = [...Deno.readDirSync(`${outDir}/checkpoints`)].map((e) => e.name)
      .filter((n) => n.endsWith(".pt")).sort();
    assert.deepEqual(files, ["step-00002.pt", "step-00005.pt", "step-00006.pt"]);
    assert.deepEqual(state.checkpoints.map((c) => c.next_step), [5, 6]);
    assert.equal(state.best?.next_step, 2);
    assert.equal(state.best?.score, 0.7);
    assert.ok(state.worker_checkpoint.endsWith("step-00006.pt"));

    // A resumed run that redoes steps 3.. forgets a best it is redoing and the newer files.
    await saveCheckpoint(client, outDir, {
      name: "keep",
      next_step: 2,
      policy_version: 2,
      next_group: 2,
      consumed_groups: [],
      base_version: 0,
      reward_before: null,
    }, { keepLast: 2, score: 0.1 });
    const again = (await loadState(outDir))!;
    assert.equal(again.best?.score, 0.1);
    assert.deepEqual(again.checkpoints.map((c) => c.next_step), [2]);
  } finally {
    await Deno.remove(outDir, { recursive: true });
  }
});
