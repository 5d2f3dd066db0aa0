/**
 * The Live UI in a real browser (playwright-core driving Debian's Chromium) against a gateway
 * filled by a real run (proxy + scripted upstream + openai SDK): log in, watch new rollouts
 * appear in the list without a reload, filter, search and sort the list, read the token view as
 * running text with split reasons and trained-token highlighting (model HTML shown as text,
 * never run), see the overview's charts grow (eval curve, disjoint timings, unclipped ticks),
 * and compare runs of an experiment grid. Every page fits 1,440 px without horizontal scroll.
 * Screenshots go to `tests/artifacts/ui/` (`docs/img/` keeps copies of three of them).
 *
 * Run alone with `deno task test:ui`.
 */
import assert from "node:assert/strict";
import { chromium, type Page } from "playwright-core";
import {
  ADMIN_KEY,
  runRollout,
  seedRollout,
  startUiFixture,
  type UiFixture,
} from "./ui_helpers.ts";
import { GRID_SETTINGS, gridRunName, writeGridDir, writeRunsDir } from "./ui_runs_fixture.ts";
import { loginLink } from "../lib/ui/auth.ts";

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

/** The page fits the viewport's width: nothing scrolls sideways. */
async function assertNoHorizontalScroll(page: Page, what: string): Promise<void> {
  const { scroll, client } = await page.evaluate(() => ({
    scroll: document.documentElement.scrollWidth,
    client: document.documentElement.clientWidth,
  }));
  assert.ok(scroll <= client, `${what}: ${scroll} px wide in a ${client} px window`);
}

/** Rows of the rollout table, in order. */
function rowIds(page: Page): Promise<(string | null)[]> {
  return page.$$eval(
    "#rollouts tbody tr",
    (rows) => rows.map((r) => r.getAttribute("data-rollout")),
  );
}

/** A finished rollout whose only call reads git history (the monitors flag it). */
function seedFlagged(fx: UiFixture, id: string): Promise<void> {
  return seedRollout(fx, id, {
    status: "succeeded",
    group_id: "g-hack",
    labels: { step: "2" },
    toolCall: `<tool_call>\n{"name": "bash", "arguments": {"command": "git log -p"}}\n</tool_call>`,
    policyVersion: 3,
    reward: 1,
  });
}

async function postStep(fx: UiFixture, attemptId: string, step: number): Promise<void> {
  await fx.gateway.store.appendEvents("run-1", attemptId, [{
    type: "custom",
    event_key: `reins:train_step:${step}`,
    payload: {
      name: "train_step",
      data: {
        step,
        policy_version: step + 1,
        reward_mean: 0.2 + 0.2 * step,
        pass_rate: 0.1 + 0.25 * step,
        alignment_corr: 0.996 - 0.001 * step,
        samples_per_rollout: 2.4 - 0.3 * step,
        reward_std: 0.4,
        rollouts: 16,
        entropy: 0.9 - 0.1 * step,
        filtered: { error: 0, zero_variance: step, stale: 0 },
        break_reasons: { template_rewrite: 3 - step, branch: 1, token_boundary: step },
        timings_ms: {
          rollout: 1200 + 100 * step,
          assemble: 40,
          train: 600,
          step: 1900 + 100 * step,
        },
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
    const runsDir = await writeRunsDir();
    await writeGridDir(runsDir);
    const fx = await startUiFixture({ runsDir });
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
      viewport: { width: 1440, height: 900 },
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
        await runRollout(fx, "r2", {
          labels: { step: "2", harness: "calc" },
          group: "g-2",
          reward: 0.5,
        });
        await runRollout(fx, "r3", {
          labels: { step: "2", harness: "other" },
          group: "g-2",
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
          ["r3", "r2", "r1"],
          "newest first",
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
          ["hack-1", "r2"],
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

        // By group: the group cell links to its group.
        await page.goto(`${fx.base}/rollouts`);
        await Promise.all([
          page.waitForURL(/group=g-2/),
          page.click('tr[data-rollout="r2"] a[href*="group="]'),
        ]);
        assert.deepEqual(await rowIds(page), ["r3", "r2"]);
        // Full text: a word of a tool call's arguments finds the rollout that made it.
        await page.goto(`${fx.base}/rollouts`);
        await page.fill("#f-q", "git log");
        await Promise.all([page.waitForURL(/q=git/), page.click("#apply")]);
        assert.deepEqual(await rowIds(page), ["hack-1"]);
        // A word of the prompts finds every rollout that was asked it.
        await page.fill("#f-q", "careful calculator");
        await Promise.all([page.waitForURL(/q=careful/), page.click("#apply")]);
        assert.deepEqual(await rowIds(page), ["r3", "r2", "r1"]);
        assert.match(
          await page.textContent('tr[data-rollout="r1"] .snippet') ?? "",
          /a careful calculator/,
          "each hit shows its match in context",
        );
        // Sorting: a header click sorts by reward, highest first; a second click flips it.
        await page.goto(`${fx.base}/rollouts`);
        await Promise.all([page.waitForURL(/sort=-reward/), page.click("#sort-reward")]);
        assert.deepEqual(await rowIds(page), ["r1", "hack-1", "r2", "r3"]);
        assert.equal(
          await page.getAttribute("#rollouts th:has(#sort-reward)", "aria-sort"),
          "descending",
        );
        await Promise.all([page.waitForURL(/sort=reward/), page.click("#sort-reward")]);
        assert.deepEqual(await rowIds(page), ["r3", "r2", "hack-1", "r1"]);
        // Keyset paging in sorted order: two per page, the cursor is the last row's key.
        await page.goto(`${fx.base}/rollouts?sort=-reward&limit=2`);
        assert.deepEqual(await rowIds(page), ["r1", "hack-1"]);
        // The live list refreshes page 1 when r4 arrives; the cursor read before must still
        // give the same page 2.
        const next = await page.getAttribute("#next-page", "href");
        await runRollout(fx, "r4", { reward: 2 }); // sorts first: must not shift page 2
        await page.goto(new URL(next!, page.url()).href);
        await page.waitForURL(/after=k/);
        assert.deepEqual(await rowIds(page), ["r2", "r3"]);
        await assertNoHorizontalScroll(page, "rollouts");
        await shot(page, "03b_rollouts_sorted");
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
          // Tokens read as text: consecutive trained tokens share line boxes (not one per line).
          const lines = await page.$$eval(".sample .tokens", (views) =>
            views.map((v) => {
              const spans = Array.from(v.querySelectorAll(".tk.trn"));
              const tops = spans.map((s) => Math.round(s.getBoundingClientRect().top));
              let shared = 0;
              for (let i = 1; i < tops.length; i++) if (tops[i] === tops[i - 1]) shared++;
              return { spans: spans.length, lines: new Set(tops).size, shared };
            }));
          for (const l of lines) {
            if (l.spans < 10) continue;
            assert.ok(l.lines * 3 < l.spans, `${l.spans} tokens on ${l.lines} lines`);
            assert.ok(l.shared * 2 > l.spans, `${l.shared} of ${l.spans} share a line`);
          }
          await assertNoHorizontalScroll(page, "rollout detail");
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
        // Eval rollouts labelled with their step draw the eval curve.
        for (const [id, step, reward] of [["e0", "0", 0.25], ["e1", "2", 0.75]] as const) {
          await runRollout(fx, id, {
            mode: "val",
            labels: { role: "eval", step, run: "demo" },
            reward,
          });
        }
        await postStep(fx, run.attempt.attempt_id, 3);
        await page.waitForFunction(
          () => document.querySelector("#step-count")?.textContent === "4",
          null,
          { timeout: 15_000 },
        );
        assert.deepEqual(
          await page.$$eval(
            ".chart[data-chart]",
            (els) => els.map((e) => e.getAttribute("data-chart")),
          ),
          ["reward", "pass", "alignment", "entropy", "samples", "breaks", "timings"],
        );
        // The eval curve is recomputed at most every 5 s: reload until it shows.
        for (let i = 0; i < 20; i++) {
          if (/eval reward/.test(await page.textContent('.chart[data-chart="reward"]') ?? "")) {
            break;
          }
          await new Promise((r) => setTimeout(r, 500));
          await page.reload();
        }
        assert.match(await page.textContent('.chart[data-chart="reward"]') ?? "", /eval reward/);
        // y tick labels sit inside their chart (0.996 and its neighbours are not clipped).
        const clipped = await page.$$eval(".chart svg", (svgs) =>
          svgs.flatMap((svg) => {
            const box = svg.getBoundingClientRect();
            return Array.from(svg.querySelectorAll('[aria-label="y-axis tick label"] text'))
              .filter((t) => t.getBoundingClientRect().left < box.left - 0.5)
              .map((t) => t.textContent);
          }));
        assert.deepEqual(clipped, []);
        const alignmentTicks = await page.$$eval(
          '.chart[data-chart="alignment"] [aria-label="y-axis tick label"] text',
          (ts) => ts.map((t) => t.textContent),
        );
        assert.ok(alignmentTicks.every((t) => /^0\.99\d+$/.test(t ?? "")), alignmentTicks.join());
        // The steps table reads records as text, not JSON.
        assert.doesNotMatch(await page.textContent("#steps") ?? "", /[{"]/);
        // Smoothing keeps the raw curve, faint, under the smoothed one.
        const paths = () =>
          page.$$eval('.chart[data-chart="pass"] [stroke-opacity="0.3"]', (p) => p.length);
        assert.equal(await paths(), 0);
        await page.goto(`${fx.base}/?smooth=0.8`);
        assert.equal(await page.$eval("#f-smooth", (s) => (s as HTMLSelectElement).value), "0.8");
        assert.ok(await paths() > 0, "a faint raw line under the smoothed one");
        await assertNoHorizontalScroll(page, "overview");
        await shot(page, "05_overview_steps");
      });

      await t.step(
        "a step drills down to its groups, and two rollouts diff",
        async () => {
          await page.goto(`${fx.base}/`);
          await Promise.all([
            page.waitForURL(/\/steps\/3$/),
            page.click('#steps tr[data-step="3"] a'),
          ]);
          assert.equal(await page.textContent("h1"), "Step 3");
          // r2 and r3 carry step label 2 (the overview's step 3): one group, side by side.
          const cells = (id: string) =>
            page.$eval(`tr[data-rollout="${id}"]`, (tr) => ({
              answer: tr.querySelector(".answer")?.textContent ?? "",
              reward: Number(tr.querySelector(".reward")?.textContent),
              advantage: Number(tr.querySelector(".advantage")?.textContent),
              weight: Number(tr.querySelector(".weight")?.textContent),
              samples: tr.querySelectorAll(".sample-fact").length,
            }));
          const [r2, r3] = [await cells("r2"), await cells("r3")];
          assert.equal(r2.answer, "6.");
          assert.deepEqual([r2.reward, r3.reward], [0.5, 0]);
          assert.ok(r2.advantage > 0 && r3.advantage < 0, `${r2.advantage} ${r3.advantage}`);
          assert.ok(r2.weight > 0 && r2.samples >= 1);
          assert.ok(await page.$('section.group[data-group="g-2"]'));
          await assertNoHorizontalScroll(page, "step");
          await shot(page, "10_step");
          // Two ticked rollouts: the diff of their transcripts.
          await page.check('tr[data-rollout="r2"] input[name="r"]');
          await page.check('tr[data-rollout="hack-1"] input[name="r"]');
          await Promise.all([page.waitForURL(/\/diff\?/), page.click("#diff-selected")]);
          assert.match(
            await page.textContent("#diff-counts") ?? "",
            /\d+ line\(s\) only in (r2|hack-1), \d+ only in (r2|hack-1), \d+ shared/,
          );
          assert.ok((await page.$$("pre.diff .ins")).length > 0);
          assert.match(await page.textContent("pre.diff") ?? "", /git log -p/);
          await assertNoHorizontalScroll(page, "diff");
          await shot(page, "11_diff");
        },
      );

      await t.step(
        "the runs page compares a 24-run grid legibly, by its differing keys",
        async () => {
          await page.goto(`${fx.base}/runs`);
          await page.click('#grids a[href*="grid=grid"]');
          await page.waitForURL(/grid=grid/);
          assert.equal(
            (await page.$$("#runs tbody tr input:checked")).length,
            24,
            "the whole grid is compared",
          );
          // One legend for every chart, by the key that differs, never the long run names.
          const legend = await page.$$eval(
            "#runs-legend .key",
            (els) => els.map((e) => e.getAttribute("data-setting")),
          );
          assert.deepEqual(legend.sort(), GRID_SETTINGS.map((n) => `mode=${n}`).sort());
          assert.doesNotMatch(await page.textContent("#runs-legend") ?? "", /ablation-2026/);
          // Charts come first and are drawn at a readable size.
          const widths = await page.$$eval(
            "#runs-charts .chart svg",
            (svgs) => svgs.map((s) => Math.round(s.getBoundingClientRect().width)),
          );
          assert.ok(widths.length >= 4, widths.join());
          assert.ok(widths.every((w) => w >= 600), `plotted widths ${widths.join()}`);
          const top = (sel: string) =>
            page.$eval(sel, (e) => e.getBoundingClientRect().top + globalThis.scrollY);
          assert.ok(await top("#runs-charts") < await top("#run-results"));
          assert.deepEqual(
            await page.$$eval(
              "#config-diff tbody td:first-child",
              (els) => els.map((e) => e.textContent),
            ),
            ["normalization.mode", "seed"],
          );
          await assertNoHorizontalScroll(page, "runs");
          await shot(page, "07_runs");
          // Pooled over seeds: one curve and one t band per setting; any metric selectable.
          await page.check("#f-pool");
          await page.selectOption("#f-metric", ["reward_mean", "entropy", "timings_ms.step"]);
          await Promise.all([page.waitForURL(/pool=seeds/), page.click("#compare")]);
          assert.deepEqual(
            await page.$$eval(
              "#runs-charts .chart[data-chart]",
              (els) => els.map((e) => e.getAttribute("data-chart")),
            ),
            ["runs-entropy", "runs-reward_mean", "runs-timings_ms.step"],
          );
          const bands = await page.$$eval(
            '.chart[data-chart="runs-entropy"] [aria-label="area"] path',
            (p) => p.length,
          );
          assert.equal(bands, 4, "a band per setting");
          assert.match(
            await page.textContent('.chart[data-chart="runs-timings_ms.step"]') ?? "",
            /timings_ms\.step \(s\)/,
            "ms shown as s",
          );
          await shot(page, "07b_runs_pooled");
          // A run that reported to this gateway is listed too, with a link to its rollouts.
          assert.ok(await page.$('#runs tr[data-run="gw:run-1"]'));
        },
      );

      await t.step("the metric explorer charts every logged metric", async () => {
        const runs = [gridRunName("token_mean", 0), gridRunName("rollout_token_mean", 0)]
          .map((n) => `run=${encodeURIComponent(`dir:grid/${n}`)}`).join("&");
        await page.goto(`${fx.base}/metrics?${runs}`);
        const charts = await page.$$eval(
          "#metric-charts .chart[data-chart]",
          (els) => els.map((e) => e.getAttribute("data-chart")),
        );
        assert.ok(charts.includes("metric-loss") && charts.includes("metric-timings_ms.train"));
        assert.match(await page.textContent("#metric-count") ?? "", /^(\d+) of \1 metric/);
        assert.equal(
          (await page.$$("#metrics-legend .key")).length,
          2,
          "one legend entry per run, by differing keys",
        );
        assert.doesNotMatch(await page.textContent("#metrics-legend") ?? "", /ablation-2026/);
        // The loss (-2.3e-5 … -1.4e-4): distinct ticks with the digits they need, no "-0.000".
        const lossTicks = await page.$$eval(
          '.chart[data-chart="metric-loss"] [aria-label="y-axis tick label"] text',
          (ts) => ts.map((t) => t.textContent ?? ""),
        );
        assert.equal(new Set(lossTicks).size, lossTicks.length, lossTicks.join());
        assert.ok(lossTicks.every((t) => !/^-?0\.0*$/.test(t) || t === "0"), lossTicks.join());
        await assertNoHorizontalScroll(page, "metrics");
        await shot(page, "08_metrics");
        // Filter, smoothing and a log scale.
        await page.fill("#f-q", "timings");
        await page.selectOption("#f-smooth", "0.6");
        await page.check("#f-log");
        await Promise.all([page.waitForURL(/q=timings/), page.click("#apply")]);
        assert.deepEqual(
          await page.$$eval(
            "#metric-charts .chart[data-chart]",
            (els) => els.map((e) => e.getAttribute("data-chart")),
          ),
          ["metric-timings_ms.rollout", "metric-timings_ms.step", "metric-timings_ms.train"],
        );
        // The CSV download holds the long table.
        const href = await page.getAttribute("#export-csv", "href");
        const csv = await page.evaluate(async (url) => await (await fetch(url!)).text(), href);
        assert.equal(csv.split("\n")[0], "run,step,metric,value");
      });

      await t.step("the proxy page shows the phase and the upstream", async () => {
        await page.goto(`${fx.base}/proxy`);
        assert.equal(await page.textContent("#phase"), "rollout");
        assert.match(await page.textContent("#upstreams") ?? "", /127\.0\.0\.1/);
        await shot(page, "06_proxy");
      });

      await t.step(
        "a char-tokenizer run reads as text, logged in by the one-click link",
        async () => {
          const char = await startUiFixture({ tokenizer: "auto" }, { tokenizer: "char" });
          try {
            await runRollout(char, "c1");
            // The key rides in the fragment; the login page posts it and lands on the overview.
            await Promise.all([
              page.waitForURL(`${char.base}/`),
              page.goto(loginLink(char.gateway.url, ADMIN_KEY)),
            ]);
            await page.goto(`${char.base}/rollouts/c1`);
            await page.waitForSelector(".sample");
            const context = await page.$$eval(
              ".sample .tk.ctx",
              (spans) => spans.map((s) => s.textContent).join(""),
            );
            assert.match(context, /You are a careful calculator\./);
            const trained = await page.$$eval(
              ".sample .tk.trn",
              (spans) => spans.map((s) => s.textContent).join(""),
            );
            assert.match(trained, /I should use the tool\./);
            await shot(page, "09_char_detail");
          } finally {
            await char.close();
          }
        },
      );

      assert.deepEqual(errors, [], "no script errors in the page");
    } finally {
      await browser.close();
      await fx.close();
      await Deno.remove(profile, { recursive: true });
      await Deno.remove(runsDir, { recursive: true });
    }
  },
});
