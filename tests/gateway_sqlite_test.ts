/**
 * The SQLite backend passes the store conformance suite (on a file, so that a second handle
 * sees the same data as a second process would).
 */
import assert from "node:assert/strict";
import { openSqliteStore, type SqliteStore } from "../lib/gateway/sqlite_store.ts";
import type { Store } from "../lib/gateway/store.ts";
import { runStoreConformance } from "./support/store_conformance.ts";
import { runClaimAndOrderConformance } from "./support/store_claim_order_cases.ts";

Deno.test("sqlite store: conformance", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "reins-gw-sqlite-" });
  let n = 0;
  try {
    const factory = {
      open: () => Promise.resolve(openSqliteStore(`${dir}/store-${n++}.db`)),
      reopen: (store: Store) => Promise.resolve(openSqliteStore((store as SqliteStore).path)),
    };
    await runStoreConformance(t, factory);
    await runClaimAndOrderConformance(t, factory);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("sqlite store: seqs stay unique and reused after a failed batch, with a second handle writing between groups", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-gw-sqlite-seq-" });
  const a = openSqliteStore(`${dir}/seq.db`);
  const b = openSqliteStore(`${dir}/seq.db`);
  try {
    await a.createRollouts([{ rollout_id: "r", input: {} }]);
    const [claimed] = await a.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    const aid = claimed.attempt.attempt_id;
    const log = (text: string) => ({
      type: "log" as const,
      payload: { stream: "stdout" as const, text },
    });
    const first = await a.appendEvents("r", aid, [log("1"), log("2"), log("3")]);
    const seqs = first.map((e) => e.seq);
    assert.deepEqual(seqs, [seqs[0], seqs[0] + 1, seqs[0] + 2]);
    // The third event re-uses the second's key with another payload: the whole batch is refused
    // after two of its events were written inside the group.
    const keyed = (value: number) => ({
      type: "custom" as const,
      event_key: "k",
      payload: { name: "n", data: { value } },
    });
    await assert.rejects(a.appendEvents("r", aid, [log("x"), keyed(1), keyed(2)]), /k/);
    // One event alone is written without a savepoint: refused before its insert, it takes no seq.
    await a.appendEvents("r", aid, [keyed(1)]);
    await assert.rejects(a.appendEvents("r", aid, [keyed(2)]), /k/);
    // The other handle's next event takes the seq right after the last stored one.
    const [fromB] = await b.appendEvents("r", aid, [log("b")]);
    assert.equal(fromB.seq, seqs[2] + 2);
    // Writers on both handles at once: every seq distinct, none below what was stored.
    const concurrent = await Promise.all([
      a.appendEvents("r", aid, [log("a1"), log("a2")]),
      b.appendEvents("r", aid, [log("b1"), log("b2")]),
      a.appendEvents("r", aid, [log("a3")]),
    ]);
    const all = concurrent.flat().map((e) => e.seq);
    assert.equal(new Set(all).size, all.length);
    assert.ok(Math.min(...all) > fromB.seq, JSON.stringify(all));
    const stored = await b.listEvents("r", { type: "log" });
    assert.deepEqual(
      stored.map((e) => (e.payload as { text: string }).text),
      [
        "1",
        "2",
        "3",
        "b",
        ...[...concurrent.flat()].sort((x, y) => x.seq - y.seq).map((e) =>
          (e.payload as { text: string }).text
        ),
      ],
    );
  } finally {
    await a.close();
    await b.close();
    await Deno.remove(dir, { recursive: true });
  }
});
