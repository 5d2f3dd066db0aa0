/**
 * Engine–trainer mismatch as the field measures it: k1/k3 KL estimates and the effective sample
 * size of the importance weights (lib/algo), the thresholds they are judged by, the mismatch
 * monitor that flags calls beyond them, and the UI chart that draws them.
 */
import assert from "node:assert/strict";
import { alignmentMetrics, MISMATCH_THRESHOLDS, mismatchBreaches } from "../lib/algo/mod.ts";
import { defaultMonitors, mismatchMonitor } from "../lib/monitors/mod.ts";
import { lineChart } from "../lib/ui/charts.ts";
import type { Rollout, RolloutEvent } from "../lib/schema.ts";

Deno.test("mismatch metrics: k1, k3 and ESS of the importance weights, by hand", () => {
  const rollout = [-1, -2];
  const trainer = [-1, -1]; // x = trainer − rollout = [0, 1]; w = [1, e]
  const m = alignmentMetrics([{ rollout_logprobs: rollout, trainer_logprobs: trainer }]);
  assert.equal(m.tokens, 2);
  assert.ok(Math.abs(m.k1_kl - -0.5) < 1e-12, `k1 ${m.k1_kl}`);
  assert.ok(Math.abs(m.k3_kl - (Math.E - 2) / 2) < 1e-12, `k3 ${m.k3_kl}`);
  const ess = (1 + Math.E) ** 2 / (2 * (1 + Math.E ** 2));
  assert.ok(Math.abs(m.ess - ess) < 1e-12, `ess ${m.ess}`);
  const same = alignmentMetrics([{ rollout_logprobs: rollout, trainer_logprobs: rollout }]);
  assert.equal(same.ess, 1);
  assert.equal(same.k1_kl, 0);
});

Deno.test("mismatch thresholds: a bf16-like perturbation passes, a temperature bias fails", () => {
  // Per-token logprobs of a peaked distribution; a 1e-3-scale noise is what bf16 gives.
  const rollout = Array.from({ length: 400 }, (_, i) => -0.05 - (i % 7) * 0.3);
  const noisy = rollout.map((x, i) => x + (i % 2 ? 1 : -1) * 1e-3);
  assert.deepEqual(
    mismatchBreaches(alignmentMetrics([{ rollout_logprobs: rollout, trainer_logprobs: noisy }])),
    [],
  );
  const biased = rollout.map((x) => x / 0.7); // recomputed at the wrong temperature, roughly
  const breaches = mismatchBreaches(
    alignmentMetrics([{ rollout_logprobs: rollout, trainer_logprobs: biased }]),
  );
  assert.ok(breaches.some((b) => b.startsWith("mean |Δp|")), breaches.join("; "));
  assert.ok(breaches.some((b) => b.startsWith("k3 KL")), breaches.join("; "));
  assert.equal(MISMATCH_THRESHOLDS.mean_abs_dp_max, 0.005);
  assert.equal(MISMATCH_THRESHOLDS.pearson_prob_min, 0.99);
});

const ROLLOUT = {
  rollout_id: "r",
  status: "succeeded",
} as unknown as Rollout;

function alignmentEvent(seq: number, data: Record<string, number>, key = true): RolloutEvent {
  return {
    type: "custom",
    seq,
    rollout_id: "r",
    attempt_id: "a",
    event_key: key ? `reins:alignment:${seq}` : `agent:${seq}`,
    created_at: 0,
    payload: { name: "alignment", data: { request_seq: seq, tokens: 50, ...data } },
  };
}

Deno.test("mismatch monitor flags calls beyond a threshold, and only the loop's events", async () => {
  const monitor = mismatchMonitor();
  assert.ok(defaultMonitors().some((m) => m.name === "mismatch"));
  const events = [
    alignmentEvent(1, { mean_abs_dp: 0.001, k3_kl: 1e-5, max_abs_dlogprob: 0.01, ess: 0.999 }),
    alignmentEvent(2, { mean_abs_dp: 0.03, k3_kl: 1e-5, max_abs_dlogprob: 0.01, ess: 0.999 }),
    alignmentEvent(3, { mean_abs_dp: 0.001, k3_kl: 0.2, max_abs_dlogprob: 1.5, ess: 0.5 }),
    // An agent posting the same name under its own key is ignored.
    alignmentEvent(4, { mean_abs_dp: 0.5 }, false),
  ];
  const findings = await monitor.check({ rollout: ROLLOUT, events });
  assert.equal(findings.length, 1);
  assert.deepEqual(findings[0].evidence.map((e) => e.seq), [2, 3]);
  assert.match(findings[0].evidence[1].excerpt, /k3 KL .* > 0\.001; ESS 0\.5000 < 0\.9/);
  assert.match(findings[0].evidence[1].excerpt, /max \|Δlogprob\| 1\.5000 > 0\.6931/);
  // Looser thresholds: nothing to flag.
  const loose = mismatchMonitor({
    mean_abs_dp_max: 1,
    k3_kl_max: 1,
    max_abs_dlogprob_max: 9,
    ess_min: 0,
  });
  assert.deepEqual(await loose.check({ rollout: ROLLOUT, events }), []);
});

Deno.test("UI step chart draws the mismatch threshold", () => {
  const svg = lineChart([{ x: 0, series: "mean |Δp|", y: 0.001 }, {
    x: 1,
    series: "mean |Δp|",
    y: 0.002,
  }], {
    title: "engine–trainer mismatch (mean |Δp|)",
    thresholds: [{ y: 0.005, label: "0.005" }],
  }).toString();
  assert.match(svg, /stroke-dasharray="4,3"/);
  assert.match(svg, />0\.005</);
});
