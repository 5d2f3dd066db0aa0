/**
 * The proxy's upstream client (`lib/http/client.ts`) against servers nobody here wrote
 * (`Deno.serve`, hyper) for what they send, and against a raw TCP server for what a server may
 * do at the edges: close an idle connection, close under a request, frame wrongly, never answer.
 */
import assert from "node:assert/strict";
import { HttpClient } from "../lib/http/client.ts";

const post = (body: unknown) => ({ method: "POST", body: JSON.stringify(body) });
/** The text of one POST of `{}` to `url`. */
const textOf = async (client: HttpClient, url: string) =>
  await (await client.fetch(url, post({}))).text();

Deno.test("client: JSON answers, chunked streams and errors from Deno.serve, on kept connections", async () => {
  const server = Deno.serve({ port: 0, onListen() {} }, async (req) => {
    const url = new URL(req.url);
    if (url.pathname === "/stream") {
      const { n } = await req.json();
      const body = new ReadableStream<Uint8Array>({
        async start(controller) {
          for (let i = 0; i < n; i++) {
            controller.enqueue(new TextEncoder().encode(`data: ${i}\n\n`));
            await new Promise((r) => setTimeout(r, 1));
          }
          controller.close();
        },
      });
      return new Response(body, { headers: { "content-type": "text/event-stream" } });
    }
    if (url.pathname === "/big") return new Response("x".repeat(3 * 1024 * 1024));
    if (url.pathname === "/busy") {
      return Response.json({ error: "busy" }, { status: 429, headers: { "retry-after": "2" } });
    }
    return Response.json({
      got: await req.json(),
      auth: req.headers.get("authorization"),
      host: req.headers.get("host"),
      query: url.search,
    });
  });
  const base = `http://127.0.0.1:${server.addr.port}`;
  const client = new HttpClient({ keepAlive: true });
  try {
    const res = await client.fetch(`${base}/v1/x?a=1`, {
      ...post({ é: "ü", n: [1, 2] }),
      headers: { "content-type": "application/json", authorization: "Bearer k" },
    });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get("content-type"), "application/json");
    assert.deepEqual(await res.json(), {
      got: { é: "ü", n: [1, 2] },
      auth: "Bearer k",
      host: `127.0.0.1:${server.addr.port}`,
      query: "?a=1",
    });
    // A streamed (chunked) answer arrives piece by piece and frees its connection at its end.
    const stream = await client.fetch(`${base}/stream`, post({ n: 20 }));
    const text = await stream.text();
    assert.equal(text, Array.from({ length: 20 }, (_, i) => `data: ${i}\n\n`).join(""));
    // A body over the whole-read size streams too.
    assert.equal((await (await client.fetch(`${base}/big`, post({}))).text()).length, 3 << 20);
    const busy = await client.fetch(`${base}/busy`, post({}));
    assert.equal(busy.status, 429);
    assert.equal(busy.headers.get("retry-after"), "2");
    assert.deepEqual(await busy.json(), { error: "busy" });
    for (let i = 0; i < 20; i++) {
      assert.equal((await (await client.fetch(`${base}/v1/x`, post({ i }))).json()).got.i, i);
    }
    assert.equal(client.opened, 1, "every call after the first reused the connection");
    // Calls at once each get a connection, and they are kept for the next ones.
    const many = await Promise.all(
      Array.from({ length: 5 }, (_, i) => client.fetch(`${base}/v1/x`, post({ i }))),
    );
    assert.deepEqual(
      await Promise.all(many.map(async (r) => (await r.json()).got.i)),
      [0, 1, 2, 3, 4],
    );
    const opened = client.opened;
    await Promise.all(
      Array.from(
        { length: 5 },
        async (_, i) => (await client.fetch(`${base}/v1/x`, post({ i }))).arrayBuffer(),
      ),
    );
    assert.equal(client.opened, opened, "the five kept connections served the next five calls");
  } finally {
    await client.close();
    await server.shutdown();
  }
});

/** Closes what may be closed already. */
const closeQuietly = (resource: { close(): void }) => {
  try {
    resource.close();
  } catch { /* closed */ }
};

/** A TCP server answering each connection with `answer(conn, index)`. */
function rawServer(
  answer: (conn: Deno.Conn, index: number) => Promise<void>,
): { port: number; accepted: () => number; close: () => Promise<void> } {
  const listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
  let accepted = 0;
  const conns = new Set<Deno.Conn>();
  const loop = (async () => {
    for await (const conn of listener) {
      conns.add(conn);
      answer(conn, accepted++).catch(() => {}).finally(() => {
        conns.delete(conn);
        closeQuietly(conn);
      });
    }
  })();
  return {
    port: (listener.addr as Deno.NetAddr).port,
    accepted: () => accepted,
    close: async () => {
      closeQuietly(listener);
      conns.forEach(closeQuietly);
      await loop.catch(() => {});
    },
  };
}

/** Reads one request (head and a content-length body) from `conn`. */
async function readRequest(conn: Deno.Conn): Promise<string | null> {
  const buf = new Uint8Array(65536);
  let n = 0;
  for (;;) {
    const got = await conn.read(buf.subarray(n));
    if (got === null) return null;
    n += got;
    const text = new TextDecoder().decode(buf.subarray(0, n));
    const end = text.indexOf("\r\n\r\n");
    if (end < 0) continue;
    const length = Number(/content-length: (\d+)/i.exec(text)?.[1] ?? 0);
    if (n >= end + 4 + length) return text;
  }
}

const write = (conn: Deno.Conn, text: string) => conn.write(new TextEncoder().encode(text));

/**
 * Runs `body` with a keep-alive client (`options` added) on a {@link rawServer} answering with
 * `answer`, and closes both after it.
 */
async function withRawServer(
  answer: (conn: Deno.Conn, index: number) => Promise<void>,
  body: (client: HttpClient, url: string, server: ReturnType<typeof rawServer>) => Promise<void>,
  options: { idleTimeoutMs?: number } = {},
): Promise<void> {
  const server = rawServer(answer);
  const client = new HttpClient({ keepAlive: true, ...options });
  try {
    await body(client, `http://127.0.0.1:${server.port}/`, server);
  } finally {
    await client.close();
    await server.close();
  }
}

Deno.test("client: a kept connection the server closed is not used again; one closed under the request is retried once", async () => {
  // Connection 0 answers once and closes at once (noticed while idle); connection 1 answers
  // once and reads the next request, then closes without answering (a race the idle read
  // cannot see): that request goes again on connection 2.
  await withRawServer(async (conn, index) => {
    await readRequest(conn);
    await write(conn, "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
    if (index === 1) await readRequest(conn);
    else if (index >= 2) {
      while (await readRequest(conn)) {
        await write(conn, "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok");
      }
    }
  }, async (client, url) => {
    assert.equal(await textOf(client, url), "ok");
    // The server's close arrives while the connection is idle, and drops it (waited for, up to
    // 5 s on a loaded machine).
    for (let waited = 0; client.idle > 0 && waited < 5_000; waited += 10) {
      await new Promise((r) => setTimeout(r, 10));
    }
    assert.equal(client.idle, 0, "the connection the server closed was dropped while idle");
    assert.equal(await textOf(client, url), "ok");
    assert.equal(client.idle, 1);
    assert.equal(client.opened, 2, "the closed connection was not reused");
    assert.equal(await textOf(client, url), "ok");
    assert.equal(client.opened, 3, "closed under the request: sent again on a new connection");
    assert.equal(await textOf(client, url), "ok");
    assert.equal(client.opened, 3);
    // A minute of idle time: only the posted read can have dropped the closed connection.
  }, { idleTimeoutMs: 60_000 });
});

Deno.test("client: a body read to the connection's end, an interim 100, and connection: close each end their connection", async () => {
  const answers = [
    "HTTP/1.0 200 OK\r\ncontent-type: text/plain\r\n\r\nuntil the end",
    "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 5\r\nconnection: close\r\n\r\nafter",
    "HTTP/1.1 204 No Content\r\n\r\n",
  ];
  await withRawServer(async (conn, index) => {
    await readRequest(conn);
    await write(conn, answers[index]);
    // The server keeps both open: the client ends the one its answer said to close.
    if (index >= 1) await readRequest(conn);
  }, async (client, url) => {
    assert.equal(await textOf(client, url), "until the end");
    assert.equal(client.idle, 0);
    assert.equal(await textOf(client, url), "after");
    assert.equal(client.idle, 0, "connection: close is not kept");
    const empty = await client.fetch(url, post({}));
    assert.equal(empty.status, 204);
    assert.equal(empty.body, null);
    assert.equal(client.idle, 1, "a bodiless answer leaves its connection ready");
    assert.equal(client.opened, 3);
  });
});

Deno.test("client: what a server gets wrong is a TypeError naming it, as fetch's network errors are", async () => {
  const answers = [
    ["HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nshort", /closed inside the body/],
    ["HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n", /malformed chunked body/],
    ["HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n5\r\nabc", /closed inside the body/],
    ["HTTP/1.1 200 OK\r\ncontent-length: 1\r\ncontent-length: 2\r\n\r\nab", /content-length/],
    ["SPDY/3 200 OK\r\n\r\n", /malformed status line/],
    ["HTTP/1.1 200 OK\r\nno colon here\r\n\r\n", /malformed header line/],
    ["HTTP/1.1 200 OK\r\ncontent-", /closed inside the head/],
    [`HTTP/1.1 200 OK\r\nx: ${"a".repeat(70_000)}\r\n\r\n`, /head larger than 64 KiB/],
  ] as const;
  await withRawServer(async (conn, index) => {
    await readRequest(conn);
    await write(conn, answers[index][0]);
  }, async (client, url, server) => {
    for (const [, message] of answers) {
      await assert.rejects(
        async () => {
          const res = await client.fetch(url, post({}));
          await res.text();
        },
        (err: Error) => err instanceof TypeError && message.test(err.message),
      );
    }
    // Nothing listening: a TypeError too (the proxy retries on another try).
    await server.close();
    await assert.rejects(
      client.fetch(url, post({})),
      (err: Error) => err instanceof TypeError && /cannot connect/.test(err.message),
    );
    await assert.rejects(
      client.fetch(url, {
        ...post({}),
        headers: { "x-evil": "a\r\nhost: elsewhere" },
      }),
      /invalid header 'x-evil'/,
    );
  });
});

Deno.test("client: an abort rejects with its reason while waiting and while streaming, and the connection is not kept", async () => {
  let release = () => {};
  await withRawServer(async (conn, index) => {
    await readRequest(conn);
    if (index === 0) return await new Promise<void>((r) => (release = r)); // never answers
    await write(conn, "HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabc\r\n");
    await new Promise<void>((r) => (release = r)); // never ends the body
  }, async (client, url) => {
    const waiting = new AbortController();
    const pending = client.fetch(url, { ...post({}), signal: waiting.signal });
    setTimeout(() => waiting.abort(new Error("gave up waiting")), 30);
    await assert.rejects(pending, /gave up waiting/);
    release();
    const streaming = new AbortController();
    const res = await client.fetch(url, { ...post({}), signal: streaming.signal });
    const reader = res.body!.getReader();
    assert.equal(new TextDecoder().decode((await reader.read()).value), "abc");
    setTimeout(() => streaming.abort(new Error("harness left")), 30);
    await assert.rejects(reader.read(), /harness left/);
    release();
    assert.equal(client.opened, 2);
    await assert.rejects(
      client.fetch(url, { ...post({}), signal: AbortSignal.abort(new Error("already")) }),
      /already/,
    );
  });
});

Deno.test("client: without keepAlive each call has its own connection, and https goes to fetch", async () => {
  const server = Deno.serve({ port: 0, onListen() {} }, () => new Response("hi"));
  const client = new HttpClient();
  try {
    for (let i = 0; i < 3; i++) {
      assert.equal(
        await (await client.fetch(`http://127.0.0.1:${server.addr.port}/`, post({}))).text(),
        "hi",
      );
    }
    assert.equal(client.opened, 3);
    // Not ours to speak TLS: fetch's error for a port that does not speak it.
    await assert.rejects(client.fetch(`https://127.0.0.1:${server.addr.port}/`, post({})));
    assert.equal(client.opened, 3);
  } finally {
    await client.close();
    await server.shutdown();
  }
});

Deno.test("client: a connection idle past idleTimeoutMs is closed, and the next call opens another", async () => {
  const server = Deno.serve({ port: 0, onListen() {} }, () => new Response("hi"));
  const client = new HttpClient({ keepAlive: true, idleTimeoutMs: 300 });
  const url = `http://127.0.0.1:${server.addr.port}/`;
  try {
    assert.equal(await textOf(client, url), "hi");
    assert.equal(client.idle, 1);
    for (let waited = 0; client.idle > 0 && waited < 5_000; waited += 50) {
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.equal(client.idle, 0, "closed by the sweep");
    assert.equal(await textOf(client, url), "hi");
    assert.equal(client.opened, 2);
  } finally {
    await client.close();
    await server.shutdown();
  }
});
