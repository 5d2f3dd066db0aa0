/** `/v1/stream`: the change feed as server-sent events (admin). @module */
import { Hono } from "hono";
import type { AuthEnv } from "../../http/auth.ts";
import { changeFeedResponse } from "../change_feed.ts";
import type { GatewayContext } from "./context.ts";

/** The change-feed sub-app (mounted at `/v1`). */
export function streamApp(ctx: GatewayContext): Hono<AuthEnv> {
  const { store, notifier, pollMs, guards: { admin } } = ctx;
  const app = new Hono<AuthEnv>();
  app.get("/stream", admin, (c) =>
    changeFeedResponse(c, {
      store,
      signals: [ctx.signal],
      comment: "reins gateway change feed",
      wait: async (signal) => {
        const started = Date.now();
        await notifier.wait(pollMs, signal);
        return Date.now() - started;
      },
    }));
  return app;
}
