/**
 * Property tests on random synthetic rollouts: coverage of every response token exactly once
 * with its logprob, exact prompts, exact-only merging, tree paths, idempotency.
 */
import assert from "node:assert/strict";
import { assembleRollout, type AssemblyResult, treeDepths, treePath } from "../lib/samples/mod.ts";
import type {
  MergeStrategy,
  ModelRequest,
  ModelRequestEvent,
  RolloutEvent,
} from "../lib/schema.ts";
import { callEvent } from "./fixtures/samples/events.ts";
import { mulberry32 } from "./fixtures/algo/samples.ts";

/**
 * A random rollout: several conversations whose calls mostly extend exactly, sometimes with a
 * mutated history, retries with the same prompt, failed calls and brand-new branches. A tiny
 * vocabulary makes accidental partial matches common.
 */
function randomRollout(seed: number): ModelRequestEvent[] {
  const r = mulberry32(seed);
  const int = (n: number) => Math.floor(r() * n);
  const ids = (n: number) => Array.from({ length: n }, () => int(6));
  const convs: { prompt: number[]; response: number[] }[] = [];
  const events: ModelRequestEvent[] = [];
  let last: number[] | null = null;
  const calls = 1 + int(14);
  for (let seq = 1; seq <= calls; seq++) {
    const u = r();
    let prompt: number[];
    let conv: number;
    if (convs.length === 0 || u < 0.12) {
      prompt = ids(1 + int(6));
      conv = convs.length;
      convs.push({ prompt: [], response: [] });
    } else if (u < 0.22 && last) {
      prompt = last; // retry with the identical prompt
      conv = convs.length - 1;
    } else {
      conv = int(convs.length);
      const { prompt: p, response: a } = convs[conv];
      // Re-tokenize the earlier response: id 5 and the pair (1, 2) spell the same text.
      const retok = u < 0.45 ? a.join(",").replace(/\b5\b/g, "1,2") : a.join(",");
      prompt = [...p, ...(retok ? retok.split(",").map(Number) : []), ...ids(int(4))];
      if (u < 0.3 && prompt.length > 0) prompt[int(prompt.length)] = int(6); // history edit
    }
    const failed = r() < 0.06;
    const response = failed ? [] : ids(1 + int(5));
    events.push(callEvent(seq, prompt, response, failed ? { http_status: 500 } : {}));
    if (!failed) convs[conv] = { prompt, response };
    last = prompt;
  }
  return events;
}

const concat = (a: Uint32Array, b: Uint32Array) => {
  const out = new Uint32Array(a.length + b.length);
  out.set(a);
  out.set(b, a.length);
  return out;
};

function payloads(events: RolloutEvent[]): Map<number, ModelRequest> {
  return new Map(
    events.filter((e): e is ModelRequestEvent => e.type === "model_request").map((e) => [
      e.seq,
      e.payload,
    ]),
  );
}

/** Every used call's response sits once at its placement, masked 1, with its logprobs. */
function assertCoverage(events: RolloutEvent[], result: AssemblyResult, seed: number): void {
  const byseq = payloads(events);
  const usedSeqs = result.calls.map((c) => c.seq);
  const droppedSeqs = result.dropped.map((d) => d.seq);
  assert.deepEqual(
    [...usedSeqs, ...droppedSeqs].sort((a, b) => a - b),
    [...byseq.keys()],
    `seed ${seed}: every call is either used or dropped with a reason, exactly once`,
  );
  const covered = result.samples.map((s) => new Uint8Array(s.tokens.length));
  let responseTokens = 0;
  for (const p of result.calls) {
    const call = byseq.get(p.seq)!;
    const s = result.samples[p.sample_index];
    const end = p.response_start + p.response_length;
    assert.equal(p.response_length, call.response_token_ids.length);
    assert.deepEqual(s.tokens.subarray(p.response_start, end), call.response_token_ids);
    assert.deepEqual(s.rollout_logprobs.subarray(p.response_start, end), call.response_logprobs);
    for (let i = p.response_start; i < end; i++) {
      assert.equal(s.loss_mask[i], 1, `seed ${seed}: seq ${p.seq} token ${i} not trained`);
      assert.equal(covered[p.sample_index][i], 0, `seed ${seed}: token ${i} covered twice`);
      covered[p.sample_index][i] = 1;
    }
    responseTokens += p.response_length;
  }
  const trained = result.samples.reduce((n, s) => n + s.loss_mask.reduce((m, x) => m + x, 0), 0);
  assert.equal(trained, responseTokens, `seed ${seed}: masked tokens that are no response`);
  for (const s of result.samples) {
    for (let i = 0; i < s.tokens.length; i++) {
      if (s.loss_mask[i] === 0) assert.equal(s.rollout_logprobs[i], 0);
    }
  }
  assert.equal(result.metrics.tokens_trained, trained);
}

const SEEDS = Array.from({ length: 300 }, (_, i) => i + 1);

for (const strategy of ["per_call", "prefix_merge", "tree"] as MergeStrategy[]) {
  Deno.test(`${strategy}: every response token covered exactly once with its logprob (random rollouts)`, () => {
    for (const seed of SEEDS) {
      const events = randomRollout(seed);
      const result = assembleRollout(events, { strategy });
      assertCoverage(events, result, seed);
      const byseq = payloads(events);
      for (const p of result.calls) {
        const call = byseq.get(p.seq)!;
        const s = result.samples[p.sample_index];
        const exact = concat(call.prompt_token_ids, call.response_token_ids);
        if (strategy === "tree") {
          const leaf = p.response_start + p.response_length - 1;
          assert.deepEqual(treePath(s, leaf), exact);
          // Depth = position the token had in the call's own linear sequence.
          assert.equal(treeDepths(s)[leaf], exact.length - 1);
        } else {
          assert.deepEqual(
            s.tokens.subarray(0, p.response_start),
            call.prompt_token_ids,
            `seed ${seed}: seq ${p.seq} lost its exact prompt`,
          );
        }
      }
    }
  });
}

Deno.test("prefix_merge never merges a non-exact pair, and splits only when no open sample extends", () => {
  let merges = 0;
  let splits = 0;
  for (const seed of SEEDS) {
    const events = randomRollout(seed);
    const result = assembleRollout(events);
    const byseq = payloads(events);
    for (const s of result.samples) {
      const seqs = s.provenance.request_seqs;
      for (let k = 1; k < seqs.length; k++) {
        const a = byseq.get(seqs[k - 1])!;
        const b = byseq.get(seqs[k])!;
        const head = concat(a.prompt_token_ids, a.response_token_ids);
        assert.deepEqual(b.prompt_token_ids.subarray(0, head.length), head, `seed ${seed}`);
      }
      const last = byseq.get(seqs.at(-1)!)!;
      assert.deepEqual(s.tokens, concat(last.prompt_token_ids, last.response_token_ids));
    }
    // A new sample starts only when no open sample's tokens prefix the prompt.
    for (const s of result.samples) {
      const first = s.provenance.request_seqs[0];
      const prompt = byseq.get(first)!.prompt_token_ids;
      for (const other of result.samples) {
        const before = other.provenance.request_seqs.filter((q) => q < first).at(-1);
        if (before === undefined) continue;
        const b = byseq.get(before)!;
        const head = concat(b.prompt_token_ids, b.response_token_ids);
        const extends_ = prompt.length >= head.length &&
          head.every((t, i) => prompt[i] === t);
        assert.ok(!extends_, `seed ${seed}: seq ${first} could have extended seq ${before}`);
      }
    }
    merges += result.calls.length - result.samples.length;
    splits += result.breaks.length;
    // One diagnosed break per sample after the first.
    assert.equal(result.breaks.length, Math.max(0, result.samples.length - 1));
    assert.equal(
      result.samples.filter((s) => s.provenance.split_reason !== null).length,
      result.breaks.length,
    );
  }
  // The generator exercises both paths.
  assert.ok(merges > 100 && splits > 100, `merges ${merges}, splits ${splits}`);
});

Deno.test("buffer_substitute: every response token covered exactly once with its logprob", () => {
  // A decoder under which ids 1,2 spell the same text as id 5, so substitutions happen.
  const decode = (ids: Uint32Array) => [...ids].map((i) => i === 5 ? "bc" : "abcdef"[i]).join("");
  let substituted = 0;
  for (const seed of SEEDS) {
    const events = randomRollout(seed);
    const result = assembleRollout(events, { strategy: "buffer_substitute", decode });
    assertCoverage(events, result, seed);
    substituted += result.substitutions.length;
    for (const s of result.substitutions) {
      assert.equal(result.samples[s.sample_index].provenance.off_policy, true);
      assert.equal(decode(s.substituted_prompt), decode(s.real_prompt));
      assert.notDeepEqual(s.substituted_prompt, s.real_prompt);
    }
  }
  assert.ok(substituted > 0, "the generator never produced a token-boundary break");
});

Deno.test("tree stores shared prefixes once: never more tokens than prefix_merge or per_call", () => {
  let strictlyFewer = 0;
  for (const seed of SEEDS) {
    const events = randomRollout(seed);
    const tree = assembleRollout(events, { strategy: "tree" }).metrics;
    const merged = assembleRollout(events).metrics;
    const perCall = assembleRollout(events, { strategy: "per_call" }).metrics;
    assert.ok(tree.tokens_total <= merged.tokens_total, `seed ${seed}`);
    assert.ok(merged.tokens_total <= perCall.tokens_total, `seed ${seed}`);
    assert.equal(perCall.tokens_total, perCall.tokens_naive);
    if (tree.tokens_total < merged.tokens_total) strictlyFewer++;
  }
  assert.ok(strictlyFewer > 0);
});

Deno.test("assembly is idempotent and independent of event order", () => {
  const decode = (ids: Uint32Array) => String.fromCharCode(...[...ids].map((i) => 97 + i));
  for (const seed of SEEDS.slice(0, 100)) {
    const events = randomRollout(seed);
    for (const strategy of ["per_call", "prefix_merge", "buffer_substitute", "tree"] as const) {
      const a = assembleRollout(events, { strategy, decode });
      const b = assembleRollout(events, { strategy, decode });
      const shuffled = [...events].reverse();
      const c = assembleRollout(shuffled, { strategy, decode });
      assert.deepEqual(a, b, `seed ${seed} ${strategy}`);
      assert.deepEqual(a, c, `seed ${seed} ${strategy}`);
    }
  }
});
