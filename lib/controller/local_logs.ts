/**
 * An attempt's output, as the local backend keeps it: `stdout.log` and `stderr.log` in the
 * attempt's directory, read from byte offsets into log chunks (so a restarted controller
 * resumes exactly where the posted log ends).
 *
 * @module
 */
import type { LogChunk } from "./backend.ts";

/** Byte offsets into each stream's file. */
export interface LogOffsets {
  stdout: number;
  stderr: number;
}

/** One decoder per stream (a multi-byte character may span two reads). */
export interface LogDecoders {
  stdout: TextDecoder;
  stderr: TextDecoder;
}

/**
 * Sends what the attempt's output files hold past `offsets` to `sink` and advances the
 * offsets; `final` flushes the decoders (the attempt ended).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { streamLogs } from "./local_logs.ts";
 * const dir = await Deno.makeTempDir();
 * await Deno.writeTextFile(`${dir}/stdout.log`, "hello\n");
 * const chunks: string[] = [];
 * const offsets = { stdout: 0, stderr: 0 };
 * streamLogs(dir, (c) => chunks.push(`${c.stream}@${c.offset}-${c.end}:${c.text}`), offsets, true);
 * assert.deepEqual(chunks, ["stdout@0-6:hello\n"]);
 * assert.equal(offsets.stdout, 6);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export function streamLogs(
  dir: string,
  sink: (chunk: LogChunk) => void,
  offsets: LogOffsets,
  final: boolean,
  decoders?: LogDecoders,
): void {
  const dec = decoders ?? { stdout: new TextDecoder(), stderr: new TextDecoder() };
  for (const stream of ["stdout", "stderr"] as const) {
    let file: Deno.FsFile;
    try {
      file = Deno.openSync(`${dir}/${stream}.log`, { read: true });
    } catch {
      continue;
    }
    try {
      file.seekSync(offsets[stream], Deno.SeekMode.Start);
      const buffer = new Uint8Array(64 * 1024);
      while (true) {
        const n = file.readSync(buffer);
        if (n === null || n === 0) break;
        const text = dec[stream].decode(buffer.subarray(0, n), { stream: true });
        if (text) sink({ stream, offset: offsets[stream], end: offsets[stream] + n, text });
        offsets[stream] += n;
      }
      if (final) {
        const rest = dec[stream].decode();
        if (rest) sink({ stream, offset: offsets[stream], end: offsets[stream], text: rest });
      }
    } finally {
      file.close();
    }
  }
}
