/**
 * The credentials of reins services (see `docs/security.md`):
 *
 * - the **admin key** (the operator, the controller, the training loop): the control plane;
 * - the optional **reporter key** (a verifier outside the agent's sandbox): events, rewards
 *   included, for any attempt, and reads; nothing else;
 * - per-attempt **capability tokens** `rk_` + base64url(HMAC-SHA256(secret, rollout_id + "/" +
 *   attempt_id)), derived statelessly and placed in the agent's environment: the proxy and
 *   non-reward events of their own live attempt only.
 *
 * Every comparison is constant-time; keys never reach logs.
 *
 * @module
 */
import { createHmac, randomBytes } from "node:crypto";
import { dirname } from "node:path";

/** Prefix of capability tokens, so that logs and users can tell them from admin keys. */
export const CAPABILITY_PREFIX = "rk_";

/**
 * The capability token of one attempt.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { capabilityToken, verifyCapability } from "./credentials.ts";
 * const token = capabilityToken("s3cret", "r1", "a1");
 * assert.equal(verifyCapability("s3cret", "r1", "a1", token), true);
 * assert.equal(verifyCapability("s3cret", "r1", "a2", token), false);
 * ```
 */
export function capabilityToken(secret: string, rolloutId: string, attemptId: string): string {
  const mac = createHmac("sha256", secret).update(`${rolloutId}/${attemptId}`).digest();
  return CAPABILITY_PREFIX + mac.toString("base64url");
}

/** Most expected tokens {@link verifyCapability} remembers (the oldest are dropped first). */
const EXPECTED_TOKENS_MAX = 16_384;
/** Expected capability tokens by secret and attempt: an HMAC costs more than the whole check. */
const expectedTokens = new Map<string, string>();

/** True when `token` is the capability token of attempt `attemptId` of `rolloutId`. */
export function verifyCapability(
  secret: string,
  rolloutId: string,
  attemptId: string,
  token: string,
): boolean {
  // Lengths make the key unambiguous whatever characters the ids hold.
  const key = `${secret.length}:${rolloutId.length}:${secret}${rolloutId}${attemptId}`;
  let expected = expectedTokens.get(key);
  if (expected === undefined) {
    expected = capabilityToken(secret, rolloutId, attemptId);
    if (expectedTokens.size >= EXPECTED_TOKENS_MAX) {
      expectedTokens.delete(expectedTokens.keys().next().value!);
    }
    expectedTokens.set(key, expected);
  }
  return constantTimeEqual(expected, token);
}

/**
 * Compares two strings in time independent of where they differ: every code unit of `expected`
 * is compared, the differences OR-ed together, with no early exit; only the lengths may show.
 * A loop over code units, not `node:crypto`'s `timingSafeEqual`: that one needs both strings
 * encoded to bytes first, ~12 µs a request on the proxy's path against ~0.1 µs here.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { constantTimeEqual } from "./credentials.ts";
 * assert.equal(constantTimeEqual("abc", "abc"), true);
 * assert.equal(constantTimeEqual("abc", "abd"), false);
 * assert.equal(constantTimeEqual("abc", "ab"), false);
 * assert.equal(constantTimeEqual("abc", ""), false);
 * assert.equal(constantTimeEqual("é", "\u00e9"), true);
 * ```
 */
export function constantTimeEqual(expected: string, given: string): boolean {
  let diff = expected.length ^ given.length;
  const shared = given.length;
  for (let i = 0; i < expected.length; i++) {
    diff |= expected.charCodeAt(i) ^ (i < shared ? given.charCodeAt(i) : 0);
  }
  return diff === 0;
}

/** True when `given` is the admin key. */
export function verifyAdminKey(adminKey: string, given: string): boolean {
  return constantTimeEqual(adminKey, given);
}

/**
 * The API key a request carries: `Authorization: Bearer <key>` (OpenAI style) or
 * `x-api-key: <key>` (Anthropic style); null when neither is present.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { keyFromHeaders } from "./credentials.ts";
 * assert.equal(keyFromHeaders(new Headers({ authorization: "Bearer k1" })), "k1");
 * assert.equal(keyFromHeaders(new Headers({ "x-api-key": "k2" })), "k2");
 * ```
 */
export function keyFromHeaders(headers: Headers): string | null {
  const auth = headers.get("authorization");
  if (auth) {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(auth);
    if (match) return match[1];
  }
  const apiKey = headers.get("x-api-key");
  return apiKey ? apiKey.trim() : null;
}

/** Who a request speaks for. */
export type Principal =
  | { kind: "admin" }
  | { kind: "reporter" }
  | { kind: "attempt"; rollout_id: string; attempt_id: string };

/** The kind of credential a request carries, as the store records it on rewards. */
export type CredentialKind = "admin" | "reporter" | "capability";

/** The keys a service checks requests against. */
export interface ServiceKeys {
  adminKey: string;
  /** HMAC secret of capability tokens. */
  secret: string;
  /** The reporter key, when the gateway has one. */
  reporterKey?: string | undefined;
}

/**
 * What a key is, before any route decides what it may do: the admin or reporter key, a
 * capability token (checked against its attempt later, by the route), or nothing valid.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { classifyKey } from "./credentials.ts";
 * const keys = { adminKey: "admin-key", secret: "s", reporterKey: "reporter-key" };
 * assert.equal(classifyKey(keys, "admin-key"), "admin");
 * assert.equal(classifyKey(keys, "reporter-key"), "reporter");
 * assert.equal(classifyKey(keys, "rk_anything"), "capability");
 * assert.equal(classifyKey(keys, "guess"), "invalid");
 * ```
 */
export function classifyKey(keys: ServiceKeys, key: string): CredentialKind | "invalid" {
  if (key.startsWith(CAPABILITY_PREFIX)) return "capability";
  // Both comparisons always run, so timing tells nothing about which key matched.
  const admin = verifyAdminKey(keys.adminKey, key);
  const reporter = keys.reporterKey ? constantTimeEqual(keys.reporterKey, key) : false;
  return admin ? "admin" : reporter ? "reporter" : "invalid";
}

/**
 * Resolves a key to a principal: the admin, the reporter, or the attempt `scope` names when the
 * key is that attempt's capability token. Returns null for any other key.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { authorize, capabilityToken } from "./credentials.ts";
 * const keys = { adminKey: "admin", secret: "s" };
 * assert.equal(authorize(keys, "admin")?.kind, "admin");
 * const token = capabilityToken("s", "r1", "a1");
 * assert.equal(authorize(keys, token, { rollout_id: "r1", attempt_id: "a1" })?.kind, "attempt");
 * assert.equal(authorize(keys, token, { rollout_id: "r1", attempt_id: "a2" }), null);
 * ```
 */
export function authorize(
  keys: ServiceKeys,
  key: string | null,
  scope?: { rollout_id: string; attempt_id: string },
): Principal | null {
  if (!key) return null;
  const kind = classifyKey(keys, key);
  if (kind === "capability") {
    if (scope && verifyCapability(keys.secret, scope.rollout_id, scope.attempt_id, key)) {
      return { kind: "attempt", rollout_id: scope.rollout_id, attempt_id: scope.attempt_id };
    }
    return null;
  }
  return kind === "invalid" ? null : { kind };
}

/**
 * A fresh random key (32 bytes, base64url) for admin keys and secrets.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { randomKey } from "./credentials.ts";
 * assert.equal(randomKey("ra_").startsWith("ra_"), true);
 * ```
 */
export function randomKey(prefix = ""): string {
  return prefix + randomBytes(32).toString("base64url");
}

/**
 * The key stored in `file`, or a fresh `prefix` key (default `ra_`, an admin key) written
 * there (mode 0600, creating its folder) when the file is missing or empty.
 */
export async function readOrCreateKey(file: string, prefix = "ra_"): Promise<string> {
  const { key, save } = await readOrNewKey(file, prefix);
  await save();
  return key;
}

/**
 * The key in `file`, or a fresh one with a `save()` that writes it there (0600): a caller that
 * may still fail to start saves only once it has started, so a failed start leaves no file.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readOrNewKey } from "./credentials.ts";
 * const dir = await Deno.makeTempDir();
 * const { key, save } = await readOrNewKey(`${dir}/k`);
 * await assert.rejects(Deno.stat(`${dir}/k`));
 * await save();
 * assert.equal((await readOrNewKey(`${dir}/k`)).key, key);
 * await Deno.remove(dir, { recursive: true });
 * ```
 */
export async function readOrNewKey(
  file: string,
  prefix = "ra_",
): Promise<{ key: string; save: () => Promise<void> }> {
  try {
    const key = (await Deno.readTextFile(file)).trim();
    if (key) return { key, save: () => Promise.resolve() };
  } catch (err) {
    if (!(err instanceof Deno.errors.NotFound)) throw err;
  }
  const key = randomKey(prefix);
  return {
    key,
    save: async () => {
      await Deno.mkdir(dirname(file), { recursive: true });
      await Deno.writeTextFile(file, key + "\n", { mode: 0o600 });
    },
  };
}
