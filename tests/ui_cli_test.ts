/**
 * The UI command line: serves the UI over a SQLite file that another store writes to, sees
 * those writes, and refuses bad flags naming them.
 */
import assert from "node:assert/strict";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";
import { main } from "../bin/ui.ts";

Deno.test("ui cli serves a SQLite file another writer fills", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_ui_cli_" });
  const db = `${dir}/run.db`;
  const writer = openSqliteStore(db);
  const stop = new AbortController();
  try {
    await writer.createRollouts([{ rollout_id: "a1", input: {} }]);
    const listening = Promise.withResolvers<string>();
    const done = main(
      [
        "--db",
        db,
        "--port",
        "0",
        "--tokenizer",
        "none",
        "--no-monitors",
        "--admin-key-file",
        `${dir}/key`,
      ],
      { signal: stop.signal, onListen: listening.resolve },
    );
    const base = await listening.promise;
    const key = (await Deno.readTextFile(`${dir}/key`)).trim();
    const list = async () => {
      const res = await fetch(`${base}/api/rollouts`, {
        headers: { authorization: `Bearer ${key}` },
      });
      assert.equal(res.status, 200);
      return (await res.json()).items.map((r: { rollout_id: string }) => r.rollout_id);
    };
    assert.deepEqual(await list(), ["a1"]);
    await writer.createRollouts([{ rollout_id: "a2", input: {} }]);
    assert.deepEqual(await list(), ["a2", "a1"], "newest first");
    const denied = await fetch(`${base}/api/rollouts`);
    assert.equal(denied.status, 401);
    await denied.body?.cancel();
    stop.abort();
    await done;
  } finally {
    stop.abort();
    await writer.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("ui cli refuses bad flags naming them", async () => {
  await assert.rejects(main(["--db", ":memory:", "--port", "99999"]), /--port: expected a port/);
  await assert.rejects(
    main(["--db", ":memory:", "--port", "0", "--tokenizer", "gpt"]),
    /--tokenizer: expected char, qwen3 or a directory holding tokenizer\.json, got 'gpt'/,
  );
  const spinning = "tests/fixtures/spinning_monitors.ts";
  await assert.rejects(
    main(["--db", ":memory:", "--port", "0", "--no-monitors", "--monitors-module", spinning]),
    /--monitors-module: cannot be given with --no-monitors/,
  );
  await assert.rejects(
    main([
      "--db",
      ":memory:",
      "--port",
      "0",
      "--monitors-module",
      spinning,
      "--monitors-module",
      spinning,
    ]),
    /--monitors-module: tests\/fixtures\/spinning_monitors\.ts: monitor 'spins' is named by another module/,
  );
});

Deno.test("ui cli without --db, or with a missing file, refuses and creates nothing", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_ui_cli_" });
  const db = `${dir}/runs/x/gateway.db`;
  try {
    // Before the fix, no --db meant a silent runs/gateway.db in the working directory.
    await assert.rejects(main(["--port", "0", "--tokenizer", "none"]), /--db: required/);
    await assert.rejects(
      main(["--db", db, "--port", "0", "--tokenizer", "none"]),
      new RegExp(`--db: ${db} does not exist \\(pass --create`),
    );
    const left: string[] = [];
    for await (const e of Deno.readDir(dir)) left.push(e.name);
    assert.deepEqual(left, [], "no runs/, no gateway.db, no key file");
    // --create makes it, and says so.
    const logs: string[] = [];
    const log = console.log;
    console.log = (...a: unknown[]) => logs.push(a.join(" "));
    const stop = new AbortController();
    try {
      const listening = Promise.withResolvers<string>();
      const done = main(
        ["--db", db, "--create", "--port", "0", "--tokenizer", "none"],
        { signal: stop.signal, onListen: listening.resolve },
      );
      await listening.promise;
      stop.abort();
      await done;
    } finally {
      console.log = log;
    }
    assert.ok(logs.some((l) => l.includes(`store: sqlite ${db}, created (--create)`)), logs[0]);
    assert.ok((await Deno.stat(db)).isFile);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
