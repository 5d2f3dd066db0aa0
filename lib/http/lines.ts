/**
 * The one line reader of reins: splits a UTF-8 byte stream into lines (NDJSON replies, a
 * process's stdout), whatever the chunking, with `\n` or `\r\n` line ends.
 *
 * @module
 */

/**
 * Splits the chunks of a UTF-8 byte stream into lines; a chunk may end anywhere, even inside a
 * character. A trailing `\r` is dropped from each line.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { LineSplitter } from "./lines.ts";
 * const lines = new LineSplitter();
 * assert.deepEqual(lines.push(new TextEncoder().encode("a\r\nb")), ["a"]);
 * assert.deepEqual(lines.push(new TextEncoder().encode("c\n")), ["bc"]);
 * assert.equal(lines.rest, "");
 * ```
 */
export class LineSplitter {
  #decoder = new TextDecoder();
  #buffer = "";

  /** Adds a chunk; returns the lines it completes, without their line ends. */
  push(chunk: Uint8Array): string[] {
    this.#buffer += this.#decoder.decode(chunk, { stream: true });
    const lines = this.#buffer.split("\n");
    this.#buffer = lines.pop()!;
    return lines.map((line) => line.endsWith("\r") ? line.slice(0, -1) : line);
  }

  /** What came after the last line end so far (an unterminated last line). */
  get rest(): string {
    return this.#buffer;
  }
}

/**
 * The non-blank lines of a byte stream (the last one may lack its line end). Stopping the
 * iteration cancels the stream.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readLines } from "./lines.ts";
 * const out = [];
 * for await (const line of readLines(new Response('{"a":1}\n\n{"b":2}').body!)) out.push(line);
 * assert.deepEqual(out, ['{"a":1}', '{"b":2}']);
 * ```
 */
export async function* readLines(
  body: ReadableStream<Uint8Array>,
  options: { onChunk?: () => void } = {},
): AsyncGenerator<string> {
  const reader = body.getReader();
  const lines = new LineSplitter();
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      options.onChunk?.();
      for (const line of lines.push(value)) if (line.trim() !== "") yield line;
    }
    if (lines.rest.trim() !== "") yield lines.rest;
  } finally {
    await reader.cancel().catch(() => {});
  }
}
