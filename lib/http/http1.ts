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
/** 1 for the characters of a token (RFC 9110 §5.6.2), by character code below 256. */
const TOKEN_CHAR = new Uint8Array(256);
for (const c of "!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ") {
  TOKEN_CHAR[c.charCodeAt(0)] = 1;
}

/** Space or tab: the optional whitespace around a field value. */
function isOws(c: number): boolean {
  return c === 32 || c === 9;
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
  const { text, firstLineEnd, n } = headText(bytes);
  const { method, target, minor } = requestLine(text.slice(0, firstLineEnd));
  const headers = fieldLines(text, firstLineEnd, n);
  return { method, target, minor, headers, ...framingOf(headers, minor) };
}

/**
 * A head's text, where its first line ends and where its field lines end (the blank line's
 * CRLFs are not lines); a bare LF (not after CR) is refused: it is where two parsers disagree
 * on line ends.
 */
function headText(bytes: Uint8Array): { text: string; firstLineEnd: number; n: number } {
  const text = latin1(bytes);
  for (let i = text.indexOf("\n"); i >= 0; i = text.indexOf("\n", i + 1)) {
    if (i === 0 || text.charCodeAt(i - 1) !== CR) {
      throw new HeadError(400, "a line ends in LF without CR");
    }
  }
  let n = text.length;
  while (n >= 2 && text.charCodeAt(n - 1) === LF && text.charCodeAt(n - 2) === CR) n -= 2;
  const firstLineEnd = text.indexOf("\r\n");
  return { text, firstLineEnd: firstLineEnd < 0 || firstLineEnd > n ? n : firstLineEnd, n };
}

/**
 * The field lines of a head after its first line (ending at `firstLineEnd`), up to `n`: in one
 * pass by offsets, each name checked as token characters by table, a colon, and the value trimmed
 * with control characters refused, one slice per part (splitting into lines and testing names
 * with a regex cost ~3× as much). Throws the {@link HeadError} to answer.
 */
function fieldLines(text: string, firstLineEnd: number, n: number): Array<[string, string]> {
  const headers: Array<[string, string]> = [];
  let lineEnd = firstLineEnd;
  for (let at = lineEnd + 2; at <= n; at = lineEnd + 2) {
    lineEnd = text.indexOf("\r\n", at);
    const end = lineEnd < 0 || lineEnd > n ? n : lineEnd;
    if (lineEnd < 0 || lineEnd > n) lineEnd = n;
    let colon = at;
    while (colon < end && TOKEN_CHAR[text.charCodeAt(colon)] === 1) colon++;
    if (colon === end || text.charCodeAt(colon) !== 58 /* : */) {
      // Not a token up to a colon: a name with other characters (or obs-fold, a line starting
      // with space or tab), or no colon at all.
      const firstColon = text.indexOf(":", at);
      const hasColon = firstColon > at && firstColon < end;
      throw new HeadError(400, hasColon ? "malformed header name" : "malformed header line");
    }
    if (colon === at) throw new HeadError(400, "malformed header line");
    let from = colon + 1;
    let to = end;
    while (from < to && isOws(text.charCodeAt(from))) from++;
    while (to > from && isOws(text.charCodeAt(to - 1))) to--;
    const name = text.slice(at, colon);
    for (let i = from; i < to; i++) {
      const c = text.charCodeAt(i);
      if ((c < 32 && c !== 9) || c === 127) {
        throw new HeadError(400, `header ${name}: control character`);
      }
    }
    headers.push([name, text.slice(from, to)]);
  }
  return headers;
}

/**
 * `Content-Length` after one more field `value` (a list "5, 5" counts as repeated), where the
 * length so far was `current`: the length, or why the field is refused.
 */
function addContentLength(
  current: number | null,
  value: string,
): number | "malformed" | "differing" {
  let length = current;
  for (const each of value.split(",")) {
    const trimmed = each.trim();
    if (!/^\d{1,15}$/.test(trimmed)) return "malformed";
    const n = Number(trimmed);
    if (length !== null && length !== n) return "differing";
    length = n;
  }
  return length!;
}

/** A response head, parsed (what the proxy's upstream client reads, `./client.ts`). */
export interface ResponseHead {
  status: number;
  statusText: string;
  /** Header pairs in the order they came, names lower-cased. */
  headers: Array<[string, string]>;
  /** The declared `Content-Length` (null when chunked: the chunks say). */
  length: number | null;
  /** The last transfer coding is `chunked`. */
  chunked: boolean;
  /** The server ends the connection after this answer. */
  close: boolean;
}

/**
 * Parses a whole response head (up to and including its blank line), with the field-line rules
 * of {@link parseHead}; throws {@link HeadError} naming what is malformed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseResponseHead } from "./http1.ts";
 * const head = parseResponseHead(new TextEncoder().encode(
 *   "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 2\r\nContent-Length: 0\r\n\r\n",
 * ));
 * assert.deepEqual(
 *   [head.status, head.statusText, head.headers[0], head.length, head.close],
 *   [429, "Too Many Requests", ["retry-after", "2"], 0, false],
 * );
 * assert.throws(() => parseResponseHead(new TextEncoder().encode("SPDY/3 200\r\n\r\n")), /status line/);
 * ```
 */
export function parseResponseHead(bytes: Uint8Array): ResponseHead {
  const { text, firstLineEnd, n } = headText(bytes);
  const line = text.slice(0, firstLineEnd);
  const status = /^HTTP\/1\.([01]) (\d{3})(?: (.*))?$/.exec(line);
  if (!status) throw new HeadError(502, `malformed status line '${line.slice(0, 80)}'`);
  const head: ResponseHead = {
    status: Number(status[2]),
    statusText: status[3] ?? "",
    headers: [],
    length: null,
    chunked: false,
    close: status[1] === "0",
  };
  for (const [field, value] of fieldLines(text, firstLineEnd, n)) {
    const name = field.toLowerCase();
    head.headers.push([name, value]);
    if (name === "content-length") {
      // One length a field: a list ("5, 5"), which a request may send, is refused from a server.
      const length = value.includes(",") ? "malformed" : addContentLength(head.length, value);
      if (typeof length === "string") {
        throw new HeadError(502, `malformed content-length '${value.slice(0, 40)}'`);
      }
      head.length = length;
    } else if (name === "transfer-encoding") {
      head.chunked = value.toLowerCase().split(",").at(-1)!.trim() === "chunked";
    } else if (name === "connection") {
      const tokens = value.toLowerCase();
      if (hasToken(tokens, "close")) head.close = true;
      else if (hasToken(tokens, "keep-alive")) head.close = false;
    }
  }
  // A chunked answer's length is the chunks' (RFC 9112 §6.3).
  if (head.chunked) head.length = null;
  return head;
}

/** Whether `text` is a token (RFC 9110 §5.6.2): a method, or a header name. */
export function isToken(text: string): boolean {
  return TOKEN.test(text);
}

/**
 * What a request's parsed header pairs say of its framing and connection: Host, the body's
 * length or chunking, keep-alive and `Expect`. Throws the {@link HeadError} of a head two parsers
 * could read two ways (both a length and chunking, differing lengths, two Hosts).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { framingOf } from "./http1.ts";
 * const framing = framingOf([["Host", "gw"], ["Content-Length", "5, 5"], ["connection", "close"]], 1);
 * assert.deepEqual(
 *   [framing.host, framing.contentLength, framing.chunked, framing.keepAlive],
 *   ["gw", 5, false, false],
 * );
 * assert.throws(() => framingOf([["content-length", "5"], ["content-length", "6"]], 1), /differing/);
 * ```
 */
export function framingOf(
  headers: ReadonlyArray<readonly [string, string]>,
  minor: 0 | 1,
): Omit<RequestHead, "method" | "target" | "minor" | "headers"> {
  let host: string | null = null;
  let contentLength: number | null = null;
  let transferEncoding: string | null = null;
  let connection = "";
  let expect: string | null = null;
  for (const [name, value] of headers) {
    // Only names of these lengths can be one of the five read here.
    const length = name.length;
    if (length !== 4 && length !== 6 && length !== 10 && length !== 14 && length !== 17) continue;
    switch (name.toLowerCase()) {
      case "host":
        if (host !== null) throw new HeadError(400, "more than one Host header");
        host = value;
        break;
      case "content-length": {
        // Repeated lengths must agree (a list "5, 5" counts as repeated).
        const length = addContentLength(contentLength, value);
        if (length === "malformed") throw new HeadError(400, "malformed Content-Length");
        if (length === "differing") throw new HeadError(400, "differing Content-Length values");
        contentLength = length;
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
  const keepAlive = minor === 1
    ? !hasToken(connection, "close")
    : hasToken(connection, "keep-alive");
  return {
    host,
    contentLength,
    chunked,
    keepAlive,
    expectContinue: expect === "100-continue" && minor === 1,
  };
}

/**
 * The request line's parts; throws the {@link HeadError} to answer.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { requestLine } from "./http1.ts";
 * assert.deepEqual(requestLine("GET /a?b HTTP/1.0"), { method: "GET", target: "/a?b", minor: 0 });
 * assert.throws(() => requestLine("GET / HTTP/2.0"), (e: { status?: number }) => e.status === 505);
 * ```
 */
export function requestLine(line: string): { method: string; target: string; minor: 0 | 1 } {
  const parts = line.split(" ");
  if (parts.length !== 3) throw new HeadError(400, "malformed request line");
  const [method, target, version] = parts;
  if (!TOKEN.test(method)) throw new HeadError(400, "malformed method");
  if (!TARGET.test(target)) throw new HeadError(400, "malformed request target");
  if (version !== "HTTP/1.1" && version !== "HTTP/1.0") {
    throw new HeadError(/^HTTP\/\d\.\d$/.test(version) ? 505 : 400, "unsupported HTTP version");
  }
  return { method, target, minor: version === "HTTP/1.1" ? 1 : 0 };
}

/** Whether the comma-separated (lower-case) `list` holds `token`. */
function hasToken(list: string, token: string): boolean {
  if (!list) return false;
  for (const each of list.split(",")) if (each.trim() === token) return true;
  return false;
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
