/**
 * Who may call the proxy: the capability token of the attempt the path names (or the admin
 * key), and only while that attempt is live. A finished, lost or superseded attempt gets a
 * 409 saying which, so a harness left running after its attempt ended cannot add model calls
 * (or tokens to train on) to it. Errors are thrown as {@link HttpError}s; the app answers them
 * in the caller's wire format.
 *
 * @module
 */
import type { MiddlewareHandler } from "hono";
import { authorize, keyFromHeaders, type ServiceKeys } from "../http/credentials.ts";
import { HttpError } from "../util/error.ts";
import type { LiveAttempts } from "../gateway/live_attempts.ts";

/** Hono env of the proxy app: the credential kind of the call. */
export interface ProxyEnv {
  Variables: { credential: "admin" | "capability" };
}

/**
 * Middleware admitting calls of the path's live attempt (`:rollout_id/:attempt_id`): 401 for
 * a missing key or a key not valid for this attempt (the reporter key included), 404 for an
 * unknown rollout or attempt, 409 for an attempt that is not live.
 */
export function proxyAccess(
  keys: ServiceKeys,
  live: Pick<LiveAttempts, "require">,
): MiddlewareHandler<ProxyEnv> {
  return async (c, next) => {
    const rolloutId = c.req.param("rollout_id") ?? "";
    const attemptId = c.req.param("attempt_id") ?? "";
    const key = keyFromHeaders(c.req.raw.headers);
    const principal = authorize(keys, key, { rollout_id: rolloutId, attempt_id: attemptId });
    if (!principal || principal.kind === "reporter") {
      throw new HttpError(
        401,
        key ? "api key: not valid for this rollout attempt" : "api key: missing",
      );
    }
    await live.require(rolloutId, attemptId);
    c.set("credential", principal.kind === "admin" ? "admin" : "capability");
    await next();
  };
}
