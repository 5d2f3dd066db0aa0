/**
 * UI access control. Every page and data endpoint needs the gateway's admin key, sent as a
 * header (`Authorization: Bearer`, `x-api-key`) or, for browsers, as a session cookie that the
 * login form sets. The cookie holds an HMAC of the admin key (never the key itself), so it
 * stops working when the key changes.
 *
 * @module
 */
import { createHmac } from "node:crypto";
import { CAPABILITY_PREFIX, constantTimeEqual, keyFromHeaders } from "../gateway/auth.ts";

/** Name of the UI session cookie. */
export const SESSION_COOKIE = "reins_ui";

/** The keys the UI checks against (the gateway's). */
export interface UiKeys {
  adminKey: string;
  secret: string;
}

/**
 * The session cookie value of the current admin key.
 *
 * @example
 * ```ts
 * import { sessionToken } from "./auth.ts";
 * sessionToken({ adminKey: "admin-key", secret: "s" }).startsWith("us_"); // true
 * ```
 */
export function sessionToken(keys: UiKeys): string {
  const mac = createHmac("sha256", keys.secret).update(`reins-ui-session\n${keys.adminKey}`);
  return "us_" + mac.digest("base64url");
}

/** Outcome of {@link checkAccess}. */
export type Access = "ok" | "missing" | "invalid" | "capability";

/** Reads one cookie from a `Cookie` header. */
export function readCookie(header: string | null, name: string): string | null {
  if (!header) return null;
  for (const part of header.split(";")) {
    const eq = part.indexOf("=");
    if (eq < 0) continue;
    if (part.slice(0, eq).trim() === name) return part.slice(eq + 1).trim();
  }
  return null;
}

/**
 * Decides whether a request may read the UI: the admin key in a header, or a valid session
 * cookie. Capability tokens (`rk_…`) are recognised so that the answer can say why they fail.
 *
 * @example
 * ```ts
 * import { checkAccess } from "./auth.ts";
 * const keys = { adminKey: "admin-key", secret: "s" };
 * checkAccess(new Headers({ authorization: "Bearer admin-key" }), keys); // "ok"
 * checkAccess(new Headers(), keys); // "missing"
 * ```
 */
export function checkAccess(headers: Headers, keys: UiKeys): Access {
  const key = keyFromHeaders(headers);
  if (key) {
    if (key.startsWith(CAPABILITY_PREFIX)) return "capability";
    return constantTimeEqual(keys.adminKey, key) ? "ok" : "invalid";
  }
  const cookie = readCookie(headers.get("cookie"), SESSION_COOKIE);
  if (cookie) return constantTimeEqual(sessionToken(keys), cookie) ? "ok" : "invalid";
  return "missing";
}
