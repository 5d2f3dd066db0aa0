/**
 * The SQLite backend passes the store conformance suite (on a file, so that a second handle
 * sees the same data as a second process would).
 */
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
