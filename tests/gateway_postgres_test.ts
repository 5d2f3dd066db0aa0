/**
 * The PostgreSQL backend passes the store conformance suite against a throwaway Debian
 * PostgreSQL cluster (one per file); a second handle is a second connection pool, as a second
 * gateway process would have. Two gateways serving one database share the work over HTTP.
 */
import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { openPostgresStore } from "../lib/gateway/postgres_store.ts";
import { startGateway } from "../lib/gateway/server.ts";
import type { Store } from "../lib/gateway/store.ts";
import type { Change } from "../lib/schema.ts";
import { startPostgres } from "./support/postgres.ts";
import { runStoreConformance, type StoreFactory } from "./support/store_conformance.ts";
import { runClaimAndOrderConformance } from "./support/store_claim_order_cases.ts";

Deno.test("postgres store: conformance, and two gateways on one database", async (t) => {
  const pg = await startPostgres();
  const urls = new WeakMap<Store, string>();
  try {
    const factory: StoreFactory = {
      async open() {
        const url = await pg.newDatabase();
        const store = await openPostgresStore(url);
        urls.set(store, url);
        return store;
      },
      async reopen(store) {
        const other = await openPostgresStore(urls.get(store)!);
        urls.set(other, urls.get(store)!);
        return other;
      },
    };
    await runStoreConformance(t, factory);
    await runClaimAndOrderConformance(t, factory);

    await t.step("two gateways share claims, tokens and the change feed", async () => {
      const url = await pg.newDatabase();
      const adminKey = "ra_two_gateways_key";
      const [a, b] = await Promise.all([
        startGateway({ postgres: url, adminKey, leaseSweepMs: 0 }),
        startGateway({ postgres: url, adminKey, leaseSweepMs: 0 }),
      ]);
      try {
        assert.equal(a.secret, b.secret, "one token secret per database");
        const ca = new GatewayClient(a.url, { apiKey: adminKey });
        const cb = new GatewayClient(b.url, { apiKey: adminKey });
        assert.equal((await ca.health()).store, "postgres");
        await ca.createRollouts(
          Array.from({ length: 30 }, (_, i) => ({ rollout_id: `r${i}`, input: i })),
        );
        const owner = new Map<string, string>();
        await Promise.all([ca, cb, ca, cb].map(async (client, w) => {
          while (true) {
            const got = await client.claim({ worker: `w${w}`, limit: 2 });
            if (got.length === 0) return;
            for (const c of got) {
              assert.ok(!owner.has(c.rollout.rollout_id), `${c.rollout.rollout_id} claimed twice`);
              owner.set(c.rollout.rollout_id, c.token);
            }
          }
        }));
        assert.equal(owner.size, 30);
        // A token issued through gateway A writes through gateway B; A's feed sees it. The
        // reward comes from the admin key (a token may not post one, on either gateway).
        const stop = new AbortController();
        const seen: Change[] = [];
        const after = (await ca.health()).seq;
        const feed = (async () => {
          for await (const change of ca.stream({ after, signal: stop.signal })) {
            seen.push(change);
            if (change.kind === "event" && change.type === "reward") stop.abort();
          }
        })();
        const rollout = await cb.getRollout("r0");
        const aid = rollout.attempts[0].attempt_id;
        const harness = new GatewayClient(b.url, { apiKey: owner.get("r0")!, retries: 0 });
        await harness.postEvents("r0", aid, [
          { type: "custom", payload: { name: "progress", data: { step: 1 } } },
        ]);
        await assert.rejects(
          harness.postEvents("r0", aid, [{ type: "reward", payload: { value: 1 } }]),
          (err: { status?: number }) => err.status === 403,
        );
        await cb.postEvents("r0", aid, [{ type: "reward", payload: { value: 0.5 } }]);
        await feed;
        assert.deepEqual(
          seen.map((c) => c.kind === "event" && [c.rollout_id, c.type]),
          [["r0", "custom"], ["r0", "reward"]],
        );
        assert.equal((await ca.getRollout("r0")).reward, 0.5);
      } finally {
        await Promise.all([a.close(), b.close()]);
      }
    });
  } finally {
    await pg.stop();
  }
});
