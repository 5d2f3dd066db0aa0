/**
 * UI access control. Every page and data endpoint needs the gateway's admin key, sent as a
 * header (`Authorization: Bearer`, `x-api-key`) or, for browsers, as a session cookie that the
 * login form sets. A session is a random id (never derived from the key) that expires after
 * `ttlMs` and is revoked at logout; sessions live in the gateway process's memory, so a
 * restart logs everyone out.
 *
 * @module
 */
import type { Context, MiddlewareHandler } from "hono";
import { getCookie } from "hono/cookie";
import { randomBytes } from "node:crypto";
import { CAPABILITY_PREFIX, constantTimeEqual, keyFromHeaders } from "../http/credentials.ts";
import { HttpError } from "../util/error.ts";

/** Name of the UI session cookie. */
export const SESSION_COOKIE = "reins_ui";

/** The keys the UI checks against (the gateway's). */
export interface UiKeys {
  adminKey: string;
  secret: string;
}

/** Outcome of {@link checkAccess}. */
export type Access = "ok" | "missing" | "invalid" | "capability";

/**
 * Random UI session ids with an expiry.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { UiSessions } from "./auth.ts";
 * const sessions = new UiSessions({ ttlMs: 60_000 });
 * const id = sessions.create();
 * assert.equal(sessions.valid(id), true);
 * sessions.revoke(id);
 * assert.equal(sessions.valid(id), false);
 * ```
 */
export class UiSessions {
  readonly ttlMs: number;
  readonly #maxSessions: number;
  readonly #now: () => number;
  #expiry = new Map<string, number>();

  constructor(options: { ttlMs?: number; maxSessions?: number; now?: () => number } = {}) {
    this.ttlMs = options.ttlMs ?? 12 * 3600 * 1000;
    this.#maxSessions = options.maxSessions ?? 10_000;
    this.#now = options.now ?? Date.now;
  }

  /** A fresh session id (`us_` + 32 random bytes). */
  create(): string {
    this.#sweep();
    if (this.#expiry.size >= this.#maxSessions) {
      this.#expiry.delete(this.#expiry.keys().next().value!);
    }
    const id = "us_" + randomBytes(32).toString("base64url");
    this.#expiry.set(id, this.#now() + this.ttlMs);
    return id;
  }

  /** True while `id` is a session that has neither expired nor been revoked. */
  valid(id: string): boolean {
    const expires = this.#expiry.get(id);
    if (expires === undefined) return false;
    if (expires <= this.#now()) {
      this.#expiry.delete(id);
      return false;
    }
    return true;
  }

  /** Ends a session (logout). */
  revoke(id: string): void {
    this.#expiry.delete(id);
  }

  #sweep(): void {
    const now = this.#now();
    for (const [id, expires] of this.#expiry) if (expires <= now) this.#expiry.delete(id);
  }
}

/**
 * Decides whether a request may read the UI: the admin key in a header, or a live session
 * cookie. Capability tokens (`rk_…`) are recognised so that the answer can say why they fail.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkAccess, UiSessions } from "./auth.ts";
 * const keys = { adminKey: "admin-key", secret: "s" };
 * const sessions = new UiSessions();
 * assert.equal(checkAccess(new Headers({ authorization: "Bearer admin-key" }), keys, sessions), "ok");
 * assert.equal(checkAccess(new Headers(), keys, sessions), "missing");
 * ```
 */
export function checkAccess(
  headers: Headers,
  keys: UiKeys,
  sessions: UiSessions,
  cookie?: string,
): Access {
  const key = keyFromHeaders(headers);
  if (key) {
    if (key.startsWith(CAPABILITY_PREFIX)) return "capability";
    return constantTimeEqual(keys.adminKey, key) ? "ok" : "invalid";
  }
  if (cookie) return sessions.valid(cookie) ? "ok" : "invalid";
  return "missing";
}

/** Middleware admitting only the admin key or a live session (401/403 otherwise). */
export function requireUiAccess(keys: UiKeys, sessions: UiSessions): MiddlewareHandler {
  return async (c: Context, next) => {
    const access = checkAccess(c.req.raw.headers, keys, sessions, getCookie(c, SESSION_COOKIE));
    if (access === "ok") return await next();
    if (access === "capability") {
      throw new HttpError(
        403,
        "authorization: a capability token cannot read the UI; use the admin key",
        {
          field: "authorization",
        },
      );
    }
    throw new HttpError(
      401,
      access === "missing"
        ? "authorization: missing key (log in, or send Authorization: Bearer <admin key>)"
        : "authorization: invalid key or expired session",
      { field: "authorization" },
    );
  };
}
