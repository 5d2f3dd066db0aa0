/**
 * The TS reference losses against the PyTorch worker's (`reins_worker/losses.py`) on the
 * same random inputs: Σ w·ℓ and the reported metrics must agree to float64 error, on every path:
 * π_old = μ (`rollout`), π_old = a proximal policy ≠ μ with the behaviour weight
 * (`recompute` + `tis_cap`, decoupled PPO), GSPO per sample or per model call
 * (`tests/trainer_decoupled_ppo_test.ts` runs the same through a live worker), and the KL
 * penalty to a reference policy with each of Schulman's estimators (k1, k2, k3). Needs the
 * Debian `python3-torch` (torch for /usr/bin/python3), which `scripts/ensure_deps.ts` installs.
 */
import assert from "node:assert/strict";
import { KL_ESTIMATORS, type KlEstimatorName, policyLoss, weightedSum } from "../lib/algo/mod.ts";
import type { LossConfigInput } from "../lib/schema.ts";
import { workerEnv } from "../lib/trainer/mod.ts";
import { mulberry32, randInt } from "./fixtures/algo/samples.ts";

const PY = `
import json, sys
import torch
from reins_worker.losses import LossInputs, policy_loss
from reins_worker.validate import parse_loss
out = []
for case in json.load(sys.stdin):
    t = lambda k: torch.tensor(case[k], dtype=torch.float64)
    x = LossInputs(
        new_logprobs=t("new"), old_logprobs=t("old"), behaviour_logprobs=t("behaviour"),
        advantages=t("adv"), weights=t("weights"),
        sequence_ids=torch.tensor(case.get("ids", case["seq"]), dtype=torch.long),
        reference_logprobs=t("ref"),
    )
    loss, metrics = policy_loss(parse_loss(case["spec"]), x)
    out.append({"loss": float(loss.item()), **metrics})
print(json.dumps(out))
`;

interface Case {
  spec: LossConfigInput;
  new: number[];
  old: number[];
  behaviour: number[];
  adv: number[];
  weights: number[];
  /** π_ref, the reference policy of the KL penalty. */
  ref: number[];
  seq: number[];
  /** Sequence ids by model call (GSPO `gspo_sequence: "call"`); absent: `seq`. */
  ids?: number[];
}

function randomCases(count: number): Case[] {
  const rand = mulberry32(77);
  const kinds = ["ppo", "gspo", "ce"] as const;
  return Array.from({ length: count }, (_, k) => {
    const n = randInt(rand, 1, 60);
    const sequences = randInt(rand, 1, Math.min(4, n));
    const seq = Array.from({ length: n }, (_, t) => Math.floor((t * sequences) / n));
    const behaviour = Array.from({ length: n }, () => -rand() * 4);
    const old = behaviour.map((b) => b + (rand() - 0.5) * 0.4);
    const newLp = old.map((o) => o + (rand() - 0.5) * 1.4);
    const advPerSeq = Array.from({ length: sequences }, () => (rand() - 0.5) * 4);
    // GSPO per model call: some cases cut each sequence into calls (ids, as the loop sends).
    const byCall = rand() < 0.5;
    const ids = seq.map((s, t) => (byCall ? 2 * s + (t % 5 < 2 ? 0 : 1) : s));
    const spec: LossConfigInput = {
      kind: kinds[k % 3],
      clip_low: 0.1 + rand() * 0.2,
      clip_high: 0.1 + rand() * 0.3,
      gspo_clip_low: rand() * 0.05,
      gspo_clip_high: rand() * 0.05,
      old_logprobs: rand() < 0.5 ? "rollout" : "recompute",
    };
    if (rand() < 0.5) spec.dual_clip = 1.5 + rand() * 2;
    if (rand() < 0.5) spec.tis_cap = 0.8 + rand();
    if (rand() < 0.5) {
      spec.kl_coef = rand() * 0.5;
      spec.kl_estimator = (["k1", "k2", "k3"] as const)[randInt(rand, 0, 2)];
    }
    return {
      spec,
      new: newLp,
      old: spec.old_logprobs === "rollout" ? behaviour : old,
      behaviour,
      adv: seq.map((s) => advPerSeq[s]),
      weights: Array.from({ length: n }, () => rand() / n),
      ref: newLp.map((lp) => lp + (rand() - 0.5) * 2),
      seq,
      ...(byCall ? { ids } : {}),
    };
  });
}

Deno.test("TS reference losses match the PyTorch worker's on random inputs", async () => {
  const cases = randomCases(60);
  const child = new Deno.Command("/usr/bin/python3", {
    args: ["-c", PY],
    env: workerEnv(),
    stdin: "piped",
    stdout: "piped",
    stderr: "piped",
  }).spawn();
  const writer = child.stdin.getWriter();
  await writer.write(new TextEncoder().encode(JSON.stringify(cases)));
  await writer.close();
  const { code, stdout, stderr } = await child.output();
  assert.equal(code, 0, `worker losses failed: ${new TextDecoder().decode(stderr)}`);
  const results = JSON.parse(new TextDecoder().decode(stdout)) as Record<string, number>[];
  assert.equal(results.length, cases.length);
  const kinds = new Set<string>();
  cases.forEach((c, i) => {
    const starts = c.seq.flatMap((s, t) => (t === 0 || s !== c.seq[t - 1] ? [t] : []));
    const out = policyLoss({
      logprobs: c.new,
      old_logprobs: c.old,
      behaviour_logprobs: c.behaviour,
      advantages: c.adv,
      loss_mask: c.new.map(() => 1),
      segment_starts: starts,
      reference_logprobs: c.ref,
      ...(c.ids ? { sequence_ids: c.ids } : {}),
    }, c.spec);
    const py = results[i];
    const at = `case ${i} (${JSON.stringify(c.spec)})`;
    const near = (a: number, b: number, name: string, tol = 1e-9) =>
      assert.ok(Math.abs(a - b) <= tol * Math.max(1, Math.abs(b)), `${at} ${name}: ${a} vs ${b}`);
    near(weightedSum(out.loss, c.weights), py.loss, "loss");
    near(out.kl, py.kl, "kl");
    near(out.kl_ref_mean, py.kl_ref_mean, "kl_ref_mean");
    near(out.ratio_mean, py.ratio_mean, "ratio_mean");
    near(out.ratio_max, py.ratio_max, "ratio_max");
    near(out.ratio_min, py.ratio_min, "ratio_min");
    // The worker averages its clip mask in float32.
    near(out.clip_fraction, py.clip_fraction, "clip_fraction", 1e-6);
    assert.equal(out.tokens, py.tokens);
    kinds.add(String(c.spec.kind));
  });
  assert.deepEqual([...kinds].sort(), ["ce", "gspo", "ppo"]);
  assert.ok(cases.some((c) => c.spec.kind === "gspo" && c.ids), "no GSPO-per-call case");
  assert.ok(cases.some((c) => c.spec.old_logprobs === "recompute" && c.spec.tis_cap));
  for (const estimator of ["k1", "k2", "k3"]) {
    assert.ok(
      cases.some((c) => c.spec.kl_estimator === estimator && c.spec.kl_coef),
      `no KL case with ${estimator}`,
    );
  }
});

Deno.test("KL estimators: TS and the worker give the worked values on fixed numbers", async () => {
  // x = ref − new = [0.5, −1, 0]: k1 = −x, k2 = x²/2, k3 = eˣ − x − 1.
  const logprobs = [-1.5, -0.5, -2];
  const ref = [-1, -1.5, -2];
  const py = `
import json, torch
from reins_worker.losses import KL_ESTIMATORS
t = lambda v: torch.tensor(v, dtype=torch.float64)
print(json.dumps({k: f(t(${JSON.stringify(logprobs)}), t(${JSON.stringify(ref)})).tolist()
                  for k, f in KL_ESTIMATORS.items()}))
`;
  const out = await new Deno.Command("/usr/bin/python3", {
    args: ["-c", py],
    env: workerEnv(),
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const worker = JSON.parse(new TextDecoder().decode(out.stdout)) as Record<string, number[]>;
  const expected: Record<KlEstimatorName, number[]> = {
    k1: [-0.5, 1, 0],
    k2: [0.125, 0.5, 0],
    k3: [Math.exp(0.5) - 1.5, Math.exp(-1), 0],
  };
  assert.deepEqual(Object.keys(worker).sort(), Object.keys(KL_ESTIMATORS).sort());
  for (const [name, values] of Object.entries(expected)) {
    const ts = KL_ESTIMATORS[name as KlEstimatorName](logprobs, ref);
    values.forEach((v, t) => {
      assert.ok(Math.abs(ts[t] - v) < 1e-12, `TS ${name}[${t}]: ${ts[t]} vs ${v}`);
      assert.ok(Math.abs(worker[name][t] - v) < 1e-12, `worker ${name}[${t}]: ${worker[name][t]}`);
    });
  }
});
