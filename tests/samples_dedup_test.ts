/** Call selection: retry dedup, failed calls, attempt filter — every exclusion counted. */
import assert from "node:assert/strict";
import { assembleRollout, assembleRollouts } from "../lib/samples/mod.ts";
import { callEvent, rewardEvent } from "./fixtures/samples/events.ts";

Deno.test("retry dedup keeps only the latest of calls with identical prompt ids", () => {
  const events = [
    callEvent(1, [1, 2, 3], [7, 7]),
    callEvent(2, [1, 2, 3], [8]), // retried (e.g. the harness timed out)
    callEvent(3, [1, 2, 3], [9, 9]), // retried again: this response is the one the harness saw
    callEvent(4, [1, 2, 3, 9, 9, 4], [5]),
  ];
  const result = assembleRollout(events);
  assert.deepEqual(
    result.dropped.map((d) => [d.seq, d.reason, d.superseded_by]),
    [[1, "retry_duplicate", 3], [2, "retry_duplicate", 3]],
  );
  assert.equal(result.samples.length, 1);
  assert.deepEqual(result.samples[0].provenance.request_seqs, [3, 4]);
  assert.equal(result.metrics.dropped.retry_duplicate, 2);
  assert.equal(result.metrics.calls, 4);
  assert.equal(result.metrics.calls_used, 2);
});

Deno.test("an identical prompt whose response a later call extends is not a retry", () => {
  // Two samples drawn from the same prompt, and the harness continued the first one.
  const events = [
    callEvent(1, [1, 2], [3]),
    callEvent(2, [1, 2], [4]),
    callEvent(3, [1, 2, 3, 5], [6]),
  ];
  const result = assembleRollout(events);
  assert.deepEqual(result.dropped, []);
  assert.deepEqual(result.samples.map((s) => s.provenance.request_seqs), [[1, 3], [2]]);
  // The second draw forks from the first call's prompt (a prefix of its sequence).
  assert.equal(result.breaks[0].reason, "branch");
});

Deno.test("a call forking from an earlier call of a sample starts a new sample: branch", () => {
  const events = [
    callEvent(1, [1, 2], [3]),
    callEvent(2, [1, 2, 3, 4], [5]),
    callEvent(3, [1, 2, 3, 9], [6]), // continues after seq 1, not after seq 2
  ];
  const result = assembleRollout(events);
  assert.deepEqual(result.samples.map((s) => s.provenance.request_seqs), [[1, 2], [3]]);
  assert.deepEqual(result.breaks.map((b) => [b.reason, b.basis, b.previous_seq]), [[
    "branch",
    "tokens",
    2,
  ]]);
  assert.match(result.breaks[0].detail, /extends seq 1 exactly/);
  assert.equal(result.breaks[0].first_diff_token, 3);
  // Seq 1's response is context in the fork: trained once, in the first sample.
  assert.deepEqual(result.samples[1].loss_mask, Uint8Array.of(0, 0, 0, 0, 1));
  // A segment tag inferred from messages (a side conversation sharing the main one's opening
  // looks like a compaction to the proxy) does not override the token-level fact.
  const tagged = events.map((e) => ({
    ...e,
    payload: {
      ...e.payload,
      segment: {
        conversation: "main",
        index: e.seq === 3 ? 1 : 0,
        opened_by: e.seq === 3 ? "compaction" as const : null,
      },
    },
  }));
  assert.equal(assembleRollout(tagged).breaks[0].reason, "branch");
});

Deno.test("failed, non-2xx and empty calls are excluded with counted reasons", () => {
  const events = [
    callEvent(1, [1], [2], { error: "upstream timeout", http_status: 504 }),
    callEvent(2, [1], [2], { http_status: 429 }),
    callEvent(3, [1], []),
    callEvent(4, [1], [2]),
  ];
  const result = assembleRollout(events);
  assert.deepEqual(result.dropped.map((d) => [d.seq, d.reason]), [
    [1, "error"],
    [2, "http_status"],
    [3, "empty_response"],
  ]);
  assert.match(result.dropped[0].detail, /upstream timeout/);
  assert.deepEqual(result.metrics.dropped, {
    error: 1,
    http_status: 1,
    empty_response: 1,
    retry_duplicate: 0,
    other_attempt: 0,
  });
  assert.deepEqual(result.samples[0].provenance.request_seqs, [4]);
});

Deno.test("attempts: 'final' keeps only the last attempt's calls; 'all' keeps every attempt", () => {
  const events = [
    callEvent(1, [1, 2], [3], { attempt_id: "a1" }),
    callEvent(2, [1, 2, 3, 4], [5], { attempt_id: "a1" }),
    callEvent(3, [1, 2], [6], { attempt_id: "a2" }),
  ];
  const final = assembleRollout(events, { attempts: "final" });
  assert.deepEqual(final.dropped.map((d) => [d.seq, d.reason]), [[1, "other_attempt"], [
    2,
    "other_attempt",
  ]]);
  assert.deepEqual(final.samples.map((s) => s.provenance.request_seqs), [[3]]);
  const all = assembleRollout(events);
  assert.deepEqual(all.samples.map((s) => s.provenance.request_seqs), [[1, 2], [3]]);
});

Deno.test("samples carry the rollout's reward, group and smallest policy version", () => {
  const events = [
    callEvent(1, [1], [2], { policy_version: 3 }),
    callEvent(2, [1, 2, 9], [4], { policy_version: 2 }),
    rewardEvent(3, 0.25, "format"),
    rewardEvent(4, 1),
    rewardEvent(5, 0.5, "format"),
  ];
  const [sample] = assembleRollout(events, { group_id: "task-7" }).samples;
  assert.equal(sample.reward, 1);
  assert.equal(sample.group_id, "task-7");
  assert.equal(sample.rollout_id, "r1");
  assert.equal(sample.policy_version, 2);
  assert.equal(assembleRollout(events, { reward: -1 }).samples[0].reward, -1);
  assert.equal(assembleRollout(events.slice(0, 2)).samples[0].group_id, "r1");
});

Deno.test("metrics summarise samples per rollout, single-sample share and tokens", () => {
  const one = [callEvent(1, [1, 2], [3]), callEvent(2, [1, 2, 3, 4], [5, 6])];
  const two = [
    callEvent(1, [1, 2], [3], { rollout_id: "r2" }),
    callEvent(2, [9, 9], [5], { rollout_id: "r2" }),
  ];
  const three = [
    callEvent(1, [1], [3], { rollout_id: "r3" }),
    callEvent(2, [2], [5], { rollout_id: "r3" }),
    callEvent(3, [3], [5], { rollout_id: "r3", http_status: 500 }),
    callEvent(4, [4], [5], { rollout_id: "r3" }),
  ];
  const { results, summary } = assembleRollouts([one, two, three]);
  assert.deepEqual(results.map((r) => r.metrics.samples), [1, 2, 3]);
  assert.equal(summary.rollouts, 3);
  assert.equal(summary.samples, 6);
  assert.equal(summary.samples_per_rollout_mean, 2);
  assert.equal(summary.single_sample_share, 1 / 3);
  assert.deepEqual(summary.samples_per_rollout_histogram, { "1": 1, "2": 1, "3": 1 });
  assert.equal(summary.dropped.http_status, 1);
  assert.equal(summary.break_reasons.branch, 3); // no shared token at all
  // rollout 1: one sample of 6 tokens (3 trained) vs 3 + 6 tokens per call
  assert.deepEqual(
    [
      results[0].metrics.tokens_total,
      results[0].metrics.tokens_trained,
      results[0].metrics.tokens_naive,
    ],
    [6, 3, 9],
  );
  assert.equal(summary.tokens_total, 6 + 6 + 6);
  assert.equal(summary.tokens_naive, 9 + 6 + 6);
  assert.equal(summary.storage_ratio, 18 / 21);
  assert.equal(summary.calls, 8);
  assert.equal(summary.calls_used, 7);
});

Deno.test("an empty rollout gives no sample and zero metrics", () => {
  const result = assembleRollout([], { rollout_id: "empty" });
  assert.equal(result.rollout_id, "empty");
  assert.deepEqual(result.samples, []);
  assert.equal(result.metrics.samples, 0);
  assert.equal(assembleRollout([], { strategy: "tree" }).samples.length, 0);
});
