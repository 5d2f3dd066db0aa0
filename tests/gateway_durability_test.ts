/**
 * Durability: a gateway process is killed with SIGKILL in the middle of a stream of writes;
 * restarted on the same SQLite file, it still has every write it had acknowledged.
 */
import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import type { EventInput, RolloutEvent } from "../lib/schema.ts";
import { spawnKeyFileGateway } from "./support/gateway_process.ts";

const spawnGateway = async (db: string, keyFile: string) => {
  const gw = await spawnKeyFileGateway(["--db", db], keyFile);
  assert.match(gw.banner, /admin key: file /);
  assert.doesNotMatch(gw.banner, /ra_[A-Za-z0-9_-]{20,}/, "the admin key is not printed");
  return gw;
};

Deno.test("durability: every acknowledged write survives SIGKILL of the gateway", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-gw-durable-" });
  const db = `${dir}/run.db`;
  const keyFile = `${dir}/admin.key`;
  try {
    const first = await spawnGateway(db, keyFile);
    const key = (await Deno.readTextFile(keyFile)).trim();
    const client = new GatewayClient(first.url, { apiKey: key, retries: 0, timeoutMs: 5_000 });
    await client.createRollouts([{
      rollout_id: "main",
      input: "task",
      config: { max_attempts: 3 },
    }]);
    const [{ attempt, token: firstToken }] = await client.claim({ worker: "w", limit: 1 });

    const ackedRollouts = new Set<string>();
    const ackedEvents = new Map<string, RolloutEvent>();
    let killed = false;
    const prompt = Array.from({ length: 2_000 }, (_, i) => i % 50_000);
    const writer = async (w: number) => {
      for (let i = 0; !killed; i++) {
        try {
          if (i % 3 === 0) {
            const id = `c-${w}-${i}`;
            await client.createRollouts([{ rollout_id: id, input: { w, i } }]);
            ackedRollouts.add(id);
          } else {
            const events: EventInput[] = [
              { type: "reward", event_key: `rw-${w}-${i}`, payload: { value: i } },
              {
                type: "model_request",
                event_key: `mr-${w}-${i}`,
                payload: {
                  flavor: "generate",
                  prompt_token_ids: [...prompt, w, i],
                  response_token_ids: [w, i, 7],
                  response_logprobs: [-0.25, -0.5, -1],
                  policy_version: i,
                },
              },
            ];
            const stored = await client.postEvents("main", attempt.attempt_id, events);
            for (const e of stored) ackedEvents.set(e.event_key!, e);
          }
        } catch {
          if (killed) return;
          throw new Error("a write failed before the kill");
        }
      }
    };
    const writers = Array.from({ length: 4 }, (_, w) => writer(w));
    // Kill once a good number of writes were acknowledged, while the writers keep going.
    while (ackedEvents.size + ackedRollouts.size < 150) await new Promise((r) => setTimeout(r, 10));
    killed = true;
    const status = await first.stop("SIGKILL");
    assert.equal(status.signal, "SIGKILL");
    await Promise.all(writers);
    assert.ok(ackedEvents.size > 0 && ackedRollouts.size > 0);

    const second = await spawnGateway(db, keyFile);
    try {
      const again = new GatewayClient(second.url, { apiKey: key, retries: 0 });
      for (const id of ackedRollouts) {
        assert.equal((await again.getRollout(id)).rollout_id, id, `rollout ${id} survived`);
      }
      const events = await again.listEvents("main", { type: ["reward", "model_request"] });
      const byKey = new Map(events.map((e) => [e.event_key!, e]));
      for (const [eventKey, acked] of ackedEvents) {
        assert.deepEqual(byKey.get(eventKey), acked, `event ${eventKey} survived intact`);
      }
      // Batches are atomic: a model call is never stored without the reward posted with it.
      for (const e of events) {
        const [kind, w, i] = e.event_key!.split("-");
        const partner = `${kind === "rw" ? "mr" : "rw"}-${w}-${i}`;
        assert.ok(byKey.has(partner), `${e.event_key} stored with its batch partner`);
      }
      // The capability token of the running attempt still works, and seq keeps increasing.
      const token = await again.attemptToken("main", attempt.attempt_id);
      assert.equal(token, firstToken, "the token secret is kept in the database");
      const [after] = await again.postEvents("main", attempt.attempt_id, [
        { type: "log", payload: { stream: "system", text: "after restart" } },
      ], { token });
      assert.ok(after.seq > Math.max(...events.map((e) => e.seq)));
    } finally {
      const status = await second.stop("SIGTERM");
      assert.equal(status.success, true, "SIGTERM shuts the gateway down cleanly");
    }
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
