/**
 * The HTTP/1.1 engine's parser (`lib/http/http1.ts`) and the engine on the wire
 * (`lib/http/conn_serve.ts`): each head two parsers could read two ways is refused (400, 501,
 * 505) and the connection closed, no handler runs; a property test round-trips random heads;
 * a differential test holds it to the earlier line-splitting parser on mutated heads;
 * chunked bodies, pipelined and kept-alive requests, `Expect: 100-continue`, HEAD and a streamed
 * answer behave as HTTP/1.1 says, checked with raw sockets and with `fetch`.
 */
import assert from "node:assert/strict";
import { chunkSize, headEnd, HeadError, parseHead } from "../lib/http/http1.ts";
import { serveGuarded } from "../lib/http/serve.ts";
import { mulberry32 } from "../lib/util/random.ts";
import { untilClosed } from "./support/raw_conn.ts";
import { referenceParseHead } from "./support/http1_reference.ts";

const encode = (text: string) => new TextEncoder().encode(text);

Deno.test("http1: every ambiguous or malformed head is refused with its status", () => {
  const cases: Array<[string, number, RegExp]> = [
    [
      "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n",
      400,
      /both/,
    ],
    [
      "POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\n",
      400,
      /differing/,
    ],
    ["POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 3, 4\r\n\r\n", 400, /differing/],
    ["POST / HTTP/1.1\r\nhost: x\r\ncontent-length: -3\r\n\r\n", 400, /Content-Length/],
    ["POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 0x10\r\n\r\n", 400, /Content-Length/],
    ["POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: gzip, chunked\r\n\r\n", 501, /chunked/],
    [
      "POST / HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\ntransfer-encoding: x\r\n\r\n",
      501,
      /chunked/,
    ],
    ["POST / HTTP/1.0\r\ntransfer-encoding: chunked\r\n\r\n", 400, /HTTP\/1\.0/],
    ["GET / HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n folded\r\n\r\n", 400, /header line/],
    ["GET / HTTP/1.1\r\nhost: x\r\nx-a: 1\r\n x-b: 2\r\n\r\n", 400, /header name/],
    ["GET / HTTP/1.1\r\nhost: x\nx-a: 1\r\n\r\n", 400, /LF without CR/],
    ["GET / HTTP/1.1\r\nhost: x\r\nx-a: a\x00b\r\n\r\n", 400, /control/],
    ["GET / HTTP/1.1\r\nhost: x\r\nbad name: 1\r\n\r\n", 400, /header name/],
    ["GET / HTTP/1.1\r\nhost: x\r\n: empty\r\n\r\n", 400, /header line/],
    ["GET / HTTP/1.1\r\nhost: x\r\nhost: y\r\n\r\n", 400, /Host/],
    ["GET  / HTTP/1.1\r\nhost: x\r\n\r\n", 400, /request line/],
    ["GET /a b HTTP/1.1\r\nhost: x\r\n\r\n", 400, /request line/],
    ["G(T / HTTP/1.1\r\nhost: x\r\n\r\n", 400, /method/],
    ["GET / HTTP/2.0\r\nhost: x\r\n\r\n", 505, /version/],
    ["GET / HTTX/1.1\r\nhost: x\r\n\r\n", 400, /version/],
    ["POST / HTTP/1.1\r\nhost: x\r\nexpect: 200-ok\r\n\r\n", 417, /Expect/],
  ];
  for (const [head, status, message] of cases) {
    assert.throws(
      () => parseHead(encode(head)),
      (e) => e instanceof HeadError && e.status === status && message.test(e.message),
      JSON.stringify(head),
    );
  }
});

Deno.test("http1: heads made of random valid parts parse back to what was written (1 000 seeds)", () => {
  const tokenChars =
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789!#$%&'*+-.^_`|~";
  const valueChars = tokenChars + ' \t"(),/:;<=>?@[\\]{}\x80\xe9\xff';
  for (let seed = 0; seed < 1_000; seed++) {
    const rng = mulberry32(seed);
    const pick = (chars: string, min: number, max: number) =>
      Array.from(
        { length: min + Math.floor(rng() * (max - min + 1)) },
        () => chars[Math.floor(rng() * chars.length)],
      ).join("");
    const method = pick("ABCDEFGHIJKLMNOPQRSTUVWXYZ", 1, 8);
    const target = `/${pick("abcxyz0189-._~%/?=&", 0, 30)}`;
    const headers: Array<[string, string]> = [["Host", "h"]];
    const count = Math.floor(rng() * 8);
    for (let i = 0; i < count; i++) {
      // Values neither start nor end with whitespace (it is not part of the value).
      const value = pick(valueChars, 0, 20).replace(/^[ \t]+|[ \t]+$/g, "");
      headers.push([`x-${pick(tokenChars, 1, 12)}`, value]);
    }
    const padding = () => (rng() < 0.5 ? "" : rng() < 0.5 ? " " : " \t ");
    const text = `${method} ${target} HTTP/1.1\r\n` +
      headers.map(([n, v]) => `${n}:${padding()}${v}${padding()}`).join("\r\n") + "\r\n\r\n";
    const bytes = Uint8Array.from(text, (c) => c.charCodeAt(0));
    assert.equal(headEnd(bytes, 0), bytes.length, text);
    const head = parseHead(bytes);
    assert.equal(head.method, method);
    assert.equal(head.target, target);
    assert.deepEqual(head.headers, headers, text);
    assert.equal(head.keepAlive, true);
    assert.equal(head.contentLength, null);
  }
});

Deno.test("http1: parseHead agrees with the line-splitting reference parser on mutated heads (5 000 seeds)", () => {
  // Valid heads with bytes changed, inserted or removed where parsers go wrong: CR, LF, colon,
  // space, tab, NUL, DEL, obs-text. Both parsers must give the same head or the same refusal.
  const base = [
    "POST /v1/x?a=1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\nConnection: keep-alive\r\n\r\n",
    "GET / HTTP/1.0\r\nconnection: Keep-Alive\r\nx-a:  v \t\r\n\r\n",
    "POST / HTTP/1.1\r\ntransfer-encoding: chunked\r\nexpect: 100-continue\r\n\r\n",
    "PUT /p HTTP/1.1\r\nhost: h\r\ncontent-length: 5, 5\r\nCONNECTION: close\r\n\r\n",
  ];
  const alphabet = "\r\n:  \t\x00\x7f\xe9aZ-,1";
  const outcome = (parse: (b: Uint8Array) => unknown, bytes: Uint8Array) => {
    try {
      return { head: parse(bytes) };
    } catch (error) {
      if (!(error instanceof HeadError)) throw error;
      return { status: error.status, message: error.message };
    }
  };
  let refused = 0;
  for (let seed = 0; seed < 5_000; seed++) {
    const rng = mulberry32(seed);
    let text = base[seed % base.length];
    const edits = 1 + Math.floor(rng() * 3);
    for (let e = 0; e < edits; e++) {
      const at = Math.floor(rng() * text.length);
      const ch = alphabet[Math.floor(rng() * alphabet.length)];
      const kind = rng();
      text = kind < 0.4
        ? text.slice(0, at) + ch + text.slice(at + 1)
        : kind < 0.8
        ? text.slice(0, at) + ch + text.slice(at)
        : text.slice(0, at) + text.slice(at + 1);
    }
    const bytes = Uint8Array.from(text, (c) => c.charCodeAt(0));
    const ours = outcome(parseHead, bytes);
    assert.deepEqual(ours, outcome(referenceParseHead, bytes), JSON.stringify(text));
    if ("status" in ours) refused++;
  }
  // The mutations reach both sides: many heads refused, many still parsed.
  assert.ok(refused > 1_000 && refused < 4_500, `${refused} refused`);
});

Deno.test("http1: chunk sizes and head ends", () => {
  assert.equal(chunkSize("0"), 0);
  assert.equal(chunkSize("A; ext=1"), 10);
  assert.equal(chunkSize(""), null);
  assert.equal(chunkSize(" 1"), null);
  assert.equal(chunkSize("1g"), null);
  const split = encode("GET / HTTP/1.1\r\nhost: x\r\n\r");
  assert.equal(headEnd(split, 0), -1);
  // Searching again from where the last search stopped finds an end that straddled two reads.
  const whole = encode("GET / HTTP/1.1\r\nhost: x\r\n\r\n");
  assert.equal(headEnd(whole, split.length - 3), whole.length);
});

const DEADLINES = {
  headers_timeout_ms: 5_000,
  body_timeout_ms: 5_000,
  idle_timeout_ms: 5_000,
  max_header_bytes: 8_192,
};

/** Everything a raw connection receives, after `writes`, until the server closes it. */
async function exchange(port: number, ...writes: string[]): Promise<string> {
  const conn = await Deno.connect({ hostname: "127.0.0.1", port });
  for (const w of writes) await conn.write(encode(w));
  return await untilClosed(conn, 10_000);
}

async function echoServer() {
  const seen: string[] = [];
  const server = await serveGuarded(async (request) => {
    const url = new URL(request.url);
    const body = request.body ? await request.text() : "";
    seen.push(`${request.method} ${url.pathname} ${body}`);
    if (url.pathname === "/bye") {
      return new Response("bye", { headers: { connection: "close" } });
    }
    if (url.pathname === "/stream") {
      const parts = ["one ", "two ", "three"];
      return new Response(
        new ReadableStream({
          pull(controller) {
            const next = parts.shift();
            if (next === undefined) controller.close();
            else controller.enqueue(encode(next));
          },
        }),
        { headers: { "content-type": "text/plain" } },
      );
    }
    return Response.json({ method: request.method, path: url.pathname, body });
  }, { hostname: "127.0.0.1", port: 0, deadlines: DEADLINES, engine: "conn" });
  return { server, seen, port: server.addr.port };
}

Deno.test("conn engine: smuggling-shaped and malformed heads are answered and closed before any handler runs", async () => {
  const { server, seen, port } = await echoServer();
  try {
    const attacks: Array<[string, RegExp]> = [
      [
        "POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nhost: x\r\n\r\n",
        /^HTTP\/1\.1 400 /,
      ],
      [
        "POST /a HTTP/1.1\r\nhost: x\r\ncontent-length: 1\r\ncontent-length: 30\r\n\r\nx",
        /^HTTP\/1\.1 400 /,
      ],
      ["GET /a HTTP/1.1\r\nhost: x\nx: y\r\n\r\n", /^HTTP\/1\.1 400 /],
      ["GET /a HTTP/1.1\r\nhost: x\r\nx: 1\r\n y\r\n\r\n", /^HTTP\/1\.1 400 /],
      ["POST /a HTTP/1.1\r\nhost: x\r\ntransfer-encoding: identity\r\n\r\n", /^HTTP\/1\.1 501 /],
      ["GET /a HTTP/3.0\r\nhost: x\r\n\r\n", /^HTTP\/1\.1 505 /],
      ["GET /a HTTP/1.1\r\nhost: bad host\r\n\r\n", /^HTTP\/1\.1 400 /],
      [`GET /a HTTP/1.1\r\nhost: x\r\nx-big: ${"y".repeat(9_000)}\r\n\r\n`, /^HTTP\/1\.1 431 /],
    ];
    for (const [attack, expected] of attacks) {
      const got = await exchange(port, attack);
      assert.match(got, expected, JSON.stringify(attack.slice(0, 60)));
      assert.match(got, /connection: close/i);
      // One answer only: nothing after it was read as a second request.
      assert.equal(got.match(/HTTP\/1\.1 /g)?.length, 1, got);
    }
    assert.deepEqual(seen, []);
  } finally {
    await server.shutdown();
  }
});

Deno.test("conn engine: chunked bodies, pipelining, keep-alive, 100-continue, HEAD and a streamed answer", async () => {
  const { server, seen, port } = await echoServer();
  try {
    // A chunked body in odd pieces, with an extension and a trailer, then a pipelined GET.
    const got = await exchange(
      port,
      "POST /chunked HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n\r\n3;ext=1\r\nabc\r\n",
      "2\r\nde\r\n0\r\ntrailer: t\r\n\r\n",
      "GET /next HTTP/1.1\r\nhost: x\r\n\r\nGET /last HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n",
    );
    const answers = got.split(/(?=HTTP\/1\.1 )/);
    assert.equal(answers.length, 3, got);
    assert.match(answers[0], /"body":"abcde"/);
    assert.match(answers[1], /"path":"\/next"/);
    // A kept connection says how long it stays open idle (5 s here), as node:http does.
    assert.match(answers[1], /keep-alive: timeout=5\r\n/);
    assert.match(answers[2], /connection: close[\s\S]*"path":"\/last"/);
    // Expect: 100-continue gets its interim answer before the body is sent.
    const conn = await Deno.connect({ hostname: "127.0.0.1", port });
    await conn.write(
      encode(
        "POST /expect HTTP/1.1\r\nhost: x\r\ncontent-length: 5\r\nexpect: 100-continue\r\n\r\n",
      ),
    );
    const buf = new Uint8Array(4096);
    const n = await conn.read(buf);
    assert.match(new TextDecoder().decode(buf.subarray(0, n!)), /^HTTP\/1\.1 100 Continue\r\n\r\n/);
    await conn.write(encode("hello"));
    const m = await conn.read(buf);
    assert.match(
      new TextDecoder().decode(buf.subarray(0, m!)),
      /^HTTP\/1\.1 200 [\s\S]*"body":"hello"/,
    );
    conn.close();
    // HEAD: the head of the answer, no body.
    const head = await exchange(port, "HEAD /h HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n");
    assert.match(head, /^HTTP\/1\.1 200 [\s\S]*content-length: \d+\r\n/i);
    assert.equal(head.split("\r\n\r\n")[1], "");
    // A handler's `connection: close` ends the connection after its answer; a request pipelined
    // behind it is not served.
    const bye = await exchange(
      port,
      "GET /bye HTTP/1.1\r\nhost: x\r\n\r\nGET /after HTTP/1.1\r\nhost: x\r\n\r\n",
    );
    assert.match(bye, /^HTTP\/1\.1 200 [\s\S]*connection: close\r\n[\s\S]*\r\nbye\r\n0\r\n\r\n$/);
    assert.ok(!seen.some((line) => line.startsWith("GET /after")), JSON.stringify(seen));
    // HTTP/1.0 closes after one answer.
    const old = await exchange(port, "GET /old HTTP/1.0\r\n\r\n");
    assert.match(old, /^HTTP\/1\.1 200 [\s\S]*connection: close/);
    // fetch over kept-alive connections: a streamed (chunked) answer and a large streamed body.
    const base = `http://127.0.0.1:${port}`;
    const stream = await fetch(`${base}/stream`);
    assert.equal(stream.headers.get("transfer-encoding"), "chunked");
    assert.equal(await stream.text(), "one two three");
    const big = "z".repeat(200_000);
    const posted = await fetch(`${base}/big`, { method: "POST", body: big });
    assert.equal((await posted.json()).body.length, big.length);
    const streamedBody = await fetch(`${base}/streamed`, {
      method: "POST",
      body: new Blob([big]).stream(),
      // @ts-ignore: `duplex` is required for a streamed body and not in every lib's types
      duplex: "half",
    });
    assert.equal((await streamedBody.json()).body.length, big.length);
    assert.ok(seen.includes("GET /next "), JSON.stringify(seen));
  } finally {
    await server.shutdown();
  }
});

Deno.test("conn engine: a malformed or overlong chunked body is a 400 or 413 naming the body, and nothing is stored", async () => {
  const { startGateway } = await import("../lib/gateway/server.ts");
  const gw = await startGateway({ adminKey: "admin-key-for-chunks", leaseSweepMs: 0 });
  try {
    const port = Number(new URL(gw.url).port);
    const post = (chunks: string) =>
      exchange(
        port,
        "POST /v1/rollouts HTTP/1.1\r\nhost: x\r\nauthorization: Bearer admin-key-for-chunks\r\n" +
          "content-type: application/json\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n" +
          chunks,
      );
    const malformed = await post('5\r\n{"rol\r\nzz\r\nlouts":[]}\r\n0\r\n\r\n');
    assert.match(
      malformed,
      /^HTTP\/1\.1 400 [\s\S]*malformed chunked encoding \(a malformed chunk size\)/,
    );
    assert.match(malformed, /"field":"body"/);
    const overlong = await post(`5;${"x".repeat(5_000)}\r\n{"rol\r\n`);
    assert.match(overlong, /^HTTP\/1\.1 413 [\s\S]*longer than 4096 bytes/);
    const bareLf = await post('5\n{"rol\r\n');
    assert.match(bareLf, /^HTTP\/1\.1 400 [\s\S]*LF without CR/);
    // A well-formed chunked body is stored, and only it.
    const json = JSON.stringify({ rollouts: [{ input: 1, rollout_id: "chunked-ok" }] });
    const pieces = [json.slice(0, 7), json.slice(7, 30), json.slice(30)];
    const good = await post(
      pieces.map((p) => `${p.length.toString(16)}\r\n${p}\r\n`).join("") + "0\r\n\r\n",
    );
    assert.match(good, /^HTTP\/1\.1 200 /);
    const listed = await gw.store.listRollouts({ limit: 10 });
    assert.deepEqual(listed.items.map((r) => r.rollout_id), ["chunked-ok"]);
  } finally {
    await gw.close();
  }
});

Deno.test("conn engine: a client that asks for a large answer and never reads it is closed at the idle deadline", async () => {
  const big = new Uint8Array(32 * 1024 * 1024);
  const server = await serveGuarded(() => new Response(big), {
    hostname: "127.0.0.1",
    port: 0,
    engine: "conn",
    deadlines: { ...DEADLINES, idle_timeout_ms: 300 },
  });
  const conn = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  try {
    await conn.write(encode("GET /big HTTP/1.1\r\nhost: x\r\n\r\n"));
    // The answer fills the socket buffers and the server's write stops moving; it is closed
    // a deadline later (with a generous bound for a loaded machine), counted as timed out.
    const started = performance.now();
    while (server.connections > 0 && performance.now() - started < 10_000) {
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.equal(server.connections, 0, "the connection is still open");
    assert.ok(server.timedOut >= 1, `timedOut ${server.timedOut}`);
  } finally {
    try {
      conn.close();
    } catch { /* closed */ }
    await server.shutdown();
  }
});
