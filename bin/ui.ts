/**
 * `deno run -A bin/ui.ts --db runs/x.db` serves a gateway with the Live UI over an existing
 * SQLite file (`--db` is required; a missing file is an error unless `--create`): to watch a run
 * live from a second process (the change feed picks up the other
 * process's writes) or to inspect a finished one. It prints the login URL; the admin key comes
 * from `$REINS_ADMIN_KEY`, else from `<db>.key` (created when missing), as with the gateway's
 * own command line.
 *
 * ```
 * deno run -A bin/ui.ts --db runs/exp1/gateway.db --port 8421 --tokenizer qwen3 \
 *   --metrics runs/exp1/metrics.jsonl
 * ```
 *
 * @module
 */
import { dirname } from "node:path";
import { parseFlags, portFlag } from "../lib/flags.ts";
import { readOrCreateKey } from "../lib/gateway/auth.ts";
import { monitorsWithModules } from "../lib/monitors/module.ts";
import { startStack } from "../lib/stack/stack.ts";
import type { ChatTokenizer } from "../lib/tokens/types.ts";
import { loginLink } from "../lib/ui/auth.ts";
import { loadTokenizerFlag } from "../lib/ui/run_tokenizer.ts";

async function isFile(path: string): Promise<boolean> {
  return await Deno.stat(path).then((s) => s.isFile, () => false);
}

async function isDirectory(path: string): Promise<boolean> {
  return await Deno.stat(path).then((s) => s.isDirectory, () => false);
}

const USAGE = `usage: deno run -A bin/ui.ts --db FILE [--create] [--port N] [--host H]
  [--tokenizer auto|qwen3|char|none|DIR] [--run-dir DIR] [--metrics FILE.jsonl]
  [--runs-dir DIR] [--no-monitors] [--monitors-module FILE]... [--admin-key-file FILE]
  --db FILE        the run's SQLite store, e.g. runs/demo/gateway.db (:memory: for an empty one)
  --create         create FILE when it does not exist (otherwise a missing file is an error)
  --tokenizer T    how token ids are decoded; auto (default) reads it from the run: its
                   tokenizer.json or config.json, else the stored calls
  --run-dir DIR    the run's directory (default: the folder of --db)
  --metrics FILE   the run's metrics.jsonl (default: DIR/metrics.jsonl when it exists)
  --runs-dir DIR   list the runs under DIR (e.g. runs/ or experiments/results) on /ui/runs
  --monitors-module FILE
                   also run the monitors FILE's monitors() returns, on the checking thread
                   under the time budget like the built-ins (repeatable)`;

/** Options of {@link main} besides the command line. */
export interface UiCliOptions {
  /** Stops the server when aborted (default: SIGINT/SIGTERM). */
  signal?: AbortSignal;
  /** Called once listening, with the base URL of the UI. */
  onListen?: (uiUrl: string) => void;
}

/**
 * Runs the UI server until `signal` aborts (or SIGINT/SIGTERM).
 *
 * @example
 * ```ts
 * import { main } from "./ui.ts";
 * const dir = await Deno.makeTempDir();
 * const stop = new AbortController();
 * const done = main(["--db", ":memory:", "--port", "0", "--admin-key-file", `${dir}/ui.key`], {
 *   signal: stop.signal,
 *   onListen: (url) => console.log(`UI at ${url}`),
 * });
 * stop.abort();
 * await done;
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function main(args: string[], options: UiCliOptions = {}): Promise<void> {
  const values = parseFlags(
    args,
    {
      db: { type: "string" },
      create: { type: "boolean", default: false },
      port: { type: "string", default: "8421" },
      host: { type: "string", default: "127.0.0.1" },
      tokenizer: { type: "string", default: "auto" },
      "run-dir": { type: "string" },
      metrics: { type: "string" },
      "runs-dir": { type: "string" },
      "no-monitors": { type: "boolean", default: false },
      "monitors-module": { type: "string", multiple: true },
      "admin-key-file": { type: "string" },
    },
    USAGE,
  );
  if (!values) return;
  const port = portFlag(values.port);
  const modules = values["monitors-module"] ?? [];
  if (modules.length && values["no-monitors"]) {
    throw new Error("--monitors-module: cannot be given with --no-monitors");
  }
  const monitors = modules.length ? await monitorsWithModules(modules) : undefined;
  // Checked before anything starts: a bad name fails here, not on the first page.
  const tokenizer: ChatTokenizer | "auto" | undefined = values.tokenizer === "auto"
    ? "auto"
    : values.tokenizer === "none"
    ? undefined
    : await loadTokenizerFlag(values.tokenizer);
  // A UI over a file that is not there would show an empty store and leave a stray database
  // behind: say so instead, unless asked to create one.
  const db = values.db;
  if (!db) throw new Error("--db: required (the run's SQLite file, e.g. runs/demo/gateway.db)");
  let opened = "in-memory, empty";
  if (db !== ":memory:") {
    const size = await Deno.stat(db).then((s) => s.size, (error) => {
      if (error instanceof Deno.errors.NotFound) return null;
      throw error;
    });
    if (size === null && !values.create) {
      throw new Error(`--db: ${db} does not exist (pass --create to start an empty store there)`);
    }
    if (size === null) await Deno.mkdir(dirname(db), { recursive: true });
    opened = size === null ? `${db}, created (--create)` : `${db}, existing file of ${size} bytes`;
  }
  const runDir = values["run-dir"] ?? (db !== ":memory:" ? dirname(db) : undefined);
  if (values["run-dir"] && !(await isDirectory(values["run-dir"]))) {
    throw new Error(`--run-dir: ${values["run-dir"]} is not a directory`);
  }
  if (values.metrics && !(await isFile(values.metrics))) {
    throw new Error(`--metrics: ${values.metrics} does not exist`);
  }
  if (values["runs-dir"] && !(await isDirectory(values["runs-dir"]))) {
    throw new Error(`--runs-dir: ${values["runs-dir"]} is not a directory`);
  }
  const metrics = values.metrics ??
    (runDir && await isFile(`${runDir}/metrics.jsonl`) ? `${runDir}/metrics.jsonl` : undefined);
  let adminKey = Deno.env.get("REINS_ADMIN_KEY");
  let keySource = "environment variable REINS_ADMIN_KEY";
  if (!adminKey) {
    const file = values["admin-key-file"] ?? (db !== ":memory:" ? `${db}.key` : "runs/gateway.key");
    adminKey = await readOrCreateKey(file);
    keySource = `file ${file}`;
  }
  const stack = await startStack({
    db,
    port,
    hostname: values.host,
    adminKey,
    // Another gateway may own this file; leave lease expiry to it.
    leaseSweepMs: 0,
    ui: {
      ...(tokenizer ? { tokenizer } : {}),
      ...(runDir ? { runDir } : {}),
      ...(metrics ? { metricsPath: metrics } : {}),
      ...(values["runs-dir"] ? { runsDir: values["runs-dir"] } : {}),
      ...(values["no-monitors"] ? { monitors: false as const } : {}),
      ...(monitors ? { monitors } : {}),
    },
  });
  const gateway = stack.gateway;
  const ui = stack.ui!;
  console.log(
    `reins UI on ${gateway.url}/ui/ (store: sqlite ${opened}; log in at ${gateway.url}/ui/login)`,
  );
  console.log(`admin key: ${keySource}`);
  const chosen = await ui.tokenizer();
  console.log(`tokenizer: ${chosen?.name ?? "none"} (${chosen?.reason ?? "none given"})`);
  // The key rides in the fragment, which browsers never send: the login page posts it.
  console.log(`one-click login: ${loginLink(gateway.url, adminKey)}`);
  options.onListen?.(`${gateway.url}/ui`);

  const stopped = Promise.withResolvers<void>();
  const stop = () => stopped.resolve();
  if (options.signal) {
    if (options.signal.aborted) stop();
    options.signal.addEventListener("abort", stop, { once: true });
  } else {
    Deno.addSignalListener("SIGINT", stop);
    Deno.addSignalListener("SIGTERM", stop);
  }
  await stopped.promise;
  if (!options.signal) {
    Deno.removeSignalListener("SIGINT", stop);
    Deno.removeSignalListener("SIGTERM", stop);
  }
  await stack.close();
}

if (import.meta.main) {
  try {
    await main(Deno.args);
  } catch (err) {
    // One line naming the flag or file; the usage is a `--help` away.
    console.error(`ui: ${err instanceof Error ? err.message : err} (see --help)`);
    Deno.exit(2);
  }
}
