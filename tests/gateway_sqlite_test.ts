/**
 * The SQLite backend passes the store conformance suite (on a file, so that a second handle
 * sees the same data as a second process would).
 */
import { openSqliteStore, type SqliteStore } from "../lib/gateway/sqlite_store.ts";
import { runStoreConformance } from "./support/store_conformance.ts";

Deno.test("sqlite store: conformance", async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "reins-gw-sqlite-" });
  let n = 0;
  try {
    await runStoreConformance(t, {
      open: () => Promise.resolve(openSqliteStore(`${dir}/store-${n++}.db`)),
      reopen: (store) => Promise.resolve(openSqliteStore((store as SqliteStore).path)),
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
