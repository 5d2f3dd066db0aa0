/**
 * The security headers every answer of reins' servers carries, and the cheap way they get there.
 *
 * The set is hono's `secureHeaders()` with its defaults, less `Strict-Transport-Security`: reins
 * serves plain HTTP on loopback or behind a proxy that terminates TLS, and that proxy owns HSTS.
 * `tests/security_headers_test.ts` checks the list against hono's middleware itself.
 *
 * Why not hono's middleware on the served path: it sets ten headers on each `Response` after the
 * handler. In Deno each `Headers.set` validates its name and value and searches the list, and the
 * engine then walks eleven headers where there was one. Over `app.fetch` in a loop, setting and
 * then walking them cost ~37 µs a request (47 against 10 µs; 2026-12-03, this 2-core machine); in
 * the running gateway's profile, `Headers` took 16.9 µs per small event post before and 7.4
 * after, and sequential posts answered ~16 µs sooner at p50. Here the engines of `serveGuarded`
 * (`conn` and `node`) write the lines while they write the head, one constant string, for each
 * name the answer did not set itself. {@link securityHeaders} sets them on the `Response` only for a
 * request no engine of ours serves: an app mounted by hand, or `app.request` in tests.
 *
 * @module
 */
import type { MiddlewareHandler } from "hono";
import { isServed } from "./served_request.ts";

/** Names (lower case) and values of the headers {@link securityHeaders} guarantees. */
export const SECURITY_HEADERS: ReadonlyArray<readonly [string, string]> = [
  ["cross-origin-opener-policy", "same-origin"],
  ["cross-origin-resource-policy", "same-origin"],
  ["origin-agent-cluster", "?1"],
  ["referrer-policy", "no-referrer"],
  ["x-content-type-options", "nosniff"],
  ["x-dns-prefetch-control", "off"],
  ["x-download-options", "noopen"],
  ["x-frame-options", "SAMEORIGIN"],
  ["x-permitted-cross-domain-policies", "none"],
  ["x-xss-protection", "0"],
];

const NAMES: ReadonlySet<string> = new Set(SECURITY_HEADERS.map(([name]) => name));
const ALL_LINES = SECURITY_HEADERS.map(([name, value]) => `${name}: ${value}\r\n`).join("");

/** Whether `name` (lower case, as `Headers` yields it) is one of {@link SECURITY_HEADERS}. */
export function isSecurityHeader(name: string): boolean {
  return NAMES.has(name);
}

/**
 * The head lines of the security headers an answer lacks, given those it set itself (`null`:
 * none, the common case, one constant string).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { securityHeaderLines } from "./security_headers.ts";
 * assert.ok(securityHeaderLines(null).includes("x-content-type-options: nosniff\r\n"));
 * const own = securityHeaderLines(new Set(["x-frame-options"]));
 * assert.ok(!own.includes("x-frame-options"));
 * assert.equal(own.split("\r\n").length - 1, 9);
 * ```
 */
export function securityHeaderLines(present: ReadonlySet<string> | null): string {
  if (present === null) return ALL_LINES;
  let lines = "";
  for (const [name, value] of SECURITY_HEADERS) {
    if (!present.has(name)) lines += `${name}: ${value}\r\n`;
  }
  return lines;
}

/**
 * Hono middleware: the {@link SECURITY_HEADERS} an answer did not set itself. An engine of
 * `serveGuarded` writes them with the head; on any other server (or `app.request`) they are set
 * on the `Response` here.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { Hono } from "hono";
 * import { securityHeaders } from "./security_headers.ts";
 * const app = new Hono();
 * app.use("*", securityHeaders());
 * app.get("/", (c) => c.json({ ok: true }));
 * app.get("/framed", (c) => c.json({ ok: true }, 200, { "x-frame-options": "DENY" }));
 * const res = await app.request("/");
 * assert.equal(res.headers.get("x-content-type-options"), "nosniff");
 * const own = await app.request("/framed");
 * assert.equal(own.headers.get("x-frame-options"), "DENY"); // the answer's own value stays
 * ```
 */
export function securityHeaders(): MiddlewareHandler {
  return async function securityHeaders(c, next) {
    await next();
    if (isServed(c.req.raw)) return;
    const headers = c.res.headers;
    for (const [name, value] of SECURITY_HEADERS) {
      if (!headers.has(name)) headers.set(name, value);
    }
  };
}
