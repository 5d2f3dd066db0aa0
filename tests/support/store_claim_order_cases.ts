/**
 * Store conformance cases for label-filtered claims and newest-first listing, run against
 * every backend by `tests/gateway_sqlite_test.ts` and `tests/gateway_postgres_test.ts` next to
 * the main suite in `tests/support/store_conformance.ts`.
 *
 * @module
 */
import assert from "node:assert/strict";
import type { Store } from "../../lib/gateway/store.ts";
import { type StoreFactory, storeStep } from "./store_conformance.ts";

/** Every rollout id of a listing, page after page, checking the page size. */
async function listAll(
  store: Store,
  query: Omit<Parameters<Store["listRollouts"]>[0], "after">,
): Promise<string[]> {
  const seen: string[] = [];
  let after: string | undefined;
  let pages = 0;
  do {
    const page = await store.listRollouts({ ...query, after });
    assert.ok(page.items.length <= query.limit, "page within limit");
    seen.push(...page.items.map((r) => r.rollout_id));
    after = page.next_cursor ?? undefined;
    assert.ok(++pages < 1_000, "paging ends");
  } while (after);
  return seen;
}

/** Runs the label-claim and listing-order cases as steps of `t`. */
export async function runClaimAndOrderConformance(
  t: Deno.TestContext,
  factory: StoreFactory,
): Promise<void> {
  const step = storeStep(t, factory);

  await step("claims with labels take only matching rollouts, oldest first", async (store) => {
    await store.createRollouts([
      { rollout_id: "a0", input: 0, labels: { sandbox: "cpu", harness: "x" } },
      { rollout_id: "a1", input: 1, labels: { sandbox: "gpu", harness: "x" } },
      { rollout_id: "a2", input: 2, labels: { sandbox: "gpu", harness: "y" } },
      { rollout_id: "a3", input: 3 },
      { rollout_id: "a4", input: 4, labels: { sandbox: "gpu", harness: "x" }, mode: "val" },
      { rollout_id: "a5", input: 5, labels: { sandbox: "gpu" } },
    ]);
    const ids = (cs: { rollout: { rollout_id: string } }[]) => cs.map((c) => c.rollout.rollout_id);
    const lease_ms = 60_000;
    // Nothing matches: nothing is claimed (a label value, a missing key).
    assert.deepEqual(
      await store.claimRollouts({ worker: "w", limit: 10, lease_ms, labels: { sandbox: "tpu" } }),
      [],
    );
    assert.deepEqual(
      await store.claimRollouts({ worker: "w", limit: 10, lease_ms, labels: { zone: "gpu" } }),
      [],
    );
    // Every key must match; mode filters on top.
    assert.deepEqual(
      ids(
        await store.claimRollouts({
          worker: "w",
          limit: 10,
          lease_ms,
          labels: { sandbox: "gpu", harness: "x" },
          mode: "train",
        }),
      ),
      ["a1"],
    );
    // Oldest matching first, limited; the retry with the same key returns the same attempts
    // even though other matching rollouts are still queued.
    const first = await store.claimRollouts({
      worker: "gpu",
      limit: 1,
      lease_ms,
      labels: { sandbox: "gpu" },
      claim_key: "k1",
    });
    assert.deepEqual(ids(first), ["a2"]);
    const retry = await store.claimRollouts({
      worker: "gpu",
      limit: 1,
      lease_ms,
      labels: { sandbox: "gpu" },
      claim_key: "k1",
    });
    assert.deepEqual(ids(retry), ["a2"]);
    assert.equal(retry[0].attempt.attempt_id, first[0].attempt.attempt_id);
    assert.equal((await store.getRollout("a2"))!.attempts.length, 1, "no second attempt");
    const next = await store.claimRollouts({
      worker: "gpu",
      limit: 5,
      lease_ms,
      labels: { sandbox: "gpu" },
      claim_key: "k2",
    });
    assert.deepEqual(ids(next), ["a4", "a5"]);
    assert.deepEqual(
      await store.claimRollouts({ worker: "gpu", limit: 5, lease_ms, labels: { sandbox: "gpu" } }),
      [],
    );
    // A claim without labels still takes everything left.
    assert.deepEqual(ids(await store.claimRollouts({ worker: "any", limit: 10, lease_ms })), [
      "a0",
      "a3",
    ]);
  });

  await step("labelled claims take requeued rollouts too", async (store) => {
    await store.createRollouts([
      { rollout_id: "q0", input: 0, labels: { sandbox: "gpu" }, config: { max_attempts: 2 } },
      { rollout_id: "q1", input: 1, labels: { sandbox: "cpu" }, config: { max_attempts: 2 } },
    ]);
    const [c] = await store.claimRollouts({
      worker: "w",
      limit: 1,
      lease_ms: 60_000,
      labels: { sandbox: "gpu" },
    });
    assert.equal(c.rollout.rollout_id, "q0");
    await store.transition("q0", { to: "requeuing", attempt_id: c.attempt.attempt_id });
    const again = await store.claimRollouts({
      worker: "w",
      limit: 5,
      lease_ms: 60_000,
      labels: { sandbox: "gpu" },
    });
    assert.deepEqual(again.map((x) => [x.rollout.rollout_id, x.attempt.index]), [["q0", 2]]);
  });

  await step("desc paging is the exact reverse of asc, filters included", async (store) => {
    const names = Array.from({ length: 23 }, (_, i) => `d${String(i).padStart(2, "0")}`);
    await store.createRollouts(names.map((rollout_id, i) => ({
      rollout_id,
      input: i,
      labels: { parity: i % 2 ? "odd" : "even" },
    })));
    // Claim a few so that status filters select a subset.
    await store.claimRollouts({ worker: "w", limit: 7, lease_ms: 60_000 });

    const asc = await listAll(store, { limit: 4 });
    assert.deepEqual(asc, names);
    const desc = await listAll(store, { limit: 4, order: "desc" });
    assert.deepEqual(desc, [...names].reverse());
    assert.deepEqual(await listAll(store, { limit: 4, order: "asc" }), asc, "asc is the default");
    for (const limit of [1, 3, 22, 23, 100]) {
      assert.deepEqual(await listAll(store, { limit, order: "desc" }), desc, `limit ${limit}`);
    }

    const queries = [
      { status: "queuing" as const },
      { status: ["running" as const] },
      { labels: { parity: "odd" } },
      { status: "queuing" as const, labels: { parity: "even" } },
      { status: ["queuing" as const, "running" as const], labels: { parity: "odd" } },
    ];
    for (const q of queries) {
      const up = await listAll(store, { ...q, limit: 2 });
      const down = await listAll(store, { ...q, limit: 2, order: "desc" });
      assert.ok(up.length > 4, `${JSON.stringify(q)}: more than two pages`);
      assert.equal(new Set(down).size, down.length, `${JSON.stringify(q)}: no repeats`);
      assert.deepEqual(down, [...up].reverse(), JSON.stringify(q));
    }

    // Rollouts created while paging newest first do not show up behind the cursor.
    const first = await store.listRollouts({ limit: 5, order: "desc" });
    await store.createRollouts([{ rollout_id: "late", input: 0 }]);
    const rest: string[] = [];
    let after = first.next_cursor ?? undefined;
    while (after) {
      const page = await store.listRollouts({ limit: 5, order: "desc", after });
      rest.push(...page.items.map((r) => r.rollout_id));
      after = page.next_cursor ?? undefined;
    }
    assert.deepEqual([...first.items.map((r) => r.rollout_id), ...rest], desc);
    assert.equal(
      (await store.listRollouts({ limit: 1, order: "desc" })).items[0].rollout_id,
      "late",
    );
  });
}
