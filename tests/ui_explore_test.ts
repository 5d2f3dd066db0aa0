/**
 * The Live UI as a researcher reads a run (issue 32), over HTTP: the tokenizer taken from a
 * char-tokenizer run, nullable metrics and steps numbered from 1, evaluation series from the
 * metrics, a 24-run grid compared by its differing config keys, every metric charted and
 * exported (CSV, Parquet, TensorBoard), a step's drill-down with advantages and loss weights, a
 * diff of two rollouts, search snippets, bad query values named, and the monitor runner storing
 * each result once across restarts.
 */
import assert from "node:assert/strict";
import pl from "nodejs-polars";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";
import { startMonitorRunner } from "../lib/monitors/runner.ts";
import { defaultMonitors } from "../lib/monitors/defaults.ts";
import { createUiApp } from "../lib/ui/app.ts";
import { loadCharTokenizer } from "../lib/tokens/char.ts";
import { metricNames } from "../lib/ui/metrics.ts";
import { readTfEvents } from "../lib/ui/tfevents.ts";
import { ADMIN_KEY, compact, get, runRollout, seedRollout, startUiFixture } from "./ui_helpers.ts";
import { GRID_SETTINGS, gridRunName, writeGridDir } from "./ui_runs_fixture.ts";

const auth = { authorization: "Bearer admin-key" };

function appOver(options: Parameters<typeof createUiApp>[1]) {
  const store = openSqliteStore(":memory:");
  const ui = createUiApp({ store, adminKey: "admin-key", secret: "s" }, {
    monitors: false,
    ...options,
  });
  const request = async (path: string) => {
    const res = await ui.app.request(path, { headers: auth });
    return res;
  };
  const text = async (path: string) => {
    const res = await request(path);
    assert.equal(res.status, 200, `${path}: ${res.status}`);
    return compact(await res.text());
  };
  return {
    store,
    ui,
    request,
    text,
    close: async () => {
      await ui.close();
      await store.close();
    },
  };
}

Deno.test("the tokenizer comes from the run: a char-tokenizer run reads as text", async () => {
  const fx = await startUiFixture({ tokenizer: "auto", monitors: false }, { tokenizer: "char" });
  try {
    await runRollout(fx, "c1");
    const chosen = await fx.ui.tokenizer();
    assert.equal(chosen?.name, "char");
    assert.match(chosen?.reason ?? "", /stored calls: \d+ read, every token id < \d+/);
    const { text } = await get(`${fx.base}/rollouts/c1`);
    // The system prompt, decoded as context tokens: Qwen3's vocabulary would garble it.
    assert.match(text, /<span class="tk ctx"[^>]*>[^<]*You are a careful calculator\./);
  } finally {
    await fx.close();
  }
});

Deno.test("a tokenizer loader runs when a page first needs it, once, and again after a failure", async () => {
  let loads = 0;
  let fail = true;
  const fx = await startUiFixture({
    tokenizer: async () => {
      loads++;
      if (fail) throw new Error("tokenizer.json: cannot read");
      return await loadCharTokenizer();
    },
    monitors: false,
  }, { tokenizer: "char" });
  try {
    await runRollout(fx, "c1");
    assert.equal(loads, 0, "nothing loads before a page needs it");
    await assert.rejects(() => fx.ui.tokenizer(), /tokenizer\.json: cannot read/);
    fail = false;
    const chosen = await fx.ui.tokenizer();
    assert.deepEqual([chosen?.name, chosen?.reason, loads], ["char", "given", 2]);
    const { text } = await get(`${fx.base}/rollouts/c1`);
    assert.match(text, /<span class="tk ctx"[^>]*>[^<]*You are a careful calculator\./);
    assert.equal(loads, 2, "loaded once after the failure");
  } finally {
    await fx.close();
  }
});

Deno.test("nullable metrics, steps from 1, evaluation series from the metrics", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_ui_null_" });
  const metricsPath = `${dir}/metrics.jsonl`;
  await Deno.writeTextFile(
    metricsPath,
    [0, 1, 2].map((step) =>
      JSON.stringify({
        step,
        reward_mean: 0.1 * step,
        alignment_corr: step === 1 ? null : 0.999,
        loss: -0.0000231,
        "eval/heldout_reward_mean": step === 2 ? 0.4 : null,
        timings_ms: { step: 1900 },
      })
    ).join("\n") + "\n",
  );
  const app = appOver({ metricsPath });
  try {
    const page = await app.text("/");
    assert.match(page, /<b id="step-count">3<\/b>/);
    assert.doesNotMatch(page, /unreadable metric record/);
    // Numbered like the terminal and the figures, each linked to its drill-down.
    assert.deepEqual([...page.matchAll(/<tr data-step="(\d+)">/g)].map((m) => m[1]), [
      "3",
      "2",
      "1",
    ]);
    assert.match(page, /<a href="\/ui\/steps\/3"/);
    const reward = page.slice(page.indexOf('data-chart="reward"'));
    assert.match(reward.slice(0, reward.indexOf("</svg>")), /eval\/heldout_reward_mean/);
    // Units and significant digits: no "-0.000" loss, 1.9 s not 1900.
    const table = await app.text("/?cols=loss,step_ms");
    assert.match(table, /<td class="num">-2\.31e-5<\/td>/);
    assert.match(table, /<td class="num">1\.9 s<\/td>/);
  } finally {
    await app.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a 24-run grid compares by its differing keys, pooled or not", async () => {
  const root = await writeGridDir();
  const app = appOver({ runsDir: root });
  try {
    const page = await app.text("/runs?grid=grid");
    const legend = page.slice(page.indexOf('id="runs-legend"'), page.indexOf('id="runs-charts"'));
    const settings = [...legend.matchAll(/data-setting="([^"]+)"/g)].map((m) => m[1]);
    assert.deepEqual(
      settings.sort(),
      GRID_SETTINGS.map((n) => `mode=${n}`).sort(),
      "one legend entry per setting, by the differing key",
    );
    assert.doesNotMatch(legend, /ablation-2026/, "no run name in the legend");
    assert.match(legend, /\(6 runs\)/);
    // Paths and bookkeeping are out of the diff; the setting and the seed are in.
    const diff = page.slice(page.indexOf('id="config-diff"'));
    const keys = [...diff.matchAll(/<tr><td><code>([^<]+)<\/code>/g)].map((m) => m[1]);
    assert.deepEqual(keys, ["normalization.mode", "seed"]);
    assert.match(page, /not compared: <code>harness\.data_dir, name, out_dir<\/code>/);
    // Charts first, each drawn 680 px wide; results grouped by setting.
    assert.ok(page.indexOf('id="runs-charts"') < page.indexOf('id="run-results"'));
    assert.match(page, /data-chart="runs-reward_mean"><svg[^>]*width="680"/);
    assert.equal([...page.matchAll(/<tr class="group">/g)].length, 4);
    // Pooled: one series per setting, a t band across its six seeds.
    const pooled = await app.text("/runs?grid=grid&pool=seeds&metric=entropy");
    assert.deepEqual(
      [...pooled.matchAll(/data-chart="([^"]+)"/g)].map((m) => m[1]),
      ["runs-entropy"],
      "any metric selectable",
    );
    // Unknown values are refused, naming the field.
    const bad = await app.request("/runs?smooth=2");
    assert.equal(bad.status, 400);
    assert.match(await bad.text(), /smooth/);
  } finally {
    await app.close();
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("every metric is charted and exported as CSV, Parquet and TensorBoard", async () => {
  const root = await writeGridDir();
  const app = appOver({ runsDir: root });
  const id = `dir:grid/${gridRunName("token_mean", 0)}`;
  try {
    const lines =
      (await Deno.readTextFile(`${root}/grid/${gridRunName("token_mean", 0)}/metrics.jsonl`))
        .trim().split("\n").map((l) => JSON.parse(l));
    const names = metricNames(lines);
    assert.ok(names.length >= 12, names.join());
    const page = await app.text(`/metrics?run=${encodeURIComponent(id)}`);
    const charted = [...page.matchAll(/data-chart="metric-([^"]+)"/g)].map((m) => m[1]);
    assert.deepEqual(charted, names, "one chart per logged metric");
    assert.match(page, /timings_ms\.step \(s\)/, "ms shown as s");
    const filtered = await app.text(`/metrics?run=${encodeURIComponent(id)}&q=timings&log=1`);
    assert.equal([...filtered.matchAll(/data-chart="metric-/g)].length, 3);

    const csv = await app.request(`/api/metrics.csv?run=${encodeURIComponent(id)}`);
    assert.equal(csv.status, 200);
    const rows = (await csv.text()).trim().split("\n");
    assert.equal(rows[0], "run,step,metric,value");
    const entropyStep1 = rows.find((r) => r.includes(",1,entropy,"));
    assert.equal(entropyStep1, `${gridRunName("token_mean", 0)},1,entropy,1.2`);

    const parquet = await app.request(`/api/metrics.parquet?run=${encodeURIComponent(id)}`);
    const df = pl.readParquet(Buffer.from(await parquet.arrayBuffer()));
    assert.equal(df.height, rows.length - 1);

    const tb = await app.request(`/api/metrics.tfevents?run=${encodeURIComponent(id)}`);
    assert.match(tb.headers.get("content-disposition") ?? "", /events\.out\.tfevents\.\d+\./);
    const events = readTfEvents(new Uint8Array(await tb.arrayBuffer()));
    assert.equal(events[0].file_version, "brain.Event:2");
    assert.deepEqual(events.slice(1).map((e) => e.step), [1, 2, 3, 4, 5, 6, 7, 8, 9, 10]);
    assert.ok(Math.abs(events[1].scalars.entropy - 1.2) < 1e-6);
    assert.equal(events[1].scalars["timings_ms.train"], 12000);
    assert.ok(!("alignment_corr" in events[2].scalars), "a null is not written as a value");

    const two = await app.request(
      `/api/metrics.tfevents?run=${encodeURIComponent(id)}&run=${encodeURIComponent(id)}x`,
    );
    assert.equal(two.status, 404);
    assert.match(await two.text(), /run: no run/);
  } finally {
    await app.close();
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("drill-down: a step's groups, advantages and loss weights; a diff; snippets", async () => {
  const fx = await startUiFixture({ monitors: false });
  try {
    await runRollout(fx, "g1-a", { group: "g1", labels: { step: "0", role: "train" }, reward: 1 });
    await runRollout(fx, "g1-b", { group: "g1", labels: { step: "0", role: "train" }, reward: 0 });
    await runRollout(fx, "g2-a", { group: "g2", labels: { step: "1", role: "train" }, reward: 1 });
    const { text } = await get(`${fx.base}/steps/1`);
    assert.match(text, /<span class="muted" id="step-rollouts">2 in 1 group\(s\)<\/span>/);
    const row = (id: string) => text.slice(text.indexOf(`<tr data-rollout="${id}">`));
    const cell = (id: string, cls: string) =>
      Number(row(id).match(new RegExp(`<td class="num ${cls}">([^<]+)<`))![1]);
    assert.equal(cell("g1-a", "reward"), 1);
    assert.ok(cell("g1-a", "advantage") > 0 && cell("g1-b", "advantage") < 0);
    assert.equal(cell("g1-a", "advantage"), -cell("g1-b", "advantage"));
    assert.ok(cell("g1-a", "weight") > 0);
    assert.match(row("g1-a"), /<td class="answer"[^>]*>6\.<\/td>/, "the final answer");
    assert.match(row("g1-a"), /<span class="sample-fact" data-sample="0"/);
    assert.doesNotMatch(text, /g2-a/, "only the step's rollouts");
    // The group page and a bad step number.
    assert.match((await get(`${fx.base}/groups/g1`)).text, /data-rollout="g1-b"/);
    const bad = await get(`${fx.base}/steps/0`);
    assert.equal(bad.status, 400);
    assert.match(bad.text, /n: /);

    await seedRollout(fx, "d-x", {
      status: "succeeded",
      toolCall: "line one\nthe answer is 4\nline three",
    });
    await seedRollout(fx, "d-y", {
      status: "succeeded",
      toolCall: "line one\nthe answer is 5\nline three",
    });
    const diff = await get(`${fx.base}/diff?r=d-x&r=d-y`);
    assert.match(diff.text, /<span class="del">- the answer is 4/);
    assert.match(diff.text, /<span class="ins">\+ the answer is 5/);
    assert.match(diff.text, /1 line\(s\) only in d-x, 1 only in d-y/);
    const one = await get(`${fx.base}/diff?r=d-x`);
    assert.equal(one.status, 400);
    assert.match(one.text, /r: expected two rollouts/);

    const found = await fetch(`${fx.base}/api/rollouts?q=answer%20is%205`, {
      headers: { authorization: `Bearer ${ADMIN_KEY}` },
    }).then((r) => r.json());
    assert.deepEqual(found.items.map((r: { rollout_id: string }) => r.rollout_id), ["d-y"]);
    assert.equal(found.snippets["d-y"].match, "answer is 5");
    assert.match(found.snippets["d-y"].before, /the $/);
    const list = await get(`${fx.base}/rollouts?q=careful`);
    assert.match(list.text, /<mark>careful<\/mark> calculator/);
  } finally {
    await fx.close();
  }
});

Deno.test("the monitor runner stores each result once across restarts, without errors", async () => {
  const store = openSqliteStore(":memory:");
  const errors: unknown[][] = [];
  const original = console.error;
  console.error = (...args: unknown[]) => errors.push(args);
  try {
    for (const id of ["m1", "m2"]) {
      await store.createRollouts([{ rollout_id: id, input: {} }]);
    }
    await store.claimRollouts({ worker: "w", limit: 2, lease_ms: 60_000 });
    for (const id of ["m1", "m2"]) await store.transition(id, { to: "succeeded" });
    for (let restart = 0; restart < 3; restart++) {
      // A restarted UI reads the change feed from the start and meets every rollout again.
      const runner = startMonitorRunner({ store, monitors: defaultMonitors(), pollMs: 10 });
      await runner.drain();
      await runner.close();
    }
    for (const id of ["m1", "m2"]) {
      const flags = (await store.listEvents(id, { type: "custom" }))
        .filter((e) => e.type === "custom" && e.payload.name === "monitor_flags");
      assert.equal(flags.length, 1, `${id}: one stored result`);
    }
    assert.deepEqual(errors, []);
  } finally {
    console.error = original;
    await store.close();
  }
});
