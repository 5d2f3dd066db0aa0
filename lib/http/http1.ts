/**
 * HTTP/1.1 request heads and chunked bodies, parsed without I/O, for `serveGuarded`'s own engine
 * (`./conn_serve.ts`).
 *
 * Hand-written because no reachable package parses HTTP/1.1 for Deno without bringing its own
 * server: `node:http`'s parser comes only with Node's server and its streams (more CPU per
 * request than this engine, see `./conn_serve.ts`), and `Deno.serve`'s lives in Rust behind a
 * server that accepts its own connections. The parser is strict where leniency lets two parties
 * read one message two ways (RFC 9112 §6.3, §11.2): a request with both `Content-Length` and
 * `Transfer-Encoding`, a `Transfer-Encoding` other than `chunked`, differing lengths, a folded or
 * malformed header line, a bare LF, a control character: each is a 400 (or 501), and the
 * connection closes after it.
 *
 * @module
 */

/** A refused request head: the status to answer and why. */
export class HeadError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
    this.name = "HeadError";
  }
}

/** A request head, parsed. */
export interface RequestHead {
  method: string;
  /** The request target as sent (origin form `/path?q`, absolute form, or `*`). */
  target: string;
  /** 1.0 or 1.1 (HTTP/1.0 connections close after one request). */
  minor: 0 | 1;
  /** Header pairs in the order they came, names as sent. */
  headers: Array<[string, string]>;
  host: string | null;
  /** The declared `Content-Length`, or null. */
  contentLength: number | null;
  chunked: boolean;
  /** Whether the client keeps the connection after this request. */
  keepAlive: boolean;
  /** The client waits for `100 Continue` before sending its body. */
  expectContinue: boolean;
}

const CR = 13;
const LF = 10;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const TARGET = /^[\x21-\x7e]+$/;

/**
 * Whether a field value holds a control character: values are visible ASCII, obs-text, space
 * and tab (RFC 9110 §5.5).
 */
function hasControl(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if ((c < 32 && c !== 9) || c === 127) return true;
  }
  return false;
}

const ascii = new TextDecoder();

/** Bytes as ISO-8859-1 text, byte for byte (`TextDecoder("latin1")` is windows-1252). */
export function latin1(bytes: Uint8Array): string {
  // The usual head is ASCII, which the native UTF-8 decoder reads the same and ~8x faster.
  let high = false;
  for (let i = 0; i < bytes.length; i++) {
    if (bytes[i] > 127) {
      high = true;
      break;
    }
  }
  if (!high) return ascii.decode(bytes);
  let text = "";
  for (let i = 0; i < bytes.length; i += 8_192) {
    text += String.fromCharCode.apply(null, bytes.subarray(i, i + 8_192) as unknown as number[]);
  }
  return text;
}

/** `text` without the spaces and tabs around it. */
function trimOws(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && (text.charCodeAt(start) === 32 || text.charCodeAt(start) === 9)) start++;
  while (end > start && (text.charCodeAt(end - 1) === 32 || text.charCodeAt(end - 1) === 9)) end--;
  return start === 0 && end === text.length ? text : text.slice(start, end);
}

/**
 * Where the head in `bytes` ends (the index just past its blank line), searching from `from`,
 * or -1 when it has not all arrived.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { headEnd } from "./http1.ts";
 * const bytes = new TextEncoder().encode("GET / HTTP/1.1\r\nhost: x\r\n\r\nrest");
 * assert.equal(headEnd(bytes, 0), bytes.length - 4);
 * assert.equal(headEnd(bytes.subarray(0, 20), 0), -1);
 * ```
 */
export function headEnd(bytes: Uint8Array, from: number): number {
  let i = Math.max(3, from);
  const n = bytes.length;
  while (i < n) {
    i = bytes.indexOf(LF, i);
    if (i < 0) return -1;
    if (bytes[i - 1] === CR && bytes[i - 2] === LF && bytes[i - 3] === CR) return i + 1;
    i++;
  }
  return -1;
}

/**
 * How many empty lines (CRLF) `bytes` starts with, in bytes: a server ignores them before a
 * request line (RFC 9112 §2.2; some clients send one after a body).
 */
export function leadingBlankLines(bytes: Uint8Array): number {
  let i = 0;
  while (i + 1 < bytes.length && bytes[i] === CR && bytes[i + 1] === LF) i += 2;
  return i;
}

/**
 * Parses a whole request head (up to and including its blank line); throws {@link HeadError}
 * with the status to answer.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { HeadError, parseHead } from "./http1.ts";
 * const head = parseHead(new TextEncoder().encode(
 *   "POST /v1/x?a=1 HTTP/1.1\r\nHost: gw\r\nContent-Length: 2\r\n\r\n",
 * ));
 * assert.deepEqual(
 *   [head.method, head.target, head.host, head.contentLength, head.keepAlive],
 *   ["POST", "/v1/x?a=1", "gw", 2, true],
 * );
 * assert.throws(
 *   () => parseHead(new TextEncoder().encode(
 *     "POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
 *   )),
 *   (e) => e instanceof HeadError && e.status === 400,
 * );
 * ```
 */
export function parseHead(bytes: Uint8Array): RequestHead {
  // A bare LF (not after CR) is refused: it is where two parsers disagree on line ends.
  for (let i = bytes.indexOf(LF); i >= 0; i = bytes.indexOf(LF, i + 1)) {
    if (i === 0 || bytes[i - 1] !== CR) throw new HeadError(400, "a line ends in LF without CR");
  }
  const text = latin1(bytes);
  const lines = text.split("\r\n");
  // The head ends with an empty line: drop it (and the empty string after the last CRLF).
  while (lines.length > 0 && lines[lines.length - 1] === "") lines.pop();
  const requestLine = lines[0] ?? "";
  const parts = requestLine.split(" ");
  if (parts.length !== 3) throw new HeadError(400, "malformed request line");
  const [method, target, version] = parts;
  if (!TOKEN.test(method)) throw new HeadError(400, "malformed method");
  if (!TARGET.test(target)) throw new HeadError(400, "malformed request target");
  if (version !== "HTTP/1.1" && version !== "HTTP/1.0") {
    throw new HeadError(/^HTTP\/\d\.\d$/.test(version) ? 505 : 400, "unsupported HTTP version");
  }
  const minor = version === "HTTP/1.1" ? 1 : 0;
  const headers: Array<[string, string]> = [];
  let host: string | null = null;
  let contentLength: number | null = null;
  let transferEncoding: string | null = null;
  let connection = "";
  let expect: string | null = null;
  for (let i = 1; i < lines.length; i++) {
    const line = lines[i];
    const colon = line.indexOf(":");
    if (colon <= 0) throw new HeadError(400, "malformed header line");
    const name = line.slice(0, colon);
    // A name must be a token: this also refuses obs-fold (a line starting with space or tab).
    if (!TOKEN.test(name)) throw new HeadError(400, "malformed header name");
    const value = trimOws(line.slice(colon + 1));
    if (hasControl(value)) throw new HeadError(400, `header ${name}: control character`);
    headers.push([name, value]);
    switch (name.toLowerCase()) {
      case "host":
        if (host !== null) throw new HeadError(400, "more than one Host header");
        host = value;
        break;
      case "content-length": {
        // Repeated lengths must agree (a list "5, 5" counts as repeated).
        for (const each of value.split(",")) {
          const trimmed = each.trim();
          if (!/^\d{1,15}$/.test(trimmed)) throw new HeadError(400, "malformed Content-Length");
          const n = Number(trimmed);
          if (contentLength !== null && contentLength !== n) {
            throw new HeadError(400, "differing Content-Length values");
          }
          contentLength = n;
        }
        break;
      }
      case "transfer-encoding":
        transferEncoding = transferEncoding === null ? value : `${transferEncoding}, ${value}`;
        break;
      case "connection":
        connection += `${connection ? "," : ""}${value.toLowerCase()}`;
        break;
      case "expect":
        expect = value.toLowerCase();
        break;
    }
  }
  let chunked = false;
  if (transferEncoding !== null) {
    if (contentLength !== null) {
      throw new HeadError(400, "both Content-Length and Transfer-Encoding");
    }
    if (minor === 0) throw new HeadError(400, "Transfer-Encoding in an HTTP/1.0 request");
    if (transferEncoding.trim().toLowerCase() !== "chunked") {
      throw new HeadError(501, "only Transfer-Encoding: chunked is supported");
    }
    chunked = true;
  }
  if (expect !== null && expect !== "100-continue") throw new HeadError(417, "unknown Expect");
  const tokens = connection.split(",").map((t) => t.trim());
  const keepAlive = minor === 1 ? !tokens.includes("close") : tokens.includes("keep-alive");
  return {
    method,
    target,
    minor,
    headers,
    host,
    contentLength,
    chunked,
    keepAlive,
    expectContinue: expect === "100-continue" && minor === 1,
  };
}

/**
 * The size of a chunk from its size line (without CRLF; extensions after `;` are ignored), or
 * null when the line is malformed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { chunkSize } from "./http1.ts";
 * assert.equal(chunkSize("1a"), 26);
 * assert.equal(chunkSize("0;name=value"), 0);
 * assert.equal(chunkSize("-1"), null);
 * assert.equal(chunkSize("fffffffffffffff0"), null);
 * ```
 */
export function chunkSize(line: string): number | null {
  const semi = line.indexOf(";");
  const digits = (semi < 0 ? line : line.slice(0, semi)).replace(/[ \t]+$/, "");
  // 13 hex digits: below 2^52, so the size stays an exact number.
  if (!/^[0-9A-Fa-f]{1,13}$/.test(digits)) return null;
  return parseInt(digits, 16);
}
