/**
 * The request-head parser as it was before the one-pass rewrite (split into lines, a regex per
 * name): slower and plainly correct, kept as the reference `tests/http1_test.ts` compares the
 * library's `parseHead` with on random and mutated heads.
 *
 * @module
 */
import { HeadError, latin1, type RequestHead } from "../../lib/http/http1.ts";

const CR = 13;
const LF = 10;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;
const TARGET = /^[\x21-\x7e]+$/;

function hasControl(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if ((c < 32 && c !== 9) || c === 127) return true;
  }
  return false;
}

function trimOws(text: string): string {
  let start = 0;
  let end = text.length;
  while (start < end && (text.charCodeAt(start) === 32 || text.charCodeAt(start) === 9)) start++;
  while (end > start && (text.charCodeAt(end - 1) === 32 || text.charCodeAt(end - 1) === 9)) end--;
  return start === 0 && end === text.length ? text : text.slice(start, end);
}

/** Parses a whole request head; throws {@link HeadError} with the status to answer. */
export function referenceParseHead(bytes: Uint8Array): RequestHead {
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
