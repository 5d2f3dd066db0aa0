/**
 * The first process inside a reins sandbox: it opens the only ways out of the network namespace
 * (TCP listeners on 127.0.0.1 that relay to Unix sockets bind-mounted from the controller),
 * then runs the harness and exits with its status.
 *
 * Usage (the local backend builds this line):
 * `deno run --allow-net --allow-read --allow-write --allow-run sandbox_entry.ts
 *   --forward 8080=/run/reins/gw.sock [--forward …] -- harness argv…`
 *
 * @module
 */
import { parseArgs } from "node:util";

/**
 * Parses `--forward PORT=SOCKET` pairs (with `node:util` `parseArgs`) and the harness argv after
 * `--`. Throws an error naming the flag on an unknown flag, a port outside 1–65535, a port given
 * twice, a missing socket path, or no harness command.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseEntryArgs } from "./sandbox_entry.ts";
 * assert.deepEqual(
 *   parseEntryArgs(["--forward", "8420=/tmp/rs-1/f0.sock", "--", "bash", "run.sh"]),
 *   { forwards: [{ port: 8420, socket: "/tmp/rs-1/f0.sock" }], argv: ["bash", "run.sh"] },
 * );
 * assert.throws(() => parseEntryArgs(["--forward", "http=/s", "--", "true"]), /--forward/);
 * ```
 */
export function parseEntryArgs(args: string[]): {
  forwards: Array<{ port: number; socket: string }>;
  argv: string[];
} {
  // Everything after the first `--` is the harness's own argv, flags included.
  const cut = args.indexOf("--");
  const flags = cut === -1 ? args : args.slice(0, cut);
  const argv = cut === -1 ? [] : args.slice(cut + 1);
  const { values } = parseArgs({
    args: flags,
    options: { forward: { type: "string", multiple: true } },
    strict: true,
    allowPositionals: false,
  });
  const forwards: Array<{ port: number; socket: string }> = [];
  for (const pair of values.forward ?? []) {
    const at = pair.indexOf("=");
    const port = Number(at === -1 ? NaN : pair.slice(0, at));
    const socket = pair.slice(at + 1);
    if (at === -1 || !/^\d+$/.test(pair.slice(0, at)) || port < 1 || port > 65_535 || !socket) {
      throw new Error(`--forward: expected PORT=SOCKET with PORT in 1-65535, got '${pair}'`);
    }
    if (forwards.some((f) => f.port === port)) {
      throw new Error(`--forward: port ${port} given twice`);
    }
    forwards.push({ port, socket });
  }
  if (argv.length === 0) throw new Error("missing harness command after --");
  return { forwards, argv };
}

async function pipe(from: Deno.Conn, to: Deno.Conn): Promise<void> {
  try {
    await from.readable.pipeTo(to.writable);
  } catch {
    // One side went away; closing both below ends the other direction too.
  }
  try {
    to.close();
  } catch { /* already closed */ }
}

async function relay(listener: Deno.Listener, socket: string): Promise<void> {
  for await (const conn of listener) {
    Deno.connect({ transport: "unix", path: socket }).then((upstream) => {
      pipe(conn, upstream);
      pipe(upstream, conn);
    }, () => conn.close());
  }
}

if (import.meta.main) {
  let parsed: ReturnType<typeof parseEntryArgs>;
  try {
    parsed = parseEntryArgs(Deno.args);
  } catch (error) {
    console.error(`sandbox_entry: ${(error as Error).message}`);
    Deno.exit(2);
  }
  const { forwards, argv } = parsed;
  const listeners = forwards.map(({ port, socket }) => {
    const listener = Deno.listen({ hostname: "127.0.0.1", port });
    relay(listener, socket).catch(() => {});
    return listener;
  });
  const child = new Deno.Command(argv[0], {
    args: argv.slice(1),
    stdin: "inherit",
    stdout: "inherit",
    stderr: "inherit",
  }).spawn();
  for (const signal of ["SIGTERM", "SIGINT", "SIGHUP"] as const) {
    Deno.addSignalListener(signal, () => {
      try {
        child.kill(signal);
      } catch { /* exited */ }
    });
  }
  const status = await child.status;
  for (const listener of listeners) listener.close();
  // Deno reports a signal death as 128 + signo, the shell convention the backend expects.
  Deno.exit(status.code);
}
