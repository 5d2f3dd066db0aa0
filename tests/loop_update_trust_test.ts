/**
 * What the update step must not do silently (issue #17): train a rollout that has no reward or
 * is not finished as reward 0; hide one-member groups; take a later epoch's ratio against the
 * policy of the same pass; lose which model call a token came from (GSPO per call, per-call
 * alignment events the logprob monitor and the rollout page read).
 */
import assert from "node:assert/strict";
import { type EventInput, parseOrThrow, type RolloutEvent } from "../lib/schema.ts";
import { LoopConfigSchema } from "../lib/loop/schema.ts";
import { postRolloutEvents, updatePolicy } from "../lib/loop/mod.ts";
import { logprobMonitor } from "../lib/monitors/logprob.ts";
import { detailFragment } from "../lib/ui/detail.ts";
import { call, data, fakeClient } from "./support/loop_update.ts";

const config = parseOrThrow(LoopConfigSchema, {
  name: "trust",
  tasks: [{ id: "t", input: {} }],
  harness: { name: "command", options: { command: ["true"] } },
  schedule: { mode: "collocated_async", max_staleness: 1 },
});

Deno.test("update: a rollout without a reward or not finished is left out, counted, never reward 0", async () => {
  const groups = () => [
    [data("a1", "g1", 1, 4), data("a2", "g1", null, 4)], // a2: finished, no reward event
    [data("b1", "g2", 1, 4), data("b2", "g2", null, 4, { status: "running" })],
    [data("c1", "g3", 1, 4), data("c2", "g3", 0, 4)],
  ];
  // Even with drop_errors off (the old code's path to training a running rollout as 0).
  const lenient = { ...config, filters: { ...config.filters, drop_errors: false } };
  const { client, requests } = fakeClient(4);
  const result = await updatePolicy(groups(), { client, config: lenient, version: 4 });
  assert.equal(result.filtered.no_reward, 1);
  assert.equal(result.filtered.unfinished, 1);
  assert.deepEqual(result.rewards, [1, 1, 1, 0]);
  // a1 and b1 are left alone in their groups: one-member groups, counted and dropped.
  assert.equal(result.singleton_groups, 2);
  assert.equal(result.filtered.singleton, 2);
  assert.deepEqual(result.trained.map((t) => t.rollout_id), ["c1", "c2"]);
  const trainedIds = new Set(requests.flatMap((r) => r.rows.map((row) => row.rollout_id)));
  assert.ok(!trainedIds.has("a2") && !trainedIds.has("b2"));
  assert.deepEqual(
    result.notes.map((n) => [n.rollout_id, n.reason, n.attempt_id]).sort(),
    [
      ["a1", "singleton", "a1-a1"],
      ["a2", "no_reward", "a2-a1"],
      ["b1", "singleton", "b1-a1"],
      ["b2", "unfinished", "b2-a1"],
    ],
  );
});

Deno.test("update: one-member groups get A = r − baseline on request (verl-style, baseline 0)", async () => {
  const groups = [[data("s1", "solo-1", 1, 2)], [data("s2", "solo-2", 0.25, 2)]];
  const zero = await updatePolicy(groups, { client: fakeClient(2).client, config, version: 2 });
  assert.equal(zero.updated, false);
  assert.equal(zero.singleton_groups, 2);
  assert.equal(zero.filtered.singleton, 2);

  const baseline = {
    ...config,
    advantage: { ...config.advantage, singleton: "baseline" as const },
  };
  const { client, requests } = fakeClient(2);
  const result = await updatePolicy(groups, { client, config: baseline, version: 2 });
  assert.equal(result.updated, true);
  assert.equal(result.singleton_groups, 2);
  assert.equal(result.filtered.singleton, 0);
  assert.deepEqual(result.advantages, [1, 0.25]); // r − 0
  assert.deepEqual(
    result.notes.map((n) => [n.rollout_id, n.reason, n.advantage]),
    [["s1", "singleton_group", 1], ["s2", "singleton_group", 0.25]],
  );
  const adv = requests[0].rows[0].advantages;
  assert.ok(adv.includes(1) && adv.includes(0.25));

  const half = { ...baseline, advantage: { ...baseline.advantage, singleton_baseline: 0.5 } };
  const shifted = await updatePolicy(groups, {
    client: fakeClient(2).client,
    config: half,
    version: 2,
  });
  assert.deepEqual(shifted.advantages, [0.5, -0.25]);
});

Deno.test("update: later epochs send the first epoch's logprobs back as the proximal policy", async () => {
  const tis = {
    ...config,
    ppo_epochs: 3,
    schedule: { ...config.schedule, stale_policy: "tis" as const, max_staleness: 0 },
  };
  // The fake worker answers a distinct logprob per position in each pass.
  let pass = 0;
  const { client, requests } = fakeClient(9, (row) => {
    pass++;
    return row.tokens.map((_, i) => -0.01 * i - pass);
  });
  const result = await updatePolicy([
    [data("f1", "g1", 1, 9), data("f2", "g1", 0, 9)], // fresh: old_logprobs "rollout"
    [data("o1", "g2", 1, 6), data("o2", "g2", 0, 6)], // one update behind: TIS, decoupled
  ], { client, config: tis, version: 9 });
  assert.equal(result.tis_samples, 2);
  assert.equal(result.clip_fraction_epochs.length, 3);
  const stale = requests.filter((r) => r.loss.old_logprobs === "recompute");
  const fresh = requests.filter((r) => r.loss.old_logprobs !== "recompute");
  assert.equal(stale.length, 3);
  assert.equal(stale[0].proximal_logprobs, undefined);
  assert.equal(stale[0].return_logprobs, true);
  // What the first stale pass answered (the fake's 2nd answer: fresh part first) comes back.
  const firstAnswer = stale[0].rows[0].tokens.map((_, i) => -0.01 * i - 2);
  assert.deepEqual(stale[1].proximal_logprobs, [firstAnswer]);
  assert.deepEqual(stale[2].proximal_logprobs, [firstAnswer]);
  assert.ok(fresh.every((r) => r.proximal_logprobs === undefined));
});

Deno.test("update: gspo_sequence 'call' gives each merged call its own sequence id", async () => {
  const ids = async (gspo_sequence: "sample" | "call", share_prefix: boolean) => {
    const gspo = {
      ...config,
      share_prefix,
      loss: { ...config.loss, kind: "gspo" as const, gspo_sequence },
    };
    const { client, requests } = fakeClient(3);
    await updatePolicy([[data("m1", "g", 1, 3), data("m2", "g", 0, 3)]], {
      client,
      config: gspo,
      version: 3,
    });
    const row = requests[0].rows[0];
    // Distinct ids over trained tokens: one per sample, or one per (sample, call).
    const trained = row.loss_mask.flatMap((m, t) => (m ? [row.sequence_ids?.[t] ?? -1] : []));
    assert.equal(requests[0].loss.gspo_sequence, gspo_sequence);
    return new Set(trained).size;
  };
  // Two rollouts, each one merged sample of two calls ([4, 5, 6] and [8, 9]).
  assert.equal(await ids("call", true), 4);
  assert.equal(await ids("call", false), 4);
  assert.equal(await ids("sample", true), 2);
});

Deno.test("alignment: per-call events flag the misaligned call, not the aligned ones", async () => {
  // Rollout x1: calls seq A (tokens 4, 5, 6) and B (8, 9) merge; the fake trainer answers
  // call B's tokens far from the engine's logprobs.
  const x1 = data("x1", "g", 1, 7);
  const x2 = data("x2", "g", 0, 7);
  x2.events = [call("x2", [1, 2, 3], [4, 5, 6], 7), call("x2", [1, 2, 3, 4, 5, 6, 7], [10, 12], 7)];
  // Engine: p(8) = e^-0.15 > p(9) = e^-0.25; trainer: the other way round, far off.
  const bad = new Map([[8, -3], [9, -0.01]]);
  const { client } = fakeClient(
    7,
    (row) => row.rollout_logprobs.map((lp, t) => bad.get(row.tokens[t]) ?? lp),
  );
  const result = await updatePolicy([[x1, x2]], { client, config, version: 7 });
  const seqs = x1.events.map((e) => e.seq);
  const x1Calls = result.call_alignment.filter((c) => c.rollout_id === "x1");
  assert.deepEqual(x1Calls.map((c) => c.request_seq), seqs);
  assert.equal(x1Calls[0].metrics.pearson_prob, 1);
  assert.ok(x1Calls[1].metrics.pearson_prob! < 0.99);
  assert.ok(x1Calls[1].metrics.max_abs_dlogprob > 1);
  assert.equal(result.call_alignment.length, 4);
  // The per-step figure stays.
  assert.ok(result.alignment && result.alignment.tokens === 10);

  // Posted on the calls' attempts (a fake gateway that stores them), the monitor flags exactly
  // call B, and the loop stores that flag as the monitor runner would.
  let seq = 1000;
  const store = new Map<string, RolloutEvent[]>([["x1", [...x1.events]], ["x2", [...x2.events]]]);
  const gateway = {
    postEvents: (rollout: string, attempt: string, events: EventInput[]) => {
      const stored = events.map((e) => ({
        ...e,
        seq: ++seq,
        rollout_id: rollout,
        attempt_id: attempt,
        event_key: e.event_key ?? null,
        created_at: 0,
      })) as RolloutEvent[];
      store.get(rollout)!.push(...stored);
      return Promise.resolve(stored);
    },
  };
  await postRolloutEvents(gateway, result, 0);
  const custom = (id: string, name: string) =>
    store.get(id)!.filter((e) => e.type === "custom" && e.payload.name === name);
  assert.equal(custom("x1", "alignment").length, 2);
  assert.ok(custom("x1", "alignment").every((e) => e.attempt_id === "x1-a1"));
  const withoutFlags = store.get("x1")!.filter((e) => !custom("x1", "monitor_flags").includes(e));
  const findings = await logprobMonitor().check({ rollout: x1.rollout, events: withoutFlags });
  assert.equal(findings.length, 1);
  assert.deepEqual(findings[0].evidence.map((e) => e.seq), [seqs[1]]);
  const [flagged] = custom("x1", "monitor_flags");
  assert.ok(flagged && flagged.type === "custom");
  // The logprob monitor flags call B; the engine–trainer mismatch monitor flags the same call.
  const flagData = flagged.payload.data as {
    flags: { monitor: string; evidence: { seq: number }[] }[];
    monitors: string[];
  };
  assert.deepEqual(flagData.flags[0], { monitor: "logprob", ...findings[0] });
  assert.deepEqual(flagData.monitors, ["logprob", "mismatch"]);
  assert.deepEqual(flagData.flags[1].evidence.map((e) => e.seq), [seqs[1]]);
  // An aligned rollout raises nothing.
  assert.equal(custom("x2", "alignment").length, 2);
  assert.equal(custom("x2", "monitor_flags").length, 0);
  assert.deepEqual(
    await logprobMonitor().check({ rollout: x2.rollout, events: store.get("x2")! }),
    [],
  );
  const stored = store.get("x1")!;

  // The rollout page shows each call's alignment beside it, the low one marked.
  const page = String(detailFragment({
    rollout: x1.rollout,
    events: stored,
    base: "",
    strategy: "prefix_merge",
  }));
  assert.equal(page.match(/class="align"/g)?.length, 1);
  assert.equal(page.match(/class="err align"/g)?.length, 1);
  assert.ok(page.includes("alignment r 1, max |Δlogprob| 0<"));
  assert.ok(page.includes("alignment r -1, max |Δlogprob| 2.8500<"));
  assert.ok(
    page.includes(
      "[alert] logprob</span>: rollout/trainer probability correlation -1.0000 &lt; 0.99",
    ),
  );
});

Deno.test("update: calls sampled at another version get no alignment event", async () => {
  const older = data("v1", "g", 1, 5);
  older.events.push(call("v1", [1, 2, 3, 4, 5, 6, 7, 8, 9, 10], [20, 21], 6));
  const { client } = fakeClient(6);
  const result = await updatePolicy([[older, data("v2", "g", 0, 6)]], {
    client,
    config,
    version: 6,
  });
  const v1 = result.call_alignment.filter((c) => c.rollout_id === "v1");
  assert.deepEqual(v1.map((c) => c.policy_version), [6]);
  assert.equal(v1[0].request_seq, older.events[2].seq);
  // The per-step figure counts whole samples at the version only (v2's).
  assert.equal(result.alignment?.tokens, 5);
});
