/**
 * Worker of `benches/proxy.ts`: a fake vLLM answering instantly with canned bodies, in its own
 * isolate so that it does not share an event loop with the proxy being measured.
 *
 * @module
 */
/// <reference lib="deno.worker" />

self.onmessage = (event: MessageEvent<{ whole: string; chunks: string }>) => {
  const { whole, chunks } = event.data;
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (req) => {
    if (req.method === "DELETE") {
      queueMicrotask(() => server.shutdown().then(() => self.close()));
      return new Response(null, { status: 204 });
    }
    const body = await req.json();
    return body.stream
      ? new Response(chunks, { headers: { "content-type": "text/event-stream" } })
      : new Response(whole, { headers: { "content-type": "application/json" } });
  });
  self.postMessage({ port: (server.addr as Deno.NetAddr).port });
};
