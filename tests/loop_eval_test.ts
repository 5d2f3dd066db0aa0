/**
 * Evaluation you can trust: a 95% interval that covers the true mean 95% of the time, a paired
 * before/after difference on the same tasks and sampling seeds, and fixed seeds that really fix
 * what the policy samples (through the built-in harness, the proxy and the worker).
 */
import assert from "node:assert/strict";
import { compareEvals, evalSeeds, evaluatePolicy, formatCi, toyModel } from "../lib/loop/mod.ts";
import { mulberry32 } from "../lib/util/random.ts";
import { meanCi } from "../lib/util/stats.ts";
import { parseOrThrow } from "../lib/schema.ts";
import { LoopConfigSchema } from "../lib/loop/schema.ts";
import { toyLoopTasks } from "../lib/loop/toy.ts";
import { startTestStack, testConfig } from "./loop_helpers.ts";

Deno.test("eval CI: the 95% t interval is the textbook one and covers a known mean ~95% of the time", () => {
  // Textbook: 10 observations, mean 5.0, s = 1.0 → t(0.975, 9) = 2.262 → ± 0.715.
  const xs = [4, 5, 6, 5, 4, 6, 5, 4, 6, 5].map((x) => x + 0);
  const r = meanCi(xs);
  assert.equal(r.mean, 5);
  assert.equal(r.std.toFixed(4), (Math.sqrt(6 / 9)).toFixed(4));
  assert.equal(r.ci95.toFixed(4), (2.2621571628 * Math.sqrt(6 / 9) / Math.sqrt(10)).toFixed(4));
  assert.ok(Number.isNaN(meanCi([1]).ci95), "one rollout has no interval");
  assert.equal(formatCi(meanCi([1])), "1.000");

  // Coverage over 2000 simulated evaluations of 64 rollouts with a true pass rate of 0.4.
  const rand = mulberry32(7);
  let covered = 0;
  const trials = 2000;
  for (let t = 0; t < trials; t++) {
    const rewards = Array.from({ length: 64 }, () => (rand() < 0.4 ? 1 : 0));
    const ci = meanCi(rewards);
    if (Math.abs(ci.mean - 0.4) <= ci.ci95) covered++;
  }
  const coverage = covered / trials;
  assert.ok(coverage > 0.93 && coverage < 0.97, `coverage ${coverage}`);
});

Deno.test("eval comparison: paired on the same tasks and seeds; a real gain separates, noise does not", () => {
  const rand = mulberry32(11);
  const n = 64;
  const tasks = Array.from({ length: n }, (_, i) => `t${i % 4}`);
  const seeds = evalSeeds(n, 0);
  const draw = (p: number) => Array.from({ length: n }, () => (rand() < p ? 1 : 0));
  const before = { rewards: draw(0.35), tasks, seeds };
  // The same policy evaluated again: no separation.
  const again = compareEvals(before, { rewards: draw(0.35), tasks, seeds });
  assert.equal(again.paired, true);
  // A policy that solves what it solved before and most of the rest.
  const better = before.rewards.map((r) => (r === 1 || rand() < 0.8 ? 1 : 0));
  const gain = compareEvals(before, { rewards: better, tasks, seeds });
  assert.equal(gain.paired, true);
  assert.equal(gain.separated, true, JSON.stringify(gain.diff));
  assert.ok(gain.diff.mean > 0.4);
  // Other seeds: not paired (Welch), and the interval is wider than the paired one.
  const unpaired = compareEvals(before, { rewards: better, tasks, seeds: evalSeeds(n, 1) });
  assert.equal(unpaired.paired, false);
  assert.ok(unpaired.diff.ci95 > gain.diff.ci95);
  // Runs without seeds (a harness that takes none) are never paired.
  const none = tasks.map(() => null);
  assert.equal(compareEvals({ ...before, seeds: none }, { ...before, seeds: none }).paired, false);
});

Deno.test("eval: fixed seeds fix what the policy samples (same policy, same seeds → same tokens)", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-eval-" });
  const { stack, tokenizer, tasks, dataDir } = await startTestStack(dir, 4);
  try {
    const config = parseOrThrow(
      LoopConfigSchema,
      testConfig("evalseed", dir, dataDir, tokenizer, {
        model: toyModel(tokenizer, { d_model: 32, n_layers: 1, max_seq_len: 512 }),
      }),
    );
    const state = await stack.worker.client.init({ model: config.model! });
    await stack.client.registerModel({
      name: config.policy_name,
      endpoints: [stack.worker.url],
      version: state.policy_version,
    });
    await stack.client.setPhase("rollout");
    await stack.services.startController!();
    const evalTasks = toyLoopTasks(tasks.slice(0, 3));
    const six = [...evalTasks, ...evalTasks];
    const statuses: string[] = [];
    // "loop-test" is the built-in harness under another name: say which option is the seed.
    const a = await evaluatePolicy(stack.client, config, "a", six, {
      seedOption: "seed",
      onStatus: (text, count) => statuses.push(`${text} ${count.done}/${count.total}`),
    });
    const b = await evaluatePolicy(stack.client, config, "b", six, { seedOption: "seed" });
    assert.deepEqual(a.seeds, evalSeeds(6, 0));
    assert.deepEqual(b.seeds, a.seeds);
    assert.equal(a.failed, 0);
    assert.ok(statuses.at(-1)!.endsWith("6/6"));
    const sampled = async (label: string, i: number) => {
      const events = await stack.client.listEvents(`evalseed-eval-${label}-${i}`, {
        type: "model_request",
      });
      return events.map((e) => e.type === "model_request" ? e.payload.response_token_ids : []);
    };
    const first: string[] = [];
    for (let i = 0; i < six.length; i++) {
      const [x, y] = [await sampled("a", i), await sampled("b", i)];
      assert.ok(x.length > 0, `rollout ${i} made calls`);
      assert.deepEqual(y, x, `rollout ${i}: same seed, same policy → same tokens`);
      first.push(JSON.stringify(x[0]));
    }
    // Rollouts i and i+3 share the task but not the seed: what they sample differs somewhere.
    assert.ok(
      [0, 1, 2].some((i) => first[i] !== first[i + 3]),
      "different seeds sample differently",
    );
    assert.deepEqual(a.rewards, b.rewards);
    assert.equal(compareEvals(a, b).diff.mean, 0);
  } finally {
    await stack.close();
    await Deno.remove(dir, { recursive: true });
  }
});
