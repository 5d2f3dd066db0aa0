/**
 * The Live UI in a real browser (playwright-core driving Debian's Chromium) against a gateway
 * filled by a real run (proxy + scripted upstream + openai SDK): log in, watch new rollouts
 * appear in the list without a reload, filter the list, read split reasons and trained-token
 * highlighting on the detail page (with model HTML shown as text, never run), and see the
 * overview's charts grow. Screenshots go to `tests/artifacts/ui/`.
 *
 * Run alone with `deno task test:ui`.
 */
import assert from "node:assert/strict";
import { chromium, type Page } from "playwright-core";
import { ADMIN_KEY, runRollout, startUiFixture, type UiFixture } from "./ui_helpers.ts";

const CHROMIUM = "/usr/bin/chromium";
const ARTIFACTS = new URL("./artifacts/ui/", import.meta.url).pathname;

async function chromiumAvailable(): Promise<boolean> {
  try {
    return (await Deno.stat(CHROMIUM)).isFile;
  } catch {
    return false;
  }
}

async function shot(page: Page, name: string): Promise<void> {
  await page.screenshot({ path: `${ARTIFACTS}${name}.png`, fullPage: true });
}

/** A finished rollout whose only call reads git history (the monitors flag it). */
async function seedFlagged(fx: UiFixture, id: string): Promise<void> {
  const store = fx.gateway.store;
  await store.createRollouts([{ rollout_id: id, input: { q: id }, labels: { step: "2" } }]);
  const [claimed] = (await store.claimRollouts({ worker: "seed", limit: 10, lease_ms: 60_000 }))
    .filter((c) => c.rollout.rollout_id === id);
  await store.appendEvents(id, claimed.attempt.attempt_id, [{
    type: "model_request",
    payload: {
      flavor: "openai_chat",
      prompt_token_ids: [1, 2],
      response_token_ids: [3, 4],
      response_logprobs: [-0.1, -0.2],
      response_text:
        `<tool_call>\n{"name": "bash", "arguments": {"command": "git log -p"}}\n</tool_call>`,
      policy_version: 3,
    },
  }, { type: "reward", payload: { value: 1 } }]);
  await store.transition(id, { to: "succeeded" });
}

async function postStep(fx: UiFixture, attemptId: string, step: number): Promise<void> {
  await fx.gateway.store.appendEvents("run-1", attemptId, [{
    type: "custom",
    payload: {
      name: "train_step",
      data: {
        step,
        policy_version: step + 1,
        reward_mean: 0.2 + 0.2 * step,
        pass_rate: 0.1 + 0.25 * step,
        alignment_corr: 0.996 - 0.001 * step,
        samples_per_rollout: 2.4 - 0.3 * step,
        break_reasons: { template_rewrite: 3 - step, branch: 1, token_boundary: step },
        timings_ms: { rollout: 1200 + 100 * step, assemble: 40, train: 600 },
      },
    },
  }]);
}

Deno.test({
  name: "Live UI in Chromium over a real run",
  ignore: !(await chromiumAvailable()),
  fn: async (t) => {
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    const profile = await Deno.makeTempDir({ prefix: "reins_ui_chromium_" });
    const fx = await startUiFixture();
    const browser = await chromium.launchPersistentContext(profile, {
      executablePath: CHROMIUM,
      headless: true,
      args: [
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--no-first-run",
        "--disable-background-networking",
      ],
      viewport: { width: 1280, height: 900 },
    });
    try {
      const page = browser.pages()[0] ?? await browser.newPage();
      const errors: string[] = [];
      page.on("pageerror", (err) => errors.push(err.message));
      await runRollout(fx, "r1", { labels: { step: "1", harness: "calc" } });

      await t.step("log in with the admin key", async () => {
        const denied = await page.goto(`${fx.base}/rollouts`);
        assert.equal(denied?.status(), 401);
        await page.fill("#key", ADMIN_KEY);
        await Promise.all([page.waitForURL(`${fx.base}/`), page.click("#login button")]);
        await page.waitForSelector("#overview");
        await shot(page, "01_overview_empty");
      });

      await t.step("new rollouts appear in the list without a reload", async () => {
        await page.goto(`${fx.base}/rollouts`);
        await page.waitForSelector('tr[data-rollout="r1"]');
        await page.waitForSelector("#live.on");
        await page.evaluate(() => {
          (window as unknown as { __sameDocument: boolean }).__sameDocument = true;
        });
        await runRollout(fx, "r2", { labels: { step: "2", harness: "calc" }, reward: 0.5 });
        await runRollout(fx, "r3", {
          labels: { step: "2", harness: "other" },
          reward: 0,
          status: "failed",
        });
        await page.waitForSelector('tr[data-rollout="r3"]', { timeout: 15_000 });
        const same = await page.evaluate(() =>
          (window as unknown as { __sameDocument?: boolean }).__sameDocument === true
        );
        assert.ok(same, "the page was updated in place, not reloaded");
        assert.deepEqual(
          await page.$$eval(
            "#rollouts tbody tr",
            (rows) => rows.map((r) => r.getAttribute("data-rollout")),
          ),
          ["r1", "r2", "r3"],
        );
        await shot(page, "02_rollouts_live");
      });

      await t.step("filters narrow the list", async () => {
        await seedFlagged(fx, "hack-1");
        await fx.ui.monitors!.drain();
        await page.selectOption("#f-status", "failed");
        await Promise.all([page.waitForURL(/status=failed/), page.click("#apply")]);
        assert.deepEqual(
          await page.$$eval(
            "#rollouts tbody tr",
            (rows) => rows.map((r) => r.getAttribute("data-rollout")),
          ),
          ["r3"],
        );
        await page.goto(`${fx.base}/rollouts`);
        await page.fill("#f-step", "2");
        await page.fill("#f-reward_min", "0.5");
        await Promise.all([page.waitForURL(/step=2/), page.click("#apply")]);
        assert.deepEqual(
          await page.$$eval(
            "#rollouts tbody tr",
            (rows) => rows.map((r) => r.getAttribute("data-rollout")),
          ),
          ["r2", "hack-1"],
        );
        await page.goto(`${fx.base}/rollouts`);
        await page.selectOption("#f-flagged", "yes");
        await Promise.all([page.waitForURL(/flagged=yes/), page.click("#apply")]);
        assert.deepEqual(
          await page.$$eval(
            "#rollouts tbody tr",
            (rows) => rows.map((r) => r.getAttribute("data-rollout")),
          ),
          ["hack-1"],
        );
        assert.match(await page.textContent("#rollouts tbody") ?? "", /⚑ 1/);
        await shot(page, "03_rollouts_flagged");
      });

      await t.step(
        "the detail page shows split reasons and trained tokens; model HTML stays text",
        async () => {
          await page.goto(`${fx.base}/rollouts/r1`);
          await page.waitForSelector(".sample");
          assert.equal(
            await page.textContent('.sample[data-split="template_rewrite"] .split-reason'),
            "template_rewrite",
          );
          const trained = await page.$$(".tk.trn[title]");
          assert.ok(trained.length > 20, `trained tokens highlighted (${trained.length})`);
          const underline = await page.$eval(
            ".tk.trn[title]",
            (el) => getComputedStyle(el).borderBottomColor,
          );
          assert.equal(underline, "rgb(22, 163, 74)");
          const context = await page.$eval(".tk.ctx", (el) => getComputedStyle(el).color);
          assert.equal(context, "rgb(107, 114, 128)");
          assert.ok(
            (await page.$$(".seg")).length >= 3,
            "a marker where each call's response starts",
          );
          // The hostile answer renders as text and never runs.
          const callId = await page.$eval("details.call", (d) => d.id);
          await page.click(`#${callId} > summary`);
          const pwned = await page.evaluate(() =>
            (window as unknown as { __pwned?: number }).__pwned
          );
          assert.equal(pwned, undefined);
          assert.ok(
            (await page.content()).includes("&lt;script&gt;window.__pwned = 1&lt;/script&gt;"),
          );
          assert.equal(await page.$$eval("main script, main img", (els) => els.length), 0);
          await shot(page, "04_detail");

          // Live: a new reward event updates the page in place.
          const attempt = (await fx.gateway.store.getRollout("r1"))!.attempts[0].attempt_id;
          await fx.gateway.store.appendEvents("r1", attempt, [{
            type: "reward",
            payload: { value: 0.25 },
          }]);
          await page.waitForFunction(
            () => document.querySelector("#reward")?.textContent === "0.250",
            null,
            {
              timeout: 15_000,
            },
          );
          assert.ok(
            await page.$eval(`#${callId}`, (d) => (d as HTMLDetailsElement).open),
            "an opened call stays open across live updates",
          );
        },
      );

      await t.step("the overview's charts grow as training steps arrive", async () => {
        await fx.gateway.store.createRollouts([{
          rollout_id: "run-1",
          input: {},
          labels: { kind: "run" },
        }]);
        const [run] = (await fx.gateway.store.claimRollouts({
          worker: "trainer",
          limit: 10,
          lease_ms: 600_000,
        }))
          .filter((c) => c.rollout.rollout_id === "run-1");
        await postStep(fx, run.attempt.attempt_id, 0);
        await page.goto(`${fx.base}/`);
        await page.waitForSelector("#live.on");
        assert.equal(await page.textContent("#step-count"), "1");
        await postStep(fx, run.attempt.attempt_id, 1);
        await postStep(fx, run.attempt.attempt_id, 2);
        await page.waitForFunction(
          () => document.querySelector("#step-count")?.textContent === "3",
          null,
          {
            timeout: 15_000,
          },
        );
        assert.equal(await page.$$eval(".chart > svg", (els) => els.length), 5);
        await shot(page, "05_overview_steps");
      });

      await t.step("the proxy page shows the phase and the upstream", async () => {
        await page.goto(`${fx.base}/proxy`);
        assert.equal(await page.textContent("#phase"), "rollout");
        assert.match(await page.textContent("#upstreams") ?? "", /127\.0\.0\.1/);
        await shot(page, "06_proxy");
      });

      assert.deepEqual(errors, [], "no script errors in the page");
    } finally {
      await browser.close();
      await fx.close();
      await Deno.remove(profile, { recursive: true });
    }
  },
});
