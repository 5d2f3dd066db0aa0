/**
 * The UI's run index reads the change feed, and reads an event itself only when it is one of
 * reins' own (a reserved key): an agent posting custom events as fast as it can costs the index
 * no read per event.
 */
import assert from "node:assert/strict";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";
import type { Store } from "../lib/gateway/store.ts";
import { RESERVED_EVENT_KEY_PREFIX, TRAIN_STEP_EVENT } from "../lib/schema.ts";
import { RunIndex } from "../lib/ui/run_index.ts";

Deno.test("run index: an agent's custom events are not read; reins' own train steps are", async () => {
  const store = openSqliteStore(":memory:");
  try {
    await store.createRollouts([{ rollout_id: "r", input: {} }]);
    const [claimed] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    const aid = claimed.attempt.attempt_id;
    const step = (n: number, key?: string) => ({
      type: "custom" as const,
      ...(key ? { event_key: key } : {}),
      payload: { name: TRAIN_STEP_EVENT, data: { step: n, reward_mean: 0.5 } },
    });
    // 200 agent events, some shaped like train steps (with unreserved keys or none).
    await store.appendEvents(
      "r",
      aid,
      Array.from({ length: 200 }, (_, i) => step(100 + i, i % 2 ? `agent:${i}` : undefined)),
      { credential: "capability" },
    );
    await store.appendEvents("r", aid, [step(1, `${RESERVED_EVENT_KEY_PREFIX}step:1`)]);
    let reads = 0;
    const counting = new Proxy(store, {
      get(target, name, receiver) {
        const value = Reflect.get(target, name, receiver);
        if (name === "listEvents") {
          return (...args: Parameters<Store["listEvents"]>) => {
            reads++;
            return target.listEvents(...args);
          };
        }
        return typeof value === "function" ? value.bind(target) : value;
      },
    });
    const index = new RunIndex(counting);
    assert.equal(await index.refresh(), true);
    assert.deepEqual([...index.steps.keys()], [1], "only reins' own step is believed");
    assert.equal(reads, 1, "one read: the reserved event; none for the agent's 200");
  } finally {
    await store.close();
  }
});
