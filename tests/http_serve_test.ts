/**
 * The guarded server, on both engines (`conn`: our own HTTP/1.1 engine on `Deno.listen`; `node`:
 * `node:http`): a client that leaves aborts the handler's request
 * signal, on a fresh connection and on a reused keep-alive one (where `Deno.serve` alone never
 * notices); a concurrency slot lives until the server wrote the response (its hook,
 * `served_request.ts`); the head goes out as written; each deadline closes what it bounds.
 */
import assert from "node:assert/strict";
import { serveGuarded } from "../lib/http/serve.ts";
import { untilClosed } from "./support/raw_conn.ts";
import { Hono } from "hono";
import { bodyLimits, readJson } from "../lib/http/body.ts";
import { concurrencyCap } from "../lib/http/concurrency.ts";
import type { HttpError } from "../lib/util/error.ts";
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

for (const engine of ["conn", "node"] as const) {
  for (const reused of [false, true]) {
    Deno.test(`serve (${engine}): a client that leaves aborts the handler's signal (${reused ? "keep-alive connection, second request" : "fresh connection"})`, async () => {
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
      }, { hostname: "127.0.0.1", port: 0, deadlines: DEADLINES, engine });
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

  Deno.test(`serve (${engine}): a concurrency slot is held until the server has written the streamed response, then freed`, async () => {
    const app = new Hono();
    app.onError((err) => (err as HttpError).toResponse());
    app.use(concurrencyCap({ keyOf: () => "k", max: () => 1 }));
    let release = () => {};
    app.get("/stream", () => {
      const gate = new Promise<void>((r) => (release = r));
      const body = new ReadableStream<Uint8Array>({
        async start(controller) {
          controller.enqueue(new TextEncoder().encode("first "));
          await gate;
          controller.enqueue(new TextEncoder().encode("last"));
          controller.close();
        },
      });
      return new Response(body, { headers: { "content-type": "text/plain" } });
    });
    app.post("/echo", bodyLimits({ maxBytes: 16 }), async (c) => c.text(await c.req.text()));
    const server = await serveGuarded((r) => app.fetch(r), {
      hostname: "127.0.0.1",
      port: 0,
      deadlines: DEADLINES,
      engine,
    });
    const base = `http://127.0.0.1:${server.addr.port}`;
    try {
      const streaming = await fetch(`${base}/stream`);
      const reader = streaming.body!.getReader();
      assert.equal(new TextDecoder().decode((await reader.read()).value), "first ");
      // The first response is still being written: its slot is held.
      const second = await fetch(`${base}/echo`, { method: "POST", body: "hi" });
      assert.equal(second.status, 429);
      await second.body?.cancel();
      release();
      let rest = "";
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        rest += new TextDecoder().decode(value);
      }
      assert.equal(rest, "last");
      // Written: the slot is free again. A small collected body passes under the limit ...
      await waitFor(async () => {
        const res = await fetch(`${base}/echo`, { method: "POST", body: "hello" });
        const text = await res.text();
        return res.status === 200 && text === "hello";
      });
      // ... and one declared over it is still refused.
      const big = await fetch(`${base}/echo`, { method: "POST", body: "x".repeat(64) });
      assert.equal(big.status, 413);
      await big.body?.cancel();
    } finally {
      await server.shutdown();
    }
  });
}

async function waitFor(fn: () => Promise<boolean>): Promise<void> {
  for (let i = 0; i < 100; i++) {
    if (await fn()) return;
    await sleep(20);
  }
  throw new Error("timed out");
}

for (const engine of ["conn", "node"] as const) {
  Deno.test(`serve (${engine}): the head goes out as the handler wrote it: status, each cookie, one content-length`, async () => {
    const server = await serveGuarded((request) => {
      const path = new URL(request.url).pathname;
      const headers = new Headers({ "content-type": "application/json", "x-kind": path });
      headers.append("set-cookie", "a=1");
      headers.append("set-cookie", "b=2");
      // A JSON answer and a plain one that state their length, and one without a body.
      if (path === "/json") headers.set("content-length", "7");
      if (path === "/text") {
        headers.set("content-type", "text/plain");
        headers.set("content-length", "5");
      }
      if (path === "/empty") return new Response(null, { status: 204, headers });
      return new Response(path === "/text" ? "hello" : '{"a":1}', {
        status: 201,
        statusText: "Made",
        headers,
      });
    }, { hostname: "127.0.0.1", port: 0, deadlines: DEADLINES, engine });
    try {
      for (const [path, body] of [["/json", '{"a":1}'], ["/text", "hello"], ["/empty", ""]]) {
        const conn = await Deno.connect({ port: server.addr.port });
        await conn.write(
          new TextEncoder().encode(`GET ${path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`),
        );
        let raw = "";
        const buf = new Uint8Array(4096);
        for (;;) {
          const n = await conn.read(buf);
          if (n === null) break;
          raw += new TextDecoder().decode(buf.subarray(0, n));
        }
        conn.close();
        const [head, rest] = raw.split("\r\n\r\n");
        const lines = head.toLowerCase().split("\r\n");
        // The handler's own reason phrase goes out.
        assert.equal(lines[0], path === "/empty" ? "http/1.1 204 no content" : "http/1.1 201 made");
        assert.deepEqual(lines.filter((l) => l.startsWith("set-cookie:")), [
          "set-cookie: a=1",
          "set-cookie: b=2",
        ]);
        assert.ok(lines.includes(`x-kind: ${path}`), head);
        const lengths = lines.filter((l) => l.startsWith("content-length:"));
        if (path === "/empty") assert.equal(rest, "");
        else {
          assert.deepEqual(lengths, [`content-length: ${body.length}`], head);
          assert.equal(rest, body);
        }
      }
    } finally {
      await server.shutdown();
    }
  });
}

for (const engine of ["conn", "node"] as const) {
  Deno.test(`serve (${engine}): half a head, an idle connection, half a body and an oversized head are each closed at their limit`, async () => {
    const handled: string[] = [];
    const server = await serveGuarded(async (request) => {
      handled.push(`${request.method} ${new URL(request.url).pathname}`);
      return new Response(`read ${(await request.arrayBuffer()).byteLength}`);
    }, {
      hostname: "127.0.0.1",
      port: 0,
      deadlines: {
        headers_timeout_ms: 300,
        body_timeout_ms: 300,
        idle_timeout_ms: 300,
        max_header_bytes: 1_024,
      },
      bodyGraceMs: 100,
      engine,
    });
    const open = async (text: string) => {
      const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
      await conn.write(new TextEncoder().encode(text));
      return conn;
    };
    try {
      const started = performance.now();
      const [halfHead, idle, halfBody, bigHead] = await Promise.all([
        open("POST /a HTTP/1.1\r\nhost: x\r\n").then((c) => untilClosed(c, 5_000)),
        open("GET /b HTTP/1.1\r\nhost: x\r\n\r\n").then((c) => untilClosed(c, 5_000)),
        open("POST /c HTTP/1.1\r\nhost: x\r\ncontent-length: 100\r\n\r\n0123456789")
          .then((c) => untilClosed(c, 5_000)),
        open(`GET /d HTTP/1.1\r\nhost: x\r\nx-big: ${"y".repeat(2_000)}\r\n\r\n`)
          .then((c) => untilClosed(c, 5_000)),
      ]);
      // All closed by the server, well before the 5 s the test would wait.
      assert.ok(
        performance.now() - started < 4_000,
        `closed after ${performance.now() - started} ms`,
      );
      for (const got of [halfHead, idle, halfBody, bigHead]) assert.doesNotMatch(got, /still open/);
      // Half a head reaches no handler: it is answered 408.
      assert.match(halfHead, /^HTTP\/1\.1 408/);
      // The idle connection got its answer first, then was closed.
      assert.match(idle, /^HTTP\/1\.1 200[\s\S]*read 0/);
      // Half a body: 408 (the handler never saw it), and the connection closed.
      assert.match(halfBody, /^(HTTP\/1\.1 408|)/);
      assert.match(bigHead, /^HTTP\/1\.1 431/);
      assert.deepEqual(handled, ["GET /b"]);
      assert.ok(server.timedOut >= 1, `timedOut ${server.timedOut}`);
    } finally {
      await server.shutdown();
    }
  });
}

for (const engine of ["conn", "node"] as const) {
  Deno.test(`serve (${engine}): readJson decodes a collected body as text() would (BOM, malformed UTF-8, multi-byte), and a streamed one the same`, async () => {
    const seen: unknown[] = [];
    const server = await serveGuarded(async (request) => {
      const copy = request.clone();
      let parsed: unknown;
      try {
        parsed = await readJson(request);
      } catch (error) {
        parsed = { status: (error as HttpError).status };
      }
      // The same bytes through the Request's own body, for comparison.
      const viaText = await copy.text();
      seen.push([parsed, viaText]);
      return Response.json(parsed);
    }, { hostname: "127.0.0.1", port: 0, deadlines: DEADLINES, engine });
    const url = `http://127.0.0.1:${server.addr.port}/`;
    const bodies: Uint8Array<ArrayBuffer>[] = [
      new TextEncoder().encode('{"text":"héllo ✓ 𝄞"}'),
      new Uint8Array([0xef, 0xbb, 0xbf, ...new TextEncoder().encode('{"bom":true}')]),
      new Uint8Array([
        ...new TextEncoder().encode('{"bad":"'),
        0xff,
        0xfe,
        ...new TextEncoder().encode('"}'),
      ]),
      new TextEncoder().encode("   "),
      // Past the collected size (64 KiB): streamed to the handler.
      new TextEncoder().encode(JSON.stringify({ big: "é".repeat(40_000) })),
    ];
    try {
      for (const body of bodies) {
        const res = await fetch(url, { method: "POST", body });
        const answer = await res.json();
        const [parsed, viaText] = seen.at(-1) as [unknown, string];
        assert.deepEqual(answer, parsed);
        if (viaText.trim()) assert.deepEqual(parsed, JSON.parse(viaText));
        else assert.deepEqual(parsed, { status: 400 });
      }
      assert.deepEqual((seen[0] as unknown[])[0], { text: "héllo ✓ 𝄞" });
      assert.deepEqual((seen[1] as unknown[])[0], { bom: true });
      assert.deepEqual((seen[2] as unknown[])[0], { bad: "\ufffd\ufffd" });
    } finally {
      await server.shutdown();
    }
  });
}
