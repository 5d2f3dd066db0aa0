/**
 * Token storage: Uint32/Float32 little-endian blobs, and prompts stored as a reference to an
 * earlier call plus the new tail, so a multi-turn rollout costs about its final context.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { parseEvents } from "../lib/gateway/store_input.ts";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";
import { EventInputSchema } from "../lib/schema.ts";
import { mulberry32 } from "../lib/util/random.ts";
import {
  commonPrefixLength,
  decodeF32,
  decodeU32,
  encodeF32,
  encodeU32,
  planPrompt,
  resolvePrompt,
} from "../lib/gateway/token_blob.ts";

Deno.test("tokens: blobs are little-endian Uint32 ids and Float32 logprobs", () => {
  const ids = Uint32Array.of(0, 1, 0x01020304, 0xffffffff);
  const blob = encodeU32(ids);
  assert.deepEqual(Array.from(blob.subarray(8, 12)), [4, 3, 2, 1]);
  assert.deepEqual(decodeU32(blob), ids);
  const lp = Float32Array.of(-0.5, -1e-8, 0, -30.25);
  const lpBlob = encodeF32(lp);
  assert.equal(new DataView(lpBlob.buffer).getFloat32(0, true), -0.5);
  assert.deepEqual(decodeF32(lpBlob), lp);
  // Decoding an unaligned view works and never aliases the input.
  const shifted = new Uint8Array(blob.length + 1);
  shifted.set(blob, 1);
  const decoded = decodeU32(shifted.subarray(1));
  assert.deepEqual(decoded, ids);
  decoded[0] = 9;
  assert.equal(shifted[1], 0);
  assert.throws(() => decodeU32(new Uint8Array(3)), /not Uint32/);
});

Deno.test("tokens: planPrompt picks the longest shared context and resolvePrompt rebuilds it", () => {
  const sys = Array.from({ length: 40 }, (_, i) => i + 1);
  const a = { prompt: Uint32Array.from(sys), response: Uint32Array.of(100, 101, 102) };
  const b = { prompt: Uint32Array.from([...sys, 7]), response: Uint32Array.of(200) };
  // Extends a's prompt ∥ response fully.
  const p1 = Uint32Array.from([...sys, 100, 101, 102, 5, 6]);
  const plan1 = planPrompt(p1, [{ seq: 2, tokens: b }, { seq: 1, tokens: a }]);
  assert.deepEqual([plan1.ref_seq, plan1.ref_len, Array.from(plan1.tail)], [1, 43, [5, 6]]);
  assert.deepEqual(resolvePrompt(a, plan1.ref_len, plan1.tail), p1);
  // Retokenized response: shares the prompt and part of the response.
  const p2 = Uint32Array.from([...sys, 100, 999, 5]);
  const plan2 = planPrompt(p2, [{ seq: 1, tokens: a }]);
  assert.equal(plan2.ref_len, 41);
  assert.deepEqual(resolvePrompt(a, plan2.ref_len, plan2.tail), p2);
  // Too little shared: stored inline.
  const p3 = Uint32Array.of(1, 2, 3);
  assert.deepEqual(planPrompt(p3, [{ seq: 1, tokens: a }]).ref_seq, null);
  assert.equal(commonPrefixLength(Uint32Array.of(), Uint32Array.of(1)), 0);
});

Deno.test("tokens: planPrompt chooses what scanning every candidate chooses (property)", () => {
  // The reference: every candidate scanned in full, the first longest (>= 16) kept.
  const reference = (prompt: Uint32Array, candidates: Parameters<typeof planPrompt>[1]) => {
    let best = { ref_seq: null as number | null, ref_len: 0 };
    for (const { seq, tokens } of candidates) {
      const context = Uint32Array.from([...tokens.prompt, ...tokens.response]);
      const shared = commonPrefixLength(prompt, context);
      if (shared >= 16 && shared > best.ref_len) best = { ref_seq: seq, ref_len: shared };
    }
    return best;
  };
  const random = mulberry32(29);
  const pick = (n: number) => Math.floor(random() * n);
  const base = Uint32Array.from({ length: 200 }, () => pick(5));
  for (let trial = 0; trial < 2_000; trial++) {
    // Contexts and prompts cut from one base sequence (often sharing long prefixes), with an id
    // changed here and there, so full, partial, equal and empty matches all occur.
    const cut = () => {
      const ids = base.slice(0, pick(base.length + 1));
      if (ids.length && random() < 0.3) ids[pick(ids.length)] = 9;
      return ids;
    };
    const candidates = Array.from({ length: pick(6) }, (_, i) => {
      const context = cut();
      const split = pick(context.length + 1);
      return {
        seq: 100 - i,
        tokens: { prompt: context.slice(0, split), response: context.slice(split) },
      };
    });
    const prompt = cut();
    const plan = planPrompt(prompt, candidates);
    assert.deepEqual(
      { ref_seq: plan.ref_seq, ref_len: plan.ref_len },
      reference(prompt, candidates),
    );
    assert.deepEqual(plan.tail, prompt.subarray(plan.ref_len));
  }
});

Deno.test("tokens: a 30-turn rollout stores about its final context, not the sum of prompts", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-gw-tokens-" });
  try {
    const store = openSqliteStore(`${dir}/t.db`);
    await store.createRollouts([{ rollout_id: "r", input: 1 }]);
    const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    let prompt: number[] = Array.from({ length: 500 }, (_, i) => i);
    let sumOfPrompts = 0;
    let next = 1_000;
    let finalContext = 0;
    for (let turn = 0; turn < 30; turn++) {
      const response = Array.from({ length: 50 }, () => next++);
      await store.appendEvents("r", attempt.attempt_id, [{
        type: "model_request",
        payload: {
          flavor: "generate",
          prompt_token_ids: prompt,
          response_token_ids: response,
          response_logprobs: response.map(() => -1),
          policy_version: 0,
        },
      }]);
      sumOfPrompts += prompt.length;
      finalContext = prompt.length + response.length;
      prompt = [...prompt, ...response, ...Array.from({ length: 200 }, () => next++)];
    }
    await store.close();
    const db = new DatabaseSync(`${dir}/t.db`);
    const row = db.prepare(
      `SELECT SUM(LENGTH(prompt_tail)) AS tails, SUM(LENGTH(response_ids)) AS responses,
        COUNT(prompt_ref) AS refs FROM events WHERE type = 'model_request'`,
    ).get() as { tails: number; responses: number; refs: number };
    db.close();
    assert.equal(row.refs, 29, "every call after the first references its predecessor");
    const storedIds = (row.tails + row.responses) / 4;
    assert.equal(storedIds, finalContext, "ids stored once each");
    assert.ok(sumOfPrompts > 10 * finalContext);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("tokens: a call's request body is checked by a loop exactly as zod would check it", () => {
  const call = (request: unknown) => ({
    type: "model_request" as const,
    payload: {
      flavor: "openai_chat" as const,
      request,
      prompt_token_ids: [1, 2],
      response_token_ids: [3],
      response_logprobs: [-0.5],
      policy_version: 0,
    },
  });
  const bodies: unknown[] = [
    { model: "m", messages: { sha256: "ab", chars: 2 }, max_tokens: 16, stop: ["x", null] },
    { nested: { a: [1, [2, { b: true }]] } },
    Object.create(null),
    JSON.parse('{"__proto__": {"x": 1}, "y": 2}'),
    { bad: Infinity },
    { bad: [1, , 2] },
    { bad: undefined },
    { bad: new Date(0) },
    { [Symbol("s")]: 1 },
    [1, 2],
    undefined,
  ];
  for (const body of bodies) {
    const zod = EventInputSchema.safeParse(call(body));
    let fast: unknown;
    try {
      fast = parseEvents([call(body) as never])[0];
    } catch (err) {
      assert.equal(zod.success, false, `zod accepts ${String(body)}, the loop rejects: ${err}`);
      continue;
    }
    assert.ok(zod.success, `the loop accepts what zod rejects: ${JSON.stringify(body)}`);
    assert.deepEqual(JSON.parse(JSON.stringify(fast)), JSON.parse(JSON.stringify(zod.data)));
  }
});
