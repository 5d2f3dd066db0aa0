/**
 * The upstream pool on its own: backoff bounds and jitter, sticky routing, the per-try timeout
 * renewed by streamed chunks, and no retry once bytes reached the harness.
 */
import assert from "node:assert/strict";
import { PoolFailure, UpstreamError, UpstreamPool } from "../lib/proxy/upstreams/pool.ts";

const base = { timeout_ms: 200, max_retries: 3, backoff_base_ms: 100, backoff_max_ms: 1_000 };

Deno.test("pool: exponential backoff with jitter stays within [half, full] of the capped step", () => {
  const low = new UpstreamPool({ ...base, endpoints: ["http://a"], random: () => 0 });
  const high = new UpstreamPool({ ...base, endpoints: ["http://a"], random: () => 0.999999 });
  assert.deepEqual([1, 2, 3, 4, 5].map((r) => low.backoffMs(r)), [50, 100, 200, 400, 500]);
  assert.deepEqual([1, 2, 3, 4, 5].map((r) => Math.round(high.backoffMs(r))), [
    100,
    200,
    400,
    800,
    1000,
  ]);
  assert.equal(low.backoffMs(1, 0.3), 300, "Retry-After is honoured (capped by backoff_max_ms)");
  assert.equal(low.backoffMs(1, 30), 1000);
});

Deno.test("pool: sticky endpoint per rollout, spread over rollouts, next endpoint on retry", () => {
  const endpoints = ["http://a", "http://b", "http://c"];
  const pool = new UpstreamPool({ ...base, endpoints });
  const seen = new Set<string>();
  for (let i = 0; i < 60; i++) {
    const first = pool.endpointFor(`rollout-${i}`);
    assert.equal(pool.endpointFor(`rollout-${i}`), first);
    const next = pool.endpointFor(`rollout-${i}`, 1);
    assert.equal(endpoints.indexOf(next), (endpoints.indexOf(first) + 1) % 3);
    seen.add(first);
  }
  assert.equal(seen.size, 3);
  assert.throws(() => new UpstreamPool({ ...base, endpoints: [] }), /endpoints/);
});

Deno.test("pool: retries retryable failures, not 4xx, and never after commit; the timeout is renewed by chunks", async () => {
  const pool = new UpstreamPool({
    ...base,
    endpoints: ["http://a"],
    backoff_base_ms: 1,
    backoff_max_ms: 2,
  });
  const signal = new AbortController().signal;
  let tries = 0;
  const ok = await pool.run("r", signal, () => {
    tries++;
    if (tries < 3) throw new UpstreamError("busy", { status: 502, retryable: true });
    return Promise.resolve("done");
  });
  assert.deepEqual({ value: ok.value, retries: ok.retries }, { value: "done", retries: 2 });

  tries = 0;
  const bad = await pool.run("r", signal, () => {
    tries++;
    throw new UpstreamError("bad request", { status: 400, retryable: false });
  }).catch((e) => e);
  assert.ok(bad instanceof PoolFailure);
  assert.equal(bad.failure.status, 400);
  assert.equal(tries, 1);

  tries = 0;
  const committed = await pool.run("r", signal, (ctx) => {
    tries++;
    ctx.commit();
    throw new UpstreamError("broke mid-stream", { status: 502, retryable: true });
  }).catch((e) => e);
  assert.ok(committed instanceof PoolFailure);
  assert.equal(tries, 1, "no retry once the harness saw bytes");

  // Chunks every 50 ms for 600 ms under a 400 ms timeout: never times out.
  const slow = new UpstreamPool({ ...base, timeout_ms: 400, endpoints: ["http://a"] });
  const streamed = await slow.run("r", signal, async (ctx) => {
    for (let i = 0; i < 12; i++) {
      await new Promise((r) => setTimeout(r, 50));
      if (ctx.signal.aborted) throw new Error("timed out");
      ctx.touch();
    }
    return "streamed";
  });
  assert.equal(streamed.value, "streamed");

  // A silent try is aborted after the timeout, then retried (and times out again) until
  // max_retries.
  const quick = new UpstreamPool({
    ...base,
    timeout_ms: 100,
    max_retries: 2,
    backoff_base_ms: 1,
    backoff_max_ms: 2,
    endpoints: ["http://a"],
  });
  tries = 0;
  const t0 = performance.now();
  const silent = await quick.run("r", signal, (ctx) => {
    tries++;
    return new Promise((_, reject) =>
      ctx.signal.addEventListener("abort", () => reject(ctx.signal.reason))
    );
  }).catch((e) => e);
  assert.ok(silent instanceof PoolFailure);
  assert.equal(silent.failure.status, 504);
  assert.equal(tries, 3);
  assert.ok(performance.now() - t0 >= 3 * 100);
});

Deno.test("pool: the caller's abort stops tries and backoff at once", async () => {
  const pool = new UpstreamPool({
    ...base,
    endpoints: ["http://a"],
    backoff_base_ms: 10_000,
    backoff_max_ms: 10_000,
  });
  const controller = new AbortController();
  const t0 = performance.now();
  const run = pool.run("r", controller.signal, () => {
    throw new UpstreamError("busy", { status: 503, retryable: true });
  });
  setTimeout(() => controller.abort(new DOMException("client went away", "AbortError")), 20);
  const err = await run.catch((e) => e);
  assert.equal((err as DOMException).name, "AbortError");
  assert.ok(performance.now() - t0 < 2_000, "did not sit out the 10 s backoff");
});
