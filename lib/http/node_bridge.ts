/**
 * Between `node:http` and a fetch handler (what `serveGuarded` serves): a `Request` over each
 * incoming request, its small body collected as bytes, and the handler's `Response` written
 * back, a JSON answer in one write. Hand-written: `@hono/node-server` does this for Node, but it
 * replaces the global `Request`/`Response` to go fast, which a library imported into a user's
 * process must not do, and it knows nothing of `served_request.ts`'s hooks.
 *
 * @module
 */
import type http from "node:http";
import { isSecurityHeader, SECURITY_HEADERS } from "./security_headers.ts";
import { markServed } from "./served_request.ts";
import { answerOf, clientLeft, SMALL_BODY_BYTES } from "./serve_types.ts";

/**
 * Runs `handler` on one `node:http` request and writes its response, aborting the request's
 * signal if the client leaves; `service` names the server in the warning logged for a client
 * that leaves before its body has arrived.
 */
export async function respond(
  handler: (request: Request) => Response | Promise<Response>,
  incoming: http.IncomingMessage,
  outgoing: http.ServerResponse,
  hostname: string,
  service: string,
): Promise<void> {
  const gone = new AbortController();
  const leave = () => {
    if (!outgoing.writableFinished) {
      gone.abort(clientLeft());
    }
  };
  outgoing.once("close", leave);
  let request: Request;
  let collected: Uint8Array | null;
  try {
    ({ request, collected } = await toRequest(incoming, outgoing, hostname, gone.signal));
  } catch {
    // The client left before its (small) body had arrived: no one to answer, nothing ran.
    console.warn(
      `${service}: 499 ${incoming.method} ${incoming.url?.split("?")[0]}: the client left ` +
        "before its body had arrived",
    );
    return;
  }
  // Middleware learns here when the response is over (a concurrency slot is released then).
  const finish = markServed(request, collected);
  outgoing.once("close", finish);
  try {
    const response = await answerOf(handler, request);
    if (gone.signal.aborted) {
      await response.body?.cancel().catch(() => {});
      return;
    }
    await writeResponse(response, outgoing, gone.signal);
  } finally {
    finish();
  }
}

const BODYLESS = new Set(["GET", "HEAD", "OPTIONS", "DELETE", "TRACE"]);

/**
 * The body of `incoming` (of declared `length`), once it has all arrived; rejects when the
 * client leaves first (a body that never ends is cut by the server's request deadline, which
 * closes the connection).
 */
function collect(
  incoming: http.IncomingMessage,
  outgoing: http.ServerResponse,
  length: number,
): Promise<Uint8Array<ArrayBuffer>> {
  return new Promise((resolve, reject) => {
    const whole = new Uint8Array(length);
    let at = 0;
    incoming.on("data", (chunk: Uint8Array) => {
      whole.set(chunk.subarray(0, Math.max(0, length - at)), at);
      at += chunk.byteLength;
    });
    const fail = () => reject(clientLeft());
    incoming.once("end", () => {
      outgoing.off("close", fail);
      resolve(whole.subarray(0, Math.min(at, length)));
    });
    incoming.once("aborted", fail);
    incoming.once("error", fail);
    outgoing.once("close", fail);
  });
}

/**
 * A fetch `Request` over a `node:http` request; its body streams with backpressure, or is
 * collected whole when small (`collected`: its bytes), before the handler runs.
 */
async function toRequest(
  incoming: http.IncomingMessage,
  outgoing: http.ServerResponse,
  hostname: string,
  signal: AbortSignal,
): Promise<{ request: Request; collected: Uint8Array | null }> {
  // Node has parsed the head already: read what is needed from it, and put the raw pairs
  // straight into the request's own headers (a `Headers` passed as `init.headers` would be
  // copied once more, entry by entry, by the `Request` constructor).
  const raw = incoming.rawHeaders;
  const method = incoming.method ?? "GET";
  const nodeHeaders = incoming.headers;
  const host = nodeHeaders.host ?? hostname;
  const url = `http://${host}${incoming.url ?? "/"}`;
  const length = nodeHeaders["content-length"];
  const chunked = nodeHeaders["transfer-encoding"] !== undefined;
  const hasBody = !BODYLESS.has(method) || length !== undefined || chunked;
  const withHeaders = (request: Request) => {
    const headers = request.headers;
    for (let i = 0; i < raw.length; i += 2) headers.append(raw[i], raw[i + 1]);
    return request;
  };
  if (!hasBody || length === "0") {
    return { request: withHeaders(new Request(url, { method, signal })), collected: null };
  }
  // A small declared body is collected here and handed over as bytes: a stream per request
  // costs more than the body (the common case: an events post of a few hundred bytes).
  const declared = Number(length ?? NaN);
  if (declared <= SMALL_BODY_BYTES && !chunked) {
    const body = await collect(incoming, outgoing, declared);
    return {
      request: withHeaders(new Request(url, { method, signal, body })),
      collected: body,
    };
  }
  const body = new ReadableStream<Uint8Array>({
    start(controller) {
      incoming.on("data", (chunk: Uint8Array) => {
        controller.enqueue(new Uint8Array(chunk.buffer, chunk.byteOffset, chunk.byteLength));
        if ((controller.desiredSize ?? 1) <= 0) incoming.pause();
      });
      incoming.once("end", () => {
        try {
          controller.close();
        } catch { /* cancelled */ }
      });
      incoming.once("error", (error) => {
        try {
          controller.error(error);
        } catch { /* cancelled */ }
      });
      incoming.once("aborted", () => {
        try {
          controller.error(clientLeft());
        } catch { /* cancelled */ }
      });
    },
    pull() {
      incoming.resume();
    },
    cancel() {
      // The handler stopped reading (a refused body): stop reading the socket too.
      incoming.pause();
    },
  }, { highWaterMark: 4 });
  const request = withHeaders(
    new Request(url, {
      method,
      body,
      signal,
      // @ts-ignore: `duplex` is required for a streamed body and not in every lib's types
      duplex: "half",
    }),
  );
  return { request, collected: null };
}

/** Writes `response` to `outgoing`, waiting for the socket to drain between chunks. */
async function writeResponse(
  response: Response,
  outgoing: http.ServerResponse,
  signal: AbortSignal,
): Promise<void> {
  // The head goes out in one `writeHead` with the raw pairs (not one `setHeader` each: Node
  // would validate and store every header in its own map first). `forEach` yields each
  // set-cookie apart and the others combined; it is also ~10 µs cheaper than for-of here.
  const head: string[] = [];
  let closing = false;
  let json = false;
  let length: string | null = null;
  let secured = null as Set<string> | null;
  response.headers.forEach((value, name) => {
    // Held back: a JSON answer states its own (once), anything else the handler's.
    if (name === "content-length") return void (length = value);
    head.push(name, value);
    if (name === "connection") closing = value.toLowerCase() === "close";
    else if (name === "content-type") json = value.startsWith("application/json");
    else if (isSecurityHeader(name)) (secured ??= new Set()).add(name);
  });
  for (const [name, value] of SECURITY_HEADERS) {
    if (!secured?.has(name)) head.push(name, value);
  }
  if (length !== null && !(json && response.body)) head.push("content-length", length);
  const writeHead = () =>
    response.statusText
      ? outgoing.writeHead(response.status, response.statusText, head)
      : outgoing.writeHead(response.status, head);
  if (!response.body) {
    writeHead();
    outgoing.end();
    if (closing) outgoing.socket?.destroySoon?.();
    return;
  }
  // A JSON answer is already whole in memory: one write, with its length.
  if (json) {
    const bytes = new Uint8Array(await response.arrayBuffer());
    if (signal.aborted) return;
    head.push("content-length", String(bytes.byteLength));
    writeHead();
    outgoing.end(bytes);
    if (closing) outgoing.socket?.destroySoon?.();
    return;
  }
  writeHead();
  const reader = response.body.getReader();
  const stop = () => reader.cancel(signal.reason).catch(() => {});
  signal.addEventListener("abort", stop, { once: true });
  try {
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      if (!outgoing.write(value)) {
        await new Promise<void>((resolve) => {
          const go = () => {
            outgoing.off("drain", go);
            outgoing.off("close", go);
            resolve();
          };
          outgoing.on("drain", go);
          outgoing.on("close", go);
        });
      }
      if (signal.aborted) return;
    }
    outgoing.end();
    // A refused body (413, 408): the rest is not read, the connection ends with the answer.
    if (closing) outgoing.socket?.destroySoon?.();
  } catch {
    // The body failed mid-stream (or the client left): the connection cannot carry on.
    outgoing.destroy();
  } finally {
    signal.removeEventListener("abort", stop);
  }
}
