/**
 * What the gateway's per-resource sub-apps share: the store and its helpers, the credential
 * guards, the body limits, and {@link jsonBody}, the validator middleware every body-taking
 * route uses (read within the byte and depth limits, batch size checked before validation,
 * parsed with the route's zod schema — strict objects, so unknown keys are refused by name).
 *
 * @module
 */
import type { MiddlewareHandler } from "hono";
import { createMiddleware } from "hono/factory";
import type { z } from "zod";
import type { AuthEnv } from "../../http/auth.ts";
import { readJson } from "../../http/body.ts";
import { type GatewayLimits, parseOrThrow, type ServerDeadlines } from "../../schema.ts";
import { HttpError } from "../../util/error.ts";
import type { AttemptBudgets } from "../attempt_budget.ts";
import type { LiveAttempts } from "../live_attempts.ts";
import type { PhaseGate } from "../phase.ts";
import type { Store } from "../store.ts";

/** Wakes change-feed readers after this process writes (see `ChangeNotifier`). */
export interface Notifier {
  notify(): void;
  wait(ms: number, signal?: AbortSignal): Promise<void>;
}

/** The context of the gateway's sub-apps. */
export interface GatewayContext {
  store: Store;
  phase: PhaseGate;
  secret: string;
  limits: GatewayLimits;
  deadlines: ServerDeadlines;
  notifier: Notifier;
  live: LiveAttempts;
  budgets: AttemptBudgets;
  /** How often stream readers re-poll the store for other processes' writes. */
  pollMs: number;
  signal: AbortSignal | undefined;
  /** Credential guards: admin only; admin or reporter; event writers; event readers. */
  guards: {
    admin: MiddlewareHandler<AuthEnv>;
    reader: MiddlewareHandler<AuthEnv>;
    eventWriter: MiddlewareHandler<AuthEnv>;
    eventReader: MiddlewareHandler<AuthEnv>;
  };
  /** Body byte cap and deadline (`lib/http/body.ts`). */
  body: MiddlewareHandler;
}

/** Env of a route behind {@link jsonBody}: the validated body is `c.var.body`. */
export type BodyEnv<T> = AuthEnv & { Variables: { body: T } };

/**
 * Validator middleware: reads the JSON body (400 naming `body` when malformed or too deep),
 * checks `batch`'s length against `max_batch` (413) before validating, parses it with
 * `schema` (400 naming the field, unknown keys by name) and sets `c.var.body`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { Hono } from "hono";
 * import { z } from "zod";
 * import { jsonBody } from "./context.ts";
 * const app = new Hono().post("/", jsonBody(z.strictObject({ n: z.number() })), (c) =>
 *   c.json({ twice: c.var.body.n * 2 }));
 * app.onError((err) => new Response((err as Error).message, { status: 400 }));
 * const ok = await app.request("/", { method: "POST", body: '{"n":2}' });
 * assert.deepEqual(await ok.json(), { twice: 4 });
 * const bad = await app.request("/", { method: "POST", body: '{"n":2,"m":1}' });
 * assert.equal(bad.status, 400);
 * ```
 */
export function jsonBody<S extends z.ZodType>(
  schema: S,
  options: { batch?: { field: string; limits: GatewayLimits } } = {},
) {
  return createMiddleware<BodyEnv<z.infer<S>>>(async (c, next) => {
    const raw = await readJson(c.req.raw);
    if (options.batch) checkBatch(raw, options.batch.field, options.batch.limits);
    c.set("body", parseOrThrow(schema, raw));
    await next();
  });
}

/** Throws the 404 naming `field`. */
export function notFound(field: string, message: string): never {
  throw new HttpError(404, `${field}: ${message}`, { field });
}

/** 413 naming `field` when a body's batch holds more than the limit (before validating it). */
function checkBatch(body: unknown, field: string, limits: GatewayLimits): void {
  const items = (body as Record<string, unknown> | null)?.[field];
  if (Array.isArray(items) && items.length > limits.max_batch) {
    throw new HttpError(
      413,
      `${field}: at most ${limits.max_batch} per request, got ${items.length}`,
      { field },
    );
  }
}

/** 400 naming `limit` when a listing asks for more than `max_page`. */
export function checkPage(limit: number, limits: GatewayLimits): void {
  if (limit > limits.max_page) {
    throw new HttpError(400, `limit: at most ${limits.max_page}, got ${limit}`, {
      field: "limit",
    });
  }
}
