/**
 * The proxy makes the parts of a call's record that the call's outcome does not change (the
 * request's digest, its messages checked and serialized for the store) while the upstream
 * works, and the record it then appends is the one it would have made afterwards.
 */
import assert from "node:assert/strict";
import { Hono } from "hono";
import { capabilityToken } from "../lib/http/credentials.ts";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";
import { parseEvents } from "../lib/gateway/store_input.ts";
import { CallRecorder, type CallResult, type CaptureStore } from "../lib/proxy/capture.ts";
import type { PreparedCall } from "../lib/proxy/call.ts";
import { createProxyApp } from "../lib/proxy/app.ts";
import { startScriptedUpstream } from "../lib/proxy/scripted_upstream.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import type { ChatMessage, EventInput, JsonObject } from "../lib/schema.ts";

/** A store that keeps what it was asked to append. */
function recordingStore(): CaptureStore & { appended: EventInput[] } {
  const appended: EventInput[] = [];
  return {
    appended,
    appendEvents: (_rollout, _attempt, inputs) => {
      appended.push(...inputs);
      return Promise.resolve([]);
    },
    listModels: () => Promise.resolve([]),
  };
}

function preparedCall(messages: ChatMessage[]): PreparedCall {
  const body = { model: "m", messages, tools: [{ type: "function" }], temperature: 0.5 };
  return {
    callId: "c1",
    rolloutId: "r1",
    attemptId: "a1",
    body,
    request: {
      flavor: "openai_chat",
      model: "m",
      stream: false,
      messages,
      prompt: null,
      promptIds: null,
      tools: [],
      sampling: { temperature: 0.5, top_p: 1 },
      includeUsage: false,
    },
    segment: null,
    conversation: null,
    promptIds: Uint32Array.of(1, 2, 3),
    parser: null,
    mode: "faithful",
    startedAt: performance.now(),
  } as unknown as PreparedCall;
}

const FAILED: CallResult = {
  outcome: null,
  partial: { ids: [7], logprobs: [-0.5], text: "x" },
  httpStatus: 502,
  error: "upstream failed",
  retries: 1,
  endpoint: "http://upstream",
  clientDisconnected: false,
};

const payloadOf = (event: { payload: unknown }) => {
  const { latency_ms: _latency, ...rest } = event.payload as JsonObject;
  return rest;
};

Deno.test("a record made ahead is the record made afterwards", async () => {
  const messages: ChatMessage[] = [
    { role: "system", content: "be brief" },
    { role: "user", content: 'say "hi" \\ twice', extra: 1 } as ChatMessage,
  ];
  const after = recordingStore();
  await new CallRecorder(after, 1_000).record(preparedCall(messages), FAILED);
  const ahead = recordingStore();
  const recorder = new CallRecorder(ahead, 1_000);
  const call = preparedCall(messages);
  recorder.ready(call);
  await recorder.record(call, FAILED);
  // As the store takes them: the same event (zod strips the unknown key on both paths).
  const [madeAhead] = parseEvents(ahead.appended);
  const [madeAfter] = parseEvents(after.appended);
  assert.deepEqual(payloadOf(madeAhead), payloadOf(madeAfter));
  assert.equal("extra" in (madeAhead.payload as { messages: object[] }).messages[1], false);
  // Made ahead: the messages the store gets are the checked, frozen ones (not the call's).
  const stored = (ahead.appended[0].payload as { messages: ChatMessage[] }).messages;
  assert.ok(Object.isFrozen(stored));
  assert.notEqual(stored, messages);
  assert.equal(Object.isFrozen(messages), false, "the call's own messages stay as they were");
  assert.equal(
    Object.isFrozen((after.appended[0].payload as { messages: ChatMessage[] }).messages),
    false,
  );
});

Deno.test("messages that fail the check ahead are left to the store, which refuses them", async () => {
  const bad = [{ role: "robot", content: "x" }] as unknown as ChatMessage[];
  const store = openSqliteStore(":memory:");
  try {
    await store.createRollouts([{ rollout_id: "r1", input: {} }]);
    const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    const recorder = new CallRecorder(store, 1_000);
    const call = { ...preparedCall(bad), attemptId: attempt.attempt_id };
    recorder.ready(call); // does not throw
    await assert.rejects(
      recorder.record(call, FAILED),
      /events\[0\]\.payload\.messages\[0\]\.role/,
    );
    assert.equal((await store.listEvents("r1", { type: "model_request" })).length, 0);
  } finally {
    await store.close();
  }
});

Deno.test("the proxy appends every call with its record made ahead (JSON and streaming)", async () => {
  const tokenizer = await loadQwen3Tokenizer();
  const policy = await startScriptedUpstream({
    tokenizer,
    turns: [{ content: "4" }, { content: "5" }],
  });
  const store = openSqliteStore(":memory:");
  const appended: EventInput[] = [];
  const watched = new Proxy(store, {
    get(target, name) {
      if (name === "appendEvents") {
        return (r: string, a: string, inputs: EventInput[], o: unknown) => {
          appended.push(...inputs);
          return target.appendEvents(r, a, inputs, o as never);
        };
      }
      const value = Reflect.get(target, name, target);
      return typeof value === "function" ? value.bind(target) : value;
    },
  });
  const [secret, adminKey] = ["hmac-secret", "admin-key"];
  const app = new Hono();
  app.route(
    "/proxy",
    createProxyApp({
      store: watched,
      tokenizer,
      secret,
      adminKey,
      upstream: { kind: "token_level", endpoints: [policy.url] },
    }),
  );
  try {
    await store.createRollouts([{ rollout_id: "r1", input: {} }]);
    const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    for (const stream of [false, true]) {
      const res = await app.request(`/proxy/r1/${attempt.attempt_id}/v1/chat/completions`, {
        method: "POST",
        headers: { authorization: `Bearer ${capabilityToken(secret, "r1", attempt.attempt_id)}` },
        body: JSON.stringify({ model: "p", stream, messages: [{ role: "user", content: "2+2?" }] }),
      });
      assert.equal(res.status, 200);
      await res.text();
    }
    assert.equal(appended.length, 2);
    for (const event of appended) {
      const payload = event.payload as { messages: ChatMessage[]; request: JsonObject };
      assert.ok(Object.isFrozen(payload.messages), "checked ahead");
      assert.deepEqual(payload.messages, [{ role: "user", content: "2+2?" }]);
      assert.equal(typeof (payload.request.messages as { sha256: string }).sha256, "string");
    }
    const stored = await store.listEvents("r1", { type: "model_request" });
    assert.deepEqual(
      stored.map((e) => (e.payload as { messages: ChatMessage[] }).messages),
      [[{ role: "user", content: "2+2?" }], [{ role: "user", content: "2+2?" }]],
    );
  } finally {
    await policy.close();
    await store.close();
  }
});
