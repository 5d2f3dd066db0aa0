/**
 * Hono middleware deciding who may call a route: each route names the credentials it accepts
 * (`admin`, `reporter`, `capability`), and the middleware answers 401 for a missing or unknown
 * key and 403 for a known key the route does not accept, before the handler runs. A
 * capability token is checked against the attempt the route's `:id`/`:aid` (or another scope)
 * names. The accepted credential is left in `c.var.credential`.
 *
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";
import { HttpError } from "../util/error.ts";
import {
  classifyKey,
  type CredentialKind,
  keyFromHeaders,
  type ServiceKeys,
  verifyCapability,
} from "./credentials.ts";

/** The credential a request was accepted with. */
export type RequestCredential =
  | { kind: "admin"; key: string }
  | { kind: "reporter"; key: string }
  | { kind: "capability"; key: string; rollout_id: string; attempt_id: string };

/** Hono env of apps using {@link requireCredential}. */
export interface AuthEnv {
  Variables: { credential: RequestCredential };
}

/** An attempt a capability token must belong to. */
export interface AttemptScope {
  rollout_id: string;
  attempt_id: string;
}

/** What a route accepts. */
export interface CredentialRule {
  /** The credential kinds the route accepts. */
  allow: readonly CredentialKind[];
  /**
   * The attempt a capability token must belong to (default: the route's `:id` and `:aid`);
   * undefined refuses capability tokens with a message saying what to pass.
   */
  scope?: (c: Context) => AttemptScope | undefined;
  /** The 403 message when `scope` finds no attempt (default: a generic one). */
  scopeMissing?: { field: string; message: string };
}

const WHAT_MAY: Record<CredentialKind, string> = {
  admin: "the admin key",
  reporter: "the reporter key may only post and read events",
  capability: "a capability token cannot use the control plane",
};

/**
 * The credential of a request under `rule`; throws the 401/403 {@link HttpError} otherwise.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { Hono } from "hono";
 * import { credentialOf } from "./auth.ts";
 * import { capabilityToken } from "./credentials.ts";
 * const keys = { adminKey: "admin-key", secret: "s" };
 * const app = new Hono();
 * const rule = { allow: ["admin", "capability"] as const };
 * let kind = "";
 * app.get("/r/:id/a/:aid", (c) => {
 *   kind = credentialOf(c, keys, rule).kind;
 *   return c.body(null, 204);
 * });
 * const token = capabilityToken("s", "r1", "a1");
 * await app.request("/r/r1/a/a1", { headers: { authorization: `Bearer ${token}` } });
 * assert.equal(kind, "capability");
 * ```
 */
export function credentialOf(
  c: Context,
  keys: ServiceKeys,
  rule: CredentialRule,
): RequestCredential {
  const key = keyFromHeaders(c.req.raw.headers);
  if (!key) {
    throw new HttpError(
      401,
      "authorization: missing API key (send Authorization: Bearer <key> or x-api-key)",
      { field: "authorization" },
    );
  }
  const kind = classifyKey(keys, key);
  if (kind === "invalid") {
    throw new HttpError(401, "authorization: invalid API key", { field: "authorization" });
  }
  if (!rule.allow.includes(kind)) {
    throw new HttpError(403, `authorization: ${WHAT_MAY[kind]}`, {
      field: "authorization",
    });
  }
  if (kind !== "capability") return { kind, key };
  const scope = rule.scope ? rule.scope(c) : routeScope(c);
  if (!scope) {
    const missing = rule.scopeMissing ?? {
      field: "authorization",
      message: "authorization: a capability token may only use its own attempt",
    };
    throw new HttpError(403, missing.message, { field: missing.field });
  }
  if (!verifyCapability(keys.secret, scope.rollout_id, scope.attempt_id, key)) {
    throw new HttpError(
      403,
      "authorization: this capability token does not belong to this rollout/attempt",
      { field: "authorization" },
    );
  }
  return { kind, key, ...scope };
}

/** The attempt named by the route's `:id` and `:aid` parameters, if both are present. */
export function routeScope(c: Context): AttemptScope | undefined {
  const rollout_id = c.req.param("id");
  const attempt_id = c.req.param("aid");
  return rollout_id && attempt_id ? { rollout_id, attempt_id } : undefined;
}

/**
 * Middleware accepting only the credentials of `rule` (see {@link credentialOf}); the
 * credential is then in `c.var.credential`.
 */
export function requireCredential(
  keys: ServiceKeys,
  rule: CredentialRule,
): MiddlewareHandler<AuthEnv> {
  return async (c, next) => {
    c.set("credential", credentialOf(c, keys, rule));
    await next();
  };
}
