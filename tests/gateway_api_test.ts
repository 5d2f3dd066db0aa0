/**
 * The gateway's HTTP API over loopback: the endpoints of docs/architecture.md#gateway, auth and
 * capability tokens, bad input answered with the right 4xx naming the field (and the store left
 * unchanged), limits, concurrent claims, the SSE change feed, phase control and the client's
 * retries.
 */
import assert from "node:assert/strict";
import { Hono } from "hono";
import { capabilityToken } from "../lib/gateway/auth.ts";
import { GatewayClient, GatewayError } from "../lib/gateway/client.ts";
import { type RunningGateway, startGateway } from "../lib/gateway/server.ts";
import type { Change, RolloutEvent } from "../lib/schema.ts";

async function withGateway(
  fn: (gw: RunningGateway, client: GatewayClient) => Promise<void>,
  options: Parameters<typeof startGateway>[0] = {},
): Promise<void> {
  const gw = await startGateway({ leaseSweepMs: 0, ...options });
  try {
    await fn(gw, new GatewayClient(gw.url, { apiKey: gw.adminKey, retries: 0 }));
  } finally {
    await gw.close();
  }
}

/** A raw request; answers `{status, body}` with the body parsed when it is JSON. */
async function raw(
  gw: RunningGateway,
  method: string,
  path: string,
  init: { key?: string | null; body?: string; headers?: Record<string, string> } = {},
): Promise<{ status: number; body: Record<string, unknown> }> {
  const headers = new Headers(init.headers);
  const key = init.key === undefined ? gw.adminKey : init.key;
  if (key !== null) headers.set("authorization", `Bearer ${key}`);
  const res = await fetch(gw.url + path, { method, headers, body: init.body });
  const text = await res.text();
  return { status: res.status, body: text ? JSON.parse(text) : {} };
}

function errorOf(body: Record<string, unknown>): { code: string; message: string } {
  const error = body.error as { code: string; message: string } | undefined;
  assert.ok(error, `expected an error body, got ${JSON.stringify(body)}`);
  assert.equal(typeof error.code, "string");
  return error;
}

const call = (prompt: number[], response: number[]) => ({
  type: "model_request" as const,
  payload: {
    flavor: "generate" as const,
    prompt_token_ids: prompt,
    response_token_ids: response,
    response_logprobs: response.map(() => -0.5),
    policy_version: 1,
  },
});

Deno.test("api: create, list, claim, events, transition and models through the client", async () => {
  await withGateway(async (gw, client) => {
    assert.deepEqual(await client.health(), {
      ok: true,
      store: "sqlite",
      phase: "rollout",
      seq: 0,
    });
    const created = await client.createRollouts([
      { rollout_id: "r1", group_id: "g", input: { q: 1 } },
      { group_id: "g", input: { q: 1 }, labels: { step: "0" } },
    ]);
    assert.deepEqual(created.created, [true, true]);
    const generated = created.rollouts[1].rollout_id;
    assert.match(generated, /^r-/);
    const again = await client.createRollouts([{ rollout_id: "r1", input: "other" }]);
    assert.deepEqual(again.created, [false]);
    assert.deepEqual(again.rollouts[0].input, { q: 1 });

    const claimed = await client.claim({ worker: "ctl", limit: 1 });
    assert.equal(claimed.length, 1);
    const { rollout, attempt, token } = claimed[0];
    assert.equal(rollout.rollout_id, "r1");
    assert.equal(token, capabilityToken(gw.secret, "r1", attempt.attempt_id));
    assert.equal(await client.attemptToken("r1", attempt.attempt_id), token);

    const lease = await client.renewLease("r1", attempt.attempt_id, {
      worker: "ctl",
      lease_ms: 30_000,
    });
    assert.ok(lease.lease_expires_at! > Date.now());

    // The harness writes its own custom events and logs with its capability token; model calls
    // are recorded by the proxy and the reward by the verifier, both with the admin key (a
    // capability token may post neither).
    const prompt = Array.from({ length: 64 }, (_, i) => i);
    const posted = [
      ...await client.postEvents("r1", attempt.attempt_id, [
        call(prompt, [100, 101]),
        call([...prompt, 100, 101, 7], [102]),
      ]),
      ...await new GatewayClient(gw.url, { apiKey: token }).postEvents(
        "r1",
        attempt.attempt_id,
        [{ type: "custom", payload: { name: "tool", data: { cmd: "ls" } } }],
      ),
      ...await client.postEvents("r1", attempt.attempt_id, [
        { type: "reward", payload: { value: 0.75 } },
      ]),
    ];
    assert.equal(posted.length, 4);
    assert.ok(posted.every((e) => e.event_key), "the client keys every event");
    const viaHeader = await fetch(
      `${gw.url}/v1/rollouts/r1/attempts/${attempt.attempt_id}/events`,
      {
        method: "POST",
        headers: { "x-api-key": token, "content-type": "application/json" },
        body: JSON.stringify({
          events: [{ type: "log", payload: { stream: "stderr", text: "warn" } }],
        }),
      },
    );
    assert.equal(viaHeader.status, 200);
    await viaHeader.body?.cancel();

    // Reads: the client gives typed arrays; the wire carries number arrays.
    const events = await client.listEvents("r1", { type: "model_request" });
    assert.equal(events.length, 2);
    const second = events[1] as Extract<RolloutEvent, { type: "model_request" }>;
    assert.ok(second.payload.prompt_token_ids instanceof Uint32Array);
    assert.deepEqual(Array.from(second.payload.prompt_token_ids), [...prompt, 100, 101, 7]);
    assert.ok(second.payload.response_logprobs instanceof Float32Array);
    const wire = await raw(gw, "GET", "/v1/rollouts/r1/events?type=model_request&limit=1");
    const items = wire.body.items as Array<{ payload: { prompt_token_ids: unknown } }>;
    assert.ok(Array.isArray(items[0].payload.prompt_token_ids));
    assert.equal(wire.body.next_after_seq, events[0].seq);
    // The capability token reads its own attempt only.
    const own = await client.listEvents("r1", { attempt_id: attempt.attempt_id }, { token });
    assert.deepEqual(own.map((e) => e.type), [
      "status",
      "model_request",
      "model_request",
      "custom",
      "reward",
      "log",
    ]);

    const done = await client.transition("r1", {
      to: "succeeded",
      expected_version: rollout.version,
      attempt_id: attempt.attempt_id,
      exit_code: 0,
    });
    assert.equal(done.status, "succeeded");
    assert.equal(done.reward, 0.75);
    assert.equal(done.policy_version_min, 1);
    await assert.rejects(
      client.transition("r1", { to: "running" }),
      (e: unknown) => e instanceof GatewayError && e.status === 400 && /to:/.test(e.message),
    );
    await assert.rejects(
      client.transition("r1", { to: "cancelled" }),
      (e: unknown) =>
        e instanceof GatewayError && e.status === 409 && e.code === "conflict" &&
        /from 'succeeded' to 'cancelled'/.test(e.message),
    );

    // Listing with filters and the page iterator.
    const page = await client.listRollouts({ status: "queuing", labels: { step: "0" } });
    assert.deepEqual(page.items.map((r) => r.rollout_id), [generated]);
    await client.createRollouts(
      Array.from({ length: 7 }, (_, i) => ({ rollout_id: `x${i}`, input: i })),
    );
    const all: string[] = [];
    for await (const r of client.iterateRollouts({ limit: 3 })) all.push(r.rollout_id);
    assert.deepEqual(all, ["r1", generated, ...Array.from({ length: 7 }, (_, i) => `x${i}`)]);
    assert.equal((await client.getRollout("x3")).input, 3);

    const model = await client.registerModel({
      name: "policy",
      endpoints: ["http://127.0.0.1:1"],
      version: 4,
    });
    assert.equal(model.version, 4);
    assert.deepEqual((await client.listModels()).map((m) => m.name), ["policy"]);
    assert.equal((await client.getModel("policy")).version, 4);
  });
});

Deno.test("api: missing, wrong and foreign keys are refused", async () => {
  await withGateway(async (gw, client) => {
    await client.createRollouts([{ rollout_id: "a", input: 1 }, { rollout_id: "b", input: 1 }]);
    const claimed = await client.claim({ worker: "w", limit: 2 });
    const [x, y] = claimed;
    const before = await client.health();

    const none = await raw(gw, "GET", "/v1/rollouts", { key: null });
    assert.equal(none.status, 401);
    assert.match(errorOf(none.body).message, /^authorization: missing API key/);
    const wrong = await raw(gw, "GET", "/v1/rollouts", { key: gw.adminKey + "x" });
    assert.equal(wrong.status, 401);
    assert.match(errorOf(wrong.body).message, /^authorization: invalid API key/);

    // A capability token cannot use the control plane ...
    for (
      const [method, path, body] of [
        ["GET", "/v1/rollouts", undefined],
        ["GET", `/v1/rollouts/${x.rollout.rollout_id}`, undefined],
        ["POST", "/v1/rollouts", JSON.stringify({ rollouts: [{ input: 1 }] })],
        ["POST", "/v1/rollouts/claim", JSON.stringify({ worker: "evil" })],
        ["PATCH", `/v1/rollouts/${x.rollout.rollout_id}`, JSON.stringify({ to: "succeeded" })],
        ["POST", "/v1/phase", JSON.stringify({ phase: "update" })],
        ["POST", "/v1/models", JSON.stringify({ name: "m", version: 1 })],
        ["GET", `/v1/rollouts/a/attempts/${x.attempt.attempt_id}/token`, undefined],
        ["GET", "/v1/stream", undefined],
      ] as const
    ) {
      const res = await raw(gw, method, path, { key: x.token, body });
      assert.equal(res.status, 403, `${method} ${path}`);
      assert.match(errorOf(res.body).message, /capability token cannot use the control plane/);
    }
    // ... nor write or read another attempt (of another rollout, or forged for this one).
    const post = (rid: string, aid: string, key: string) =>
      raw(gw, "POST", `/v1/rollouts/${rid}/attempts/${aid}/events`, {
        key,
        body: JSON.stringify({ events: [{ type: "reward", payload: { value: 1 } }] }),
      });
    for (
      const res of [
        await post(y.rollout.rollout_id, y.attempt.attempt_id, x.token),
        await post(x.rollout.rollout_id, y.attempt.attempt_id, x.token),
        await post(
          x.rollout.rollout_id,
          x.attempt.attempt_id,
          capabilityToken("not-the-secret", "a", x.attempt.attempt_id),
        ),
        await raw(
          gw,
          "GET",
          `/v1/rollouts/${y.rollout.rollout_id}/events?attempt=${y.attempt.attempt_id}`,
          {
            key: x.token,
          },
        ),
      ]
    ) {
      assert.equal(res.status, 403);
      assert.match(errorOf(res.body).message, /does not belong to this rollout\/attempt/);
    }
    const noAttempt = await raw(gw, "GET", `/v1/rollouts/${x.rollout.rollout_id}/events`, {
      key: x.token,
    });
    assert.equal(noAttempt.status, 403);
    assert.match(errorOf(noAttempt.body).message, /^attempt: /);
    assert.deepEqual(await client.health(), before, "nothing was written");
    // The admin key works everywhere; health needs no key.
    assert.equal((await post(y.rollout.rollout_id, y.attempt.attempt_id, gw.adminKey)).status, 200);
    assert.equal((await raw(gw, "GET", "/v1/health", { key: null })).status, 200);
  });
});

Deno.test("api: bad input gets the right 4xx naming the field; the store is unchanged", async () => {
  await withGateway(async (gw, client) => {
    await client.createRollouts([{ rollout_id: "r", input: 1 }]);
    const [{ attempt }] = await client.claim({ worker: "w", limit: 1 });
    const seqBefore = (await client.health()).seq;
    const cases: Array<[string, string, string | undefined, number, RegExp]> = [
      ["POST", "/v1/rollouts", "{not json", 400, /^body: malformed JSON/],
      ["POST", "/v1/rollouts", "", 400, /^body: empty/],
      [
        "POST",
        "/v1/rollouts",
        JSON.stringify({ rollout: [] }),
        400,
        /^rollouts: expected an array/,
      ],
      [
        "POST",
        "/v1/rollouts",
        JSON.stringify({ rollouts: [] }),
        400,
        /^rollouts: must hold at least one/,
      ],
      [
        "POST",
        "/v1/rollouts",
        JSON.stringify({ rollouts: [{ input: 1 }, { input: 1, config: { max_attempts: "3" } }] }),
        400,
        /^rollouts\[1\]\.config\.max_attempts: /,
      ],
      [
        "POST",
        "/v1/rollouts",
        JSON.stringify({ rollouts: [{ rollout_id: "a/b", input: 1 }] }),
        400,
        /rollouts\[0\]\.rollout_id/,
      ],
      ["POST", "/v1/rollouts/claim", JSON.stringify({ worker: 5 }), 400, /^worker: /],
      ["POST", "/v1/rollouts/claim", JSON.stringify({ worker: "w", limit: 0 }), 400, /^limit: /],
      [
        "POST",
        "/v1/rollouts/claim",
        JSON.stringify({ worker: "w", limit: 100_000 }),
        400,
        /^limit: at most 256/,
      ],
      [
        "POST",
        "/v1/rollouts/claim",
        JSON.stringify({ worker: "w", labels: "sandbox=gpu" }),
        400,
        /^labels: /,
      ],
      [
        "POST",
        "/v1/rollouts/claim",
        JSON.stringify({ worker: "w", labels: { sandbox: 5 } }),
        400,
        /^labels\.sandbox: /,
      ],
      ["PATCH", "/v1/rollouts/r", JSON.stringify({ to: "done" }), 400, /^to: /],
      [
        "PATCH",
        "/v1/rollouts/r",
        JSON.stringify({ to: "failed", expected_version: "2" }),
        400,
        /^expected_version: /,
      ],
      [
        "PATCH",
        "/v1/rollouts/r",
        JSON.stringify({ to: "failed", expected_version: 99 }),
        409,
        /^expected_version: /,
      ],
      [
        "PATCH",
        "/v1/rollouts/nope",
        JSON.stringify({ to: "failed" }),
        404,
        /^rollout_id: no rollout 'nope'/,
      ],
      ["GET", "/v1/rollouts/nope", undefined, 404, /^rollout_id: no rollout 'nope'/],
      ["GET", "/v1/rollouts/nope/events", undefined, 404, /^rollout_id: /],
      ["GET", "/v1/rollouts?limit=abc", undefined, 400, /^limit: /],
      ["GET", "/v1/rollouts?limit=5000", undefined, 400, /^limit: at most 1000/],
      ["GET", "/v1/rollouts?status=done", undefined, 400, /^status/],
      ["GET", "/v1/rollouts?after=xyz", undefined, 400, /^after: /],
      ["GET", "/v1/rollouts?order=newest", undefined, 400, /^order: /],
      ["GET", "/v1/rollouts?order=", undefined, 400, /^order: /],
      ["GET", "/v1/rollouts/r/events?after_seq=-1", undefined, 400, /^after_seq: /],
      ["GET", "/v1/rollouts/r/events?type=bogus", undefined, 400, /^type/],
      [
        "POST",
        "/v1/rollouts/r/attempts/a9-x/events",
        JSON.stringify({ events: [{ type: "log", payload: { stream: "stdout", text: "" } }] }),
        404,
        /^attempt_id: no attempt 'a9-x'/,
      ],
      [
        "POST",
        `/v1/rollouts/r/attempts/${attempt.attempt_id}/events`,
        JSON.stringify({ events: "x" }),
        400,
        /^events: expected an array/,
      ],
      [
        "POST",
        `/v1/rollouts/r/attempts/${attempt.attempt_id}/events`,
        JSON.stringify({
          events: [{ type: "reward", payload: { value: 1 } }, {
            type: "reward",
            payload: { value: null },
          }],
        }),
        400,
        /^events\[1\]\.payload\.value: /,
      ],
      [
        "POST",
        `/v1/rollouts/r/attempts/${attempt.attempt_id}/events`,
        JSON.stringify({
          events: [{
            ...call([1], [2, 3]),
            payload: { ...call([1], [2, 3]).payload, response_logprobs: [0] },
          }],
        }),
        400,
        /^events\[0\]\.payload\.response_logprobs: expected 2 logprobs/,
      ],
      [
        "POST",
        `/v1/rollouts/r/attempts/${attempt.attempt_id}/lease`,
        JSON.stringify({ worker: "x" }),
        409,
        /^worker: /,
      ],
      ["GET", "/v1/rollouts/r/attempts/a9-x/token", undefined, 404, /^attempt_id: /],
      ["POST", "/v1/models", JSON.stringify({ name: "m", version: -1 }), 400, /^version: /],
      [
        "POST",
        "/v1/models",
        JSON.stringify({ name: "m", version: 1, endpoints: ["not a url"] }),
        400,
        /^endpoints\[0\]: /,
      ],
      ["GET", "/v1/models/none", undefined, 404, /^name: no model 'none'/],
      ["POST", "/v1/phase", JSON.stringify({ phase: "training" }), 400, /^phase: /],
      ["GET", "/v1/stream?after=-3", undefined, 400, /^after: /],
      ["GET", "/v2/nothing", undefined, 404, /^path: no route GET \/v2\/nothing/],
    ];
    for (const [method, path, body, status, message] of cases) {
      const res = await raw(gw, method, path, {
        body,
        headers: { "content-type": "application/json" },
      });
      assert.equal(
        res.status,
        status,
        `${method} ${path} ${body?.slice(0, 60)} → ${JSON.stringify(res.body)}`,
      );
      assert.match(errorOf(res.body).message, message, `${method} ${path}`);
    }
    assert.equal((await client.health()).seq, seqBefore, "no bad request wrote anything");
    assert.equal((await client.listRollouts()).items.length, 1);
    assert.equal((await client.getRollout("r")).version, 2);
  });
});

Deno.test("api: labelled claims and newest-first listing through the client", async () => {
  await withGateway(async (gw, client) => {
    const names = Array.from({ length: 9 }, (_, i) => `r${i}`);
    await client.createRollouts(names.map((rollout_id, i) => ({
      rollout_id,
      input: i,
      labels: { sandbox: i % 3 === 0 ? "gpu" : "cpu" },
    })));
    // A GPU controller claims only GPU rollouts, oldest first; a retried claim (same key)
    // returns the same attempts.
    const gpu = await client.claim({
      worker: "gpu-ctl",
      limit: 2,
      labels: { sandbox: "gpu" },
      claim_key: "c1",
    });
    assert.deepEqual(gpu.map((c) => c.rollout.rollout_id), ["r0", "r3"]);
    const retry = await client.claim({
      worker: "gpu-ctl",
      limit: 2,
      labels: { sandbox: "gpu" },
      claim_key: "c1",
    });
    assert.deepEqual(retry.map((c) => c.attempt.attempt_id), gpu.map((c) => c.attempt.attempt_id));
    assert.deepEqual(
      (await client.claim({ worker: "gpu-ctl", limit: 5, labels: { sandbox: "gpu" } })).map((c) =>
        c.rollout.rollout_id
      ),
      ["r6"],
    );
    assert.deepEqual(
      await client.claim({ worker: "gpu-ctl", limit: 5, labels: { sandbox: "tpu" } }),
      [],
    );
    // Newest first, page after page through the iterator, filters included.
    const desc: string[] = [];
    for await (const r of client.iterateRollouts({ order: "desc", limit: 2 })) {
      desc.push(r.rollout_id);
    }
    assert.deepEqual(desc, [...names].reverse());
    const asc: string[] = [];
    for await (const r of client.iterateRollouts({ limit: 2 })) asc.push(r.rollout_id);
    assert.deepEqual(asc, names);
    const cpuQueued: string[] = [];
    for await (
      const r of client.iterateRollouts({
        order: "desc",
        limit: 1,
        status: "queuing",
        labels: { sandbox: "cpu" },
      })
    ) cpuQueued.push(r.rollout_id);
    assert.deepEqual(cpuQueued, ["r8", "r7", "r5", "r4", "r2", "r1"]);
    const page = await raw(gw, "GET", "/v1/rollouts?order=desc&limit=1");
    assert.equal(page.status, 200);
    assert.equal((page.body.items as Array<{ rollout_id: string }>)[0].rollout_id, "r8");
  });
});

Deno.test("api: size, batch and page limits answer 413/400", async () => {
  await withGateway(async (gw, client) => {
    const big = JSON.stringify({ rollouts: [{ input: "x".repeat(5_000) }] });
    const declared = await raw(gw, "POST", "/v1/rollouts", { body: big });
    assert.equal(declared.status, 413);
    assert.match(errorOf(declared.body).message, /^body: .*limit of 4096 bytes/);
    // A chunked body (no content-length) is cut off while it is read.
    const chunked = await fetch(`${gw.url}/v1/rollouts`, {
      method: "POST",
      headers: { authorization: `Bearer ${gw.adminKey}` },
      body: ReadableStream.from([new TextEncoder().encode(big)]),
    });
    assert.equal(chunked.status, 413);
    assert.match(errorOf(await chunked.json()).message, /^body: more than the limit/);
    const batch = await raw(gw, "POST", "/v1/rollouts", {
      body: JSON.stringify({ rollouts: Array.from({ length: 6 }, () => ({ input: 1 })) }),
    });
    assert.equal(batch.status, 413);
    assert.match(errorOf(batch.body).message, /^rollouts: at most 5 per request, got 6/);
    const page = await raw(gw, "GET", "/v1/rollouts?limit=11");
    assert.equal(page.status, 400);
    assert.match(errorOf(page.body).message, /^limit: at most 10/);
    assert.equal((await client.health()).seq, 0);
  }, { limits: { max_body_bytes: 4096, max_batch: 5, max_page: 10 } });
});

Deno.test("api: concurrent claims from several clients never hand one rollout to two", async () => {
  await withGateway(async (gw) => {
    const admin = new GatewayClient(gw.url, { apiKey: gw.adminKey });
    await admin.createRollouts(
      Array.from({ length: 50 }, (_, i) => ({ rollout_id: `r${i}`, input: i })),
    );
    const owner = new Map<string, number>();
    await Promise.all(Array.from({ length: 5 }, async (_, w) => {
      const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
      while (true) {
        const got = await client.claim({ worker: `w${w}`, limit: 2 });
        if (got.length === 0) return;
        for (const c of got) {
          assert.ok(!owner.has(c.rollout.rollout_id), `${c.rollout.rollout_id} claimed twice`);
          owner.set(c.rollout.rollout_id, w);
        }
      }
    }));
    assert.equal(owner.size, 50);
    assert.ok(new Set(owner.values()).size > 1, "several clients got work");
  });
});

Deno.test("api: the SSE stream delivers changes live and resumes from a seq", async () => {
  await withGateway(async (_gw, client) => {
    await client.createRollouts([{ rollout_id: "r", input: 1 }]);
    const stop = new AbortController();
    const seen: Change[] = [];
    const reader = (async () => {
      for await (const change of client.stream({ signal: stop.signal })) {
        seen.push(change);
        if (change.kind === "event" && change.type === "reward") stop.abort();
      }
    })();
    const [{ attempt }] = await client.claim({ worker: "w", limit: 1 });
    await client.registerModel({ name: "policy", version: 2 });
    await client.postEvents("r", attempt.attempt_id, [{ type: "reward", payload: { value: 1 } }]);
    await reader;
    assert.deepEqual(
      seen.map((c) =>
        c.kind === "event" ? `${c.type}:${c.status ?? ""}` : `model:${c.name}@${c.version}`
      ),
      ["status:queuing", "status:running", "model:policy@2", "reward:"],
    );
    // Resuming after the second change replays from there.
    const resumed: number[] = [];
    const stop2 = new AbortController();
    for await (const change of client.stream({ after: seen[1].seq, signal: stop2.signal })) {
      resumed.push(change.seq);
      if (resumed.length === 2) stop2.abort();
    }
    assert.deepEqual(resumed, [seen[2].seq, seen[3].seq]);
  }, { leaseSweepMs: 0 });
});

Deno.test("api: closing the gateway ends open streams", async () => {
  const gw = await startGateway({ leaseSweepMs: 0 });
  const res = await fetch(`${gw.url}/v1/stream`, {
    headers: { authorization: `Bearer ${gw.adminKey}` },
  });
  assert.equal(res.status, 200);
  assert.equal(res.headers.get("content-type"), "text/event-stream");
  const reading = res.text();
  await gw.close();
  assert.match(await reading, /^: reins gateway change feed/);
});

Deno.test("api: phase endpoints hold calls in update and drain in-flight ones", async () => {
  await withGateway(async (gw, client) => {
    assert.equal((await client.getPhase()).phase, "rollout");
    const release = await gw.phase.acquire();
    const drained = client.setPhase("update", { drain: true });
    let answered = false;
    drained.then(() => answered = true);
    await new Promise((r) => setTimeout(r, 50));
    assert.equal(answered, false, "the drain waits for the in-flight call");
    const held = gw.phase.acquire();
    assert.deepEqual(
      { ...(await client.getPhase()), since: 0 },
      { phase: "update", in_flight: 1, held: 1, since: 0 },
    );
    release();
    const snap = await drained;
    assert.equal(snap.in_flight, 0);
    await client.setPhase("rollout");
    (await held)();
    assert.deepEqual({ ...(await client.getPhase()), since: 0 }, {
      phase: "rollout",
      in_flight: 0,
      held: 0,
      since: 0,
    });
    const stuck = await gw.phase.acquire();
    const timeout = await raw(gw, "POST", "/v1/phase", {
      body: JSON.stringify({ phase: "update", drain: true, drain_timeout_ms: 30 }),
    });
    assert.equal(timeout.status, 504);
    assert.match(errorOf(timeout.body).message, /^drain_timeout_ms: 1 call\(s\) still in flight/);
    stuck();
  });
});

Deno.test("api: mounts serve sub-apps with the gateway's store", async () => {
  await withGateway(async (gw) => {
    const res = await fetch(`${gw.url}/proxy/ping`);
    assert.deepEqual(await res.json(), { kind: "sqlite" });
  }, {
    mounts: [{
      path: "/proxy",
      create: ({ store }) => new Hono().get("/ping", (c) => c.json({ kind: store.kind })),
    }],
  });
});

Deno.test("api: lease expiry over HTTP requeues the rollout", async () => {
  await withGateway(async (_gw, client) => {
    await client.createRollouts([{ rollout_id: "r", input: 1, config: { max_attempts: 2 } }]);
    await client.claim({ worker: "w", limit: 1, lease_ms: 100 });
    await new Promise((r) => setTimeout(r, 150));
    const changed = await client.expireLeases();
    assert.deepEqual(changed.map((r) => [r.rollout_id, r.status]), [["r", "requeuing"]]);
    assert.equal(changed[0].attempts[0].status, "lost");
  });
});

Deno.test("client: retries network errors and 502/503s without duplicating writes", async () => {
  await withGateway(async (gw) => {
    const forward = async (req: Request) => {
      const url = new URL(req.url);
      return await fetch(gw.url + url.pathname + url.search, {
        method: req.method,
        headers: req.headers,
        body: req.body,
      });
    };
    // A port nobody listens on yet: the first tries are refused, then a front comes up.
    const probe = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    const port = (probe.addr as Deno.NetAddr).port;
    probe.close();
    let n = 0;
    const client = new GatewayClient(`http://127.0.0.1:${port}`, {
      apiKey: gw.adminKey,
      retries: 8,
      backoffMs: 20,
    });
    const pending = client.createRollouts([{ input: 1 }]);
    await new Promise((r) => setTimeout(r, 60));
    // The front answers 502 then 503 (a restarting gateway behind a balancer), then forwards.
    const front = Deno.serve({ hostname: "127.0.0.1", port, onListen: () => {} }, (req) => {
      n++;
      if (n === 1) return new Response("bad gateway", { status: 502 });
      if (n === 2) return new Response("busy", { status: 503 });
      return forward(req);
    });
    try {
      const out = await pending;
      assert.equal(out.rollouts.length, 1);
      assert.equal(n, 3, "two refused answers, then the forwarded one");
      const direct = new GatewayClient(gw.url, { apiKey: gw.adminKey });
      assert.equal((await direct.listRollouts()).items.length, 1, "one rollout, not three");
      // 4xx answers are not retried.
      await assert.rejects(
        client.getRollout("nope"),
        (e: unknown) => e instanceof GatewayError && e.status === 404,
      );
      assert.equal(n, 4);
      // With retries exhausted, a network failure is a GatewayError with code "network".
      const dead = new GatewayClient("http://127.0.0.1:9", { retries: 1, backoffMs: 1 });
      await assert.rejects(
        dead.health(),
        (e: unknown) => e instanceof GatewayError && e.code === "network",
      );
    } finally {
      await front.shutdown();
    }
  });
});
