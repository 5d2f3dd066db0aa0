/**
 * Runs the gateway CLI as a child process (for the durability test and the benchmark), and
 * waits for it to print its URL.
 *
 * @module
 */
const ROOT = new URL("../..", import.meta.url).pathname;

/** A gateway child process. */
export interface GatewayProcess {
  process: Deno.ChildProcess;
  url: string;
  /** Everything the child printed on stdout before it listened. */
  banner: string;
  /** Sends `signal` and waits for the exit. */
  stop(signal: Deno.Signal): Promise<Deno.CommandStatus>;
}

/**
 * A gateway CLI process with the proxy over `upstream` (the char tokenizer) and its SQLite
 * store at `db`, the admin key from `REINS_ADMIN_KEY`; `flags` follow (`--no-ui`, deadlines).
 */
export function spawnProxyGateway(
  options: { db: string; upstream: string; adminKey: string; flags?: string[] },
): Promise<GatewayProcess> {
  return spawnGatewayProcess([
    "--db",
    options.db,
    "--port",
    "0",
    "--upstream",
    options.upstream,
    "--tokenizer",
    "char",
    ...(options.flags ?? []),
  ], { REINS_ADMIN_KEY: options.adminKey });
}

/**
 * A gateway CLI process on the store `store` (`--db file` or `--postgres url`) that reads its
 * admin key from `keyFile` and never sweeps leases on its own.
 */
export function spawnKeyFileGateway(store: string[], keyFile: string): Promise<GatewayProcess> {
  return spawnGatewayProcess([
    ...store,
    "--port",
    "0",
    "--admin-key-file",
    keyFile,
    "--lease-sweep-ms",
    "0",
  ]);
}

/**
 * Spawns `deno run -A bin/gateway.ts <args>` from the repository root.
 *
 * @example
 * ```ts
 * import { spawnGatewayProcess } from "./gateway_process.ts";
 * const gw = await spawnGatewayProcess(["--db", "/tmp/x.db", "--port", "0"]);
 * await gw.stop("SIGTERM");
 * ```
 */
export async function spawnGatewayProcess(
  args: string[],
  env: Record<string, string> = {},
): Promise<GatewayProcess> {
  const process = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "bin/gateway.ts", ...args],
    cwd: ROOT,
    stdout: "piped",
    stderr: "inherit",
    env: { REINS_ADMIN_KEY: "", ...env },
  }).spawn();
  const stdout = process.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let banner = "";
  while (true) {
    const { value, done } = await stdout.read();
    if (done) {
      await process.status;
      throw new Error(`gateway exited before listening: ${banner}`);
    }
    banner += value;
    const match = /listening on (http:\/\/\S+)/.exec(banner);
    // The banner is one write ending with the proxy line (and the UI's, when on).
    if (match && /^proxy: .*\n/m.test(banner)) {
      // Keep draining stdout so the child never blocks on a full pipe.
      const drained = (async () => {
        while (!(await stdout.read()).done) { /* discard */ }
      })();
      return {
        process,
        url: match[1],
        banner,
        async stop(signal: Deno.Signal) {
          try {
            process.kill(signal);
          } catch {
            // Already gone.
          }
          const status = await process.status;
          await drained;
          return status;
        },
      };
    }
  }
}
