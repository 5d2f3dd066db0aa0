/**
 * Hostile input and hostile connections (issue #16's table): a never-ending body is cut at the
 * limit while it streams, half-sent requests are closed at their deadline, one token cannot
 * hold more than its share of requests, a client that leaves mid-body is a 499 (not a 500),
 * deep JSON is a 400, and a slow upstream is bounded by the CLI's flags.
 */
import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { spawnProxyGateway } from "./support/gateway_process.ts";
import { ADMIN_KEY, proxyChat, withSecurityFixture } from "./support/security.ts";
import { readAll, writeAll } from "./support/raw_conn.ts";
import { waitFor } from "./support/wait.ts";

const utf8 = new TextEncoder();

Deno.test("limits: a never-ending chunked body to /proxy is cut at the limit while it streams (413)", async () => {
  const limit = 1024 * 1024;
  await withSecurityFixture({ proxy: { max_body_bytes: limit } }, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const conn = await Deno.connect({ port: Number(new URL(fx.gateway.url).port) });
    await writeAll(
      conn,
      utf8.encode(
        `POST /proxy/${rolloutId}/${attemptId}/v1/chat/completions HTTP/1.1\r\n` +
          `host: x\r\nauthorization: Bearer ${token}\r\ncontent-type: application/json\r\n` +
          "transfer-encoding: chunked\r\n\r\n" + '7\r\n{"a":"x\r\n',
      ),
    );
    let answered = false;
    const answer = readAll(conn, () => (answered = true));
    const chunk = utf8.encode(`10000\r\n${"x".repeat(0x10000)}\r\n`);
    let sent = 0;
    // An endless body: keep sending until the server answers or drops the connection.
    while (!answered && sent < 64 * limit) {
      try {
        await writeAll(conn, chunk);
      } catch {
        break;
      }
      sent += chunk.length;
    }
    // The server answers and then ends the connection itself (readAll returns at its close).
    const text = await answer;
    try {
      conn.close();
    } catch { /* closed by the server */ }
    assert.match(text, /^HTTP\/1\.1 413/, text.slice(0, 200));
    assert.match(text, /body: more than the limit of 1048576 bytes/);
    assert.ok(sent < 8 * limit, `the body was cut near the limit (sent ${sent} bytes)`);
    assert.deepEqual(await fx.snapshot(), before, "nothing was recorded");
  });
});

Deno.test("limits: half-sent requests are closed at the header/body deadline", async () => {
  await withSecurityFixture({
    deadlines: { headers_timeout_ms: 300, body_timeout_ms: 300, idle_timeout_ms: 300 },
  }, async (fx) => {
    const port = Number(new URL(fx.gateway.url).port);
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const conns: Deno.Conn[] = [];
    for (let i = 0; i < 100; i++) {
      const conn = await Deno.connect({ port });
      const head = i % 2 === 0
        // Half a head: no blank line ever comes.
        ? "POST /v1/rollouts HTTP/1.1\r\nhost: x\r\n"
        // A whole head, half a body.
        : `POST /v1/rollouts/${rolloutId}/attempts/${attemptId}/events HTTP/1.1\r\n` +
          `host: x\r\nauthorization: Bearer ${token}\r\ncontent-length: 100000\r\n\r\n{"events":`;
      await writeAll(conn, utf8.encode(head));
      conns.push(conn);
    }
    const answers = await Promise.all(conns.map((conn) => readAll(conn)));
    for (const conn of conns) {
      try {
        conn.close();
      } catch { /* closed by the server */ }
    }
    // Every connection was closed by the server (readAll returned); half-heads got a 408.
    answers.forEach((text, i) => {
      if (i % 2 === 0) assert.match(text, /^HTTP\/1\.1 408/, `connection ${i}`);
      else assert.match(text, /^(HTTP\/1\.1 408|)/, `connection ${i}`);
    });
    await waitFor(
      async () => await fx.gateway.connections === 0,
      10_000,
      "every connection to close",
    );
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
  });
});

Deno.test("limits: one token may hold at most max_concurrent_per_token requests (429 above)", async () => {
  await withSecurityFixture(
    { deadlines: { max_concurrent_per_token: 2 }, chunkDelayMs: 100 },
    async (fx) => {
      const { rolloutId, attemptId, token } = await fx.claimOne();
      const slow = [
        proxyChat(fx, rolloutId, attemptId, token),
        proxyChat(fx, rolloutId, attemptId, token),
      ];
      // Wait until both are in flight at the policy.
      await waitFor(async () => await fx.upstream.calls.length >= 2, 10_000, "two calls in flight");
      const third = await proxyChat(fx, rolloutId, attemptId, token);
      assert.equal(third.status, 429);
      assert.match(JSON.stringify(third.body), /requests in flight \(at most 2\)/);
      for (const res of await Promise.all(slow)) assert.equal(res.status, 200);
      // The admin key is not held to the token's cap.
      assert.equal((await fx.admin.health()).ok, true);
      assert.equal((await proxyChat(fx, rolloutId, attemptId, token)).status, 200);
    },
  );
});

Deno.test("limits: a client that leaves mid-body is logged as a 499, not a 500 with a stack", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const warned: string[] = [];
    const errors: string[] = [];
    const { warn, error } = console;
    console.warn = (...args: unknown[]) => warned.push(args.join(" "));
    console.error = (...args: unknown[]) => errors.push(args.join(" "));
    try {
      const conn = await Deno.connect({ port: Number(new URL(fx.gateway.url).port) });
      await writeAll(
        conn,
        utf8.encode(
          `POST /v1/rollouts/${rolloutId}/attempts/${attemptId}/events HTTP/1.1\r\n` +
            `host: x\r\nauthorization: Bearer ${token}\r\ncontent-length: 5000\r\n\r\n{"events": [`,
        ),
      );
      await new Promise((r) => setTimeout(r, 200));
      conn.close();
      await waitFor(
        async () => await warned.some((w) => / 499 /.test(w)),
        10_000,
        "the 499 log line",
      );
    } finally {
      console.warn = warn;
      console.error = error;
    }
    assert.deepEqual(errors, [], "no error (and no stack) was logged");
    assert.match(
      warned.find((w) => / 499 /.test(w))!,
      /gateway: 499 POST \/v1\/rollouts\/.*\/events/,
    );
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
  });
});

Deno.test("limits: JSON nested 2 000 deep is a 400 naming the body, not a crash", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const deep = "[".repeat(2_000) + "]".repeat(2_000);
    const bodies: Array<[string, string, string]> = [
      [
        `/v1/rollouts/${rolloutId}/attempts/${attemptId}/events`,
        token,
        `{"events":[{"type":"custom","payload":{"name":"x","data":${deep}}}]}`,
      ],
      ["/v1/rollouts", ADMIN_KEY, `{"rollouts":[{"input":${deep}}]}`],
      [
        `/proxy/${rolloutId}/${attemptId}/v1/chat/completions`,
        token,
        `{"model":"policy","messages":[{"role":"user","content":"hi"}],"metadata":${deep}}`,
      ],
    ];
    for (const [path, key, body] of bodies) {
      const res = await fx.send("POST", path, key, body);
      assert.equal(res.status, 400, path);
      assert.match(JSON.stringify(res.body), /body: JSON nested deeper than 128 levels/, path);
    }
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
  });
});

Deno.test("limits: the gateway CLI bounds a slow upstream with --upstream-timeout-ms and --upstream-retries", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-limits-" });
  // A policy that never answers.
  const hung = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    (req) =>
      new Promise<Response>((resolve) => {
        req.signal.addEventListener("abort", () => resolve(new Response(null, { status: 499 })));
      }),
  );
  const key = "ra_limits_cli_key_0123";
  const gw = await spawnProxyGateway({
    db: `${dir}/x.db`,
    upstream: `http://127.0.0.1:${hung.addr.port}`,
    adminKey: key,
    flags: ["--no-ui", "--upstream-timeout-ms", "300", "--upstream-retries", "1"],
  });
  try {
    assert.match(gw.banner, /upstream timeout 300 ms per try, 1 retries/);
    const admin = new GatewayClient(gw.url, { apiKey: key });
    await admin.createRollouts([{ rollout_id: "slow", input: {} }]);
    const [{ attempt, token }] = await admin.claim({ worker: "w", limit: 1 });
    const res = await fetch(`${gw.url}/proxy/slow/${attempt.attempt_id}/v1/chat/completions`, {
      method: "POST",
      headers: { authorization: `Bearer ${token}`, "content-type": "application/json" },
      body: JSON.stringify({ model: "m", messages: [{ role: "user", content: "hi" }] }),
    });
    assert.equal(res.status, 504);
    assert.match(await res.text(), /timed out after 300 ms/);
    const [call] = await admin.listEvents("slow", { type: "model_request" });
    assert.ok(call && call.type === "model_request");
    assert.equal(call.payload.retry_count, 1);
    assert.equal(call.payload.http_status, 504);
  } finally {
    await gw.stop("SIGTERM");
    await hung.shutdown();
    await Deno.remove(dir, { recursive: true });
  }
});
