/** `/v1/phase`: read and set the rollout/update phase, optionally draining calls (admin). @module */
import { Hono } from "hono";
import type { AuthEnv } from "../../http/auth.ts";
import { sleep } from "../../util/time.ts";
import { PhaseRequestSchema } from "../../schema.ts";
import { HttpError } from "../../util/error.ts";
import { type GatewayContext, jsonBody } from "./context.ts";

/** The phase sub-app (mounted at `/v1`). */
export function phaseApp(ctx: GatewayContext): Hono<AuthEnv> {
  const { phase, guards: { admin }, body } = ctx;
  const app = new Hono<AuthEnv>();

  app.get("/phase", admin, (c) => c.json(phase.snapshot()));

  app.post("/phase", admin, body, jsonBody(PhaseRequestSchema), async (c) => {
    const req = c.var.body;
    phase.setPhase(req.phase);
    if (req.drain && req.phase === "update") {
      const timeout = new AbortController();
      const drained = await Promise.race([
        phase.waitForDrain().then(() => true),
        sleep(req.drain_timeout_ms, timeout.signal).then(() => false),
      ]);
      timeout.abort();
      if (!drained) {
        throw new HttpError(
          504,
          `drain_timeout_ms: ${phase.snapshot().in_flight} call(s) still in flight after ` +
            `${req.drain_timeout_ms} ms`,
          { field: "drain_timeout_ms" },
        );
      }
    }
    return c.json(phase.snapshot());
  });

  return app;
}
