/**
 * Schema versions and migrations, on SQLite and PostgreSQL:
 * - a database made by the stores before schema versions existed (the committed fixtures of
 *   `tests/fixtures/store_v1/`, written by the code of commit a8fd12c) opens, is migrated to
 *   the current schema, and serves everything it held, unchanged;
 * - a database made from schema 1 as the migration list keeps it migrates the same way;
 * - a database of a newer schema is refused with a message that says so, and left as it was;
 * - gateways opening one old PostgreSQL database together migrate it once.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import postgres from "postgres";
import { openPostgresStore } from "../lib/gateway/postgres_store.ts";
import { POSTGRES, SQLITE, sqliteText } from "../lib/gateway/sql/dialect.ts";
import { runAsync, runSync } from "../lib/gateway/sql/flow.ts";
import { SqlFlows } from "../lib/gateway/sql/flows.ts";
import { migrate, MIGRATIONS, SCHEMA_VERSION } from "../lib/gateway/sql/migrations.ts";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";
import { type Store, StoreError } from "../lib/gateway/store.ts";
import type { ModelRequestEvent } from "../lib/schema.ts";
import { startPostgres } from "./support/postgres.ts";

const FIXTURES = new URL("./fixtures/store_v1/", import.meta.url).pathname;

/** What the fixtures hold (see `tests/fixtures/store_v1/make.ts`). */
async function checkFixtureData(store: Store): Promise<void> {
  const done = (await store.getRollout("done"))!;
  assert.equal(done.status, "succeeded");
  assert.deepEqual(done.input, { q: "2+2" });
  assert.deepEqual(done.labels, { split: "train" });
  assert.equal(done.version, 3);
  assert.equal(done.attempts.length, 1);
  assert.equal(done.attempts[0].status, "succeeded");
  assert.equal(done.reward, 0.75);
  assert.equal(done.reward_attempt_id, done.attempts[0].attempt_id, "backfilled from its event");
  assert.equal(done.reward_credential, null, "not recorded before schema 2");
  assert.deepEqual([done.policy_version_min, done.policy_version_max], [3, 3]);
  const lost = (await store.getRollout("lost"))!;
  assert.equal(lost.status, "requeuing");
  assert.equal(lost.attempts[0].status, "lost");
  assert.equal(lost.reward, -1);
  assert.equal(lost.reward_attempt_id, lost.attempts[0].attempt_id);
  const waiting = (await store.getRollout("waiting"))!;
  assert.equal(waiting.status, "queuing");
  assert.equal(waiting.mode, "val");
  assert.equal(waiting.reward_attempt_id, null);

  const events = await store.listEvents("done");
  assert.deepEqual(events.map((e) => e.type), [
    "status",
    "status",
    "model_request",
    "model_request",
    "log",
    "custom",
    "reward",
    "status",
  ]);
  const calls = events.filter((e): e is ModelRequestEvent => e.type === "model_request");
  const system = Array.from({ length: 40 }, (_, i) => 1000 + i);
  const first = [...system, 1, 2, 3];
  assert.deepEqual(Array.from(calls[0].payload.prompt_token_ids), first);
  // The second prompt is stored as a reference to the first plus a tail.
  assert.deepEqual(Array.from(calls[1].payload.prompt_token_ids), [...first, 50, 51, 52, 4, 5]);
  assert.deepEqual(Array.from(calls[1].payload.response_token_ids), [60, 61]);
  assert.deepEqual(Array.from(calls[1].payload.response_logprobs), [-0.25, -0.5]);
  assert.deepEqual((await store.listModels()).map((m) => [m.name, m.version]), [["policy", 3]]);
  assert.equal(await store.ensureMeta("capability_secret", "other"), "fixture-secret-v1");
  // 13 events and a model update: the change feed and the seq counter go on where they were.
  const changes = await store.changesSince(0, 100);
  assert.equal(changes.length, 14);
  assert.equal(await store.lastSeq(), changes[13].seq);
  assert.deepEqual(await store.changesSince(changes[11].seq, 10), changes.slice(12));
}

/** The migrated store takes new writes under the new rules. */
async function checkWrites(store: Store): Promise<void> {
  const [claimed] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
  assert.equal(claimed.rollout.rollout_id, "lost", "the requeued rollout comes first");
  assert.equal(claimed.attempt.index, 2);
  assert.equal(claimed.rollout.reward, null, "a new attempt starts without the old reward");
  await store.appendEvents("lost", claimed.attempt.attempt_id, [
    { type: "reward", event_key: "reward:2", payload: { value: 0.5 } },
  ], { credential: "reporter" });
  const lost = (await store.getRollout("lost"))!;
  assert.equal(lost.reward, 0.5);
  assert.equal(lost.reward_attempt_id, claimed.attempt.attempt_id);
  assert.equal(lost.reward_credential, "reporter");
  const [last] = (await store.changesSince(0, 100)).slice(-1);
  assert.equal(last.kind === "event" && last.type, "reward");
}

function sqliteVersions(path: string): number[] {
  const db = new DatabaseSync(path);
  try {
    return (db.prepare("SELECT version FROM schema_migrations ORDER BY version").all() as Array<
      { version: number }
    >).map((r) => r.version);
  } finally {
    db.close();
  }
}

async function rejectsNewer(open: () => Promise<unknown>, version: number): Promise<void> {
  await assert.rejects(open, (err: unknown) => {
    assert.ok(err instanceof StoreError, String(err));
    assert.equal(err.status, 409);
    assert.match(
      err.message,
      new RegExp(
        `^schema_version: .* has schema version ${version}, newer than version ` +
          `${SCHEMA_VERSION} that this reins reads and writes; open it with the newer reins`,
      ),
    );
    return true;
  });
}

Deno.test("migrations: the list is ordered and ends at SCHEMA_VERSION", () => {
  assert.deepEqual(MIGRATIONS.map((m) => m.version), MIGRATIONS.map((_, i) => i + 1));
  assert.equal(SCHEMA_VERSION, MIGRATIONS.length);
  assert.ok(SCHEMA_VERSION >= 2);
});

Deno.test("sqlite: a schema-1 file made before versions existed is migrated", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "reins-migrate-sqlite-" });
  try {
    await t.step("the committed fixture (written by the old store)", async () => {
      const path = `${dir}/fixture.db`;
      await Deno.copyFile(`${FIXTURES}sqlite.db`, path);
      const raw = new DatabaseSync(path);
      const tables = raw.prepare("SELECT name FROM sqlite_master WHERE type = 'table'").all();
      raw.close();
      assert.ok(!tables.some((r) => r.name === "schema_migrations"), "no versions recorded yet");
      const store = openSqliteStore(path);
      try {
        await checkFixtureData(store);
        assert.deepEqual(sqliteVersions(path), MIGRATIONS.map((m) => m.version));
        // A second handle (as a restarted gateway) opens it without migrating again.
        const again = openSqliteStore(path);
        await checkFixtureData(again);
        await again.close();
        assert.deepEqual(sqliteVersions(path), MIGRATIONS.map((m) => m.version));
        await checkWrites(store);
      } finally {
        await store.close();
      }
      // Schema 3: model calls have an index of their own, and the lookup of a new call's
      // prompt-prefix candidates searches it (other events are no longer indexed by attempt).
      const raw2 = new DatabaseSync(path);
      try {
        const indexes = raw2.prepare(
          "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'events'",
        ).all().map((r) => r.name);
        assert.ok(indexes.includes("events_model_calls"), String(indexes));
        assert.ok(!indexes.includes("events_calls"), String(indexes));
        const plan = raw2.prepare(
          `EXPLAIN QUERY PLAN ${sqliteText(new SqlFlows(SQLITE).q.recentCalls)}`,
        ).all("done", "a").map((r) => String(r.detail));
        assert.ok(
          plan.some((d) => /USING (COVERING )?INDEX events_model_calls\b/.test(d)),
          String(plan),
        );
      } finally {
        raw2.close();
      }
    });

    await t.step("a file made from schema 1 as the migration list keeps it", async () => {
      const path = `${dir}/v1.db`;
      const db = new DatabaseSync(path);
      const exec = (q: { sql: string; params: unknown[] }) =>
        db.prepare(sqliteText(q.sql)).all(...(q.params as string[]));
      assert.deepEqual(runSync(migrate(SQLITE, path, 1), exec), { from: 0, to: 1 });
      const columns = db.prepare("PRAGMA table_info(rollouts)").all().map((c) => c.name);
      assert.ok(!columns.includes("reward_attempt_id"), "schema 1 has no reward provenance");
      // Rows as schema 1 wrote them: a rollout whose reward came from attempt 1.
      db.exec(`INSERT INTO rollouts (rollout_id, group_id, mode, status, version, input, config,
        labels, created_at, updated_at, reward) VALUES ('r', 'r', 'train', 'succeeded', 3, '1',
        '{"timeout_s":600,"max_attempts":1}', '{}', 0, 0, 1)`);
      db.exec(`INSERT INTO attempts (rollout_id, attempt_id, idx, status, started_at, info)
        VALUES ('r', 'a1-0001', 1, 'succeeded', 0, '{}')`);
      db.exec(`INSERT INTO events (seq, rollout_id, attempt_id, type, created_at, payload)
        VALUES (1, 'r', 'a1-0001', 'reward', 0, '{"value":1,"name":"reward","info":{}}')`);
      db.exec("UPDATE counters SET value = 1 WHERE name = 'seq'");
      db.close();
      const store = openSqliteStore(path);
      try {
        const r = (await store.getRollout("r"))!;
        assert.equal(r.reward, 1);
        assert.equal(r.reward_attempt_id, "a1-0001");
        assert.equal(r.reward_credential, null);
        assert.equal(await store.lastSeq(), 1);
      } finally {
        await store.close();
      }
      assert.deepEqual(sqliteVersions(path), MIGRATIONS.map((m) => m.version));
    });

    await t.step("a file of a newer schema is refused and left as it was", async () => {
      const path = `${dir}/newer.db`;
      const store = openSqliteStore(path);
      await store.createRollouts([{ rollout_id: "kept", input: 1 }]);
      await store.close();
      const db = new DatabaseSync(path);
      db.prepare("INSERT INTO schema_migrations (version, name, applied_at) VALUES (?, ?, ?)")
        .run(SCHEMA_VERSION + 1, "from the future", 0);
      db.close();
      await rejectsNewer(
        () => Promise.resolve().then(() => openSqliteStore(path)),
        SCHEMA_VERSION + 1,
      );
      assert.deepEqual(sqliteVersions(path), [
        ...MIGRATIONS.map((m) => m.version),
        SCHEMA_VERSION + 1,
      ]);
      const check = new DatabaseSync(path);
      assert.equal(
        (check.prepare("SELECT count(*) AS n FROM rollouts").get() as { n: number }).n,
        1,
      );
      check.close();
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("postgres: a schema-1 database made before versions existed is migrated", async (t) => {
  const pg = await startPostgres();
  /** A new database restored from the committed `pg_dump` of the old store. */
  const fromFixture = async (): Promise<string> => {
    const url = await pg.newDatabase();
    const dump = (await Deno.readTextFile(`${FIXTURES}postgres.sql`))
      .split("\n")
      .filter((line) => !line.startsWith("\\")) // psql meta-commands (\restrict)
      .join("\n");
    // The dump empties search_path for its session: a connection of its own.
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      await sql.unsafe(dump).simple();
    } finally {
      await sql.end({ timeout: 1 });
    }
    return url;
  };
  const versions = async (url: string): Promise<number[]> => {
    const sql = postgres(url, { max: 1, onnotice: () => {} });
    try {
      const rows = await sql.unsafe(
        "SELECT version FROM reins_schema_migrations ORDER BY version",
      );
      return rows.map((r) => Number(r.version));
    } finally {
      await sql.end({ timeout: 1 });
    }
  };
  try {
    await t.step("the committed fixture (a pg_dump of the old store)", async () => {
      const url = await fromFixture();
      const store = await openPostgresStore(url);
      try {
        await checkFixtureData(store);
        assert.deepEqual(await versions(url), MIGRATIONS.map((m) => m.version));
        await checkWrites(store);
      } finally {
        await store.close();
      }
    });

    await t.step("gateways opening an old database together migrate it once", async () => {
      const url = await fromFixture();
      const stores = await Promise.all([1, 2, 3].map(() => openPostgresStore(url)));
      try {
        assert.deepEqual(await versions(url), MIGRATIONS.map((m) => m.version));
        for (const store of stores) await checkFixtureData(store);
      } finally {
        for (const store of stores) await store.close();
      }
    });

    await t.step("a database made from schema 1 as the migration list keeps it", async () => {
      const url = await pg.newDatabase();
      const sql = postgres(url, { max: 1, onnotice: () => {} });
      try {
        await sql.begin(async (tx) => {
          const exec = async (q: { sql: string; params: unknown[] }) =>
            [...await tx.unsafe(q.sql, q.params as never[])] as unknown[];
          assert.deepEqual(await runAsync(migrate(POSTGRES, url, 1), exec), { from: 0, to: 1 });
          await tx.unsafe(`INSERT INTO reins_rollouts (pos, rollout_id, group_id, mode, status,
            version, input, config, labels, created_at, updated_at, reward) VALUES (
            nextval('reins_seq'), 'r', 'r', 'train', 'succeeded', 3, '1',
            '{"timeout_s":600,"max_attempts":1}', '{}', 0, 0, 1)`);
          await tx.unsafe(`INSERT INTO reins_attempts (rollout_id, attempt_id, idx, status,
            started_at, info) VALUES ('r', 'a1-0001', 1, 'succeeded', 0, '{}')`);
          await tx.unsafe(`INSERT INTO reins_events (seq, rollout_id, attempt_id, type, created_at,
            payload) VALUES (nextval('reins_seq'), 'r', 'a1-0001', 'reward', 0,
            '{"value":1,"name":"reward","info":{}}')`);
        });
      } finally {
        await sql.end({ timeout: 1 });
      }
      const store = await openPostgresStore(url);
      try {
        const r = (await store.getRollout("r"))!;
        assert.equal(r.reward, 1);
        assert.equal(r.reward_attempt_id, "a1-0001");
        assert.equal(r.reward_credential, null);
      } finally {
        await store.close();
      }
      assert.deepEqual(await versions(url), MIGRATIONS.map((m) => m.version));
    });

    await t.step("a database of a newer schema is refused and left as it was", async () => {
      const url = await pg.newDatabase();
      const store = await openPostgresStore(url);
      await store.createRollouts([{ rollout_id: "kept", input: 1 }]);
      await store.close();
      const sql = postgres(url, { max: 1, onnotice: () => {} });
      try {
        await sql.unsafe(
          "INSERT INTO reins_schema_migrations (version, name, applied_at) VALUES ($1, $2, 0)",
          [SCHEMA_VERSION + 1, "from the future"],
        );
        await rejectsNewer(() => openPostgresStore(url), SCHEMA_VERSION + 1);
        const [{ n }] = await sql.unsafe("SELECT count(*)::int AS n FROM reins_rollouts");
        assert.equal(n, 1);
      } finally {
        await sql.end({ timeout: 1 });
      }
      assert.deepEqual(await versions(url), [
        ...MIGRATIONS.map((m) => m.version),
        SCHEMA_VERSION + 1,
      ]);
    });
  } finally {
    await pg.stop();
  }
});
