/**
 * The gateway client rides out a gateway outage (a restart on the same port and store) within
 * its outage window, with nothing lost or done twice; past the window, or with bounded retries,
 * it gives up with a clear error. Both ways of calling: `fetch`, and reins' own keep-alive client,
 * whose kept connection the restart leaves dead.
 */
import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";

const KEY = "ra_outage-test-admin-key";

for (const keepAlive of [false, true]) {
  Deno.test(`the gateway client rides out a gateway restart within its outage window (keepAlive: ${keepAlive})`, async () => {
    const dir = await Deno.makeTempDir();
    const db = `${dir}/gateway.db`;
    let gw = await startGateway({ db, port: 0, adminKey: KEY });
    const port = Number(new URL(gw.url).port);
    const client = new GatewayClient(gw.url, { apiKey: KEY, outageWindowMs: 20_000, keepAlive });
    try {
      await client.createRollouts([{ rollout_id: "r1", input: 1 }]);
      await gw.close();
      // Down for 1.5 s, then back on the same port and store.
      const back = new Promise<void>((resolve) =>
        setTimeout(async () => {
          gw = await startGateway({ db, port, adminKey: KEY });
          resolve();
        }, 1_500)
      );
      const t0 = performance.now();
      // Issued while the gateway is down: retried with backoff until it answers.
      await client.createRollouts([{ rollout_id: "r2", input: 2 }]);
      const waited = performance.now() - t0;
      await back;
      assert.ok(waited >= 1_000, `answered only once the gateway was back (${waited} ms)`);
      const ids = (await client.listRollouts({ limit: 10 })).items.map((r) => r.rollout_id).sort();
      assert.deepEqual(ids, ["r1", "r2"]);

      // Bounded retries (or a window that has passed): a clear error, status 0.
      await gw.close();
      const strict = new GatewayClient(gw.url, {
        apiKey: KEY,
        retries: 1,
        backoffMs: 10,
        keepAlive,
      });
      await assert.rejects(
        strict.getRollout("r1"),
        (e: unknown) => (e as { status?: number }).status === 0 && /unreachable/.test(String(e)),
      );
      const short = new GatewayClient(gw.url, {
        apiKey: KEY,
        outageWindowMs: 300,
        backoffMs: 20,
        keepAlive,
      });
      const s0 = performance.now();
      await assert.rejects(short.getRollout("r1"), /unreachable/);
      assert.ok(performance.now() - s0 >= 300, "kept trying for the whole window");
      if (keepAlive) {
        // The first connection died with the first gateway: the calls after it opened another.
        assert.ok(client.connectionsOpened >= 2, `opened ${client.connectionsOpened}`);
      }
    } finally {
      await client.close();
      await gw.close().catch(() => undefined);
      await Deno.remove(dir, { recursive: true });
    }
  });
}
