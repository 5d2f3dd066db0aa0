/**
 * The SQLite store's checkpointer: a worker thread with its own connection to the store's file
 * that copies the write-ahead log into the database (`PRAGMA wal_checkpoint(PASSIVE)`, which
 * never blocks a writer) whenever the store says it committed. A checkpoint writes up to the
 * whole WAL into the database and fsyncs both files: on the gateway's thread it held the event
 * loop for tens of milliseconds every 1 000 pages (issue #29), here it holds nobody.
 *
 * The gateway's own connection keeps SQLite's automatic checkpoint only as a safety net at a
 * much larger WAL ({@link SAFETY_NET_WAL_PAGES}), for when this thread cannot keep up or died.
 *
 * Started through `node:worker_threads` (not a web `Worker`) so that it can be unref'd: a store
 * a script forgets to close must not keep the process alive.
 *
 * @module
 */
import { DatabaseSync } from "node:sqlite";
import process from "node:process";
import { isMainThread, parentPort, Worker, workerData } from "node:worker_threads";

/** WAL pages after which the store's own connection checkpoints anyway (16 KiB pages: 64 MiB). */
export const SAFETY_NET_WAL_PAGES = 4_096;

/**
 * How long the worker waits after a commit before it checkpoints: commits come in bursts, and
 * each checkpoint costs two fsyncs and disk bandwidth the writers share (at 100 ms, a proxy
 * recording every call checkpointed ten times a second and its p50 doubled).
 */
const CHECKPOINT_DELAY_MS = 1_000;

interface CheckpointerData {
  path: string;
  busyTimeoutMs: number;
}

/** The store's handle on its checkpointer thread. */
export interface Checkpointer {
  /** Says a transaction was committed (cheap; checkpoints are coalesced by the worker). */
  committed(): void;
  /** Stops the thread after its current checkpoint, closing its connection. */
  close(): Promise<void>;
}

/**
 * Starts the checkpointer thread for the SQLite file at `path`; `onFailure` is told when the
 * thread cannot run (the store then checkpoints on its own thread again).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { DatabaseSync } from "node:sqlite";
 * import { startCheckpointer } from "./sqlite_checkpointer.ts";
 * const path = await Deno.makeTempFile({ suffix: ".db" });
 * const db = new DatabaseSync(path);
 * db.exec("PRAGMA journal_mode = WAL; PRAGMA wal_autocheckpoint = 0; CREATE TABLE t (x)");
 * db.exec("INSERT INTO t VALUES (1)");
 * const before = Deno.statSync(path).size; // the table and its row are still in the log
 * const checkpointer = startCheckpointer(path, 1_000, (err) => assert.fail(String(err)));
 * checkpointer.committed();
 * for (let i = 0; i < 200 && Deno.statSync(path).size === before; i++) {
 *   await new Promise((r) => setTimeout(r, 50)); // the thread starts, waits 1 s, copies
 * }
 * await checkpointer.close();
 * assert.ok(Deno.statSync(path).size > before); // copied into the database by the worker
 * db.close();
 * await Deno.remove(path);
 * ```
 */
export function startCheckpointer(
  path: string,
  busyTimeoutMs: number,
  onFailure: (err: unknown) => void,
): Checkpointer {
  const data: CheckpointerData = { path, busyTimeoutMs };
  const worker = new Worker(new URL(import.meta.url), { workerData: data });
  worker.unref();
  let failed = false;
  let exited = false;
  const exit = new Promise<void>((resolve) => {
    worker.once("exit", () => {
      exited = true;
      resolve();
    });
  });
  worker.on("error", (err) => {
    if (failed) return;
    failed = true;
    onFailure(err);
  });
  // A message costs the gateway's thread ~10-25 µs, once per group commit. The worker
  // checkpoints CHECKPOINT_DELAY_MS after the message that scheduled one, so a commit within
  // half that delay of the last message is already covered by the checkpoint it scheduled (at
  // worst, when the worker's timer came from an earlier message, its frames wait in the log
  // for the next commit's message).
  let lastMessage = -Infinity;
  return {
    committed() {
      if (failed || exited) return;
      const now = performance.now();
      if (now - lastMessage < CHECKPOINT_DELAY_MS / 2) return;
      lastMessage = now;
      worker.postMessage("committed");
    },
    async close() {
      if (!exited) worker.postMessage("close");
      // A thread stuck in a checkpoint past the busy timeout is not worth waiting for.
      const timer = setTimeout(() => worker.terminate(), busyTimeoutMs + 1_000);
      await exit;
      clearTimeout(timer);
    },
  };
}

/**
 * Hands `db`'s checkpoints to a checkpointer thread: the connection itself checkpoints only at
 * {@link SAFETY_NET_WAL_PAGES}, or again at SQLite's default 1 000 pages when the thread cannot
 * run (`isClosed` tells whether `db` may still be used then).
 */
export function checkpointOffThread(
  db: DatabaseSync,
  path: string,
  busyTimeoutMs: number,
  isClosed: () => boolean,
): Checkpointer | null {
  let checkpointer: Checkpointer | null = null;
  const fallBack = () => {
    if (!isClosed()) db.exec("PRAGMA wal_autocheckpoint = 1000"); // SQLite's default
  };
  try {
    db.exec(`PRAGMA wal_autocheckpoint = ${SAFETY_NET_WAL_PAGES}`);
    checkpointer = startCheckpointer(path, busyTimeoutMs, (err) => {
      console.error(
        `SQLite file '${path}': the checkpoint thread failed, checkpointing on the main one:`,
        err instanceof Error ? err.message : err,
      );
      fallBack();
    });
  } catch {
    fallBack();
  }
  return checkpointer;
}

/** The worker's side: one connection, one checkpoint at a time, coalesced. */
function runWorker(port: NonNullable<typeof parentPort>, data: CheckpointerData): void {
  const db = new DatabaseSync(data.path);
  db.exec(`PRAGMA busy_timeout = ${data.busyTimeoutMs}`);
  // This connection only checkpoints: NORMAL fsyncs the WAL before and the database after.
  db.exec("PRAGMA synchronous = NORMAL");
  db.exec("PRAGMA wal_autocheckpoint = 0");
  let timer: ReturnType<typeof setTimeout> | undefined;
  const checkpoint = () => {
    timer = undefined;
    try {
      db.exec("PRAGMA wal_checkpoint(PASSIVE)");
    } catch {
      // Busy or locked: the next commit asks again, and the safety net stays.
    }
  };
  port.on("message", (message: string) => {
    if (message === "committed") {
      timer ??= setTimeout(checkpoint, CHECKPOINT_DELAY_MS);
    } else if (message === "close") {
      if (timer !== undefined) clearTimeout(timer);
      db.close();
      // Ends this thread only (in a worker, `process.exit` stops the worker).
      process.exit(0);
    }
  });
}

if (!isMainThread && parentPort && (workerData as CheckpointerData | undefined)?.path) {
  runWorker(parentPort, workerData as CheckpointerData);
}
