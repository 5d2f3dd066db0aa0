/**
 * The controller's side of a sandbox's network forwards: a Unix socket per forward, bound into
 * the sandbox, relayed to the real TCP endpoint (the gateway, or an allow-listed port).
 *
 * @module
 */

/** One forward out of the sandbox: a Unix socket the controller relays to `hostname:port`. */
export interface RelaySpec {
  socket: string;
  hostname: string;
  port: number;
}

/** Open relays; `close()` stops them and removes their sockets. */
export interface Relays {
  close(): Promise<void>;
}

/**
 * Starts the controller side of the sandbox's forwards (also after a restart, for adopted
 * attempts: a stale socket file is replaced).
 *
 * @example
 * ```ts
 * import { openRelays } from "./sandbox_relays.ts";
 * const dir = await Deno.makeTempDir();
 * const relays = openRelays([{ socket: `${dir}/f0.sock`, hostname: "127.0.0.1", port: 8080 }]);
 * // connections to f0.sock (bound into the sandbox) now reach 127.0.0.1:8080
 * await relays.close();
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export function openRelays(specs: RelaySpec[]): Relays {
  const opened = specs.map((spec) => unixRelay(spec.socket, spec.hostname, spec.port));
  return {
    async close() {
      await Promise.all(opened.map((relay) => relay.close()));
    },
  };
}

/** Relays connections on a Unix socket to a TCP endpoint (the controller side of a forward). */
function unixRelay(path: string, hostname: string, port: number): Relays {
  try {
    Deno.removeSync(path);
  } catch { /* no stale socket */ }
  const listener = Deno.listen({ transport: "unix", path });
  const conns = new Set<Deno.Conn>();
  const pipe = async (from: Deno.Conn, to: Deno.Conn) => {
    try {
      await from.readable.pipeTo(to.writable);
    } catch { /* peer closed */ }
    for (const conn of [from, to]) {
      try {
        conn.close();
      } catch { /* closed */ }
      conns.delete(conn);
    }
  };
  const pipes: Promise<void>[] = [];
  const loop = (async () => {
    try {
      for await (const conn of listener) {
        conns.add(conn);
        try {
          const upstream = await Deno.connect({ hostname, port });
          conns.add(upstream);
          pipes.push(pipe(conn, upstream), pipe(upstream, conn));
        } catch {
          conn.close();
          conns.delete(conn);
        }
      }
    } catch { /* listener closed */ }
  })();
  return {
    async close() {
      try {
        listener.close();
      } catch { /* closed */ }
      for (const conn of conns) {
        try {
          conn.close();
        } catch { /* closed */ }
      }
      await loop;
      await Promise.allSettled(pipes);
      try {
        Deno.removeSync(path);
      } catch { /* gone */ }
    },
  };
}
