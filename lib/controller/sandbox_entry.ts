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

/**
 * Parses `--forward PORT=SOCKET` pairs and the harness argv after `--`.
 *
 * @example
 * ```ts
 * import { parseEntryArgs } from "./sandbox_entry.ts";
 * parseEntryArgs(["--forward", "8420=/tmp/rs-1/f0.sock", "--", "bash", "run.sh"]);
 * // { forwards: [{ port: 8420, socket: "/tmp/rs-1/f0.sock" }], argv: ["bash", "run.sh"] }
 * ```
 */
export function parseEntryArgs(args: string[]): {
  forwards: Array<{ port: number; socket: string }>;
  argv: string[];
} {
  const forwards: Array<{ port: number; socket: string }> = [];
  let i = 0;
  for (; i < args.length; i++) {
    if (args[i] === "--") break;
    if (args[i] === "--forward") {
      const [port, ...rest] = (args[++i] ?? "").split("=");
      const socket = rest.join("=");
      if (!/^\d+$/.test(port) || !socket) throw new Error(`bad --forward ${args[i]}`);
      forwards.push({ port: Number(port), socket });
    } else {
      throw new Error(`unknown argument ${args[i]}`);
    }
  }
  const argv = args.slice(i + 1);
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
  const { forwards, argv } = parseEntryArgs(Deno.args);
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
