/**
 * `/v1/rollouts/:id/attempts/:aid/events` (post) and `/v1/rollouts/:id/events` (read): who may
 * post what is the store's one rule (`checkCredential`), checked before the attempt's liveness;
 * a capability token's posts are also charged to its attempt's budget.
 *
 * @module
 */
import { Hono } from "hono";
import type { AuthEnv } from "../../http/auth.ts";
import { ListEventsQuerySchema, parseOrThrow, PostEventsEnvelopeSchema } from "../../schema.ts";
import { parseEvents } from "../store_input.ts";
import { checkCredential } from "../store_rules.ts";
import { eventToWire } from "../wire.ts";
import { checkPage, type GatewayContext, jsonBody } from "./context.ts";

/** The events sub-app (mounted at `/v1`). */
export function eventsApp(ctx: GatewayContext): Hono<AuthEnv> {
  const { store, limits, notifier, live, budgets, guards: { eventWriter, eventReader }, body } =
    ctx;
  const app = new Hono<AuthEnv>();

  app.post(
    "/rollouts/:id/attempts/:aid/events",
    eventWriter,
    body,
    jsonBody(PostEventsEnvelopeSchema, { batch: { field: "events", limits } }),
    async (c) => {
      const id = c.req.param("id");
      const aid = c.req.param("aid");
      // The store's own rules, once; the store then takes these as already parsed.
      const events = parseEvents(c.var.body.events);
      const credential = c.var.credential.kind;
      checkCredential(events, credential);
      let refund = () => {};
      if (credential === "capability") {
        await live.require(id, aid);
        refund = await budgets.charge(id, aid, events);
      }
      let stored;
      try {
        stored = await store.appendEvents(id, aid, events, { credential });
      } catch (error) {
        refund();
        throw error;
      }
      notifier.notify();
      if (/\breturn=minimal\b/.test(c.req.header("prefer") ?? "")) {
        return c.json({
          events: stored.map(({ seq, rollout_id, attempt_id, type, event_key, created_at }) => ({
            seq,
            rollout_id,
            attempt_id,
            type,
            event_key,
            created_at,
          })),
        });
      }
      return c.json({ events: stored.map(eventToWire) });
    },
  );

  app.get("/rollouts/:id/events", eventReader, async (c) => {
    const id = c.req.param("id");
    const url = new URL(c.req.url);
    const raw: Record<string, unknown> = {};
    const type = url.searchParams.get("type");
    if (type !== null) raw.type = type.includes(",") ? type.split(",") : type;
    const attempt = url.searchParams.get("attempt");
    if (attempt !== null) raw.attempt_id = attempt;
    for (const key of ["after_seq", "limit"]) {
      const v = url.searchParams.get(key);
      if (v !== null) raw[key] = Number(v);
    }
    const query = parseOrThrow(ListEventsQuerySchema, raw);
    checkPage(query.limit, limits);
    const events = await store.listEvents(id, { ...query, limit: query.limit + 1 });
    const more = events.length > query.limit;
    const items = more ? events.slice(0, query.limit) : events;
    return c.json({
      items: items.map(eventToWire),
      next_after_seq: more ? items[items.length - 1].seq : null,
    });
  });

  return app;
}
