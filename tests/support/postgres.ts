/**
 * Throwaway PostgreSQL clusters for tests and benches: `initdb` into a temp dir, `pg_ctl start`
 * on a random loopback port (socket dir in the temp dir), and a `stop()` that removes it all.
 * PostgreSQL refuses to run as root, so as root the binaries run as the `postgres` OS user via
 * `runuser`. When the server binaries are missing this throws, telling to install `postgresql`.
 *
 * @module
 */
import postgres from "postgres";

/** A running throwaway cluster. */
export interface TestPostgres {
  /** Base URL without a database, e.g. `postgres://postgres@127.0.0.1:5433`. */
  baseUrl: string;
  /** URL of a fresh, empty database (created on each call). */
  newDatabase(): Promise<string>;
  /** Stops the server and removes its files. */
  stop(): Promise<void>;
}

/** Finds the PostgreSQL server binaries (Debian layout). */
export function findPostgresBin(): string {
  const roots: string[] = [];
  try {
    for (const entry of Deno.readDirSync("/usr/lib/postgresql")) roots.push(entry.name);
  } catch {
    // Reported below.
  }
  roots.sort((a, b) => Number(b) - Number(a));
  for (const version of ["15", ...roots]) {
    const bin = `/usr/lib/postgresql/${version}/bin`;
    try {
      Deno.statSync(`${bin}/initdb`);
      Deno.statSync(`${bin}/pg_ctl`);
      return bin;
    } catch {
      // Try the next version.
    }
  }
  throw new Error(
    "PostgreSQL server binaries (initdb, pg_ctl) not found under /usr/lib/postgresql/*/bin: " +
      "install the Debian package `postgresql` (apt-get install -y postgresql)",
  );
}

function freePort(): number {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const port = (listener.addr as Deno.NetAddr).port;
  listener.close();
  return port;
}

async function run(argv: string[], asPostgres: boolean): Promise<void> {
  const full = asPostgres ? ["runuser", "-u", "postgres", "--", ...argv] : argv;
  const out = await new Deno.Command(full[0], {
    args: full.slice(1),
    stdout: "piped",
    stderr: "piped",
  }).output();
  if (!out.success) {
    const text = new TextDecoder().decode(out.stderr) + new TextDecoder().decode(out.stdout);
    throw new Error(`${argv.join(" ")} failed (${out.code}): ${text.slice(-2000)}`);
  }
}

/**
 * Starts a throwaway cluster.
 *
 * @example
 * ```ts
 * import { startPostgres } from "./postgres.ts";
 * const pg = await startPostgres();
 * const url = await pg.newDatabase();
 * // ... open a store on url ...
 * await pg.stop();
 * ```
 */
export async function startPostgres(options: { fsync?: boolean } = {}): Promise<TestPostgres> {
  const bin = findPostgresBin();
  const asPostgres = Deno.uid() === 0;
  const dir = await Deno.makeTempDir({ prefix: "reins-pg-" });
  await Deno.chmod(dir, 0o755);
  const data = `${dir}/data`;
  const sockets = `${dir}/sock`;
  await Deno.mkdir(data, { mode: 0o700 });
  await Deno.mkdir(sockets, { mode: 0o755 });
  if (asPostgres) {
    await run(["chown", "-R", "postgres:postgres", data, sockets], false);
  }
  const port = freePort();
  let started = false;
  try {
    await run([
      `${bin}/initdb`,
      "-D",
      data,
      "-U",
      "postgres",
      "--auth=trust",
      "-E",
      "UTF8",
      "--no-sync",
      "--locale=C",
    ], asPostgres);
    const settings = [
      `-p ${port}`,
      `-k ${sockets}`,
      "-c listen_addresses=127.0.0.1",
      "-c max_connections=100",
      options.fsync ? "" : "-c fsync=off -c synchronous_commit=off -c full_page_writes=off",
    ].join(" ");
    await run([
      `${bin}/pg_ctl`,
      "-D",
      data,
      "-o",
      settings,
      "-l",
      `${data}/server.log`,
      "-w",
      "-t",
      "60",
      "start",
    ], asPostgres);
    started = true;
  } catch (err) {
    await Deno.remove(dir, { recursive: true }).catch(() => {});
    throw err;
  }
  const baseUrl = `postgres://postgres@127.0.0.1:${port}`;
  let counter = 0;
  return {
    baseUrl,
    async newDatabase() {
      const name = `reins_test_${++counter}`;
      const admin = postgres(`${baseUrl}/postgres`, { max: 1, onnotice: () => {} });
      try {
        await admin.unsafe(`CREATE DATABASE ${name}`);
      } finally {
        await admin.end({ timeout: 1 });
      }
      return `${baseUrl}/${name}`;
    },
    async stop() {
      if (started) {
        started = false;
        await run([`${bin}/pg_ctl`, "-D", data, "-m", "immediate", "-w", "stop"], asPostgres)
          .catch(() => {});
      }
      await Deno.remove(dir, { recursive: true });
    },
  };
}
