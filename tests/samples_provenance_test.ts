/**
 * Break provenance after a fork: each split is diagnosed against its own previous call on its
 * branch (its `previous_seq` and its evidence), not against the last call of the sample the branch
 * forked from.
 */
import assert from "node:assert/strict";
import { assembleRollout, diagnoseBreak } from "../lib/samples/mod.ts";
import { loadTrajectories, replayTrajectory } from "../lib/trajectories/mod.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { callEvent } from "./fixtures/samples/events.ts";

// Ids are character codes, except 300 = "xy" and 301 = "hi" (one id each for two characters,
// re-tokenized later as two ids: a token-boundary split).
const decode = (ids: Uint32Array) =>
  [...ids].map((id) => id === 300 ? "xy" : id === 301 ? "hi" : String.fromCharCode(id)).join("");
const ids = (text: string) => [...text].map((c) => c.charCodeAt(0));

Deno.test("after a fork, every split of the new branch is diagnosed against its own previous call", () => {
  const events = [
    callEvent(1, ids("ab"), ids("c")),
    callEvent(2, ids("abcd"), ids("e")),
    // Continues after seq 1, not after seq 2: a fork.
    callEvent(3, ids("abcf"), [300]),
    // Seq 3's "xy" comes back as two ids: a token-boundary split from seq 3 (its branch).
    callEvent(4, ids("abcfxyg"), [301]),
    // And seq 4's "hi" the same way: a split from seq 4.
    callEvent(5, ids("abcfxyghij"), ids("k")),
  ];
  const result = assembleRollout(events, { decode });
  assert.deepEqual(result.samples.map((s) => s.provenance.request_seqs), [[1, 2], [3], [4], [5]]);
  const rows = result.breaks.map((b) => ({
    seq: b.seq,
    previous_seq: b.previous_seq,
    reason: b.reason,
    first_diff_token: b.first_diff_token,
    context: b.context_text,
    expected: b.expected_text,
    actual: b.actual_text,
  }));
  assert.deepEqual(rows, [
    // The fork itself is compared with the sample it left (which had moved on to seq 2).
    {
      seq: 3,
      previous_seq: 2,
      reason: "branch",
      first_diff_token: 3,
      context: "abc",
      expected: "de",
      actual: "f",
    },
    {
      seq: 4,
      previous_seq: 3,
      reason: "token_boundary",
      first_diff_token: 4,
      context: "abcf",
      expected: "xy",
      actual: "xyg",
    },
    {
      seq: 5,
      previous_seq: 4,
      reason: "token_boundary",
      first_diff_token: 7,
      context: "abcfxyg",
      expected: "hi",
      actual: "hij",
    },
  ]);
  assert.match(result.breaks[0].detail, /extends seq 1 exactly/);
  // The evidence ids are the branch's own: seq 3's sampled id 300, then seq 4's 301.
  assert.deepEqual(result.breaks[1].expected_ids, [300]);
  assert.deepEqual(result.breaks[2].expected_ids, [301]);
});

Deno.test("a real log: every split of a one-conversation run is diagnosed against the call before it", async () => {
  // SWE-agent's eps demonstration splits three times in a row at token boundaries (calls 12, 13,
  // 14 of its replay); calls 13 and 14 also extend earlier calls of the first sample exactly,
  // which once made both report that sample's last call (11) as their previous one.
  const qwen3 = await loadQwen3Tokenizer();
  const runs = await loadTrajectories({ sources: ["swe-agent"] });
  const eps = runs.find((t) => t.file.endsWith("ctf/crypto/eps.traj"))!;
  const events = replayTrajectory(eps, qwen3);
  const result = assembleRollout(events, { tokenizer: qwen3 });
  const breaks = result.breaks.map((b) => [b.seq, b.previous_seq, b.reason]);
  assert.deepEqual(breaks, [
    [12, 11, "token_boundary"],
    [13, 12, "token_boundary"],
    [14, 13, "token_boundary"],
  ]);
  // Every single-conversation run of the set: the previous call is always the one before.
  const decode = (ids: Uint32Array) => qwen3.decode(ids);
  for (const run of runs) {
    for (const policy of ["logged", "thinking"] as const) {
      const replayed = replayTrajectory(run, qwen3, { policy_output: policy });
      const r = assembleRollout(replayed, { tokenizer: qwen3 });
      const call = (seq: number) => {
        const event = replayed.find((e) => e.seq === seq)!;
        return { seq, request: event.payload };
      };
      for (const b of r.breaks) {
        const where = `${run.id} (${policy}) seq ${b.seq}`;
        assert.equal(b.previous_seq, b.seq - 1, where);
        // The evidence is the previous call's own: what diagnosing the pair alone gives.
        assert.deepEqual(b, diagnoseBreak(call(b.seq - 1), call(b.seq), { decode }), where);
      }
    }
  }
});
