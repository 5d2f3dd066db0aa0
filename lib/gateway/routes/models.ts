/** `/v1/models`: register (upsert), list and read policy models (admin). @module */
import { Hono } from "hono";
import type { AuthEnv } from "../../http/auth.ts";
import { RegisterModelRequestSchema } from "../../schema.ts";
import { type GatewayContext, jsonBody, notFound } from "./context.ts";

/** The models sub-app (mounted at `/v1`). */
export function modelsApp(ctx: GatewayContext): Hono<AuthEnv> {
  const { store, notifier, guards: { admin }, body } = ctx;
  const app = new Hono<AuthEnv>();

  app.post("/models", admin, body, jsonBody(RegisterModelRequestSchema), async (c) => {
    const stored = await store.upsertModel(c.var.body);
    notifier.notify();
    return c.json(stored);
  });

  app.get("/models", admin, async (c) => c.json({ models: await store.listModels() }));

  app.get("/models/:name", admin, async (c) => {
    const name = c.req.param("name");
    const model = await store.getModel(name);
    if (!model) notFound("name", `no model '${name}'`);
    return c.json(model);
  });

  return app;
}
