/**
 * The Live UI under attack (issue #16's table): a small request with deeply nested tool-call
 * arguments never makes a page over 1 MB, and UI sessions are random ids that expire and die at
 * logout.
 */
import assert from "node:assert/strict";
import type { ChatMessage } from "../lib/schema.ts";
import {
  ADMIN_KEY,
  proxyChat,
  type SecurityFixture,
  startSecurityFixture,
} from "./support/security.ts";

async function withFixture(
  options: Parameters<typeof startSecurityFixture>[0],
  fn: (fx: SecurityFixture) => Promise<void>,
): Promise<void> {
  const fx = await startSecurityFixture(options);
  try {
    await fn(fx);
  } finally {
    await fx.close();
  }
}

async function login(fx: SecurityFixture): Promise<string> {
  const res = await fetch(`${fx.gateway.url}/ui/login`, {
    method: "POST",
    body: new URLSearchParams({ key: ADMIN_KEY }),
    redirect: "manual",
  });
  await res.body?.cancel();
  assert.equal(res.status, 303);
  const cookie = (res.headers.get("set-cookie") ?? "").split(";")[0];
  assert.match(cookie, /^reins_ui=us_[A-Za-z0-9_-]{43}$/);
  return cookie;
}

async function page(fx: SecurityFixture, path: string, cookie: string) {
  const res = await fetch(`${fx.gateway.url}/ui${path}`, { headers: { cookie } });
  return { status: res.status, text: await res.text() };
}

Deno.test("ui: a 32 KB request with deeply nested tool-call arguments makes a page under 1 MB", async () => {
  await withFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const depth = 16_000;
    const nested = "[".repeat(depth) + "]".repeat(depth);
    const body = {
      model: "policy",
      messages: [
        { role: "user", content: "call the tool" },
        {
          role: "assistant",
          content: "",
          tool_calls: [{
            id: "call_1",
            type: "function",
            function: { name: "deep", arguments: nested },
          }],
        },
        { role: "tool", tool_call_id: "call_1", content: "ok" },
      ],
    };
    assert.ok(JSON.stringify(body).length >= 32_000);
    // Through the proxy, the chat template refuses it (400, not a crash) ...
    const call = await proxyChat(fx, rolloutId, attemptId, token, body);
    assert.equal(call.status, 400, JSON.stringify(call.body).slice(0, 300));
    // ... but a passthrough upstream records such messages as sent (the proxy posts with the
    // admin key): the UI must cope.
    await fx.admin.postEvents(rolloutId, attemptId, [{
      type: "model_request",
      payload: {
        flavor: "openai_chat",
        messages: body.messages as ChatMessage[],
        prompt_token_ids: [1, 2, 3],
        response_token_ids: [4],
        response_logprobs: [-0.5],
        response_text: `<tool_call>{"name": "deep", "arguments": ${nested}}</tool_call>`,
        policy_version: 1,
      },
    }]);
    const cookie = await login(fx);
    for (const path of [`/rollouts/${rolloutId}`, `/fragments/rollouts/${rolloutId}`]) {
      const res = await page(fx, path, cookie);
      assert.equal(res.status, 200, path);
      assert.ok(res.text.length < 1_000_000, `${path}: ${res.text.length} characters`);
      // The arguments are still shown (raw, since they are too deep to pretty-print).
      assert.ok(res.text.includes("[".repeat(64)), `${path}: the arguments are shown`);
    }
  });
});

Deno.test("ui: sessions are random ids, revoked at logout", async () => {
  await withFixture({}, async (fx) => {
    await fx.claimOne();
    const a = await login(fx);
    const b = await login(fx);
    assert.notEqual(a, b, "each login gets its own session");
    assert.ok(!a.includes(ADMIN_KEY));
    assert.equal((await page(fx, "/rollouts", a)).status, 200);
    const out = await fetch(`${fx.gateway.url}/ui/logout`, {
      headers: { cookie: a },
      redirect: "manual",
    });
    await out.body?.cancel();
    assert.equal(out.status, 303);
    assert.match(out.headers.get("set-cookie") ?? "", /^reins_ui=; Max-Age=0/);
    // The old cookie is dead even if the browser keeps sending it; the other session lives.
    const after = await page(fx, "/rollouts", a);
    assert.equal(after.status, 401);
    assert.match(after.text, /expired session/);
    assert.equal((await page(fx, "/rollouts", b)).status, 200);
  });
});

Deno.test("ui: sessions expire", async () => {
  await withFixture({ ui: { sessionTtlMs: 300 } }, async (fx) => {
    const cookie = await login(fx);
    assert.equal((await page(fx, "/rollouts", cookie)).status, 200);
    await new Promise((r) => setTimeout(r, 400));
    assert.equal((await page(fx, "/rollouts", cookie)).status, 401);
  });
});
