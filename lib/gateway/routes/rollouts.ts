/**
 * `/v1/rollouts…` and `/v1/leases/expire`: create, list, claim, read, transition, renew a
 * lease, mint an attempt's token (admin; reads also with the reporter key).
 *
 * @module
 */
import { Hono } from "hono";
import type { AuthEnv } from "../../http/auth.ts";
import { capabilityToken } from "../../http/credentials.ts";
import {
  ClaimRequestSchema,
  CreateRolloutsRequestSchema,
  ListRolloutsQuerySchema,
  parseOrThrow,
  RenewLeaseRequestSchema,
  TransitionRequestSchema,
} from "../../schema.ts";
import { HttpError } from "../../util/error.ts";
import { checkPage, type GatewayContext, jsonBody, notFound } from "./context.ts";

/** The rollouts sub-app (mounted at `/v1`). */
export function rolloutsApp(ctx: GatewayContext): Hono<AuthEnv> {
  const { store, limits, notifier, live, guards: { admin, reader }, body } = ctx;
  const app = new Hono<AuthEnv>();

  app.post(
    "/rollouts",
    admin,
    body,
    jsonBody(CreateRolloutsRequestSchema, { batch: { field: "rollouts", limits } }),
    async (c) => {
      const out = await store.createRollouts(c.var.body.rollouts);
      notifier.notify();
      return c.json(out);
    },
  );

  app.get("/rollouts", reader, async (c) => {
    const url = new URL(c.req.url);
    const labels: Record<string, string> = {};
    for (const [k, v] of url.searchParams) if (k.startsWith("label.")) labels[k.slice(6)] = v;
    const raw: Record<string, unknown> = {};
    const status = url.searchParams.get("status");
    if (status !== null) raw.status = status.includes(",") ? status.split(",") : status;
    for (const key of ["mode", "group_id", "order", "after"]) {
      const v = url.searchParams.get(key);
      if (v !== null) raw[key] = v;
    }
    const limit = url.searchParams.get("limit");
    if (limit !== null) raw.limit = Number(limit);
    if (Object.keys(labels).length) raw.labels = labels;
    const query = parseOrThrow(ListRolloutsQuerySchema, raw);
    checkPage(query.limit, limits);
    return c.json(await store.listRollouts(query));
  });

  app.post("/rollouts/claim", admin, body, jsonBody(ClaimRequestSchema), async (c) => {
    const req = c.var.body;
    if (req.limit > limits.max_claim) {
      throw new HttpError(400, `limit: at most ${limits.max_claim} per claim`, { field: "limit" });
    }
    const claimed = await store.claimRollouts(req);
    if (claimed.length) notifier.notify();
    return c.json({
      claimed: claimed.map(({ rollout, attempt }) => ({
        rollout,
        attempt,
        token: capabilityToken(ctx.secret, rollout.rollout_id, attempt.attempt_id),
      })),
    });
  });

  app.post("/leases/expire", admin, async (c) => {
    const rollouts = await store.expireLeases(Date.now());
    for (const r of rollouts) live.invalidate(r.rollout_id);
    if (rollouts.length) notifier.notify();
    return c.json({ rollouts });
  });

  app.get("/rollouts/:id", reader, async (c) => {
    const id = c.req.param("id");
    const rollout = await store.getRollout(id);
    if (!rollout) notFound("rollout_id", `no rollout '${id}'`);
    return c.json(rollout);
  });

  app.patch("/rollouts/:id", admin, body, jsonBody(TransitionRequestSchema), async (c) => {
    const id = c.req.param("id");
    const rollout = await store.transition(id, c.var.body);
    live.invalidate(id);
    notifier.notify();
    return c.json(rollout);
  });

  app.post(
    "/rollouts/:id/attempts/:aid/lease",
    admin,
    body,
    jsonBody(RenewLeaseRequestSchema),
    async (c) => {
      const { worker, lease_ms } = c.var.body;
      return c.json(
        await store.renewLease(c.req.param("id"), c.req.param("aid"), worker, lease_ms),
      );
    },
  );

  app.get("/rollouts/:id/attempts/:aid/token", admin, async (c) => {
    const id = c.req.param("id");
    const aid = c.req.param("aid");
    const rollout = await store.getRollout(id);
    if (!rollout) notFound("rollout_id", `no rollout '${id}'`);
    if (!rollout.attempts.some((a) => a.attempt_id === aid)) {
      notFound("attempt_id", `no attempt '${aid}' in rollout '${id}'`);
    }
    return c.json({ token: capabilityToken(ctx.secret, id, aid) });
  });

  return app;
}
