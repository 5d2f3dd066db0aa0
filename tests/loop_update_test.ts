/**
 * The update step and the config, without processes: filters with counted reasons, the
 * staleness bound (drop, or TIS in a call of its own), rollout-whole batches, alignment on
 * same-version samples only, and config errors that name the field.
 */
import assert from "node:assert/strict";
import { type ForwardBackwardRequest, parseOrThrow, ValidationError } from "../lib/schema.ts";
import { LoopConfigSchema } from "../lib/loop/schema.ts";
import { LoopConfigError, parseLoopConfig, updatePolicy } from "../lib/loop/mod.ts";
import { data, fakeClient } from "./support/loop_update.ts";

const baseConfig = parseOrThrow(LoopConfigSchema, {
  name: "unit",
  tasks: [{ id: "t", input: {} }],
  harness: { name: "command", options: { command: ["true"] } },
  schedule: { mode: "collocated_async", max_staleness: 1 },
});

Deno.test("update: filters are counted by reason and batches keep rollouts whole", async () => {
  const { client, requests } = fakeClient(5);
  const result = await updatePolicy([
    // g1: signal (1 vs 0), r1 has two samples (a branch).
    [data("r1", "g1", 1, 5, { split: true }), data("r2", "g1", 0, 5)],
    // g2: zero variance → dropped.
    [data("r3", "g2", 1, 5), data("r4", "g2", 1, 5)],
    // g3: r6 failed → error; r5 alone is a zero-variance singleton.
    [data("r5", "g3", 1, 5), data("r6", "g3", 0, 5, { status: "failed" })],
  ], { client, config: baseConfig, version: 5 });

  assert.equal(result.updated, true);
  assert.equal(result.policy_version, 6);
  assert.deepEqual(result.filtered, {
    unfinished: 0,
    no_reward: 0,
    error: 1,
    no_samples: 0,
    singleton: 1,
    zero_variance: 2,
    stale: 0,
  });
  assert.equal(result.singleton_groups, 1);
  assert.equal(result.rollouts, 6);
  // One break (r1's second conversation); without segments or a decoder its reason is unknown.
  assert.equal(Object.values(result.break_reasons).reduce((a, b) => a + b, 0), 1);
  assert.deepEqual(
    result.trained.map((t) => [t.rollout_id, t.samples, t.assembled]),
    [["r1", 2, 2], ["r2", 1, 1]],
  );
  // rollout_token_mean over the whole batch: the weights of the packed rows sum to 1.
  const rows = requests.flatMap((r) => r.rows);
  const total = rows.reduce((acc, row) => acc + row.loss_weights.reduce((a, w) => a + w, 0), 0);
  assert.ok(Math.abs(total - 1) < 1e-6, `total weight ${total}`);
  assert.equal(result.alignment?.pearson_prob, 1);
  assert.equal(result.trained_tokens, 5 + 5 + 2);
});

Deno.test("update: shared-prefix packing (default) sends tree rows and reads alignment back exactly", async () => {
  const groups = () => [
    [data("p1", "g1", 1, 5, { split: true }), data("p2", "g1", 0, 5)],
    [data("p3", "g2", 1, 5), data("p4", "g2", 0, 5)],
  ];
  assert.equal(baseConfig.share_prefix, true);
  const shared = fakeClient(5);
  const a = await updatePolicy(groups(), { client: shared.client, config: baseConfig, version: 5 });
  const plain = fakeClient(5);
  const b = await updatePolicy(groups(), {
    client: plain.client,
    config: { ...baseConfig, share_prefix: false },
    version: 5,
  });
  // Four samples [1, 2, 3 | 4 … 9] (the prompt untrained) and p1's branch [1, 11, 12 | 13, 14]:
  // stored once, the prompt saves 3 tokens in three samples and the branch shares token 1.
  const count = (reqs: ForwardBackwardRequest[]) =>
    reqs.reduce((n, r) => n + r.rows.reduce((m, row) => m + row.tokens.length, 0), 0);
  assert.equal(count(plain.requests), 41);
  assert.equal(count(shared.requests), 41 - 3 * 3 - 1);
  const row = shared.requests[0].rows[0];
  assert.ok(row.parent && row.sequence_ids && row.segment_starts === undefined);
  assert.equal(new Set(row.sequence_ids).size, 5);
  // The fake worker echoes each node's behaviour logprob: read back through the tree, every
  // trained token of every sample gets exactly its own.
  for (const result of [a, b]) {
    assert.equal(result.alignment?.tokens, 4 * 5 + 2);
    assert.equal(result.alignment?.max_abs_dp, 0);
    assert.equal(result.trained_tokens, 4 * 5 + 2);
  }
});

Deno.test("update: stale samples are dropped, or trained with TIS in a call of their own", async () => {
  const groups = () => [
    [data("s1", "g1", 1, 7), data("s2", "g1", 0, 7)],
    [data("s3", "g2", 1, 5), data("s4", "g2", 0, 5)], // 2 versions behind 7
    [data("s5", "g3", 1, 8), data("s6", "g3", 0, 8)], // from a future a crash lost
  ];
  const drop = fakeClient(7);
  const dropped = await updatePolicy(groups(), {
    client: drop.client,
    config: baseConfig,
    version: 7,
  });
  assert.equal(dropped.filtered.stale, 4);
  assert.deepEqual(dropped.trained.map((t) => t.rollout_id), ["s1", "s2"]);
  assert.equal(drop.requests.length, 1);

  const tisConfig = {
    ...baseConfig,
    schedule: { ...baseConfig.schedule, stale_policy: "tis" as const },
  };
  const tis = fakeClient(7);
  const reweighted = await updatePolicy(groups(), {
    client: tis.client,
    config: tisConfig,
    version: 7,
  });
  assert.equal(reweighted.filtered.stale, 2); // only the lost-future ones
  assert.equal(reweighted.tis_samples, 2);
  assert.deepEqual(reweighted.staleness.sort(), [0, 0, 2, 2]);
  assert.equal(tis.requests.length, 2);
  const stale = tis.requests.find((r) => r.loss.tis_cap !== undefined)!;
  assert.equal(stale.loss.old_logprobs, "recompute");
  assert.deepEqual(stale.rows[0].rollout_id, "s3");
  // Alignment counts only same-version samples (s1, s2): 2 × 5 trained tokens.
  assert.equal(reweighted.alignment?.tokens, 10);
});

Deno.test("update: nothing to train leaves the policy version alone", async () => {
  const { client, requests } = fakeClient(2);
  const result = await updatePolicy([[data("z1", "g", 1, 2), data("z2", "g", 1, 2)]], {
    client,
    config: baseConfig,
    version: 2,
  });
  assert.equal(result.updated, false);
  assert.equal(result.policy_version, 2);
  assert.equal(result.filtered.zero_variance, 2);
  assert.equal(requests.length, 0);
});

Deno.test("config: bad values are refused naming the field", () => {
  const bad = (value: unknown, field: string) => {
    assert.throws(
      () => parseOrThrow(LoopConfigSchema, value, "config"),
      (e: unknown) => e instanceof ValidationError && e.field === field,
    );
  };
  const ok = { name: "x", tasks: [{ id: "t", input: 1 }], harness: { name: "builtin" } };
  bad({ ...ok, tasks: [] }, "config.tasks");
  bad({ ...ok, group_size: 0 }, "config.group_size");
  bad({ ...ok, schedule: { mode: "later" } }, "config.schedule.mode");
  bad({ ...ok, schedule: { stale_policy: "keep" } }, "config.schedule.stale_policy");
  bad({ ...ok, loss: { kind: "reinforce" } }, "config.loss.kind");
  bad({ ...ok, name: "has space" }, "config.name");
  bad({ ...ok, harness: {} }, "config.harness.name");
  const parsed = parseOrThrow(LoopConfigSchema, ok, "config");
  assert.equal(parsed.schedule.mode, "collocated_async");
  // What runLoop throws: every bad field on its own line, not zod's JSON dump.
  assert.throws(
    () => parseLoopConfig({ ...ok, name: "has space", group_size: 0, loss: { kind: "x" } }),
    (e: unknown) => {
      assert.ok(e instanceof LoopConfigError);
      assert.equal(e.field, "config.name");
      const lines = e.message.split("\n");
      assert.equal(lines[0], "3 invalid fields in the loop config:");
      assert.deepEqual(lines.slice(1).map((l) => l.trim().split(":")[0]).sort(), [
        "config.group_size",
        "config.loss.kind",
        "config.name",
      ]);
      assert.doesNotMatch(e.message, /"code"|\[\s*\{/);
      return true;
    },
  );
  assert.equal(parsed.normalization.mode, "rollout_token_mean");
  assert.equal(parsed.advantage.level, "rollout");
});

Deno.test("update: ppo_epochs repeats the batch, advances the version per epoch, counts staleness in updates", async () => {
  const config = { ...baseConfig, ppo_epochs: 3 };
  const { client, requests } = fakeClient(9);
  const result = await updatePolicy([
    [data("e1", "g1", 1, 9), data("e2", "g1", 0, 9)],
    // Sampled one update (three versions) ago: within max_staleness 1, so trained.
    [data("e3", "g2", 1, 6), data("e4", "g2", 0, 6)],
    // Two updates ago: dropped.
    [data("e5", "g3", 1, 3), data("e6", "g3", 0, 3)],
  ], { client, config, version: 9 });
  assert.equal(result.policy_version, 12);
  assert.equal(result.filtered.stale, 2);
  assert.deepEqual(result.staleness.sort(), [0, 0, 1, 1]);
  // The same rows in every epoch; logprobs (for alignment) only in the first.
  assert.equal(requests.length, 3);
  assert.deepEqual(requests[1].rows, requests[0].rows);
  assert.deepEqual(requests.map((r) => r.return_logprobs), [true, false, false]);
  assert.equal(result.alignment?.tokens, 10);
});
