/**
 * Reward integrity at the store (#16 items 2 and 3), on SQLite and PostgreSQL: the red-team
 * rows that the store itself refuses, each asserting the refusal and that nothing changed.
 *
 * | attack | store's answer |
 * | --- | --- |
 * | a capability token posts a reward for its own running attempt | 403, nothing stored |
 * | the token takes the controller's key `reins:reward:1` first | 403; the controller's reward then stands |
 * | the token of a succeeded attempt posts a reward | 403; reward unchanged |
 * | the token of a lost attempt posts while attempt 2 runs | 403 (reward) / 409 (other events) |
 * | a late reward for a superseded or lost attempt (any credential) | stored as an event, never sets `rollout.reward` |
 * | a retried `event_key` with a different payload, type or attempt | 409 naming the key; the first event stands |
 *
 * And what must keep holding: one compare-and-swap winner among concurrent transitions, no
 * rollout claimed twice by 20 claimers over 200 rollouts (one and two gateway processes),
 * and a claim racing a stale reward never leaves that reward on the rollout. (Capability
 * tokens reach the store through the gateway app, which passes `credential: "capability"`;
 * the app's wiring is tested with the HTTP credential tests.)
 */
import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import { openSqliteStore, type SqliteStore } from "../lib/gateway/sqlite_store.ts";
import { type Store, StoreError } from "../lib/gateway/store.ts";
import type { Credential, EventInput } from "../lib/schema.ts";
import { spawnKeyFileGateway } from "./support/gateway_process.ts";
import { startPostgres } from "./support/postgres.ts";
import { postgresStoreFactory } from "./support/store_conformance.ts";

interface Backend {
  open(): Promise<Store>;
  reopen(store: Store): Promise<Store>;
}

async function rejectsWith(p: Promise<unknown>, status: number, message: RegExp): Promise<void> {
  await assert.rejects(p, (err: unknown) => {
    assert.ok(err instanceof StoreError, `expected a StoreError, got ${err}`);
    assert.equal(err.status, status, err.message);
    assert.match(err.message, message);
    return true;
  });
}

const reward = (value: number, event_key?: string): EventInput => ({
  type: "reward",
  ...(event_key === undefined ? {} : { event_key }),
  payload: { value },
});

/** Everything a refused request could have changed. */
async function snapshot(store: Store, id: string) {
  return {
    rollout: await store.getRollout(id),
    events: await store.listEvents(id),
    seq: await store.lastSeq(),
  };
}

async function claimOne(store: Store, id: string, max_attempts = 1, lease_ms = 60_000) {
  await store.createRollouts([{ rollout_id: id, input: id, config: { max_attempts } }]);
  const [claimed] = await store.claimRollouts({
    worker: "ctl",
    limit: 1,
    lease_ms,
    labels: {},
    claim_key: `k-${id}`,
  });
  assert.equal(claimed.rollout.rollout_id, id);
  return claimed;
}

function storeAttacks(t: Deno.TestContext, backend: Backend) {
  const step = (name: string, fn: (store: Store) => Promise<void>) =>
    t.step(name, async () => {
      const store = await backend.open();
      try {
        await fn(store);
      } finally {
        await store.close();
      }
    });
  const as = (credential: Credential) => ({ credential });

  return (async () => {
    await step("a capability token cannot post a reward: 403, nothing stored", async (store) => {
      const { attempt } = await claimOne(store, "r");
      const before = await snapshot(store, "r");
      await rejectsWith(
        store.appendEvents("r", attempt.attempt_id, [
          { type: "log", payload: { stream: "stdout", text: "solved it" } },
          reward(1),
        ], as("capability")),
        403,
        /^events\[1\]\.type: a capability token cannot post rewards/,
      );
      assert.deepEqual(await snapshot(store, "r"), before);
      // Its other events are welcome while its attempt runs.
      const [log] = await store.appendEvents("r", attempt.attempt_id, [
        { type: "log", payload: { stream: "stdout", text: "working" } },
      ], as("capability"));
      assert.equal(log.type, "log");
    });

    await step(
      "no credential squats another's key: the token only under agent:, the reporter not there",
      async (store) => {
        const { attempt } = await claimOne(store, "r");
        const before = await snapshot(store, "r");
        const custom = (event_key: string): EventInput => ({
          type: "custom",
          event_key,
          payload: { name: "x", data: 1 },
        });
        await rejectsWith(
          store.appendEvents("r", attempt.attempt_id, [custom("reward:1")], as("capability")),
          403,
          /^events\[0\]\.event_key: a capability token's keys must start with 'agent:'/,
        );
        await rejectsWith(
          store.appendEvents("r", attempt.attempt_id, [custom("agent:x")], as("reporter")),
          403,
          /^events\[0\]\.event_key: 'agent:x' is in the agent's namespace/,
        );
        assert.deepEqual(await snapshot(store, "r"), before);
        await store.appendEvents("r", attempt.attempt_id, [custom("agent:x")], as("capability"));
        await store.appendEvents("r", attempt.attempt_id, [reward(1, "reward:1")], as("reporter"));
        assert.equal((await store.getRollout("r"))!.reward, 1);
      },
    );

    await step(
      "the token cannot take the controller's reward key first; the verified reward stands",
      async (store) => {
        const { attempt } = await claimOne(store, "r");
        const before = await snapshot(store, "r");
        await rejectsWith(
          store.appendEvents("r", attempt.attempt_id, [{
            type: "custom",
            event_key: "reins:reward:1",
            payload: { name: "reward", data: { value: 1 } },
          }], as("capability")),
          403,
          /^events\[0\]\.event_key: 'reins:reward:1' is in the namespace reserved for reins/,
        );
        assert.deepEqual(await snapshot(store, "r"), before);
        await store.appendEvents("r", attempt.attempt_id, [reward(0, "reins:reward:1")]);
        const r = (await store.getRollout("r"))!;
        assert.equal(r.reward, 0);
        assert.equal(r.reward_attempt_id, attempt.attempt_id);
        assert.equal(r.reward_credential, "admin");
      },
    );

    await step("a succeeded attempt's token cannot overwrite the reward", async (store) => {
      const { attempt } = await claimOne(store, "r");
      await store.appendEvents("r", attempt.attempt_id, [reward(0, "reins:reward:1")]);
      await store.transition("r", { to: "succeeded", attempt_id: attempt.attempt_id });
      const before = await snapshot(store, "r");
      await rejectsWith(
        store.appendEvents("r", attempt.attempt_id, [reward(999)], as("capability")),
        403,
        /cannot post rewards/,
      );
      await rejectsWith(
        store.appendEvents("r", attempt.attempt_id, [{
          type: "custom",
          payload: { name: "note", data: "late" },
        }], as("capability")),
        409,
        /^attempt_id: attempt '.*' is succeeded, not running; its token cannot post events/,
      );
      assert.deepEqual(await snapshot(store, "r"), before);
      assert.equal(before.rollout!.reward, 0);
    });

    await step(
      "a lost attempt cannot set the reward while attempt 2 runs, nor after",
      async (store) => {
        const now = Date.now();
        await store.createRollouts([{ rollout_id: "r", input: 1, config: { max_attempts: 2 } }]);
        const [first] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 1_000, now });
        await store.expireLeases(now + 5_000);
        const [second] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
        assert.equal(second.attempt.index, 2);
        const a1 = first.attempt.attempt_id;
        const before = await snapshot(store, "r");
        await rejectsWith(
          store.appendEvents("r", a1, [reward(-7)], as("capability")),
          403,
          /cannot post rewards/,
        );
        await rejectsWith(
          store.appendEvents("r", a1, [{
            type: "log",
            payload: { stream: "stdout", text: "still here" },
          }], as("capability")),
          409,
          /^attempt_id: attempt '.*' is no longer the current attempt of rollout 'r'/,
        );
        assert.deepEqual(await snapshot(store, "r"), before);
        // A late report for attempt 1 by a trusted credential is kept, but does not count.
        for (const credential of ["admin", "reporter"] as const) {
          const [late] = await store.appendEvents("r", a1, [reward(-7)], as(credential));
          assert.equal(late.attempt_id, a1);
        }
        assert.equal((await store.getRollout("r"))!.reward, null);
        await store.appendEvents("r", second.attempt.attempt_id, [reward(0.5)], as("reporter"));
        await store.appendEvents("r", a1, [reward(-9)]);
        const r = (await store.getRollout("r"))!;
        assert.equal(r.reward, 0.5);
        assert.equal(r.reward_attempt_id, second.attempt.attempt_id);
        assert.equal(r.reward_credential, "reporter");
        assert.equal((await store.listEvents("r", { type: "reward" })).length, 4);
      },
    );

    await step(
      "a reward for an attempt given up as lost never counts, even as the last",
      async (store) => {
        const now = Date.now();
        await store.createRollouts([{ rollout_id: "r", input: 1 }]);
        const [only] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 1_000, now });
        const [expired] = await store.expireLeases(now + 5_000);
        assert.equal(expired.status, "failed");
        await store.appendEvents("r", only.attempt.attempt_id, [reward(1)]);
        const r = (await store.getRollout("r"))!;
        assert.equal(r.reward, null);
        assert.equal(r.reward_attempt_id, null);
      },
    );

    await step("a new attempt starts without the previous attempt's reward", async (store) => {
      const { attempt } = await claimOne(store, "r", 2);
      await store.appendEvents("r", attempt.attempt_id, [reward(0.25)]);
      assert.equal((await store.getRollout("r"))!.reward, 0.25);
      await store.transition("r", { to: "requeuing", attempt_id: attempt.attempt_id });
      assert.equal((await store.getRollout("r"))!.reward, 0.25, "kept while it is current");
      const [next] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
      assert.equal(next.rollout.reward, null);
      assert.equal(next.rollout.reward_attempt_id, null);
      assert.equal(next.rollout.reward_credential, null);
    });

    await step(
      "a retried event_key with a different event is a 409 naming the key",
      async (store) => {
        const { rollout, attempt } = await claimOne(store, "r", 2);
        const [first] = await store.appendEvents("r", attempt.attempt_id, [
          reward(0, "reins:reward:1"),
        ]);
        // The same event again (a retry whose answer was lost): the stored event comes back.
        const [again] = await store.appendEvents("r", attempt.attempt_id, [
          reward(0, "reins:reward:1"),
        ]);
        assert.deepEqual(again, first);
        const before = await snapshot(store, "r");
        await rejectsWith(
          store.appendEvents("r", attempt.attempt_id, [reward(1, "reins:reward:1")]),
          409,
          /^events\[0\]\.event_key: 'reins:reward:1' is already taken \(seq \d+\) by an event with a different payload/,
        );
        await rejectsWith(
          store.appendEvents("r", attempt.attempt_id, [
            { type: "log", event_key: "log:a", payload: { stream: "stdout", text: "a" } },
            { type: "log", event_key: "log:a", payload: { stream: "stdout", text: "b" } },
          ]),
          409,
          /^events\[1\]\.event_key: 'log:a' is already taken earlier in this post/,
        );
        assert.deepEqual(await snapshot(store, "r"), before);
        // Another attempt reusing the key is a different event too.
        await store.transition("r", { to: "requeuing", expected_version: rollout.version });
        const [next] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
        const beforeNext = await snapshot(store, "r");
        await rejectsWith(
          store.appendEvents("r", next.attempt.attempt_id, [reward(0, "reins:reward:1")]),
          409,
          /different attempt \('a1-/,
        );
        assert.deepEqual(await snapshot(store, "r"), beforeNext);
      },
    );

    await step(
      "a claim racing a stale reward never leaves that reward on the rollout",
      async (store) => {
        const other = await backend.reopen(store);
        try {
          for (let i = 0; i < 20; i++) {
            const id = `race${i}`;
            const { attempt } = await claimOne(store, id, 2);
            await store.transition(id, { to: "requeuing", attempt_id: attempt.attempt_id });
            const [claimed] = await Promise.all([
              store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 }),
              other.appendEvents(id, attempt.attempt_id, [reward(1)]),
            ]);
            assert.equal(claimed[0].rollout.rollout_id, id);
            const r = (await store.getRollout(id))!;
            assert.equal(r.reward, null, `${id}: attempt 1's reward outlived attempt 2's claim`);
            await store.transition(id, { to: "cancelled" });
          }
        } finally {
          await other.close();
        }
      },
    );

    await step("one compare-and-swap winner among concurrent transitions", async (store) => {
      const handles = [store, await backend.reopen(store), await backend.reopen(store)];
      try {
        for (let i = 0; i < 5; i++) {
          const { rollout } = await claimOne(store, `cas${i}`);
          const outcomes = await Promise.allSettled(
            Array.from({ length: 12 }, (_, j) =>
              handles[j % handles.length].transition(`cas${i}`, {
                to: (["succeeded", "failed", "cancelled"] as const)[j % 3],
                expected_version: rollout.version,
              })),
          );
          // One transition applies; requests for the status it set are answered as retries of
          // it (a no-op); every other one is a 409.
          const after = (await store.getRollout(`cas${i}`))!;
          assert.equal(after.version, rollout.version + 1, `cas${i}: applied once`);
          for (const o of outcomes) {
            if (o.status === "fulfilled") {
              assert.equal(o.value.status, after.status);
              assert.equal(o.value.version, after.version);
            } else {
              assert.ok(
                o.reason instanceof StoreError && o.reason.status === 409,
                String(o.reason),
              );
            }
          }
          assert.equal(
            outcomes.filter((o) => o.status === "rejected").length,
            8,
            `cas${i}: the 8 requests for the two other statuses lose`,
          );
          const moves = (await store.listEvents(`cas${i}`, { type: "status" })).filter((e) =>
            e.type === "status" && e.payload.from === "running"
          );
          assert.equal(moves.length, 1, `cas${i}: one status change recorded`);
        }
      } finally {
        for (const h of handles.slice(1)) await h.close();
      }
    });
  })();
}

Deno.test("security (store): reward integrity and idempotency on SQLite", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "reins-sec-store-" });
  let n = 0;
  try {
    await storeAttacks(t, {
      open: () => Promise.resolve(openSqliteStore(`${dir}/s${n++}.db`)),
      reopen: (store) => Promise.resolve(openSqliteStore((store as SqliteStore).path)),
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("security (store): reward integrity and idempotency on PostgreSQL", async (t) => {
  const pg = await startPostgres();
  try {
    await storeAttacks(t, postgresStoreFactory(pg));
  } finally {
    await pg.stop();
  }
});

Deno.test("security (HTTP): event-key conflicts and late rewards through the gateway", async () => {
  const gw = await startGateway({ db: ":memory:", leaseSweepMs: 0 });
  try {
    const admin = new GatewayClient(gw.url, { apiKey: gw.adminKey, retries: 0 });
    await admin.createRollouts([{ rollout_id: "r", input: 1, config: { max_attempts: 2 } }]);
    const [first] = await admin.claim({ worker: "w", limit: 1 });
    const a1 = first.attempt.attempt_id;
    const post = (aid: string, events: EventInput[]) =>
      fetch(`${gw.url}/v1/rollouts/r/attempts/${aid}/events`, {
        method: "POST",
        headers: { authorization: `Bearer ${gw.adminKey}`, "content-type": "application/json" },
        body: JSON.stringify({ events }),
      });
    assert.equal((await post(a1, [reward(0.5, "reins:reward:1")])).status, 200);
    const before = {
      rollout: await admin.getRollout("r"),
      events: await admin.listEvents("r"),
    };
    const res = await post(a1, [reward(1, "reins:reward:1")]);
    assert.equal(res.status, 409);
    const body = await res.json();
    assert.equal(body.error.code, "conflict");
    assert.match(body.error.message, /^events\[0\]\.event_key: 'reins:reward:1' is already taken/);
    assert.deepEqual(
      { rollout: await admin.getRollout("r"), events: await admin.listEvents("r") },
      before,
    );
    // Attempt 2 runs; a late report for attempt 1 is kept as an event and does not count.
    await admin.transition("r", { to: "requeuing", attempt_id: a1 });
    const [second] = await admin.claim({ worker: "w", limit: 1 });
    assert.equal((await post(second.attempt.attempt_id, [reward(0.25)])).status, 200);
    const late = await post(a1, [reward(-7)]);
    assert.equal(late.status, 200);
    const r = await admin.getRollout("r");
    assert.equal(r.reward, 0.25);
    assert.equal(r.reward_attempt_id, second.attempt.attempt_id);
  } finally {
    await gw.close();
  }
});

/** 20 claimers over 200 rollouts through `urls` (one or more gateway processes). */
async function claimStorm(urls: string[], adminKey: string): Promise<void> {
  const clients = urls.map((url) => new GatewayClient(url, { apiKey: adminKey }));
  await clients[0].createRollouts(
    Array.from({ length: 200 }, (_, i) => ({ rollout_id: `r${i}`, input: i })),
  );
  const owner = new Map<string, string>();
  await Promise.all(Array.from({ length: 20 }, async (_, w) => {
    const client = clients[w % clients.length];
    while (true) {
      const got = await client.claim({ worker: `w${w}`, limit: 3 });
      if (got.length === 0) return;
      for (const c of got) {
        assert.ok(!owner.has(c.rollout.rollout_id), `${c.rollout.rollout_id} claimed twice`);
        owner.set(c.rollout.rollout_id, `w${w}`);
      }
    }
  }));
  assert.equal(owner.size, 200);
  const { items } = await clients[0].listRollouts({ limit: 1000 });
  assert.equal(items.length, 200);
  for (const r of items) {
    assert.equal(r.attempts.length, 1, `${r.rollout_id} has one attempt`);
    assert.equal(r.attempts[0].worker, owner.get(r.rollout_id));
  }
}

Deno.test("security (HTTP): no double claims, 200 rollouts × 20 claimers, one and two gateway processes", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "reins-sec-claims-" });
  const keyFile = `${dir}/admin.key`;
  const spawn = (...store: string[]) => spawnKeyFileGateway(store, keyFile);
  try {
    await t.step("one gateway process", async () => {
      const gw = await spawn("--db", `${dir}/one.db`);
      try {
        await claimStorm([gw.url], (await Deno.readTextFile(keyFile)).trim());
      } finally {
        await gw.stop("SIGTERM");
      }
    });
    await t.step("two gateway processes on one SQLite file", async () => {
      const a = await spawn("--db", `${dir}/two.db`);
      const b = await spawn("--db", `${dir}/two.db`);
      try {
        await claimStorm([a.url, b.url], (await Deno.readTextFile(keyFile)).trim());
      } finally {
        await Promise.all([a.stop("SIGTERM"), b.stop("SIGTERM")]);
      }
    });
    await t.step("two gateway processes on one PostgreSQL database", async () => {
      const pg = await startPostgres();
      try {
        const url = await pg.newDatabase();
        const a = await spawn("--postgres", url);
        const b = await spawn("--postgres", url);
        try {
          await claimStorm([a.url, b.url], (await Deno.readTextFile(keyFile)).trim());
        } finally {
          await Promise.all([a.stop("SIGTERM"), b.stop("SIGTERM")]);
        }
      } finally {
        await pg.stop();
      }
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
