/**
 * The request-head parser's line handling as it was before the one-pass rewrite (the head split
 * into lines, a regex per header name): slower and plainly correct, kept as the reference that
 * `tests/http1_test.ts` compares the library's `parseHead` with on mutated heads. What the
 * rewrite did not change, the request line's checks and what the headers say of the framing, is
 * the library's own (`requestLine`, `framingOf`).
 *
 * @module
 */
import {
  framingOf,
  HeadError,
  latin1,
  type RequestHead,
  requestLine,
} from "../../lib/http/http1.ts";

const CR = 13;
const LF = 10;
const TOKEN = /^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$/;

/** Parses a whole request head; throws {@link HeadError} with the status to answer. */
export function referenceParseHead(bytes: Uint8Array): RequestHead {
  // A bare LF (not after CR) is refused first, wherever it is.
  for (let i = bytes.indexOf(LF); i >= 0; i = bytes.indexOf(LF, i + 1)) {
    if (i === 0 || bytes[i - 1] !== CR) throw new HeadError(400, "a line ends in LF without CR");
  }
  const lines = latin1(bytes).split("\r\n");
  // The head ends with an empty line: drop it (and the empty string after the last CRLF).
  while (lines.length > 0 && lines[lines.length - 1] === "") lines.pop();
  const { method, target, minor } = requestLine(lines[0] ?? "");
  const headers: Array<[string, string]> = [];
  for (const line of lines.slice(1)) {
    const colon = line.indexOf(":");
    if (colon <= 0) throw new HeadError(400, "malformed header line");
    const name = line.slice(0, colon);
    // A name must be a token: this also refuses obs-fold (a line starting with space or tab).
    if (!TOKEN.test(name)) throw new HeadError(400, "malformed header name");
    const value = line.slice(colon + 1).replace(/^[ \t]+|[ \t]+$/g, "");
    // deno-lint-ignore no-control-regex -- control characters are what it looks for
    if (/[\x00-\x08\x0a-\x1f\x7f]/.test(value)) {
      throw new HeadError(400, `header ${name}: control character`);
    }
    headers.push([name, value]);
  }
  return { method, target, minor, headers, ...framingOf(headers, minor) };
}
