/**
 * UI pages and data endpoints against a gateway filled by a real run (proxy + scripted
 * upstream + openai SDK): the run overview grows with synthetic `train_step` events and a
 * metrics JSONL file, the rollout list filters and pages on the server, the detail page shows
 * split reasons and trained tokens, the export round-trips, the proxy page reports phase and
 * upstream health, and the change feed streams new events.
 */
import assert from "node:assert/strict";
import { RolloutExportSchema } from "../lib/schema/ui.ts";
import {
  ADMIN_KEY,
  get,
  runRollout,
  seedRollout,
  startUiFixture,
  type UiFixture,
} from "./ui_helpers.ts";

async function api(fx: UiFixture, path: string) {
  const res = await get(fx.base + path);
  assert.equal(res.status, 200, `${path}: ${res.text.slice(0, 300)}`);
  return JSON.parse(res.text);
}

/** Listed ids; oldest first unless the query says (the default order is newest first). */
async function ids(fx: UiFixture, query: string): Promise<string[]> {
  const order = query.includes("order=") ? "" : `${query ? "&" : "?"}order=oldest`;
  const page = await api(fx, `/api/rollouts${query}${order}`);
  return page.items.map((r: { rollout_id: string }) => r.rollout_id);
}

Deno.test("UI pages over a real run", async (t) => {
  const metricsDir = await Deno.makeTempDir({ prefix: "reins_ui_" });
  const metricsPath = `${metricsDir}/metrics.jsonl`;
  const fx = await startUiFixture({ metricsPath });
  try {
    await runRollout(fx, "r1", { labels: { step: "1", harness: "calc" }, reward: 1 });

    await t.step("the detail page shows calls, split reasons and trained tokens", async () => {
      const { text } = await get(fx.base + "/rollouts/r1");
      assert.match(text, /<b>seq \d+<\/b> · attempt 1 · openai_chat/);
      assert.match(text, /class="reasoning"><b>reasoning<\/b><pre>I should use the tool\.<\/pre>/);
      assert.match(text, /class="toolcall"><b>tool call<\/b> ?<code>add<\/code>/);
      assert.match(text, /data-split="template_rewrite"/);
      assert.match(text, /split: <span class="split-reason">template_rewrite<\/span>/);
      const trained = text.match(/class="tk trn" style="--u:[\d.]+" title="#\d+ /g) ?? [];
      const total = await api(fx, "/api/rollouts/r1/export");
      const trainedTokens = total.samples.reduce(
        (n: number, s: { loss_mask: number[] }) => n + s.loss_mask.reduce((a, b) => a + b, 0),
        0,
      );
      assert.equal(trained.length, trainedTokens, "one highlighted span per trained token");
      assert.match(text, /class="seg" title="response of call seq \d+"/);
    });

    await t.step("the export holds every event and the samples, and parses", async () => {
      // The UI's monitor runner appends its flag event after the rollout ends; wait for it so
      // the export and the store are read at the same point of the run.
      await fx.ui.monitors?.drain();
      const doc = RolloutExportSchema.parse(
        await api(fx, "/api/rollouts/r1/export?strategy=per_call"),
      );
      const events = await fx.gateway.store.listEvents("r1");
      assert.equal(doc.events.length, events.length);
      assert.equal(doc.strategy, "per_call");
      assert.equal(doc.samples.length, 3, "per_call: one sample per call");
      const calls = events.filter((e) => e.type === "model_request");
      const first = calls[0];
      assert.ok(first.type === "model_request");
      assert.deepEqual(
        doc.samples[0].tokens,
        [...first.payload.prompt_token_ids, ...first.payload.response_token_ids],
      );
      const file = await fetch(fx.base + "/rollouts/r1/export.json", {
        headers: { authorization: `Bearer ${ADMIN_KEY}` },
      });
      assert.match(
        file.headers.get("content-disposition") ?? "",
        /attachment; filename="r1\.json"/,
      );
      await file.body?.cancel();
      const nb = await api(fx, "/rollouts/r1/notebook.ipynb");
      assert.equal(nb.nbformat, 4);
      assert.equal(nb.metadata.kernelspec.name, "deno");
      assert.match(nb.cells[1].source.join(""), /\/ui\/rollouts\/r1\/export\.json/);
    });

    await t.step("filters and paging are answered on the server", async () => {
      await seedRollout(fx, "s-ok-1", {
        status: "succeeded",
        reward: 1,
        labels: { step: "2", harness: "swe" },
      });
      await seedRollout(fx, "s-bad-1", {
        status: "failed",
        reward: 0,
        labels: { step: "2", harness: "swe" },
      });
      await seedRollout(fx, "s-val-1", {
        status: "succeeded",
        reward: 0.5,
        labels: { step: "2" },
        mode: "val",
      });
      await seedRollout(fx, "s-queued", { status: "queuing", labels: { step: "3" } });
      await seedRollout(fx, "s-hack", {
        status: "succeeded",
        reward: 1,
        labels: { step: "3", harness: "swe" },
        toolCall:
          `<tool_call>\n{"name": "bash", "arguments": {"command": "git log -p | head"}}\n</tool_call>`,
      });
      await fx.ui.monitors!.drain();
      assert.deepEqual(await ids(fx, "?status=succeeded"), ["r1", "s-ok-1", "s-val-1", "s-hack"]);
      assert.deepEqual(await ids(fx, "?mode=val"), ["s-val-1"]);
      assert.deepEqual(await ids(fx, "?step=2"), ["s-ok-1", "s-bad-1", "s-val-1"]);
      assert.deepEqual(await ids(fx, "?harness=swe"), ["s-ok-1", "s-bad-1", "s-hack"]);
      assert.deepEqual(await ids(fx, "?reward_min=0.5&reward_max=1"), [
        "r1",
        "s-ok-1",
        "s-val-1",
        "s-hack",
      ]);
      assert.deepEqual(await ids(fx, "?reward_max=0.6&step=2"), ["s-bad-1", "s-val-1"]);
      assert.deepEqual(await ids(fx, "?flagged=yes"), ["s-hack"]);
      assert.deepEqual(await ids(fx, "?flagged=no&step=3"), ["s-queued"]);
      const flagged = await api(fx, "/api/rollouts?flagged=yes");
      assert.equal(flagged.items[0].flags[0].monitor, "git_network");

      // Paging: a cursor per page, nothing repeated or lost, also with a post-filter.
      const seen: string[] = [];
      let query = "?limit=2&order=oldest";
      for (let pages = 0; pages < 10; pages++) {
        const page = await api(fx, `/api/rollouts${query}`);
        seen.push(...page.items.map((r: { rollout_id: string }) => r.rollout_id));
        if (!page.next) break;
        query = `?limit=2&order=oldest&after=${encodeURIComponent(page.next)}`;
      }
      assert.deepEqual(seen, ["r1", "s-ok-1", "s-bad-1", "s-val-1", "s-queued", "s-hack"]);
      const filtered: string[] = [];
      query = "?limit=1&harness=swe&order=oldest";
      for (let pages = 0; pages < 10; pages++) {
        const page = await api(fx, `/api/rollouts${query}`);
        filtered.push(...page.items.map((r: { rollout_id: string }) => r.rollout_id));
        if (!page.next) break;
        query = `?limit=1&harness=swe&order=oldest&after=${encodeURIComponent(page.next)}`;
      }
      assert.deepEqual(filtered, ["s-ok-1", "s-bad-1", "s-hack"]);

      // Newest first by default, also paged and filtered.
      assert.deepEqual(await ids(fx, "?order=newest"), [...seen].reverse());
      assert.deepEqual(
        (await api(fx, "/api/rollouts")).items.map((r: { rollout_id: string }) => r.rollout_id),
        [...seen].reverse(),
      );
      const newest: string[] = [];
      query = "?order=newest&limit=2&status=succeeded";
      for (let pages = 0; pages < 10; pages++) {
        const page = await api(fx, `/api/rollouts${query}`);
        newest.push(...page.items.map((r: { rollout_id: string }) => r.rollout_id));
        if (!page.next) break;
        query = `?order=newest&limit=2&status=succeeded&after=${encodeURIComponent(page.next)}`;
      }
      assert.deepEqual(newest, ["s-hack", "s-val-1", "s-ok-1", "r1"]);

      const table = await get(fx.base + "/rollouts?step=2&status=failed");
      assert.match(table.text, /data-rollout="s-bad-1"/);
      assert.doesNotMatch(table.text, /data-rollout="s-ok-1"/);
      assert.match(table.text, /<option value="failed" selected>/);
    });

    await t.step(
      "the overview grows with train_step events and reads the metrics file",
      async () => {
        const store = fx.gateway.store;
        await store.createRollouts([{ rollout_id: "run-1", input: {}, labels: { kind: "run" } }]);
        const [run] =
          (await store.claimRollouts({ worker: "trainer", limit: 10, lease_ms: 600_000 }))
            .filter((c) => c.rollout.rollout_id === "run-1");
        const step = (n: number) => ({
          type: "custom" as const,
          event_key: `reins:train_step:${n}`,
          payload: {
            name: "train_step",
            data: {
              step: n,
              policy_version: n + 1,
              reward_mean: 0.25 * n,
              pass_rate: 0.2 * n,
              alignment_corr: 0.995,
              samples_per_rollout: 2.5 - 0.25 * n,
              break_reasons: { template_rewrite: n, branch: 1 },
              timings_ms: { rollout: 1000 + n, train: 400, step: 1500 + n },
              grad_norm: 0.75,
            },
          },
        });
        await store.appendEvents("run-1", run.attempt.attempt_id, [step(0), step(1)]);
        let frag = (await get(fx.base + "/fragments/overview")).text;
        assert.match(frag, /<b id="step-count">2<\/b>/);
        const charts = [...frag.matchAll(/<div class="chart" data-chart="([a-z]+)">/g)].map((m) =>
          m[1]
        );
        assert.deepEqual(charts, ["reward", "pass", "alignment", "samples", "breaks", "timings"]);
        for (
          const title of [
            "reward (train, eval)",
            "samples per rollout",
            "break reasons",
            "phase timings (s)",
          ]
        ) {
          assert.ok(frag.includes(title), title);
        }
        // Phase timings stack disjoint parts only: no `step` total among them.
        const timings = frag.slice(frag.indexOf('data-chart="timings"'));
        const legend = [
          ...timings.slice(0, timings.indexOf("</div>"))
            .matchAll(/font-size="11"[^>]*>([^<]+)<\/text>/g),
        ].map((m) => m[1]);
        assert.deepEqual(legend.sort(), ["other", "rollout", "train"]);
        assert.match(frag, /<td class="num">0\.995<\/td>/, "alignment in significant digits");
        assert.doesNotMatch(frag, /<th>grad_norm<\/th>/, "only the chosen columns");
        const chosen =
          (await get(fx.base + "/fragments/overview?cols=grad_norm,break_reasons")).text;
        assert.match(chosen, /<th>grad_norm<\/th>/);
        assert.match(chosen, /<td class="num">0\.75<\/td>/);
        assert.match(chosen, /<td class="">template_rewrite 1 · branch 1<\/td>/, "records as text");

        await store.appendEvents("run-1", run.attempt.attempt_id, [step(2)]);
        frag = (await get(fx.base + "/fragments/overview")).text;
        assert.match(frag, /<b id="step-count">3<\/b>/);
        assert.match(frag, /<td class="num">0\.5<\/td>/, "step 2 reward 0.5");

        await Deno.writeTextFile(
          metricsPath,
          JSON.stringify({ step: 3, reward_mean: 0.9 }) + "\n" +
            JSON.stringify({ step: 4, pass_rate: 2 }) + "\n",
        );
        frag = (await get(fx.base + "/fragments/overview")).text;
        assert.match(frag, /<b id="step-count">4<\/b>/);
        assert.match(frag, /metrics\.jsonl: line 2: line 2\.pass_rate/);
        assert.match(frag, /<b id="total-rollouts">7<\/b>/);
        assert.match(frag, /<a href="\/ui\/rollouts\?flagged=yes">1<\/a>/);
      },
    );

    await t.step("the proxy page shows phase, endpoints and per-upstream health", async () => {
      fx.gateway.phase.setPhase("update");
      const { text } = await get(fx.base + "/proxy");
      fx.gateway.phase.setPhase("rollout");
      assert.match(text, /<b id="phase">update<\/b>/);
      assert.ok(text.includes(`<code>${fx.upstream.url}</code>`));
      // r1's three calls plus the seeded hack call (which names no upstream).
      assert.match(
        text,
        new RegExp(`<td><code>${fx.upstream.url}</code></td><td class="num">3</td>`),
      );
      assert.match(text, /<td class="num">0\.0%<\/td>/);
    });

    await t.step("the change feed streams new events after a seq", async () => {
      const from = await fx.gateway.store.lastSeq();
      const res = await fetch(`${fx.base}/api/stream?after=${from}`, {
        headers: { authorization: `Bearer ${ADMIN_KEY}` },
      });
      assert.equal(res.headers.get("content-type"), "text/event-stream");
      await fx.gateway.store.createRollouts([{ rollout_id: "late", input: {} }]);
      const reader = res.body!.pipeThrough(new TextDecoderStream()).getReader();
      let text = "";
      while (!text.includes('"rollout_id":"late"')) {
        const { value, done } = await reader.read();
        if (done) break;
        text += value;
      }
      await reader.cancel();
      // One SSE event: its fields (id, event, data) in any order, as the spec allows.
      const frame = text.split("\n\n").find((f) => new RegExp(`^id: ${from + 1}$`, "m").test(f));
      assert.ok(frame, text);
      assert.match(frame, /^event: change$/m);
      assert.match(frame, /^data: \{"kind":"event"/m);
      const list = await get(fx.base + "/fragments/rollouts");
      assert.match(list.text, /data-rollout="late"/);
    });
  } finally {
    await fx.close();
    await Deno.remove(metricsDir, { recursive: true });
  }
});
