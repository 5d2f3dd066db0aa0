/**
 * The proxy page (phase, upstream health, failed calls), the phase as JSON, and the browser's
 * change feed (`/api/stream`, cookie-authenticated because `EventSource` cannot send headers).
 *
 * @module
 */
import { Hono } from "hono";
import { changeFeedResponse } from "../../gateway/change_feed.ts";
import { sleep } from "../../util/time.ts";
import { html } from "../html.ts";
import { liveRegion, page } from "../layout.ts";
import { type CallFact, proxyFragment } from "../proxy_view.ts";
import type { UiDeps } from "./deps.ts";

/** The proxy and stream sub-app. */
export function liveRoutes(deps: UiDeps): Hono {
  const { base, index, store } = deps;
  const streamPollMs = deps.options.streamPollMs ?? 250;
  const callCache = new Map<number, CallFact>();
  const proxy = async () => {
    await index.refresh(2_000);
    const facts: CallFact[] = [];
    for (const { seq, rollout_id } of index.recentCalls) {
      let fact = callCache.get(seq);
      if (!fact) {
        const [e] = await store.listEvents(rollout_id, {
          type: "model_request",
          after_seq: seq - 1,
          limit: 1,
        });
        if (!e || e.type !== "model_request") continue;
        const p = e.payload;
        fact = {
          seq,
          rollout_id,
          upstream: p.upstream,
          http_status: p.http_status,
          error: p.error,
          latency_ms: p.latency_ms,
          retry_count: p.retry_count,
          flavor: p.flavor,
          created_at: e.created_at,
        };
        callCache.set(seq, fact);
      }
      facts.push(fact);
    }
    if (callCache.size > 2_000) {
      const keep = new Set(index.recentCalls.map((r) => r.seq));
      for (const seq of callCache.keys()) if (!keep.has(seq)) callCache.delete(seq);
    }
    return proxyFragment(base, deps.phaseSnapshot(), await store.listModels(), facts);
  };
  const app = new Hono();
  app.get("/proxy", async (c) => {
    const ctx = await deps.pageContext();
    const body = html`<h1>Proxy</h1>${
      liveRegion(
        "proxy",
        `${base}/fragments/proxy`,
        { types: "model_request,model" },
        await proxy(),
      )
    }`;
    return c.html(page(ctx, "Proxy", "proxy", body).toString());
  });
  app.get("/fragments/proxy", async (c) => c.html((await proxy()).toString()));
  app.get("/api/phase", (c) => c.json(deps.phaseSnapshot()));
  app.get("/api/stream", (c) =>
    changeFeedResponse(c, {
      store,
      signals: [deps.closing],
      comment: "reins ui change feed",
      retryMs: 1000,
      wait: async (signal) => {
        await sleep(streamPollMs, signal);
        return streamPollMs;
      },
    }));
  return app;
}
