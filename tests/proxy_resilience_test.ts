/**
 * Upstream retries (5xx, timeouts), sticky routing, harness retries and their dedup, harness
 * disconnects mid-stream, and phase control (held calls) — through the gateway-mounted proxy.
 */
import assert from "node:assert/strict";
import OpenAI from "openai";
import { collectCalls, selectCalls } from "../lib/samples/mod.ts";
import { startScriptedUpstream } from "../lib/proxy/scripted_upstream.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { ADMIN_KEY, openaiClient, startProxyFixture } from "./proxy_helpers.ts";

const ASK = [{ role: "user" as const, content: "Count to ten." }];

async function waitFor(check: () => Promise<boolean> | boolean, what: string, ms = 5_000) {
  const deadline = Date.now() + ms;
  while (!(await check())) {
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

Deno.test("upstream 5xx, 429 and timeouts are retried with backoff; the retry count is recorded", async () => {
  const fx = await startProxyFixture({
    scripted: {
      turns: [{ content: "one" }],
      fail: (i) =>
        i === 0 ? { status: 503 } : i === 1 ? { hang: true } : i === 2 ? { status: 429 } : null,
    },
    upstream: (url) => ({
      kind: "token_level",
      endpoints: [url!],
      timeout_ms: 1_000,
      max_retries: 3,
      backoff_base_ms: 5,
      backoff_max_ms: 20,
    }),
  });
  try {
    const client = openaiClient(fx, { timeout: 20_000 });
    const answer = await client.chat.completions.create({ model: "policy", messages: ASK });
    assert.equal(answer.choices[0].message.content, "one");
    assert.equal(fx.upstream!.calls.length, 4);
    assert.equal(fx.upstream!.calls[1].aborted, true, "the timed-out try was aborted");
    const [event] = await fx.modelRequests();
    assert.equal(event.payload.retry_count, 3);
    assert.equal(event.payload.http_status, 200);
  } finally {
    await fx.close();
  }
});

Deno.test("exhausted retries answer 502 in the caller's format and are recorded as failed calls; the harness's own retry is deduplicated later", async () => {
  const fx = await startProxyFixture({
    scripted: { turns: [{ content: "fine" }], fail: (i) => (i < 2 ? { status: 500 } : null) },
    upstream: (url) => ({
      kind: "token_level",
      endpoints: [url!],
      max_retries: 1,
      backoff_base_ms: 1,
      backoff_max_ms: 2,
    }),
  });
  try {
    const client = openaiClient(fx, { timeout: 20_000 });
    const failed = await client.chat.completions.create({ model: "policy", messages: ASK })
      .catch((e) => e);
    assert.ok(failed instanceof OpenAI.APIError);
    assert.equal(failed.status, 502);
    assert.match(String(failed.message), /answered 500/);
    // The harness retries the same prompt twice (e.g. after its own timeout).
    await client.chat.completions.create({ model: "policy", messages: ASK });
    await client.chat.completions.create({ model: "policy", messages: ASK });
    const events = await fx.modelRequests();
    assert.equal(events.length, 3);
    assert.equal(events[0].payload.http_status, 502);
    assert.equal(events[0].payload.retry_count, 1);
    assert.ok(events[0].payload.error);
    assert.deepEqual(events[0].payload.prompt_token_ids, events[1].payload.prompt_token_ids);
    assert.deepEqual(events[1].payload.prompt_token_ids, events[2].payload.prompt_token_ids);
    const { used, dropped } = selectCalls(collectCalls(events), null);
    assert.deepEqual(used.map((c) => c.seq), [events[2].seq]);
    assert.deepEqual(dropped.map((d) => d.reason).sort(), ["error", "retry_duplicate"]);
  } finally {
    await fx.close();
  }
});

Deno.test("a rollout sticks to one upstream endpoint and fails over to another on retry", async () => {
  const tokenizer = await loadQwen3Tokenizer();
  const a = await startScriptedUpstream({ tokenizer, turns: [{ content: "a" }] });
  const b = await startScriptedUpstream({
    tokenizer,
    turns: [{ content: "b" }],
    fail: () => ({ status: 502 }),
  });
  const fx2 = await startProxyFixture({
    noScripted: true,
    upstream: () => ({
      endpoints: [a.url, b.url],
      max_retries: 2,
      backoff_base_ms: 1,
      backoff_max_ms: 2,
    }),
  });
  try {
    const client = openaiClient(fx2);
    for (let i = 0; i < 4; i++) {
      const r = await client.chat.completions.create({
        model: "policy",
        messages: [{ role: "user", content: `q${i}` }],
      });
      assert.equal(r.choices[0].message.content, "a");
    }
    const events = await fx2.modelRequests();
    // Same rollout → same first choice every time: either always a, or always b then a.
    const firstTries = new Set(events.map((e) => e.payload.retry_count));
    assert.equal(firstTries.size, 1, "every call of the rollout started on the same endpoint");
    assert.equal(a.calls.length, 4);
    assert.equal(b.calls.length, [...firstTries][0] === 1 ? 4 : 0);
    assert.ok(events.every((e) => e.payload.upstream === a.url));
  } finally {
    await fx2.close();
    await a.close();
    await b.close();
  }
});

Deno.test("a harness disconnect mid-stream aborts the upstream and leaves a recorded, flagged partial call", async () => {
  const fx = await startProxyFixture({
    scripted: { turns: [{ content: "word ".repeat(200) }], chunkDelayMs: 5 },
  });
  try {
    const controller = new AbortController();
    const response = await fetch(`${fx.openaiBase}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.token}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "policy", messages: ASK, stream: true }),
      signal: controller.signal,
    });
    assert.equal(response.status, 200);
    const reader = response.body!.getReader();
    let received = "";
    while (received.split("data:").length < 6) {
      received += new TextDecoder().decode((await reader.read()).value);
    }
    controller.abort();
    await reader.cancel().catch(() => {});
    await waitFor(async () => (await fx.modelRequests()).length === 1, "the recorded call");
    const [event] = await fx.modelRequests();
    assert.equal(event.payload.client_disconnected, true);
    assert.equal(event.payload.http_status, 499);
    const full = fx.upstream!.calls[0].responseIds.length;
    const got = event.payload.response_token_ids.length;
    assert.ok(got > 0 && got < full, `partial response recorded (${got} of ${full})`);
    assert.equal(event.payload.response_logprobs.length, got);
    await waitFor(() => fx.upstream!.calls[0].aborted, "the upstream generation to be aborted");
    assert.equal(fx.phase.snapshot().in_flight, 0, "no call left in flight");
  } finally {
    await fx.close();
  }
});

async function setPhase(origin: string, phase: "update" | "rollout") {
  const r = await fetch(`${origin}/v1/phase`, {
    method: "POST",
    headers: { authorization: `Bearer ${ADMIN_KEY}`, "content-type": "application/json" },
    body: JSON.stringify({ phase }),
  });
  assert.equal(r.status, 200, await r.text());
}

async function getPhase(origin: string) {
  const r = await fetch(`${origin}/v1/phase`, {
    headers: { authorization: `Bearer ${ADMIN_KEY}` },
  });
  return await r.json() as { phase: string; in_flight: number; held: number };
}

Deno.test("phase: calls in flight finish during update, new calls wait and complete after rollout resumes; nothing lost or duplicated", async () => {
  const fx = await startProxyFixture({
    scripted: {
      turns: [{ content: "a b c d e f g h i j k l m n o p q r s t u v w x y z" }],
      chunkDelayMs: 25,
    },
  });
  try {
    const client = openaiClient(fx, { timeout: 20_000 });
    const ask = (i: number) =>
      client.chat.completions.create({
        model: "policy",
        messages: [{ role: "user", content: `call ${i}` }],
      });
    const inFlight = [ask(0), ask(1)];
    await waitFor(() => fx.upstream!.calls.length === 2, "two calls in flight");
    await setPhase(fx.origin, "update");
    const held = [ask(2), ask(3)];
    await waitFor(async () => (await getPhase(fx.origin)).held === 2, "two held calls");
    const snapshot = await getPhase(fx.origin);
    assert.equal(snapshot.phase, "update");
    assert.equal(snapshot.in_flight, 2);
    const done = await Promise.all(inFlight);
    assert.ok(done.every((r) => r.choices[0].finish_reason === "stop"));
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(fx.upstream!.calls.length, 2, "held calls did not reach the policy");
    assert.equal((await getPhase(fx.origin)).held, 2);
    await setPhase(fx.origin, "rollout");
    const resumed = await Promise.all(held);
    assert.ok(
      resumed.every((r) =>
        r.choices[0].message.content === "a b c d e f g h i j k l m n o p q r s t u v w x y z"
      ),
    );
    const events = await fx.modelRequests();
    assert.equal(events.length, 4);
    assert.equal(new Set(events.map((e) => e.event_key)).size, 4);
    assert.equal(fx.upstream!.calls.length, 4);
  } finally {
    await fx.close();
  }
});

Deno.test("phase: a call held longer than max_hold_ms gets 503 with Retry-After", async () => {
  const fx = await startProxyFixture({ proxy: { max_hold_ms: 50 } });
  try {
    await setPhase(fx.origin, "update");
    const r = await fetch(`${fx.anthropicBase}/v1/messages`, {
      method: "POST",
      headers: { "x-api-key": fx.token, "content-type": "application/json" },
      body: JSON.stringify({ model: "policy", max_tokens: 8, messages: ASK }),
    });
    assert.equal(r.status, 503);
    assert.equal(r.headers.get("retry-after"), "5");
    const body = await r.json();
    assert.equal(body.type, "error");
    assert.equal(body.error.type, "overloaded_error");
    assert.equal((await getPhase(fx.origin)).held, 0);
  } finally {
    await fx.close();
  }
});

Deno.test("a harness that gives up on a non-streamed call aborts the upstream; the call is recorded as disconnected", async () => {
  const fx = await startProxyFixture({
    scripted: { turns: [{ content: "word ".repeat(100) }], chunkDelayMs: 10 },
  });
  try {
    const controller = new AbortController();
    const pending = fetch(`${fx.openaiBase}/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${fx.token}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "policy", messages: ASK }),
      signal: controller.signal,
    }).catch((e) => e);
    await waitFor(() => fx.upstream!.calls.length === 1, "the upstream call");
    controller.abort();
    assert.equal((await pending as Error).name, "AbortError");
    await waitFor(async () => (await fx.modelRequests()).length === 1, "the recorded call");
    const [event] = await fx.modelRequests();
    assert.equal(event.payload.client_disconnected, true);
    assert.equal(event.payload.http_status, 499);
    await waitFor(() => fx.upstream!.calls[0].aborted, "the upstream generation to be aborted");
    assert.equal(fx.upstream!.calls[0].done, false);
    assert.equal(fx.phase.snapshot().in_flight, 0);
  } finally {
    await fx.close();
  }
});
