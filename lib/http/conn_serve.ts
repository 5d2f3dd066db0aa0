/**
 * `serveGuarded`'s own engine: HTTP/1.1 on connections from `Deno.listen`, with every deadline,
 * cap and count on our side of the socket, and no second hop.
 *
 * Why: the server's CPU per small POST to a trivial JSON handler (`deno task bench:serve`: client
 * in another process, 64 at once; 2026-12-03, two rounds on a 2-core machine): `node:http`
 * (Node's parser, streams and writer in JavaScript, plus the `Request`/`Response` bridge) 88.3
 * and 71.2 µs, this engine 68.3 and 69.4 µs, `Deno.serve` 17.5 and 16.5 µs. `Deno.serve` itself
 * cannot be used: it accepts its own connections, so it has no cap per client, no deadline for a
 * head or an idle connection, and no way to close one. What is left here is mostly the public
 * `Request` constructor and one read and one write per request. The parser is `./http1.ts`
 * (strict, sans-IO).
 *
 * - `headers_timeout_ms`: a fresh connection, or a kept-alive one whose next request has
 *   begun, must bring a whole head within it: 408, counted in `timedOut`, closed.
 * - `idle_timeout_ms`: a kept-alive connection with nothing in flight and nothing sent is closed.
 * - `body_timeout_ms` + the grace: a small declared body (≤ 64 KiB) is collected before the
 *   handler runs and must arrive within it (408, closed); a larger or chunked body streams to
 *   the handler (whose `bodyLimits` applies the same deadline) and the connection is cut if it
 *   has not ended by then.
 * - `max_header_bytes`: request line and headers (431 above, closed).
 * - A response written before its request's body was read to the end closes the connection.
 *
 * While the handler runs, one read stays posted on the socket: end of stream or an error aborts
 * the request's signal (the client left), and bytes (a pipelined request) wait in the buffer.
 * A response is over (its `served_request` hooks run) once its last byte is written or the
 * client has gone.
 *
 * @module
 */
import { headEnd, HeadError, leadingBlankLines, parseHead } from "./http1.ts";
import type { RequestHead } from "./http1.ts";
import { markServed } from "./served_request.ts";
import {
  answerOf,
  atMost,
  ClientConnections,
  clientLeft,
  guardedServer,
  InFlight,
  newCounts,
  SMALL_BODY_BYTES,
} from "./serve_types.ts";
import type { EngineSettings, GuardedServer } from "./serve_types.ts";
import {
  type Clock,
  collect,
  Inbound,
  plainAnswer,
  streamBody,
  writeAll,
  writeResponse,
} from "./conn_io.ts";

const encoder = new TextEncoder();
/** How long, and how many bytes, a closing connection reads and drops before it closes. */
const LINGER_MS = 1_000;
const LINGER_BYTES = 1024 * 1024;

/** Serves `handler` on our own HTTP/1.1 engine; the counters are those of `GuardedServer`. */
export function serveConnections(
  handler: (request: Request) => Response | Promise<Response>,
  settings: EngineSettings,
): GuardedServer {
  const { deadlines } = settings;
  const listener = Deno.listen({ hostname: settings.hostname, port: settings.port });
  /** How to close each open connection. */
  const open = new Set<() => void>();
  const finished = new Set<Promise<void>>();
  const perClient = new ClientConnections(settings.perClient);
  const requests = new InFlight();
  const counts = newCounts();
  let shuttingDown = false;
  const clocks = new Set<Clock>();
  const keepAliveLine = `keep-alive: timeout=${Math.floor(deadlines.idle_timeout_ms / 1_000)}\r\n`;
  // How often the clocks are read: the precision of every deadline.
  const shortest = Math.min(
    deadlines.headers_timeout_ms,
    deadlines.body_timeout_ms,
    deadlines.idle_timeout_ms,
  );
  const sweep = setInterval(() => {
    const now = Date.now();
    for (const clock of clocks) {
      if (clock.at <= now) {
        clock.at = Infinity;
        clock.expire();
      }
    }
  }, Math.max(25, Math.min(1_000, Math.floor(shortest / 4))));

  const onConnection = (conn: Deno.Conn) => {
    if (open.size >= settings.maxConnections) {
      counts.dropped++;
      conn.close();
      return;
    }
    const address = (conn.remoteAddr as Deno.NetAddr).hostname;
    if (!perClient.admit(address)) {
      counts.refused++;
      writeAll(conn, plainAnswer(503)).catch(() => {}).finally(() => {
        try {
          conn.close();
        } catch { /* closed */ }
      });
      return;
    }
    let closed = false;
    const close = () => {
      if (closed) return;
      closed = true;
      try {
        conn.close();
      } catch { /* closed */ }
    };
    open.add(close);
    const served = serveConnection(conn, close).catch(() => {}).finally(() => {
      close();
      open.delete(close);
      finished.delete(served);
      perClient.release(address);
    });
    finished.add(served);
  };

  /**
   * Ends a connection once `answer` (if any) is out: our side is shut for writing, then what the
   * client still sends is read and dropped until it closes too (a second at most). Closing with
   * unread bytes would reset the connection, and the client could lose the answer with it.
   */
  const lingerClose = async (
    conn: Deno.Conn,
    inbound: Inbound,
    close: () => void,
    answer?: number,
  ) => {
    const timer = setTimeout(close, LINGER_MS);
    try {
      if (answer !== undefined) await writeAll(conn, plainAnswer(answer));
      await conn.closeWrite();
      let drained = 0;
      while (drained < LINGER_BYTES) {
        drained += inbound.size;
        inbound.consume(inbound.size);
        if (!await inbound.fill()) break;
      }
    } catch {
      /* gone */
    } finally {
      clearTimeout(timer);
      close();
    }
  };

  async function serveConnection(conn: Deno.Conn, close: () => void): Promise<void> {
    try {
      (conn as Deno.TcpConn).setNoDelay(true);
    } catch { /* not TCP */ }
    const inbound = new Inbound(conn);
    let expired = false;
    const clock: Clock = { at: Infinity, expire: () => {} };
    clocks.add(clock);
    const arm = (ms: number, onExpiry: () => void) => {
      clock.at = Date.now() + ms;
      clock.expire = () => {
        expired = true;
        onExpiry();
      };
    };
    const disarm = () => void (clock.at = Infinity);
    /** The 408 going out once a head's deadline passed; the connection ends after it. */
    let answering: Promise<void> | null = null;
    const headExpired = () => {
      counts.timedOut++;
      answering = lingerClose(conn, inbound, close, 408);
    };
    try {
      // The first head must arrive within the header deadline.
      arm(deadlines.headers_timeout_ms, headExpired);
      let waitingIdle = false;
      for (;;) {
        // ---- the head
        let end = -1;
        let searched = 0;
        for (;;) {
          const blank = leadingBlankLines(inbound.view());
          if (blank > 0) inbound.consume(blank);
          if (waitingIdle && inbound.size > 0) {
            // The next request has begun: its head has the header deadline from now.
            waitingIdle = false;
            arm(deadlines.headers_timeout_ms, headExpired);
          }
          end = headEnd(inbound.view(), Math.max(0, searched - 3));
          if (end >= 0) break;
          searched = inbound.size;
          if (inbound.size > deadlines.max_header_bytes) {
            disarm();
            return await lingerClose(conn, inbound, close, 431);
          }
          if (!await inbound.fill() || expired) return void await answering;
        }
        disarm();
        if (end > deadlines.max_header_bytes) {
          return await lingerClose(conn, inbound, close, 431);
        }
        let head: RequestHead;
        try {
          head = parseHead(inbound.view().subarray(0, end));
        } catch (error) {
          const status = error instanceof HeadError ? error.status : 400;
          return await lingerClose(conn, inbound, close, status);
        }
        inbound.consume(end);
        const next = await serveRequest(conn, inbound, head, close, clock);
        if (next === "linger") return await lingerClose(conn, inbound, close);
        if (next === "close" || shuttingDown) return;
        waitingIdle = true;
        arm(deadlines.idle_timeout_ms, close);
      }
    } finally {
      clocks.delete(clock);
    }
  }

  /**
   * Serves one request whose head has been read; resolves how the connection goes on: kept,
   * closed at once (the client left), or closed once the client has read the answer.
   */
  async function serveRequest(
    conn: Deno.Conn,
    inbound: Inbound,
    head: RequestHead,
    close: () => void,
    clock: Clock,
  ): Promise<"keep" | "close" | "linger"> {
    requests.begin();
    const gone = new AbortController();
    const leave = () => {
      if (!gone.signal.aborted) gone.abort(clientLeft());
    };
    let finish = () => {};
    let bodyDone = true;
    try {
      const host = head.host ?? settings.hostname;
      const url = head.target.startsWith("/")
        ? `http://${host}${head.target}`
        : head.target === "*"
        ? `http://${host}/`
        : head.target;
      let body: Uint8Array<ArrayBuffer> | ReadableStream<Uint8Array> | null = null;
      let collected: Uint8Array | null = null;
      const declared = head.contentLength;
      const bodyDeadline = deadlines.body_timeout_ms + settings.bodyGraceMs;
      if (head.expectContinue && (declared ?? 1) > 0 && inbound.size === 0) {
        await writeAll(conn, encoder.encode("HTTP/1.1 100 Continue\r\n\r\n"));
      }
      if (declared !== null && declared <= SMALL_BODY_BYTES && !head.chunked) {
        if (declared > 0 || !["GET", "HEAD"].includes(head.method)) {
          const bytes = await collect(inbound, declared, bodyDeadline, clock);
          if (bytes === "late") {
            counts.timedOut++;
            await writeAll(conn, plainAnswer(408)).catch(() => {});
            return "linger";
          }
          if (bytes === "gone") {
            console.warn(
              `${settings.service}: 499 ${head.method} ${head.target.split("?")[0]}: the ` +
                "client left before its body had arrived",
            );
            return "close";
          }
          body = bytes;
          collected = bytes;
        }
      } else if (declared !== null || head.chunked) {
        bodyDone = false;
        clock.at = Date.now() + bodyDeadline;
        clock.expire = () => {
          if (bodyDone) return;
          counts.timedOut++;
          close();
        };
        body = streamBody(inbound, head.chunked ? null : declared!, () => {
          bodyDone = true;
          clock.at = Infinity;
        }, leave);
      }
      let request: Request;
      try {
        request = new Request(url, {
          method: head.method,
          body,
          signal: gone.signal,
          // @ts-ignore: `duplex` is required for a streamed body and not in every lib's types
          duplex: "half",
        });
        const headers = request.headers;
        for (const [name, value] of head.headers) headers.append(name, value);
      } catch {
        await writeAll(conn, plainAnswer(400)).catch(() => {});
        return "linger";
      }
      // While the handler runs, a posted read learns whether the client leaves.
      if (bodyDone) inbound.fill().then((more) => more || leave());
      finish = markServed(request, collected);
      const response = await answerOf(handler, request);
      if (gone.signal.aborted) {
        await response.body?.cancel().catch(() => {});
        return "close";
      }
      // Answered before the body was read to its end (a 413, 408 or 429 while it streams): the
      // rest is not read, the connection ends with the answer; so it does when the handler says.
      const closing = !head.keepAlive || !bodyDone || shuttingDown ||
        response.headers.get("connection")?.toLowerCase() === "close";
      let complete = false;
      try {
        complete = await writeResponse(
          (bytes) => writeWithin(conn, bytes, clock, close),
          response,
          head.method,
          closing ? "connection: close\r\n" : keepAliveLine,
          gone.signal,
        );
      } catch {
        leave();
        return "close";
      }
      if (!complete || gone.signal.aborted) return "close";
      return closing ? "linger" : "keep";
    } finally {
      clock.at = Infinity;
      finish();
      requests.end();
    }
  }

  /**
   * Writes `bytes`, closing the connection when the client takes none of them for
   * `idle_timeout_ms` (each write that moves bytes starts the time again): a client that asks for
   * an answer and never reads it would otherwise hold its connection for ever. The connection's
   * clock is put back as it was after the write.
   */
  const writeWithin = async (
    conn: Deno.Conn,
    bytes: Uint8Array,
    clock: Clock,
    close: () => void,
  ): Promise<void> => {
    const { at: before, expire } = clock;
    clock.expire = () => {
      counts.timedOut++;
      close();
    };
    try {
      let at = 0;
      while (at < bytes.byteLength) {
        clock.at = Date.now() + deadlines.idle_timeout_ms;
        at += await conn.write(bytes.subarray(at));
      }
    } finally {
      clock.at = before;
      clock.expire = expire;
    }
  };

  // Accept errors (EMFILE when a flood took every descriptor, ECONNABORTED) are counted and
  // retried after a pause that doubles up to a second; they never stop the loop.
  const accepting = (async () => {
    let pause = 5;
    while (!shuttingDown) {
      let conn: Deno.Conn;
      try {
        conn = await listener.accept();
      } catch (error) {
        if (shuttingDown || error instanceof Deno.errors.BadResource) return;
        counts.acceptErrors++;
        await new Promise((resolve) => setTimeout(resolve, pause));
        pause = Math.min(1_000, pause * 2);
        continue;
      }
      pause = 5;
      onConnection(conn);
    }
  })();

  const addr = listener.addr as Deno.NetAddr;
  return guardedServer({
    addr: { transport: "tcp", hostname: addr.hostname, port: addr.port },
    counts,
    connections: () => open.size,
    maxConnections: settings.maxConnections,
    async shutdown(): Promise<void> {
      shuttingDown = true;
      clearInterval(sweep);
      try {
        listener.close();
      } catch { /* closed */ }
      await accepting;
      await requests.settled(1_000);
      for (const close of open) close();
      // A handler that ignores its aborted signal is not waited for past a second.
      await atMost(Promise.all([...finished]), 1_000);
    },
  });
}
