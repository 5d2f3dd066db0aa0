/**
 * The SQLite store's disk work off the event loop (issue #29): with `synchronous: "FULL"` the
 * WAL is fsynced on Deno's I/O threads before a write is acknowledged, and checkpoints run on a
 * worker thread with its own connection. What these change is visible from outside: the
 * database file fills while the store keeps writing (the worker checkpoints; the store's own
 * connection would only at a 64 MiB WAL), the store's connection no longer syncs by itself,
 * and a store nobody closes does not keep its process alive. The SIGKILL durability test
 * (`gateway_durability_test.ts`) and the conformance suite run on the same code.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";

const log = (text: string) => ({
  type: "log" as const,
  payload: { stream: "stdout" as const, text },
});

Deno.test("sqlite off-thread: the checkpoint thread copies the log into the database while the store writes", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-sqlite-offthread-" });
  const path = `${dir}/run.db`;
  const store = openSqliteStore(path);
  try {
    await store.createRollouts([{ rollout_id: "r", input: {} }]);
    const [{ attempt }] = await store.claimRollouts({ worker: "w", limit: 1, lease_ms: 60_000 });
    const before = (await Deno.stat(path)).size;
    // ~4 MB of events: 250 pages of 16 KiB, far under SQLite's own 1 000-page checkpoint
    // (and the store's 4 096-page safety net), so only the worker moves them.
    for (let i = 0; i < 40; i++) {
      const events = Array.from({ length: 50 }, (_, j) => log(`${i}/${j} ${"z".repeat(2_000)}`));
      await store.appendEvents("r", attempt.attempt_id, events);
    }
    let size = before;
    for (let i = 0; i < 200 && size < before + 3_000_000; i++) {
      await new Promise((r) => setTimeout(r, 50));
      size = (await Deno.stat(path)).size;
    }
    assert.ok(size >= before + 3_000_000, `database file ${before} → ${size} bytes`);
    assert.equal((await store.listEvents("r", { type: "log" })).length, 2_000);
  } finally {
    await store.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("sqlite off-thread: FULL, NORMAL and :memory: stores commit what they acknowledge", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-sqlite-offthread-" });
  try {
    for (
      const [synchronous, path] of [["FULL", `${dir}/full.db`], [
        "NORMAL",
        `${dir}/normal.db`,
      ]] as const
    ) {
      const store = openSqliteStore(path, { synchronous });
      await store.createRollouts([{ rollout_id: "r", input: {} }]);
      await store.close();
      // A second connection reads what the store committed and acknowledged.
      const db = new DatabaseSync(path);
      const [row] = db.prepare("SELECT count(*) AS n FROM rollouts").all() as Array<{ n: number }>;
      db.close();
      assert.equal(row.n, 1, synchronous);
    }
    const memory = openSqliteStore(":memory:");
    await memory.createRollouts([{ rollout_id: "m", input: {} }]);
    assert.equal((await memory.getRollout("m"))?.status, "queuing");
    await memory.close();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("sqlite off-thread: a store nobody closes does not keep its process alive, and its writes are on disk", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-sqlite-offthread-" });
  const path = `${dir}/run.db`;
  try {
    const script = `
      import { openSqliteStore } from ${
      JSON.stringify(new URL("../lib/gateway/sqlite_store.ts", import.meta.url).href)
    };
      const store = openSqliteStore(${JSON.stringify(path)});
      await store.createRollouts([{ rollout_id: "left-open", input: {} }]);
      console.log("written");`;
    const child = new Deno.Command(Deno.execPath(), {
      args: [
        "eval",
        "--no-check",
        "--config",
        new URL("../deno.json", import.meta.url).pathname,
        script,
      ],
      stdout: "piped",
      stderr: "piped",
    }).spawn();
    const timer = setTimeout(() => child.kill("SIGKILL"), 60_000);
    const out = await child.output();
    clearTimeout(timer);
    const stdout = new TextDecoder().decode(out.stdout);
    assert.equal(out.code, 0, new TextDecoder().decode(out.stderr));
    assert.match(stdout, /written/);
    const store = openSqliteStore(path);
    assert.equal((await store.getRollout("left-open"))?.status, "queuing");
    await store.close();
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
