/**
 * `GatewayClient` with `keepAlive`: its calls go over kept connections through reins' own HTTP/1.1
 * client, and answer exactly as the `fetch` client's do (stored events, acks, errors naming the
 * field); a connection the gateway closed is replaced; network errors name the gateway; `close()`
 * leaves nothing open (the test sanitizers check it).
 */
import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import type { EventInput } from "../lib/schema.ts";
import { HttpError } from "../lib/util/error.ts";

const KEY = "ra_keepalive-test-admin-key";

const EVENTS: EventInput[] = [
  { type: "log", payload: { stream: "stdout", text: 'é ü \u2028 "quoted" \\ back' } },
  { type: "custom", payload: { name: "tool_call", data: { tool: "bash", ok: true } } },
  { type: "reward", payload: { value: 0.5, name: "pass" } },
];

/** What a client's calls come back with, made comparable across two rollouts. */
async function session(client: GatewayClient, rollout_id: string) {
  const created = await client.createRollouts([{ rollout_id, input: { q: "2+2" } }]);
  const [{ attempt }] = await client.claim({ worker: `w-${rollout_id}`, limit: 1 });
  const full = await client.postEvents(rollout_id, attempt.attempt_id, EVENTS);
  const acks = await client.appendEvents(rollout_id, attempt.attempt_id, [EVENTS[0]]);
  const listed = await client.listEvents(rollout_id);
  const missing = await client.postEvents("no-such-rollout", "a", [EVENTS[0]]).then(
    () => null,
    (e: unknown) => e,
  );
  // Ids, seqs, keys and times differ between the two rollouts; everything else must not.
  const strip = <T extends object>(e: T) =>
    Object.fromEntries(
      Object.entries(e).filter(([k]) =>
        !["seq", "rollout_id", "attempt_id", "created_at", "event_key"].includes(k)
      ),
    ) as Record<string, unknown>;
  return {
    created: created.created,
    status: created.rollouts[0].status,
    full: full.map(strip),
    acks: acks.map(strip),
    listed: listed.map(strip),
    missing: missing instanceof HttpError
      ? { status: missing.status, code: missing.code, field: missing.field }
      : missing,
  };
}

Deno.test("a keep-alive gateway client answers as the fetch client does, over one connection", async () => {
  const gw = await startGateway({ port: 0, adminKey: KEY });
  const kept = new GatewayClient(gw.url, { apiKey: KEY, keepAlive: true });
  try {
    const viaFetch = await session(new GatewayClient(gw.url, { apiKey: KEY }), "r-fetch");
    const viaKept = await session(kept, "r-kept");
    assert.deepEqual(viaKept, viaFetch);
    assert.deepEqual(viaKept.missing, { status: 404, code: "not_found", field: "rollout_id" });
    // The four posted events, after the claim's status events.
    assert.deepEqual(
      viaKept.listed.map((e) => e.type).filter((t) => t !== "status"),
      ["log", "custom", "reward", "log"],
    );
    // Seven calls one after the other: one connection.
    assert.equal(kept.connectionsOpened, 1);
    // Concurrent calls each take a connection of their own, then keep them.
    await Promise.all(Array.from({ length: 8 }, () => kept.health()));
    const afterBurst = kept.connectionsOpened;
    assert.ok(afterBurst >= 2 && afterBurst <= 9, `opened ${afterBurst}`);
    await Promise.all(Array.from({ length: 8 }, () => kept.health()));
    assert.equal(kept.connectionsOpened, afterBurst, "the burst's connections were kept");
  } finally {
    await kept.close();
    await gw.close();
  }
});

Deno.test("a kept connection the gateway closed for idleness is replaced without an error", async () => {
  const gw = await startGateway({ port: 0, adminKey: KEY, deadlines: { idle_timeout_ms: 150 } });
  const client = new GatewayClient(gw.url, { apiKey: KEY, keepAlive: true, retries: 0 });
  try {
    await client.createRollouts([{ rollout_id: "r1", input: 1 }]);
    await new Promise((resolve) => setTimeout(resolve, 500));
    // The gateway closed the idle connection; the client noticed and opens a new one.
    assert.equal((await client.getRollout("r1")).rollout_id, "r1");
    assert.equal(client.connectionsOpened, 2);
  } finally {
    await client.close();
    await gw.close();
  }
});

Deno.test("a keep-alive client's network errors name the gateway it could not reach", async () => {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  const client = new GatewayClient(`http://127.0.0.1:${port}`, {
    apiKey: KEY,
    keepAlive: true,
    retries: 0,
  });
  await assert.rejects(client.health(), (e: unknown) => {
    assert.ok(e instanceof HttpError);
    assert.equal(e.status, 0);
    assert.equal(e.code, "network");
    assert.match(
      e.message,
      new RegExp(`^gateway unreachable: gateway 127\\.0\\.0\\.1:${port}: cannot connect`),
    );
    return true;
  });
  await client.close();
});
