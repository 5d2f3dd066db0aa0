/**
 * UI security: without the gateway's admin key every page and data endpoint answers 401
 * (capability tokens 403), the login form sets a session cookie that is an HMAC of the key,
 * model output is HTML-escaped everywhere it is shown, and bad input is refused naming the
 * field.
 */
import assert from "node:assert/strict";
import { capabilityToken } from "../lib/gateway/auth.ts";
import { createUi } from "../lib/ui/app.ts";
import { escapeHtml, html } from "../lib/ui/html.ts";
import {
  ADMIN_KEY,
  get,
  HOSTILE_ANSWER,
  runRollout,
  SECRET,
  seedRollout,
  startUiFixture,
} from "./ui_helpers.ts";

const PROTECTED = [
  "/",
  "/rollouts",
  "/rollouts/r1",
  "/proxy",
  "/fragments/overview",
  "/fragments/rollouts",
  "/fragments/rollouts/r1",
  "/fragments/proxy",
  "/api/rollouts",
  "/api/rollouts/r1/export",
  "/api/phase",
  "/api/stream",
  "/rollouts/r1/export.json",
  "/rollouts/r1/notebook.ipynb",
];

Deno.test("UI security: keys, cookies, escaping and bad input", async (t) => {
  const fx = await startUiFixture({ monitors: false });
  try {
    await runRollout(fx, "r1", { labels: { step: "1" } });

    await t.step("every page and data endpoint answers 401 without the key", async () => {
      for (const path of PROTECTED) {
        const res = await get(fx.base + path, null);
        assert.equal(res.status, 401, path);
        assert.doesNotMatch(res.text, /What is 2\+2|careful calculator/, `${path} leaks data`);
      }
      const data = await get(fx.base + "/api/rollouts", null);
      assert.equal(JSON.parse(data.text).error.code, "unauthorized");
      const page = await get(fx.base + "/rollouts", null);
      assert.match(page.text, /<form method="post"/, "pages answer with the login form");
    });

    await t.step("a wrong key is 401, a capability token 403, the admin key 200", async () => {
      assert.equal((await get(fx.base + "/rollouts", "wrong-key-123")).status, 401);
      const attempt = (await fx.gateway.store.getRollout("r1"))!.attempts[0].attempt_id;
      const token = capabilityToken(SECRET, "r1", attempt);
      const res = await get(fx.base + "/api/rollouts", token);
      assert.equal(res.status, 403);
      assert.match(JSON.parse(res.text).error.message, /capability token/);
      assert.equal((await get(fx.base + "/rollouts")).status, 200);
    });

    await t.step("login sets an HttpOnly session cookie that is not the key", async () => {
      const bad = await fetch(fx.base + "/login", {
        method: "POST",
        body: new URLSearchParams({ key: "nope-nope" }),
        redirect: "manual",
      });
      assert.equal(bad.status, 401);
      assert.match(await bad.text(), /key: not the gateway&#39;s admin key/);
      const ok = await fetch(fx.base + "/login", {
        method: "POST",
        body: new URLSearchParams({ key: ADMIN_KEY }),
        redirect: "manual",
      });
      await ok.body?.cancel();
      assert.equal(ok.status, 303);
      const cookie = ok.headers.get("set-cookie") ?? "";
      assert.match(cookie, /^reins_ui=us_[A-Za-z0-9_-]+; Path=\/ui; HttpOnly; SameSite=Strict/);
      assert.ok(!cookie.includes(ADMIN_KEY));
      const session = cookie.split(";")[0];
      const page = await fetch(fx.base + "/rollouts/r1", { headers: { cookie: session } });
      assert.equal(page.status, 200);
      await page.body?.cancel();
      const forged = await fetch(fx.base + "/rollouts/r1", {
        headers: { cookie: "reins_ui=us_forged" },
      });
      assert.equal(forged.status, 401);
      await forged.body?.cancel();
    });

    await t.step("model output is escaped on the detail page and its fragment", async () => {
      for (const path of ["/rollouts/r1", "/fragments/rollouts/r1"]) {
        const { text, headers } = await get(fx.base + path);
        assert.ok(
          !text.includes("<script>window.__pwned"),
          `${path}: raw <script> from model output`,
        );
        assert.ok(!text.includes("<img src=x onerror"), `${path}: raw <img> from model output`);
        assert.ok(text.includes(escapeHtml(HOSTILE_ANSWER)), `${path}: escaped answer shown`);
        assert.match(headers.get("content-security-policy") ?? "", /script-src 'self'/);
        // The only script tag is our own client script.
        assert.equal((text.match(/<script/g) ?? []).length, path === "/rollouts/r1" ? 1 : 0);
      }
    });

    await t.step("quotes, & and <script> in model output and labels stay text", async () => {
      const output = `<script>alert("a&b")</script><a href='x' title="y">&amp;</a>`;
      const label = `"><script>x('&')</script>`;
      await seedRollout(fx, "evil", {
        status: "succeeded",
        toolCall: output,
        labels: { harness: label },
      });
      const escapedOutput =
        `&lt;script&gt;alert(&quot;a&amp;b&quot;)&lt;/script&gt;&lt;a href=&#39;x&#39; ` +
        `title=&quot;y&quot;&gt;&amp;amp;&lt;/a&gt;`;
      const escapedLabel = `&quot;&gt;&lt;script&gt;x(&#39;&amp;&#39;)&lt;/script&gt;`;
      for (const path of ["/rollouts/evil", "/fragments/rollouts/evil"]) {
        const { text } = await get(fx.base + path);
        assert.ok(text.includes(`<pre>${escapedOutput}</pre>`), `${path}: escaped output shown`);
        assert.ok(text.includes(escapedLabel), `${path}: escaped label shown`);
        assert.ok(!text.includes(output) && !text.includes(label), `${path}: raw markup`);
        assert.equal((text.match(/<script/g) ?? []).length, path === "/rollouts/evil" ? 1 : 0);
      }
      for (const path of ["/rollouts", "/fragments/rollouts"]) {
        const { text } = await get(fx.base + path);
        assert.ok(text.includes(escapedLabel), `${path}: escaped label shown`);
        assert.ok(!text.includes(label), `${path}: raw label`);
      }
    });

    await t.step("bad input is refused naming the field", async () => {
      const cases: [string, RegExp][] = [
        ["/api/rollouts?reward_min=abc", /reward_min/],
        ["/api/rollouts?status=sleeping", /status/],
        ["/api/rollouts?limit=0", /limit/],
        ["/api/rollouts?limit=100000", /limit/],
        ["/api/rollouts?after=not-a-cursor", /after/],
        ["/api/rollouts/r1/export?strategy=zip", /strategy/],
        ["/api/stream?after=-1", /after/],
      ];
      for (const [path, field] of cases) {
        const res = await get(fx.base + path);
        assert.equal(res.status, 400, path);
        assert.match(JSON.parse(res.text).error.message, field, path);
      }
      const page = await get(fx.base + "/rollouts?reward_max=%3Cb%3E");
      assert.equal(page.status, 400);
      assert.match(page.text, /reward_max/);
      assert.ok(!page.text.includes("<b>"), "the bad value is not echoed as markup");
      const missing = await get(fx.base + "/api/rollouts/nope/export");
      assert.equal(missing.status, 404);
      assert.match(JSON.parse(missing.text).error.message, /rollout_id: no rollout 'nope'/);
    });
  } finally {
    await fx.close();
  }
});

Deno.test("html escapes interpolations and createUi checks its base path", () => {
  const name = `"><script>x</script>`;
  assert.equal(
    html`<a title="${name}">${name}</a>`.toString(),
    `<a title="&quot;&gt;&lt;script&gt;x&lt;/script&gt;">&quot;&gt;&lt;script&gt;x&lt;/script&gt;</a>`,
  );
  assert.equal(html`${["<a>", html`<b>`]}`.toString(), "&lt;a&gt;<b>");
  assert.throws(() => createUi({ base: "ui x" }), /base: expected a path/);
});
