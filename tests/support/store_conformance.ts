/**
 * The store conformance suite: the behaviour every `Store` backend must show. Run by
 * `tests/gateway_sqlite_test.ts` and `tests/gateway_postgres_test.ts` as steps of one test.
 *
 * @module
 */
import assert from "node:assert/strict";
import {
  canTransition,
  type EventInput,
  type ModelRequestEvent,
  type ModelRequestWire,
  ROLLOUT_TRANSITIONS,
  type RolloutStatus,
  RolloutStatusSchema,
  ValidationError,
} from "../../lib/schema.ts";
import { openPostgresStore } from "../../lib/gateway/postgres_store.ts";
import { checkCallMessages } from "../../lib/gateway/store_input.ts";
import { type Store, StoreError } from "../../lib/gateway/store.ts";
import type { TestPostgres } from "./postgres.ts";

/** How the suite gets stores: a fresh one per case, and a second handle on the same data. */
export interface StoreFactory {
  /** A fresh, empty store. */
  open(): Promise<Store>;
  /** Another handle (connection/pool) on the same data as `store`, as a second process would. */
  reopen(store: Store): Promise<Store>;
}

/** Stores on fresh databases of a throwaway PostgreSQL cluster; `reopen` is a second pool. */
export function postgresStoreFactory(pg: Pick<TestPostgres, "newDatabase">): StoreFactory {
  const urls = new WeakMap<Store, string>();
  return {
    async open() {
      const url = await pg.newDatabase();
      const store = await openPostgresStore(url);
      urls.set(store, url);
      return store;
    },
    async reopen(store) {
      const url = urls.get(store);
      if (url === undefined) throw new Error("reopen: not a store this factory opened");
      const other = await openPostgresStore(url);
      urls.set(other, url);
      return other;
    },
  };
}

const STATUSES = RolloutStatusSchema.options;

async function rejectsWith(
  promise: Promise<unknown>,
  status: number,
  field: RegExp,
): Promise<void> {
  await assert.rejects(promise, (err: unknown) => {
    if (err instanceof StoreError) {
      assert.equal(err.status, status, `expected ${status}, got ${err.status}: ${err.message}`);
      assert.match(err.message, field);
      return true;
    }
    if (err instanceof ValidationError) {
      assert.equal(status, 400, `expected ${status}, got a ValidationError: ${err.message}`);
      assert.match(err.message, field);
      return true;
    }
    throw err;
  });
}

function call(
  prompt: number[],
  response: number[],
  policy_version = 0,
  extra: Partial<ModelRequestWire> = {},
): EventInput {
  return {
    type: "model_request",
    payload: {
      flavor: "openai_chat",
      prompt_token_ids: prompt,
      response_token_ids: response,
      response_logprobs: response.map((_, i) => -0.125 * (i + 1)),
      policy_version,
      ...extra,
    },
  };
}

/** Drives a fresh rollout into `status` (through claims and transitions only). */
async function rolloutIn(store: Store, id: string, status: RolloutStatus): Promise<void> {
  await store.createRollouts([{ rollout_id: id, input: id, config: { max_attempts: 3 } }]);
  if (status === "queuing") return;
  if (status === "cancelled") {
    await store.transition(id, { to: "cancelled" });
    return;
  }
  const claimed = await store.claimRollouts({
    worker: `w-${id}`,
    limit: 1,
    lease_ms: 60_000,
    claim_key: id,
  });
  assert.equal(claimed.length, 1);
  if (status === "running") return;
  await store.transition(id, { to: status });
}

/** A step of `t` that runs `fn` on a freshly opened store and closes it afterwards. */
export function storeStep(
  t: Deno.TestContext,
  factory: StoreFactory,
): (name: string, fn: (store: Store) => Promise<void>) => Promise<boolean> {
  return (name, fn) =>
    t.step(name, async () => {
      const store = await factory.open();
      try {
        await fn(store);
      } finally {
        await store.close();
      }
    });
}

/**
 * Runs every conformance case as a step of `t`.
 *
 * @example
 * ```ts
 * import { runStoreConformance } from "./store_conformance.ts";
 * import { openSqliteStore } from "../../lib/gateway/sqlite_store.ts";
 * Deno.test("sqlite store conformance", (t) =>
 *   runStoreConformance(t, {
 *     open: () => Promise.resolve(openSqliteStore(":memory:")),
 *     reopen: () => Promise.reject(new Error("in-memory")),
 *   }));
 * ```
 */
export async function runStoreConformance(
  t: Deno.TestContext,
  factory: StoreFactory,
): Promise<void> {
  const step = storeStep(t, factory);

  await step("create fills defaults and is idempotent by rollout_id", async (store) => {
    const first = await store.createRollouts([
      { rollout_id: "r1", input: { q: "2+2" }, labels: { step: "1" } },
      { rollout_id: "r2", group_id: "g", input: 2, mode: "val", config: { max_attempts: 2 } },
    ]);
    assert.deepEqual(first.created, [true, true]);
    const [r1, r2] = first.rollouts;
    const second = r2;
    assert.equal(r1.group_id, "r1", "group_id defaults to the rollout id");
    assert.equal(r1.status, "queuing");
    assert.equal(r1.version, 1);
    assert.equal(r1.mode, "train");
    assert.deepEqual(r1.config, { timeout_s: 600, max_attempts: 1 });
    assert.deepEqual(r1.attempts, []);
    assert.equal(r1.reward, null);
    assert.equal(r2.group_id, "g");
    assert.equal(r2.mode, "val");
    assert.equal(r2.config.max_attempts, 2);
    // Claim r1 (but not the val rollout), then re-post both: nothing is reset.
    const [claimed] = await store.claimRollouts({
      worker: "w",
      limit: 1,
      lease_ms: 60_000,
      mode: "train",
    });
    assert.equal(claimed.rollout.rollout_id, "r1");
    const again = await store.createRollouts([
      { rollout_id: "r3", input: 3 },
      { rollout_id: "r1", input: "different input", labels: { step: "9" } },
    ]);
    assert.deepEqual(again.created, [true, false]);
    again.rollouts.reverse();
    // The whole first batch retried in reverse order: nothing new, nothing changed.
    const reordered = await store.createRollouts([
      { rollout_id: "r2", input: 2 },
      { rollout_id: "r1", input: 1 },
    ]);
    assert.deepEqual(reordered.created, [false, false]);
    assert.deepEqual(reordered.rollouts[0], second);
    assert.equal(again.rollouts[0].status, "running");
    assert.deepEqual(again.rollouts[0].input, { q: "2+2" });
    assert.deepEqual(again.rollouts[0].labels, { step: "1" });
    assert.deepEqual(again.rollouts[0], await store.getRollout("r1"));
    assert.equal(await store.getRollout("nope"), null);
    // Generated ids are unique.
    const gen = await store.createRollouts([{ input: 1 }, { input: 1 }]);
    assert.notEqual(gen.rollouts[0].rollout_id, gen.rollouts[1].rollout_id);
  });

  await step("a bad create in a batch stores nothing and names the field", async (store) => {
    const before = await store.lastSeq();
    await rejectsWith(
      store.createRollouts([
        { rollout_id: "ok", input: 1 },
        { rollout_id: "bad", input: 1, mode: "test" as "train" },
      ]),
      400,
      /rollouts\[1\]\.mode/,
    );
    await rejectsWith(
      store.createRollouts([{ rollout_id: "has space", input: 1 }]),
      400,
      /rollouts\[0\]\.rollout_id/,
    );
    assert.equal(await store.getRollout("ok"), null);
    assert.equal(await store.lastSeq(), before);
  });

  await step("state machine: every allowed and forbidden transition", async (store) => {
    let n = 0;
    for (const from of STATUSES) {
      for (const to of STATUSES) {
        const id = `sm-${n++}`;
        await rolloutIn(store, id, from);
        await checkPair(id, from, to);
        // Claims take the oldest claimable rollout: leave none behind for the next pair.
        const left = (await store.getRollout(id))!;
        if (left.status === "queuing" || left.status === "requeuing") {
          await store.transition(id, { to: "cancelled" });
        }
      }
    }
    async function checkPair(id: string, from: RolloutStatus, to: RolloutStatus) {
      const before = (await store.getRollout(id))!;
      assert.equal(before.status, from);
      if (to === "running") {
        // Entering running is only possible through a claim.
        await rejectsWith(store.transition(id, { to }), 400, /to: .*claim/);
        return;
      }
      if (from === to) {
        const same = await store.transition(id, { to });
        assert.equal(same.version, before.version, `${from} → ${to} is a no-op retry`);
        return;
      }
      if (canTransition(from, to)) {
        const after = await store.transition(id, { to, expected_version: before.version });
        assert.equal(after.status, to, `${from} → ${to}`);
        assert.equal(after.version, before.version + 1);
      } else {
        await rejectsWith(
          store.transition(id, { to }),
          409,
          new RegExp(`from '${from}' to '${to}'`),
        );
        assert.deepEqual(await store.getRollout(id), before, `${from} → ${to} left it unchanged`);
      }
    }
    // Claims take exactly the states the machine allows to enter running.
    const claimable = STATUSES.filter((s) => ROLLOUT_TRANSITIONS[s].includes("running"));
    assert.deepEqual(claimable.sort(), ["queuing", "requeuing"]);
    const fresh = await factory.open();
    try {
      // Claimable states last, so that setting up one never claims another.
      const order: RolloutStatus[] = [
        "running",
        "succeeded",
        "failed",
        "cancelled",
        "requeuing",
        "queuing",
      ];
      assert.deepEqual([...order].sort(), [...STATUSES].sort());
      for (const from of order) await rolloutIn(fresh, `c-${from}`, from);
      const claimed = await fresh.claimRollouts({ worker: "x", limit: 100, lease_ms: 60_000 });
      assert.deepEqual(
        claimed.map((c) => c.rollout.rollout_id).sort(),
        ["c-queuing", "c-requeuing"],
      );
    } finally {
      await fresh.close();
    }
  });

  await step("compare-and-swap on version, and retried transitions are no-ops", async (store) => {
    await store.createRollouts([{ rollout_id: "r", input: 1 }]);
    const [{ rollout, attempt }] = await store.claimRollouts({
      worker: "w",
      limit: 1,
      lease_ms: 60_000,
    });
    assert.equal(rollout.version, 2);
    await rejectsWith(
      store.transition("r", { to: "succeeded", expected_version: 1 }),
      409,
      /expected_version: .*version 2, not 1/,
    );
    await rejectsWith(
      store.transition("r", { to: "succeeded", attempt_id: "a9-other" }),
      409,
      /attempt_id: 'a9-other' is not the current attempt/,
    );
    const done = await store.transition("r", {
      to: "succeeded",
      expected_version: 2,
      attempt_id: attempt.attempt_id,
      exit_code: 0,
      info: { sandbox: "on" },
      log_location: "logs/r.txt",
    });
    assert.equal(done.version, 3);
    assert.equal(done.attempts[0].status, "succeeded");
    assert.equal(done.attempts[0].exit_code, 0);
    assert.deepEqual(done.attempts[0].info, { sandbox: "on" });
    assert.equal(done.attempts[0].log_location, "logs/r.txt");
    assert.equal(done.attempts[0].lease_expires_at, null);
    assert.ok(done.attempts[0].ended_at !== null);
    // The same request retried (its answer was lost): same result, no new version.
    const retried = await store.transition("r", {
      to: "succeeded",
      expected_version: 2,
      attempt_id: attempt.attempt_id,
    });
    assert.deepEqual(retried, done);
    await rejectsWith(
      store.transition("missing", { to: "cancelled" }),
      404,
      /rollout_id: no rollout 'missing'/,
    );
  });

  await step("requeuing ends the attempt; the next claim opens attempt index+1", async (store) => {
    await store.createRollouts([{ rollout_id: "r", input: 1, config: { max_attempts: 2 } }]);
    const [first] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    assert.equal(first.attempt.index, 1);
    assert.equal(first.attempt.status, "running");
    assert.equal(first.attempt.worker, "w");
    const requeued = await store.transition("r", { to: "requeuing", exit_code: 3, error: "boom" });
    assert.equal(requeued.attempts[0].status, "failed");
    assert.equal(requeued.attempts[0].error, "boom");
    const [second] = await store.claimRollouts({ worker: "w2", limit: 1, lease_ms: 60_000 });
    assert.equal(second.attempt.index, 2);
    assert.notEqual(second.attempt.attempt_id, first.attempt.attempt_id);
    assert.equal(second.rollout.attempts.length, 2);
    // A late retry of the first attempt's requeue (reordered after the second claim) is
    // refused and changes nothing, whether it names its attempt or its version.
    const current = (await store.getRollout("r"))!;
    await rejectsWith(
      store.transition("r", { to: "requeuing", attempt_id: first.attempt.attempt_id }),
      409,
      /attempt_id: .* is not the current attempt/,
    );
    await rejectsWith(
      store.transition("r", { to: "requeuing", expected_version: first.rollout.version }),
      409,
      /expected_version: /,
    );
    assert.deepEqual(await store.getRollout("r"), current);
    await rejectsWith(store.transition("r", { to: "requeuing" }), 409, /used all 2 attempt/);
    const failed = await store.transition("r", { to: "failed", attempt_status: "timeout" });
    assert.equal(failed.attempts[1].status, "timeout");
    assert.equal(failed.status, "failed");
  });

  await step("claims are idempotent by claim_key", async (store) => {
    await store.createRollouts(
      Array.from({ length: 5 }, (_, i) => ({ rollout_id: `r${i}`, input: i })),
    );
    const a = await store.claimRollouts({
      worker: "w",
      limit: 2,
      lease_ms: 60_000,
      claim_key: "k1",
    });
    const retry = await store.claimRollouts({
      worker: "w",
      limit: 2,
      lease_ms: 60_000,
      claim_key: "k1",
    });
    assert.deepEqual(
      retry.map((c) => [c.rollout.rollout_id, c.attempt.attempt_id]),
      a.map((c) => [c.rollout.rollout_id, c.attempt.attempt_id]),
    );
    const b = await store.claimRollouts({
      worker: "w",
      limit: 10,
      lease_ms: 60_000,
      claim_key: "k2",
    });
    assert.equal(b.length, 3);
    const page = await store.listRollouts({ status: "queuing", limit: 10 });
    assert.equal(page.items.length, 0);
  });

  await step(
    "concurrent claims from several handles never hand out a rollout twice",
    async (store) => {
      const total = 60;
      await store.createRollouts(
        Array.from({ length: total }, (_, i) => ({ rollout_id: `r${i}`, input: i })),
      );
      const handles = [store, await factory.reopen(store), await factory.reopen(store)];
      try {
        const claimedBy = new Map<string, string>();
        await Promise.all(Array.from({ length: 6 }, async (_, w) => {
          const handle = handles[w % handles.length];
          while (true) {
            const got = await handle.claimRollouts({ worker: `w${w}`, limit: 3, lease_ms: 60_000 });
            if (got.length === 0) return;
            for (const { rollout, attempt } of got) {
              assert.ok(!claimedBy.has(rollout.rollout_id), `${rollout.rollout_id} claimed twice`);
              assert.equal(attempt.index, 1);
              claimedBy.set(rollout.rollout_id, `w${w}`);
            }
          }
        }));
        assert.equal(claimedBy.size, total);
        for (const r of (await store.listRollouts({ limit: 100 })).items) {
          assert.equal(r.attempts.length, 1, `${r.rollout_id} has one attempt`);
          assert.equal(r.attempts[0].worker, claimedBy.get(r.rollout_id));
        }
      } finally {
        for (const h of handles.slice(1)) await h.close();
      }
    },
  );

  await step("leases: renewal, expiry to requeuing or failed, lost attempts", async (store) => {
    await store.createRollouts([
      { rollout_id: "retry", input: 1, config: { max_attempts: 2 } },
      { rollout_id: "once", input: 1 },
      { rollout_id: "kept", input: 1 },
    ]);
    const now = Date.now();
    const claimed = await store.claimRollouts({ worker: "w", limit: 3, lease_ms: 1_000, now });
    const aid = (id: string) =>
      claimed.find((c) => c.rollout.rollout_id === id)!.attempt.attempt_id;
    const renewed = await store.renewLease("kept", aid("kept"), "w", 600_000);
    assert.ok(renewed.lease_expires_at! > now + 500_000);
    await rejectsWith(
      store.renewLease("kept", aid("kept"), "intruder", 1_000),
      409,
      /worker: .*leased to 'w'/,
    );
    await rejectsWith(
      store.renewLease("kept", "a7-none", "w", 1_000),
      404,
      /attempt_id: no attempt/,
    );
    await rejectsWith(store.renewLease("ghost", "a1", "w", 1_000), 404, /rollout_id: no rollout/);
    const expired = await store.expireLeases(now + 5_000);
    assert.deepEqual(expired.map((r) => [r.rollout_id, r.status]).sort(), [
      ["once", "failed"],
      ["retry", "requeuing"],
    ]);
    for (const r of expired) assert.equal(r.attempts[0].status, "lost");
    assert.equal((await store.getRollout("kept"))!.status, "running");
    await rejectsWith(
      store.renewLease("once", aid("once"), "w", 1_000),
      409,
      /is lost, not running/,
    );
    assert.deepEqual(await store.expireLeases(now + 5_000), [], "a second sweep changes nothing");
    const [again] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    assert.equal(again.rollout.rollout_id, "retry");
    assert.equal(again.attempt.index, 2);
    const statusEvents = await store.listEvents("once", { type: "status" });
    assert.deepEqual(
      statusEvents.map((e) => e.type === "status" && [e.payload.to, e.payload.reason]),
      [
        ["queuing", null],
        ["running", null],
        ["failed", "lease expired"],
      ],
    );
  });

  await step(
    "events: seq strictly increases; event_key makes retries idempotent",
    async (store) => {
      await store.createRollouts([{ rollout_id: "a", input: 1 }, { rollout_id: "b", input: 1 }]);
      const claimed = await store.claimRollouts({ worker: "w", limit: 2, lease_ms: 60_000 });
      const att = Object.fromEntries(
        claimed.map((c) => [c.rollout.rollout_id, c.attempt.attempt_id]),
      );
      const e = (key: string, value: number): EventInput => ({
        type: "reward",
        event_key: key,
        payload: { value },
      });
      const first = await store.appendEvents("a", att.a, [
        e("k1", 0.1),
        e("k2", 0.2),
        e("k3", 0.3),
      ]);
      const other = await store.appendEvents("b", att.b, [{
        type: "log",
        payload: { stream: "stdout", text: "hi" },
      }]);
      // Duplicated and reordered retry: same events back, nothing new stored, no seq taken.
      const seqBeforeRetry = await store.lastSeq();
      const retry = await store.appendEvents("a", att.a, [e("k3", 0.3), e("k1", 0.1)]);
      assert.deepEqual(retry, [first[2], first[0]]);
      assert.equal(await store.lastSeq(), seqBeforeRetry);
      // A taken key with another payload (or type) is refused, naming the key; nothing stored.
      const seqBefore = await store.lastSeq();
      await rejectsWith(
        store.appendEvents("a", att.a, [e("k9", 1), e("k3", 9)]),
        409,
        /events\[1\]\.event_key: 'k3' is already taken .* different payload/,
      );
      await rejectsWith(
        store.appendEvents("a", att.a, [{
          type: "log",
          event_key: "k1",
          payload: { stream: "stdout", text: "0.1" },
        }]),
        409,
        /events\[0\]\.event_key: 'k1' .* different type/,
      );
      assert.equal(await store.lastSeq(), seqBefore);
      // A batch that repeats a key within itself stores it once.
      const dup = await store.appendEvents("a", att.a, [e("k4", 0.4), e("k4", 0.4)]);
      assert.equal(dup[0].seq, dup[1].seq);
      const seqs = [...first, ...other, dup[0]].map((x) => x.seq);
      for (let i = 1; i < seqs.length; i++) {
        assert.ok(
          seqs[i] > seqs[i - 1],
          "seq strictly increases",
        );
      }
      const listed = await store.listEvents("a", { type: "reward" });
      assert.deepEqual(listed.map((x) => x.event_key), ["k1", "k2", "k3", "k4"]);
      // The change feed carries each event's key (null without one).
      const changed = (await store.changesSince(first[0].seq - 1, 100)).filter((c) =>
        c.kind === "event" && c.type !== "status"
      );
      assert.deepEqual(
        changed.map((c) => c.kind === "event" ? [c.seq, c.event_key] : null),
        [...first, ...other, dup[0]].map((x) => [x.seq, x.event_key]),
      );
      assert.equal(other[0].event_key, null);
      assert.equal((await store.getRollout("a"))!.reward, 0.4, "the last reward event sets reward");
      // Keys are per rollout: the same key in another rollout is a different event.
      const inB = await store.appendEvents("b", att.b, [e("k1", 1)]);
      assert.notEqual(inB[0].seq, first[0].seq);
      // Filters.
      assert.deepEqual(
        (await store.listEvents("a", { after_seq: first[0].seq, limit: 2 })).map((x) => x.seq),
        [first[1].seq, first[2].seq],
      );
      assert.equal((await store.listEvents("a", { attempt_id: "nope" })).length, 0);
      assert.deepEqual(
        (await store.listEvents("a", { type: ["status", "reward"] })).map((x) => x.type),
        ["status", "status", "reward", "reward", "reward", "reward"],
      );
    },
  );

  await step(
    "events: unknown ids are 404, bad events 400 naming the field, nothing stored",
    async (store) => {
      await store.createRollouts([{ rollout_id: "a", input: 1 }]);
      const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
      const before = await store.lastSeq();
      await rejectsWith(
        store.appendEvents("zz", attempt.attempt_id, [call([1], [2])]),
        404,
        /rollout_id: no rollout 'zz'/,
      );
      await rejectsWith(
        store.appendEvents("a", "a5-none", [call([1], [2])]),
        404,
        /attempt_id: no attempt 'a5-none'/,
      );
      const bad = call([1, 2], [3, 4]);
      if (bad.type === "model_request") bad.payload.response_logprobs = [-1];
      await rejectsWith(
        store.appendEvents("a", attempt.attempt_id, [call([1], [2]), bad]),
        400,
        /events\[1\]\.payload\.response_logprobs: expected 2 logprobs/,
      );
      await rejectsWith(
        store.appendEvents("a", attempt.attempt_id, [{
          type: "reward",
          payload: { value: "high" as unknown as number },
        }]),
        400,
        /events\[0\]\.payload\.value/,
      );
      await rejectsWith(
        store.appendEvents("a", attempt.attempt_id, [{ type: "status" } as unknown as EventInput]),
        400,
        /events\[0\]\.type/,
      );
      assert.equal(await store.lastSeq(), before);
      await rejectsWith(store.listEvents("zz"), 404, /rollout_id/);
    },
  );

  await step("model calls: every token field is checked and named", async (store) => {
    await store.createRollouts([{ rollout_id: "a", input: 1 }]);
    const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    const before = await store.lastSeq();
    const bad = (patch: Record<string, unknown>) =>
      store.appendEvents("a", attempt.attempt_id, [
        call([1, 2], [3]),
        { ...call([1, 2], [3]), payload: { ...call([1, 2], [3]).payload, ...patch } } as EventInput,
      ]);
    const cases: Array<[Record<string, unknown>, RegExp]> = [
      [{ prompt_token_ids: [1, 1.5] }, /events\[1\]\.payload\.prompt_token_ids\[1\]: /],
      [{ prompt_token_ids: [-1] }, /events\[1\]\.payload\.prompt_token_ids\[0\]: /],
      [{ prompt_token_ids: [2 ** 32] }, /events\[1\]\.payload\.prompt_token_ids\[0\]: /],
      [{ prompt_token_ids: ["7"] }, /events\[1\]\.payload\.prompt_token_ids\[0\]: /],
      // What `>>> 0` would turn into an id is still refused: the check compares with the value.
      [{ prompt_token_ids: [1, [5]] }, /events\[1\]\.payload\.prompt_token_ids\[1\]: /],
      [{ prompt_token_ids: [true] }, /events\[1\]\.payload\.prompt_token_ids\[0\]: /],
      [{ prompt_token_ids: [Infinity] }, /events\[1\]\.payload\.prompt_token_ids\[0\]: /],
      [{ prompt_token_ids: [2 ** 32 + 5] }, /events\[1\]\.payload\.prompt_token_ids\[0\]: /],
      [{ response_token_ids: [NaN] }, /events\[1\]\.payload\.response_token_ids\[0\]: /],
      [{ response_token_ids: [10n] }, /events\[1\]\.payload\.response_token_ids\[0\]: /],
      [{ prompt_token_ids: "1 2" }, /events\[1\]\.payload\.prompt_token_ids: /],
      [{ response_token_ids: [3, null] }, /events\[1\]\.payload\.response_token_ids\[1\]: /],
      [{ response_logprobs: [NaN] }, /events\[1\]\.payload\.response_logprobs\[0\]: /],
      [{ response_logprobs: [] }, /events\[1\]\.payload\.response_logprobs: expected 1 logprobs/],
      [{ flavor: "grpc" }, /events\[1\]\.payload\.flavor: /],
      [{ policy_version: -1 }, /events\[1\]\.payload\.policy_version: /],
    ];
    for (const [patch, message] of cases) await rejectsWith(bad(patch), 400, message);
    assert.equal(await store.lastSeq(), before, "no partial batch was stored");
    const [ok] = await store.appendEvents("a", attempt.attempt_id, [call([0, 0xffffffff], [])]);
    assert.equal(ok.type, "model_request");
  });

  await step(
    "model calls: messages checked ahead (checkCallMessages) are stored as unchecked ones",
    async (store) => {
      await store.createRollouts([{ rollout_id: "a", input: 1 }]);
      const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
      const messages = [
        { role: "system", content: 'quotes " and \\ backslashes, "messages":[] and \u2028' },
        { role: "user", content: "héllo 🦀", extra: "stripped" },
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "t1", function: { name: "ls", arguments: '{"a":1}' } }],
        },
        { role: "tool", content: "x", tool_call_id: "t1", name: "ls" },
      ];
      // A nested `messages` key in the request, and a key with no JSON value (left out).
      const extra = {
        request: { model: "m", metadata: { messages: [] } },
        response_text: undefined,
      } as unknown as Partial<ModelRequestWire>;
      const checked = checkCallMessages(messages);
      const [plain, ahead] = await store.appendEvents("a", attempt.attempt_id, [
        call([1, 2], [3], 0, { ...extra, messages } as Partial<ModelRequestWire>),
        call([1, 2], [3], 0, { ...extra, messages: checked }),
      ]);
      const stored = await store.listEvents("a", { type: "model_request" });
      assert.equal(stored.length, 2);
      const payloadOf = (e: unknown) => (e as ModelRequestEvent).payload;
      assert.deepEqual(payloadOf(stored[1]), payloadOf(stored[0]));
      assert.deepEqual(payloadOf(ahead), payloadOf(plain));
      assert.deepEqual(payloadOf(stored[0]).messages![2].tool_calls![0].type, "function");
      assert.equal("extra" in payloadOf(stored[0]).messages![1], false);
      assert.deepEqual(payloadOf(stored[1]).request, { model: "m", metadata: { messages: [] } });
      // What was checked cannot change behind the check.
      assert.throws(() => (checked as unknown[]).push({ role: "robot" }), TypeError);
      assert.throws(() => (checked[1] as { content: string }).content = "changed", TypeError);
      // A copy is not the checked array: it is checked again, and refused naming the field.
      const before = await store.lastSeq();
      await rejectsWith(
        store.appendEvents("a", attempt.attempt_id, [
          call([1], [2], 0, { messages: [...checked, { role: "robot" }] } as never),
        ]),
        400,
        /events\[0\]\.payload\.messages\[4\]\.role: /,
      );
      assert.equal(await store.lastSeq(), before);
    },
  );

  await step(
    "concurrent posts of the same event keys from two handles store each once",
    async (store) => {
      await store.createRollouts([{ rollout_id: "a", input: 1 }]);
      const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
      const other = await factory.reopen(store);
      try {
        const batch = (offset: number): EventInput[] =>
          Array.from({ length: 12 }, (_, i) => ({
            type: "reward",
            event_key: `k${(i + offset) % 12}`,
            payload: { value: (i + offset) % 12 },
          }));
        const results = await Promise.all(
          [0, 5, 0, 7].map((offset, i) =>
            (i % 2 ? other : store).appendEvents("a", attempt.attempt_id, batch(offset))
          ),
        );
        const seqOf = new Map<string, number>();
        for (const events of results) {
          for (const e of events) {
            const known = seqOf.get(e.event_key!);
            if (known !== undefined) assert.equal(e.seq, known, `${e.event_key} has one seq`);
            seqOf.set(e.event_key!, e.seq);
          }
        }
        const stored = await store.listEvents("a", { type: "reward" });
        assert.equal(stored.length, 12, "each key stored once");
        assert.deepEqual(stored.map((e) => e.seq), [...seqOf.values()].sort((x, y) => x - y));
      } finally {
        await other.close();
      }
    },
  );

  await step("concurrent multi-turn posts round-trip; a bad post fails alone", async (store) => {
    await store.createRollouts(
      Array.from({ length: 4 }, (_, i) => ({ rollout_id: `r${i}`, input: i })),
    );
    const claimed = await store.claimRollouts({ worker: "w", limit: 4, lease_ms: 60_000 });
    const sent = new Map<string, number[][]>();
    const bad = rejectsWith(
      store.appendEvents("r0", "a9-unknown", [call([1], [2])]),
      404,
      /attempt_id: no attempt 'a9-unknown'/,
    );
    await Promise.all(claimed.map(async ({ rollout, attempt }, w) => {
      let prompt = Array.from({ length: 40 }, (_, i) => w * 1000 + i);
      const prompts: number[][] = [];
      for (let turn = 0; turn < 5; turn++) {
        const response = [w, turn, 7];
        prompts.push(prompt);
        await store.appendEvents(rollout.rollout_id, attempt.attempt_id, [
          call(prompt, response, turn),
          { type: "reward", payload: { value: turn } },
        ]);
        prompt = [...prompt, ...response, 100 + turn];
      }
      sent.set(rollout.rollout_id, prompts);
    }));
    await bad;
    for (const [rollout_id, prompts] of sent) {
      const calls = await store.listEvents(rollout_id, { type: "model_request" });
      assert.deepEqual(
        calls.map((c) => c.type === "model_request" && Array.from(c.payload.prompt_token_ids)),
        prompts,
      );
      const r = (await store.getRollout(rollout_id))!;
      assert.equal(r.reward, 4);
      assert.deepEqual([r.policy_version_min, r.policy_version_max], [0, 4]);
    }
  });

  await step(
    "model calls: tokens round-trip exactly through reference+tail storage",
    async (store) => {
      await store.createRollouts([{ rollout_id: "r", input: 1 }]);
      const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
      const system = Array.from({ length: 300 }, (_, i) => 1000 + i);
      const calls: EventInput[] = [];
      let prompt = [...system, 1, 2, 3];
      for (let turn = 0; turn < 6; turn++) {
        const response = Array.from({ length: 20 + turn }, (_, i) => 50_000 + turn * 100 + i);
        calls.push(
          call(prompt, response, turn, {
            segment: { conversation: "main", index: 0, opened_by: turn ? null : "root" },
          }),
        );
        // The next prompt extends prompt ∥ response, except turn 3 retokenizes the last token.
        const next = [...prompt, ...response];
        if (turn === 3) next[next.length - 1] = 4_000_000_000;
        prompt = [...next, 7, 8, 9, turn];
      }
      // A side conversation sharing only the system prompt, and a call with an empty prompt.
      calls.push(call([...system, 42], [43, 44], 6));
      calls.push(call([], [0xffffffff], 6, { http_status: 500, error: "upstream failed" }));
      const stored = await store.appendEvents("r", attempt.attempt_id, calls.slice(0, 3));
      await store.appendEvents("r", attempt.attempt_id, calls.slice(3));
      assert.equal(stored[0].type, "model_request");
      const check = (events: Awaited<ReturnType<Store["listEvents"]>>) => {
        const reqs = events.filter((x): x is ModelRequestEvent => x.type === "model_request");
        assert.equal(reqs.length, calls.length);
        reqs.forEach((event, i) => {
          const want = calls[i];
          assert.equal(want.type, "model_request");
          if (want.type !== "model_request") return;
          assert.ok(event.payload.prompt_token_ids instanceof Uint32Array);
          assert.ok(event.payload.response_logprobs instanceof Float32Array);
          assert.deepEqual(
            Array.from(event.payload.prompt_token_ids),
            want.payload.prompt_token_ids,
            `prompt ${i}`,
          );
          assert.deepEqual(
            Array.from(event.payload.response_token_ids),
            want.payload.response_token_ids,
          );
          assert.deepEqual(
            Array.from(event.payload.response_logprobs),
            want.payload.response_logprobs,
          );
          assert.equal(event.payload.policy_version, want.payload.policy_version);
          assert.equal(event.payload.flavor, "openai_chat");
          assert.equal(event.payload.mode, "faithful", "defaults are filled in");
        });
        assert.deepEqual(reqs[0].payload.segment, {
          conversation: "main",
          index: 0,
          opened_by: "root",
        });
        assert.equal(reqs[reqs.length - 1].payload.error, "upstream failed");
      };
      check(await store.listEvents("r"));
      // Mutating a returned array never changes what the store serves.
      const [firstCall] = await store.listEvents("r", { type: "model_request", limit: 1 });
      if (firstCall.type === "model_request") firstCall.payload.prompt_token_ids.fill(0);
      // A second handle has a cold cache and must resolve references from the database.
      const cold = await factory.reopen(store);
      try {
        check(await cold.listEvents("r"));
        // Reading from the middle of the chain resolves its references too.
        const tail = await cold.listEvents("r", {
          type: "model_request",
          after_seq: stored[2].seq,
        });
        assert.equal(tail.length, calls.length - 3);
      } finally {
        await cold.close();
      }
      check(await store.listEvents("r"));
      const rollout = (await store.getRollout("r"))!;
      assert.equal(rollout.policy_version_min, 0);
      assert.equal(rollout.policy_version_max, 6);
      assert.equal(rollout.version, 2, "event-derived fields do not bump the version");
    },
  );

  await step(
    "cursor paging never skips or repeats, even while rollouts are added",
    async (store) => {
      await store.createRollouts(Array.from({ length: 23 }, (_, i) => ({
        rollout_id: `p${String(i).padStart(2, "0")}`,
        input: i,
        labels: { parity: i % 2 ? "odd" : "even" },
      })));
      const seen: string[] = [];
      let after: string | undefined;
      let added = 0;
      do {
        const page = await store.listRollouts({ limit: 4, after });
        assert.ok(page.items.length <= 4);
        seen.push(...page.items.map((r) => r.rollout_id));
        after = page.next_cursor ?? undefined;
        if (added < 5) {
          await store.createRollouts([{ rollout_id: `late${added++}`, input: 0 }]);
        }
      } while (after);
      assert.equal(new Set(seen).size, seen.length, "no repeats");
      assert.equal(seen.length, 28, "every rollout, including the ones added while paging");
      assert.deepEqual(
        seen.slice(0, 23),
        Array.from({ length: 23 }, (_, i) => `p${String(i).padStart(2, "0")}`),
      );
      // Filtered paging.
      const odd: string[] = [];
      after = undefined;
      do {
        const page = await store.listRollouts({ limit: 3, after, labels: { parity: "odd" } });
        odd.push(...page.items.map((r) => r.rollout_id));
        after = page.next_cursor ?? undefined;
      } while (after);
      assert.equal(odd.length, 11);
      await store.claimRollouts({ worker: "w", limit: 2, lease_ms: 60_000 });
      assert.deepEqual(
        (await store.listRollouts({ status: ["running"], limit: 10 })).items.map((r) =>
          r.rollout_id
        ),
        ["p00", "p01"],
      );
      assert.equal(
        (await store.listRollouts({ status: ["queuing", "running"], limit: 100 })).items.length,
        28,
      );
      await rejectsWith(store.listRollouts({ limit: 5, after: "garbage!" }), 400, /after:/);
    },
  );

  await step(
    "models: upsert, list, get; the change feed orders everything by seq",
    async (store) => {
      const m = await store.upsertModel({
        name: "policy",
        endpoints: ["http://127.0.0.1:9000"],
        version: 0,
        info: {},
      });
      assert.equal(m.version, 0);
      await store.createRollouts([{ rollout_id: "r", input: 1 }]);
      await store.upsertModel({ name: "policy", endpoints: [], version: 1, info: { step: 1 } });
      await store.upsertModel({ name: "aux", endpoints: [], version: 5, info: {} });
      assert.deepEqual((await store.listModels()).map((x) => [x.name, x.version]), [["aux", 5], [
        "policy",
        1,
      ]]);
      assert.deepEqual((await store.getModel("policy"))!.info, { step: 1 });
      assert.equal(await store.getModel("none"), null);
      await rejectsWith(
        store.upsertModel({ name: "bad name", endpoints: [], version: 0, info: {} }),
        400,
        /name/,
      );
      const changes = await store.changesSince(0, 100);
      assert.deepEqual(
        changes.map((c) =>
          c.kind === "model" ? `model:${c.name}@${c.version}` : `${c.type}:${c.status}`
        ),
        [
          "status:queuing",
          "model:policy@1",
          "model:aux@5",
        ],
      );
      for (let i = 1; i < changes.length; i++) assert.ok(changes[i].seq > changes[i - 1].seq);
      assert.deepEqual(await store.changesSince(changes[1].seq, 1), [changes[2]]);
      assert.equal(await store.lastSeq(), changes[2].seq);
      // Filtered by event type: those events alone, in order, paged the same way; no models.
      const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
      await store.appendEvents("r", attempt.attempt_id, [{
        type: "log",
        payload: { stream: "stdout", text: "hi" },
      }]);
      await store.transition("r", { to: "succeeded" });
      const statuses = await store.changesSince(0, 100, { eventType: "status" });
      assert.deepEqual(
        statuses.map((c) => c.kind === "event" ? `${c.type}:${c.status}` : c.kind),
        ["status:queuing", "status:running", "status:succeeded"],
      );
      assert.deepEqual(await store.changesSince(statuses[0].seq, 1, { eventType: "status" }), [
        statuses[1],
      ]);
      const all = await store.changesSince(0, 100);
      assert.deepEqual(statuses, all.filter((c) => c.kind === "event" && c.type === "status"));
      assert.deepEqual(
        (await store.changesSince(0, 100, { eventType: "log" })).map((c) => c.seq),
        all.filter((c) => c.kind === "event" && c.type === "log").map((c) => c.seq),
      );
    },
  );

  await step("meta values are set once", async (store) => {
    assert.equal(await store.ensureMeta("secret", "one"), "one");
    assert.equal(await store.ensureMeta("secret", "two"), "one");
  });
}
