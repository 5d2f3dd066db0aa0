/**
 * One gateway replica of a replicated deployment, as the loop tests run it: a gateway on a
 * shared PostgreSQL database with the proxy mounted in front of a token-level worker (the same
 * mount as `startEmbedded`). Run as a process it prints `REPLICA_READY <url>` and serves until
 * killed: `deno run -A tests/support/gateway_replica.ts <postgres-url> <worker-url>` with the
 * admin key in `$REINS_ADMIN_KEY`.
 *
 * @module
 */
import type { RunningGateway } from "../../lib/gateway/server.ts";
import { startStack } from "../../lib/stack/stack.ts";
import { loadCharTokenizer } from "../../lib/tokens/char.ts";

/** Marker line of a replica process that listens. */
export const REPLICA_READY = "REPLICA_READY ";

/** Starts a replica in this process. */
export async function startReplica(
  postgres: string,
  workerUrl: string,
  adminKey: string,
): Promise<RunningGateway> {
  const stack = await startStack({
    postgres,
    adminKey,
    port: 0,
    leaseSweepMs: 500,
    proxy: {
      tokenizer: await loadCharTokenizer(),
      upstream: { kind: "token_level", endpoints: [workerUrl], max_retries: 2 },
      options: { max_hold_ms: 600_000 },
    },
  });
  return stack.gateway;
}

/** A replica in a child process (so that a test can SIGKILL it). */
export interface ReplicaProcess {
  url: string;
  port: number;
  child: Deno.ChildProcess;
  kill(): Promise<Deno.CommandStatus>;
}

/** Starts a replica as a child process and waits for its ready line. */
export async function spawnReplica(
  postgres: string,
  workerUrl: string,
  adminKey: string,
): Promise<ReplicaProcess> {
  const child = new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL(import.meta.url).pathname, postgres, workerUrl],
    env: { REINS_ADMIN_KEY: adminKey },
    stdin: "null",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  const reader = child.stdout.pipeThrough(new TextDecoderStream()).getReader();
  let text = "";
  while (!text.includes("\n")) {
    const { value, done } = await reader.read();
    if (done) throw new Error(`replica exited before it was ready: ${text}`);
    text += value;
  }
  const line = text.split("\n").find((l) => l.startsWith(REPLICA_READY));
  if (!line) throw new Error(`replica printed ${text}`);
  // Keep draining so that the child never blocks on a full pipe.
  (async () => {
    while (!(await reader.read()).done) { /* drain */ }
  })().catch(() => {});
  const url = line.slice(REPLICA_READY.length).trim();
  return {
    url,
    port: Number(new URL(url).port),
    child,
    async kill() {
      try {
        child.kill("SIGKILL");
      } catch {
        // already gone
      }
      return await child.status;
    },
  };
}

if (import.meta.main) {
  const [postgres, workerUrl] = Deno.args;
  const adminKey = Deno.env.get("REINS_ADMIN_KEY");
  if (!postgres || !workerUrl || !adminKey) {
    console.error("usage: REINS_ADMIN_KEY=… gateway_replica.ts <postgres-url> <worker-url>");
    Deno.exit(2);
  }
  const gateway = await startReplica(postgres, workerUrl, adminKey);
  console.log(`${REPLICA_READY}${gateway.url}`);
}
