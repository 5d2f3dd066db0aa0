/**
 * Line splitting for the worker's byte streams (its stdout/stderr, streamed NDJSON replies).
 *
 * @module
 */

/**
 * Splits the chunks of a UTF-8 byte stream into `\n`-terminated lines; a chunk may end
 * anywhere, even inside a character.
 *
 * @example
 * ```ts
 * import { LineSplitter } from "./lines.ts";
 * const lines = new LineSplitter();
 * lines.push(new TextEncoder().encode("a\nb")); // ["a"]
 * lines.push(new TextEncoder().encode("c\n")); // ["bc"]
 * lines.rest; // ""
 * ```
 */
export class LineSplitter {
  #decoder = new TextDecoder();
  #buffer = "";

  /** Adds a chunk; returns the lines it completes, without their `\n`. */
  push(chunk: Uint8Array): string[] {
    this.#buffer += this.#decoder.decode(chunk, { stream: true });
    const lines = this.#buffer.split("\n");
    this.#buffer = lines.pop()!;
    return lines;
  }

  /** What came after the last `\n` so far (an unterminated last line). */
  get rest(): string {
    return this.#buffer;
  }
}
