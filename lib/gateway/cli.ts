/**
 * Command line entry of the gateway:
 *
 * ```sh
 * deno task gateway --db runs/x.db --port 8420
 * deno task gateway --postgres postgres://user@host/db --port 8420
 * ```
 *
 * The admin key comes from `$REINS_ADMIN_KEY`, else from `--admin-key-file` (created with a
 * fresh random key when missing), else from `<db>.key` next to the SQLite file (or
 * `runs/gateway.key`). Only the key's source is printed, never the key, unless `--print-key`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { dirname } from "node:path";
import { randomKey } from "./auth.ts";
import { startGateway } from "./server.ts";

const USAGE = `usage: deno task gateway [--db FILE | --postgres URL] [--port N] [--host H]
  [--admin-key-file FILE] [--print-key] [--synchronous FULL|NORMAL] [--lease-sweep-ms N]`;

/**
 * Runs the gateway until SIGINT/SIGTERM.
 *
 * @example
 * ```ts
 * import { main } from "./cli.ts";
 * await main(["--db", "runs/demo.db", "--port", "0"]);
 * ```
 */
export async function main(args: string[]): Promise<void> {
  const { values } = parseArgs({
    args,
    options: {
      db: { type: "string" },
      postgres: { type: "string" },
      port: { type: "string", default: "8420" },
      host: { type: "string", default: "127.0.0.1" },
      "admin-key-file": { type: "string" },
      "print-key": { type: "boolean", default: false },
      synchronous: { type: "string", default: "FULL" },
      "lease-sweep-ms": { type: "string", default: "1000" },
      help: { type: "boolean", default: false },
    },
    strict: true,
  });
  if (values.help) {
    console.log(USAGE);
    return;
  }
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    throw new Error(`--port: expected a port number, got '${values.port}'`);
  }
  const synchronous = values.synchronous?.toUpperCase();
  if (synchronous !== "FULL" && synchronous !== "NORMAL") {
    throw new Error(`--synchronous: expected FULL or NORMAL, got '${values.synchronous}'`);
  }
  const leaseSweepMs = Number(values["lease-sweep-ms"]);
  if (!Number.isInteger(leaseSweepMs) || leaseSweepMs < 0) {
    throw new Error(
      `--lease-sweep-ms: expected a whole number of ms, got '${values["lease-sweep-ms"]}'`,
    );
  }
  if (values.db && values.postgres) {
    throw new Error("--db and --postgres: give one store, not both");
  }
  const db = values.db ?? (values.postgres ? undefined : "runs/gateway.db");
  if (db && db !== ":memory:") await Deno.mkdir(dirname(db), { recursive: true });

  let adminKey = Deno.env.get("REINS_ADMIN_KEY");
  let keySource = "environment variable REINS_ADMIN_KEY";
  if (!adminKey) {
    const file = values["admin-key-file"] ??
      (db && db !== ":memory:" ? `${db}.key` : "runs/gateway.key");
    adminKey = await readOrCreateKey(file);
    keySource = `file ${file} (export REINS_ADMIN_KEY=$(cat ${file}))`;
  }

  const gateway = await startGateway({
    db,
    postgres: values.postgres,
    port,
    hostname: values.host,
    adminKey,
    sqlite: { synchronous },
    leaseSweepMs,
  });
  const store = values.postgres ? "postgres" : `sqlite ${db}`;
  console.log(`reins gateway listening on ${gateway.url} (store: ${store})`);
  console.log(`admin key: ${values["print-key"] ? adminKey : keySource}`);

  const stopped = Promise.withResolvers<void>();
  const stop = () => stopped.resolve();
  Deno.addSignalListener("SIGINT", stop);
  Deno.addSignalListener("SIGTERM", stop);
  await stopped.promise;
  Deno.removeSignalListener("SIGINT", stop);
  Deno.removeSignalListener("SIGTERM", stop);
  await gateway.close();
}

async function readOrCreateKey(file: string): Promise<string> {
  try {
    const key = (await Deno.readTextFile(file)).trim();
    if (key) return key;
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  await Deno.mkdir(dirname(file), { recursive: true });
  const key = randomKey("ra_");
  await Deno.writeTextFile(file, key + "\n", { mode: 0o600 });
  return key;
}

if (import.meta.main) {
  try {
    await main(Deno.args);
  } catch (err) {
    console.error(`gateway: ${err instanceof Error ? err.message : err}`);
    console.error(USAGE);
    Deno.exit(2);
  }
}
