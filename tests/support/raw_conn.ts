/**
 * Raw TCP helpers for the hostile-client tests and the security bench: requests written byte by
 * byte, slowly or never finished, and answers read until the server closes.
 *
 * @module
 */

/** Writes all of `bytes` (a socket write may take only part). */
export async function writeAll(conn: Deno.Conn, bytes: Uint8Array): Promise<void> {
  for (let done = 0; done < bytes.length;) done += await conn.write(bytes.subarray(done));
}

/** Reads from `conn` until it closes; returns what arrived (empty when nothing did). */
export async function readAll(conn: Deno.Conn, onFirstBytes?: () => void): Promise<string> {
  const buf = new Uint8Array(4096);
  let text = "";
  for (;;) {
    const n = await conn.read(buf).catch(() => null);
    if (n === null) return text;
    if (!text) onFirstBytes?.();
    text += new TextDecoder().decode(buf.subarray(0, n));
  }
}

/**
 * Everything `conn` receives until the server closes it; after `ms` the test closes it and the
 * text ends with `[still open]`.
 */
export async function untilClosed(conn: Deno.Conn, ms: number): Promise<string> {
  let stillOpen = false;
  const timer = setTimeout(() => {
    stillOpen = true;
    conn.close();
  }, ms);
  const text = await readAll(conn);
  clearTimeout(timer);
  try {
    conn.close();
  } catch { /* closed */ }
  return stillOpen ? `${text}[still open]` : text;
}
