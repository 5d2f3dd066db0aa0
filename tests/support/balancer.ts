/**
 * A TCP load balancer for tests, as a Kubernetes Service or an L4 balancer spreads connections
 * over gateway replicas: each new connection goes to the next replica round-robin; a replica
 * that refuses the connection (it died) is skipped. Counts connections and bytes per replica.
 *
 * @module
 */

/** Per-replica traffic seen by the balancer. */
export interface ReplicaTraffic {
  port: number;
  connections: number;
  /** Request bytes forwarded to the replica. */
  bytes: number;
  /** Connections it refused (its process is gone). */
  refused: number;
  /** Connections open to it now. */
  open: number;
}

/** A running balancer. */
export interface Balancer {
  url: string;
  traffic: ReplicaTraffic[];
  close(): void;
}

/**
 * Listens on a random loopback port and spreads connections over `ports`.
 *
 * @example
 * ```ts ignore
 * const lb = startBalancer([portA, portB]);
 * await fetch(`${lb.url}/v1/health`);
 * lb.close();
 * ```
 */
export function startBalancer(ports: number[]): Balancer {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  const traffic: ReplicaTraffic[] = ports.map((port) => ({
    port,
    connections: 0,
    bytes: 0,
    refused: 0,
    open: 0,
  }));
  const open = new Set<Deno.Conn>();
  let next = 0;

  const handle = async (client: Deno.Conn) => {
    for (let k = 0; k < traffic.length; k++) {
      const target = traffic[next++ % traffic.length];
      let upstream: Deno.Conn;
      try {
        upstream = await Deno.connect({ hostname: "127.0.0.1", port: target.port });
      } catch {
        target.refused++;
        continue;
      }
      target.connections++;
      target.open++;
      open.add(client);
      open.add(upstream);
      const count = new TransformStream<Uint8Array, Uint8Array>({
        transform(chunk, controller) {
          target.bytes += chunk.byteLength;
          controller.enqueue(chunk);
        },
      });
      const close = () => {
        for (const c of [client, upstream]) {
          open.delete(c);
          try {
            c.close();
          } catch {
            // already closed
          }
        }
      };
      // Either side ending (a replica killed mid-request included) drops the whole connection,
      // as a real balancer does: the client sees a reset and retries.
      await Promise.race([
        client.readable.pipeThrough(count).pipeTo(upstream.writable).catch(() => {}),
        upstream.readable.pipeTo(client.writable).catch(() => {}),
      ]);
      close();
      target.open--;
      return;
    }
    client.close();
  };

  (async () => {
    for await (const conn of listener) handle(conn);
  })().catch(() => {});

  const port = (listener.addr as Deno.NetAddr).port;
  return {
    url: `http://127.0.0.1:${port}`,
    traffic,
    close() {
      listener.close();
      for (const c of open) {
        try {
          c.close();
        } catch {
          // already closed
        }
      }
    },
  };
}
