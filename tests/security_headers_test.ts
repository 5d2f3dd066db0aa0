/**
 * The security headers (`lib/http/security_headers.ts`): the same set as hono's `secureHeaders`
 * (the independent implementation they replace on the served path), written by both engines of
 * `serveGuarded` exactly once on every kind of answer, an answer's own value kept, and set by the
 * middleware where no engine of ours serves (`app.request`, a server of the user's own).
 */
import assert from "node:assert/strict";
import { Hono } from "hono";
import { secureHeaders } from "hono/secure-headers";
import { SECURITY_HEADERS, securityHeaders } from "../lib/http/security_headers.ts";
import { serveGuarded } from "../lib/http/serve.ts";
import { startGateway } from "../lib/gateway/server.ts";
import { readAll } from "./support/raw_conn.ts";

const DEADLINES = {
  headers_timeout_ms: 10_000,
  body_timeout_ms: 10_000,
  idle_timeout_ms: 10_000,
  max_header_bytes: 8_192,
};

/** The head of a raw HTTP/1.1 exchange, its lines lower-cased (the status line first). */
async function rawHead(port: number, method: string, path: string): Promise<string[]> {
  const conn = await Deno.connect({ port });
  await conn.write(
    new TextEncoder().encode(`${method} ${path} HTTP/1.1\r\nhost: x\r\nconnection: close\r\n\r\n`),
  );
  const raw = await readAll(conn);
  conn.close();
  return raw.split("\r\n\r\n")[0].toLowerCase().split("\r\n");
}

/** How often each header name occurs in `lines`. */
function counts(lines: string[]): Map<string, string[]> {
  const byName = new Map<string, string[]>();
  for (const line of lines.slice(1)) {
    const at = line.indexOf(":");
    const name = line.slice(0, at);
    byName.set(name, [...(byName.get(name) ?? []), line.slice(at + 1).trim()]);
  }
  return byName;
}

function app(): Hono {
  const app = new Hono();
  app.use("*", securityHeaders());
  app.get("/json", (c) => c.json({ ok: true }));
  app.get("/text", (c) => c.text("hello"));
  app.get("/empty", (c) => c.body(null, 204));
  app.get("/stream", () =>
    new Response(
      new ReadableStream({
        start(controller) {
          controller.enqueue(new TextEncoder().encode("data: 1\n\n"));
          controller.close();
        },
      }),
      { headers: { "content-type": "text/event-stream" } },
    ));
  app.get("/own", (c) => c.json({ ok: true }, 200, { "x-frame-options": "DENY" }));
  // A sub-app with hono's own middleware (as the UI has, for its CSP) sets all of them itself.
  const ui = new Hono();
  ui.use("*", secureHeaders({ strictTransportSecurity: false, xFrameOptions: "DENY" }));
  ui.get("/page", (c) => c.html("<p>hi</p>"));
  app.route("/ui", ui);
  app.notFound((c) => c.json({ error: "none" }, 404));
  return app;
}

Deno.test("security headers: the same set as hono's secureHeaders() defaults, less HSTS", async () => {
  const hono = new Hono();
  hono.use("*", secureHeaders({ strictTransportSecurity: false }));
  hono.get("/", (c) => c.body(null, 204));
  const res = await hono.request("/");
  const theirs = [...res.headers].filter(([name]) => name !== "content-type").sort();
  assert.deepEqual(theirs, [...SECURITY_HEADERS].map(([n, v]) => [n, v]).sort());
});

for (const engine of ["conn", "node"] as const) {
  Deno.test(`security headers (${engine}): every answer carries each once; an answer's own value stays`, async () => {
    const server = await serveGuarded(app().fetch, {
      hostname: "127.0.0.1",
      port: 0,
      deadlines: DEADLINES,
      engine,
    });
    try {
      const cases: Array<[string, string, string]> = [
        ["GET", "/json", "200"],
        ["GET", "/text", "200"],
        ["GET", "/empty", "204"],
        ["GET", "/stream", "200"],
        ["HEAD", "/json", "200"],
        ["GET", "/nowhere", "404"],
        ["GET", "/own", "200"],
        ["GET", "/ui/page", "200"],
      ];
      for (const [method, path, status] of cases) {
        const lines = await rawHead(server.addr.port, method, path);
        assert.match(lines[0], new RegExp(`^http/1.1 ${status} `), `${method} ${path}`);
        const byName = counts(lines);
        for (const [name, value] of SECURITY_HEADERS) {
          const want = name === "x-frame-options" && (path === "/own" || path === "/ui/page")
            ? "deny"
            : value.toLowerCase();
          assert.deepEqual(byName.get(name), [want], `${method} ${path}: ${name}`);
        }
        if (path === "/ui/page") {
          // hono's set, not ours: one of each still.
          assert.equal(byName.get("content-type")?.length, 1);
        }
      }
    } finally {
      await server.shutdown();
    }
  });
}

Deno.test("security headers: set on the Response where no engine of ours serves (app.request, Deno.serve)", async () => {
  const served = app();
  for (const path of ["/json", "/own", "/nowhere"]) {
    const res = await served.request(path);
    await res.body?.cancel();
    for (const [name, value] of SECURITY_HEADERS) {
      const want = name === "x-frame-options" && path === "/own" ? "DENY" : value;
      assert.equal(res.headers.get(name), want, `${path}: ${name}`);
    }
  }
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen() {} }, served.fetch);
  try {
    const res = await fetch(`http://127.0.0.1:${server.addr.port}/json`);
    await res.body?.cancel();
    assert.equal(res.headers.get("x-content-type-options"), "nosniff");
    assert.equal(res.headers.get("referrer-policy"), "no-referrer");
  } finally {
    await server.shutdown();
  }
});

Deno.test("security headers: the gateway's answers (health, refusals, events, a 404) carry each once", async () => {
  const gateway = await startGateway();
  try {
    const admin = { authorization: `Bearer ${gateway.adminKey}` };
    const created = await fetch(`${gateway.url}/v1/rollouts`, {
      method: "POST",
      headers: { ...admin, "content-type": "application/json" },
      body: JSON.stringify({ rollouts: [{ rollout_id: "r1", input: {} }] }),
    });
    await created.body?.cancel();
    const answers = [
      await fetch(`${gateway.url}/v1/health`),
      await fetch(`${gateway.url}/v1/rollouts`), // 401: no key
      await fetch(`${gateway.url}/v1/rollouts/r1`, { headers: admin }),
      await fetch(`${gateway.url}/v1/rollouts/r1/events`, { headers: admin }),
      await fetch(`${gateway.url}/v1/nowhere`, { headers: admin }),
      await fetch(`${gateway.url}/v1/rollouts`, {
        method: "POST",
        headers: { ...admin, "content-type": "application/json" },
        body: "{",
      }),
    ];
    assert.deepEqual(answers.map((r) => r.status), [200, 401, 200, 200, 404, 400]);
    for (const res of answers) {
      await res.body?.cancel();
      // A header written twice would read as "nosniff, nosniff".
      for (const [name, value] of SECURITY_HEADERS) {
        assert.equal(res.headers.get(name), value, `${res.url} ${res.status}: ${name}`);
      }
    }
  } finally {
    await gateway.close();
  }
});
