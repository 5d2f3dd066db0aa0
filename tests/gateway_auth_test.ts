/** Auth: capability tokens are per-attempt HMACs; keys come from either header style. */
import assert from "node:assert/strict";
import { createHmac } from "node:crypto";
import {
  authorize,
  capabilityToken,
  constantTimeEqual,
  keyFromHeaders,
  randomKey,
  verifyCapability,
} from "../lib/gateway/auth.ts";

Deno.test("auth: a capability token is rk_ + base64url HMAC-SHA256(secret, rid/aid)", () => {
  const token = capabilityToken("secret", "r1", "a1-00ff");
  const mac = createHmac("sha256", "secret").update("r1/a1-00ff").digest("base64url");
  assert.equal(token, `rk_${mac}`);
  assert.match(token, /^rk_[A-Za-z0-9_-]{43}$/);
  assert.ok(verifyCapability("secret", "r1", "a1-00ff", token));
  assert.ok(!verifyCapability("secret", "r1", "a2-00ff", token));
  assert.ok(!verifyCapability("secret", "r2", "a1-00ff", token));
  assert.ok(!verifyCapability("other", "r1", "a1-00ff", token));
  assert.ok(!verifyCapability("secret", "r1", "a1-00ff", token.slice(0, -1)));
  // Ids cannot hold "/" (IdSchema), so "rid/aid" names exactly one attempt.
  assert.notEqual(capabilityToken("s", "r", "a"), capabilityToken("s", "r", "b"));
});

Deno.test("auth: remembered expected tokens never mix secrets or attempts", () => {
  // Same concatenation, different split: each must still verify only its own token.
  const cases: Array<[string, string, string]> = [
    ["s1", "r", "a"],
    ["s", "1r", "a"],
    ["s", "1", "ra"],
    ["s1r", "", "a"],
  ];
  for (let round = 0; round < 2; round++) {
    for (const [secret, rid, aid] of cases) {
      for (const [s2, r2, a2] of cases) {
        const token = capabilityToken(s2, r2, a2);
        const same = secret === s2 && rid === r2 && aid === a2;
        assert.equal(verifyCapability(secret, rid, aid, token), same);
      }
    }
  }
  // Past the cache's bound, old entries are dropped and recomputed, not confused.
  for (let i = 0; i < 20_000; i++) verifyCapability("s", "r", `a${i}`, "rk_x");
  assert.ok(verifyCapability("s", "r", "a0", capabilityToken("s", "r", "a0")));
  assert.ok(!verifyCapability("s", "r", "a0", capabilityToken("s", "r", "a1")));
});

Deno.test("auth: admin key vs capability token principals", () => {
  const keys = { adminKey: "ra_admin", secret: "s" };
  const scope = { rollout_id: "r", attempt_id: "a" };
  assert.deepEqual(authorize(keys, "ra_admin"), { kind: "admin" });
  assert.deepEqual(authorize(keys, "ra_admin", scope), { kind: "admin" });
  assert.deepEqual(authorize(keys, capabilityToken("s", "r", "a"), scope), {
    kind: "attempt",
    ...scope,
  });
  assert.equal(authorize(keys, capabilityToken("s", "r", "a")), null, "no scope, no capability");
  assert.equal(authorize(keys, "ra_admin2"), null);
  assert.equal(authorize(keys, null), null);
  assert.equal(authorize(keys, ""), null);
});

Deno.test("auth: keys from Authorization Bearer or x-api-key; constant-time compare", () => {
  assert.equal(keyFromHeaders(new Headers({ authorization: "Bearer abc" })), "abc");
  assert.equal(keyFromHeaders(new Headers({ authorization: "bearer  abc " })), "abc");
  assert.equal(keyFromHeaders(new Headers({ "x-api-key": "xyz" })), "xyz");
  assert.equal(keyFromHeaders(new Headers({ authorization: "Basic abc", "x-api-key": "k" })), "k");
  assert.equal(keyFromHeaders(new Headers()), null);
  assert.ok(constantTimeEqual("abc", "abc"));
  assert.ok(!constantTimeEqual("abc", "abd"));
  assert.ok(!constantTimeEqual("abc", "abcd"));
  assert.notEqual(randomKey(), randomKey());
  assert.match(randomKey("ra_"), /^ra_[A-Za-z0-9_-]{43}$/);
});
