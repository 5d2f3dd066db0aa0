/**
 * The SQLite store's durability barrier: fsyncs a WAL file off the event loop (Deno runs
 * `fdatasync` on its blocking-I/O threads), so that `synchronous: "FULL"` no longer holds the
 * gateway's thread for the ~50 ms a commit's fsync takes on a loaded disk (issue #29).
 *
 * The rule: an operation is acknowledged only after an fsync of the WAL that *started after*
 * its COMMIT. A sync already running may have started before, so a caller gets the next one;
 * every commit made while one runs shares that next one (at most one is queued), which is a
 * group commit of fsyncs.
 *
 * @module
 */

/**
 * Fsyncs of one WAL file, coalesced.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { WalSync } from "./sqlite_wal_sync.ts";
 * const path = await Deno.makeTempFile({ suffix: ".db-wal" });
 * const sync = new WalSync(path, path);
 * await Deno.writeTextFile(path, "frames");
 * const first = sync.sync(); // starts at once
 * const second = sync.sync(); // queued behind it (the first may predate this commit) ...
 * assert.equal(sync.sync(), second); // ... and shared by every commit until it starts
 * await Promise.all([first, second]);
 * assert.equal(sync.pending(), null);
 * sync.close();
 * await Deno.remove(path);
 * ```
 */
export class WalSync {
  readonly #walPath: string;
  readonly #label: string;
  #wal: Deno.FsFile | null = null;
  #syncing: Promise<void> | null = null;
  #queued: Promise<void> | null = null;

  /** `label` names the store in errors (the database file). */
  constructor(walPath: string, label: string) {
    this.#walPath = walPath;
    this.#label = label;
  }

  /** Resolves once an fsync that started after this call has finished. */
  sync(): Promise<void> {
    if (this.#queued) return this.#queued;
    if (!this.#syncing) return this.#start();
    const queued = this.#syncing.catch(() => {}).then(() => {
      this.#queued = null;
      return this.#start();
    });
    this.#queued = queued;
    return queued;
  }

  /** The latest fsync still to finish, if any. */
  pending(): Promise<void> | null {
    return this.#queued ?? this.#syncing;
  }

  /** The fsync running now, if any (one queued behind it is not counted). */
  running(): Promise<void> | null {
    return this.#syncing;
  }

  /** Closes the file (after {@link pending} settled). */
  close(): void {
    this.#wal?.close();
    this.#wal = null;
  }

  #start(): Promise<void> {
    const run = this.#fsync();
    this.#syncing = run;
    const clear = () => {
      if (this.#syncing === run) this.#syncing = null;
    };
    run.then(clear, clear);
    return run;
  }

  async #fsync(): Promise<void> {
    try {
      if (!this.#wal) {
        try {
          this.#wal = await Deno.open(this.#walPath, { read: true });
        } catch (err) {
          if (err instanceof Deno.errors.NotFound) return; // nothing was ever logged
          throw err;
        }
        await syncDirectory(this.#walPath); // the log's directory entry, once
      }
      await this.#wal.syncData();
    } catch (err) {
      const message = err instanceof Error ? err.message : String(err);
      throw new Error(`SQLite file '${this.#label}': fsync of its log failed: ${message}`, {
        cause: err,
      });
    }
  }
}

/** Fsyncs the directory holding `path` (a new file's entry), where the platform allows it. */
async function syncDirectory(path: string): Promise<void> {
  const dir = path.includes("/") ? path.slice(0, path.lastIndexOf("/")) || "/" : ".";
  try {
    const handle = await Deno.open(dir, { read: true });
    try {
      await handle.syncData();
    } finally {
      handle.close();
    }
  } catch {
    // Not every platform opens or syncs directories; the WAL's data sync still stands.
  }
}
