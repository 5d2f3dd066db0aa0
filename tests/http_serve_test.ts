/**
 * The guarded server's relay: a client that leaves aborts the handler's request signal, on a
 * fresh connection and on a reused keep-alive one (where `Deno.serve` alone never notices).
 */
import assert from "node:assert/strict";
import { serveGuarded } from "../lib/http/serve.ts";
import { sleep } from "../lib/util/time.ts";

const DEADLINES = {
  headers_timeout_ms: 10_000,
  body_timeout_ms: 10_000,
  idle_timeout_ms: 10_000,
  max_header_bytes: 8_192,
};

async function readUntil(conn: Deno.Conn, text: string): Promise<string> {
  const buf = new Uint8Array(4096);
  let got = "";
  while (!got.includes(text)) {
    const n = await conn.read(buf);
    if (n === null) throw new Error(`connection closed before ${JSON.stringify(text)}: ${got}`);
    got += new TextDecoder().decode(buf.subarray(0, n));
  }
  return got;
}

for (const reused of [false, true]) {
  Deno.test(`serve: a client that leaves aborts the handler's signal (${reused ? "keep-alive connection, second request" : "fresh connection"})`, async () => {
    const aborted = Promise.withResolvers<string>();
    const started = Promise.withResolvers<void>();
    const server = await serveGuarded((request) => {
      if (new URL(request.url).pathname === "/fast") return new Response("fast-ok");
      started.resolve();
      return new Promise<Response>((resolve) => {
        request.signal.addEventListener("abort", () => {
          aborted.resolve(String((request.signal.reason as Error)?.message ?? "aborted"));
          resolve(new Response(null, { status: 499 }));
        });
      });
    }, { hostname: "127.0.0.1", port: 0, deadlines: DEADLINES });
    try {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
      const request = (path: string) =>
        new TextEncoder().encode(
          `GET ${path} HTTP/1.1\r\nhost: x\r\nconnection: keep-alive\r\n\r\n`,
        );
      if (reused) {
        await conn.write(request("/fast"));
        await readUntil(conn, "fast-ok");
      }
      await conn.write(request("/slow"));
      await started.promise;
      conn.close();
      // Generous bound, so a loaded machine cannot fail it: without the relay's signal the
      // handler would wait forever (the test's timer would fire first).
      const timer = new AbortController();
      const outcome = await Promise.race([
        aborted.promise,
        sleep(30_000, timer.signal).then(() => "never aborted"),
      ]);
      timer.abort();
      assert.match(outcome, /client closed the connection/);
    } finally {
      await server.shutdown();
    }
  });
}
