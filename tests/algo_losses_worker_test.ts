/**
 * The TS reference losses against the PyTorch worker's (`reins_worker/losses.py`) on the
 * same random inputs: Σ w·ℓ and the reported metrics must agree to float64 error, on every path:
 * π_old = μ (`rollout`), π_old = a proximal policy ≠ μ with the behaviour weight
 * (`recompute` + `tis_cap`, decoupled PPO), GSPO per sample or per model call
 * (`tests/trainer_decoupled_ppo_test.ts` runs the same through a live worker), and the KL
 * penalty to a reference policy with each of Schulman's estimators (k1, k2, k3), and the
 * training–inference mismatch corrections (IcePop token masking, masked sequence-level IS, with
 * and without TIS), on random inputs and on hand-computed vectors. Needs the
 * Debian `python3-torch` (torch for /usr/bin/python3), which `scripts/ensure_deps.ts` installs.
 */
import assert from "node:assert/strict";
import { KL_ESTIMATORS, type KlEstimatorName, policyLoss, weightedSum } from "../lib/algo/mod.ts";
import { type LossConfigInput, ValidationError } from "../lib/schema.ts";
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
    // Mismatch masks: bands inside the ratios' spread (ρ = exp(old − behaviour) ∈ [0.82, 1.22]),
    // so that they mask some tokens or sequences (under "recompute" only: else ρ = 1).
    if (rand() < 0.4) spec.token_ratio_band = [0.85 + rand() * 0.1, 1.05 + rand() * 0.1];
    if (rand() < 0.4) spec.seq_is_band = [0.97 + rand() * 0.02, 1.005 + rand() * 0.02];
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

/** The worker's Σ w·ℓ and metrics for each case (one python process for all). */
async function workerLosses(cases: Case[]): Promise<Record<string, number>[]> {
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
  return results;
}

/** Runs `py` with the worker's package importable and parses the JSON it prints. */
async function workerJson(py: string): Promise<unknown> {
  const out = await new Deno.Command("/usr/bin/python3", {
    args: ["-c", py],
    env: workerEnv(),
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return JSON.parse(new TextDecoder().decode(out.stdout));
}

/** The TS reference loss of a case (every token trained). */
function tsLoss(c: Case) {
  const starts = c.seq.flatMap((s, t) => (t === 0 || s !== c.seq[t - 1] ? [t] : []));
  return policyLoss({
    logprobs: c.new,
    old_logprobs: c.old,
    behaviour_logprobs: c.behaviour,
    advantages: c.adv,
    loss_mask: c.new.map(() => 1),
    segment_starts: starts,
    reference_logprobs: c.ref,
    ...(c.ids ? { sequence_ids: c.ids } : {}),
  }, c.spec);
}

Deno.test("TS reference losses match the PyTorch worker's on random inputs", async () => {
  const cases = randomCases(60);
  const results = await workerLosses(cases);
  const kinds = new Set<string>();
  cases.forEach((c, i) => {
    const out = tsLoss(c);
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
    near(out.is_ess, py.is_ess, "is_ess");
    assert.equal(out.is_masked_tokens, py.is_masked_tokens, `${at} is_masked_tokens`);
    assert.equal(out.is_masked_sequences, py.is_masked_sequences, `${at} is_masked_sequences`);
    assert.equal(out.tokens, py.tokens);
    kinds.add(String(c.spec.kind));
  });
  assert.deepEqual([...kinds].sort(), ["ce", "gspo", "ppo"]);
  assert.ok(cases.some((c) => c.spec.kind === "gspo" && c.ids), "no GSPO-per-call case");
  assert.ok(cases.some((c) => c.spec.old_logprobs === "recompute" && c.spec.tis_cap));
  const masking = (key: "token_ratio_band" | "seq_is_band", metric: string) =>
    cases.some((c, i) =>
      c.spec[key] && results[i][metric] > 0 && results[i][metric] < c.new.length
    );
  assert.ok(masking("token_ratio_band", "is_masked_tokens"), "no case masks some tokens");
  assert.ok(masking("seq_is_band", "is_masked_sequences"), "no case masks some sequences");
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
  const worker = await workerJson(py) as Record<string, number[]>;
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

/**
 * Two sequences of two tokens, π_θ = π_old (every ratio 1, nothing clipped), advantages 1 and 2,
 * weights 1/4: log ρ = old − behaviour = [ln 3, 0, 0.02, 0.01], so ρ = [3, 1, e^0.02, e^0.01]
 * and the sequences' geometric means are √3 and e^0.015 ≈ 1.0151. Uncorrected,
 * Σ w·ℓ = −(1 + 1 + 2 + 2) / 4 = −1.5.
 */
const HAND: Omit<Case, "spec"> = {
  new: [-1 + Math.log(3), -1, -0.98, -0.99],
  old: [-1 + Math.log(3), -1, -0.98, -0.99],
  behaviour: [-1, -1, -1, -1],
  adv: [1, 1, 2, 2],
  weights: [0.25, 0.25, 0.25, 0.25],
  ref: [-1, -1, -1, -1],
  seq: [0, 0, 1, 1],
};
const e2 = Math.exp(0.02);
const e1 = Math.exp(0.01);
const HAND_EXPECTED: {
  spec: LossConfigInput;
  loss: number;
  masked: number;
  seqs: number;
  ess: number;
}[] = [
  { spec: { kind: "ppo" }, loss: -1.5, masked: 0, seqs: 0, ess: 1 },
  // IcePop [0.5, 2]: token 0 (ρ = 3) masked; c = [0, 1, 1, 1], ESS = 3² / (4 · 3).
  { spec: { kind: "ppo", token_ratio_band: [0.5, 2] }, loss: -1.25, masked: 1, seqs: 0, ess: 0.75 },
  // Sequence band [0.99, 1.02]: sequence 0 (g = √3) masked, sequence 1 (g ≈ 1.0151) kept.
  { spec: { kind: "ppo", seq_is_band: [0.99, 1.02] }, loss: -1, masked: 2, seqs: 1, ess: 0.5 },
  // [0.99, 1.01] masks sequence 1 too: nothing trains.
  { spec: { kind: "ppo", seq_is_band: [0.99, 1.01] }, loss: 0, masked: 4, seqs: 2, ess: 0 },
  // TIS cap 2: c = [2, 1, e^0.02, e^0.01].
  {
    spec: { kind: "ppo", tis_cap: 2 },
    loss: -(2 + 1 + 2 * e2 + 2 * e1) / 4,
    masked: 0,
    seqs: 0,
    ess: (3 + e2 + e1) ** 2 / (4 * (4 + 1 + e2 * e2 + e1 * e1)),
  },
  // IcePop then TIS on the kept tokens: c = [0, 1, e^0.02, e^0.01].
  {
    spec: { kind: "ppo", tis_cap: 2, token_ratio_band: [0.5, 2] },
    loss: -(1 + 2 * e2 + 2 * e1) / 4,
    masked: 1,
    seqs: 0,
    ess: (1 + e2 + e1) ** 2 / (4 * (1 + e2 * e2 + e1 * e1)),
  },
];

Deno.test("mismatch corrections: TS and the worker give the hand-computed losses and costs", async () => {
  const cases = HAND_EXPECTED.map((h) => ({
    ...HAND,
    spec: { ...h.spec, old_logprobs: "recompute" as const },
  }));
  const results = await workerLosses(cases);
  HAND_EXPECTED.forEach((h, i) => {
    const ts = tsLoss(cases[i]);
    const py = results[i];
    const at = JSON.stringify(h.spec);
    for (
      const [side, loss, masked, seqs, ess] of [
        [
          "TS",
          weightedSum(ts.loss, HAND.weights),
          ts.is_masked_tokens,
          ts.is_masked_sequences,
          ts.is_ess,
        ],
        ["worker", py.loss, py.is_masked_tokens, py.is_masked_sequences, py.is_ess],
      ] as const
    ) {
      assert.ok(Math.abs(loss - h.loss) < 1e-12, `${side} ${at} loss: ${loss} vs ${h.loss}`);
      assert.equal(masked, h.masked, `${side} ${at} masked tokens`);
      assert.equal(seqs, h.seqs, `${side} ${at} masked sequences`);
      assert.ok(Math.abs(ess - h.ess) < 1e-12, `${side} ${at} ESS: ${ess} vs ${h.ess}`);
    }
  });
});

Deno.test("mismatch corrections: the band [0, largest float) masks nothing, on both sides", async () => {
  // Property: a band no ratio can leave leaves loss and metrics exactly those without the band.
  const open: [number, number] = [0, Number.MAX_VALUE];
  const base = randomCases(30).map((c) => ({
    ...c,
    spec: {
      ...c.spec,
      old_logprobs: "recompute" as const,
      seq_is_band: undefined,
      token_ratio_band: undefined,
    },
    old: c.old,
  }));
  const banded = base.map((c) => ({
    ...c,
    spec: { ...c.spec, seq_is_band: open, token_ratio_band: open },
  }));
  const plain = JSON.parse(JSON.stringify(base)) as Case[];
  const [withBand, without] = await Promise.all([workerLosses(banded), workerLosses(plain)]);
  banded.forEach((c, i) => {
    const a = tsLoss(c);
    const b = tsLoss(base[i]);
    assert.deepEqual(a.loss, b.loss, `case ${i}: TS loss changed under the open band`);
    assert.equal(a.is_masked_tokens, 0);
    assert.equal(a.is_masked_sequences, 0);
    assert.equal(a.is_ess, b.is_ess);
    assert.equal(withBand[i].loss, without[i].loss, `case ${i}: worker loss changed`);
    assert.equal(withBand[i].is_masked_tokens, 0);
    assert.equal(withBand[i].is_masked_sequences, 0);
    assert.equal(withBand[i].is_ess, without[i].is_ess);
  });
});

Deno.test("mismatch corrections: a band with lo > hi is refused, naming the field", async () => {
  const input = {
    logprobs: [-1],
    old_logprobs: [-1],
    behaviour_logprobs: [-1],
    advantages: [1],
    loss_mask: [1],
  };
  for (const key of ["seq_is_band", "token_ratio_band"] as const) {
    assert.throws(
      () => policyLoss(input, { kind: "ppo", old_logprobs: "recompute", [key]: [2, 0.5] }),
      (e: unknown) =>
        e instanceof ValidationError && e.message.includes(`config.${key}`) &&
        /low end/.test(e.message),
      key,
    );
    assert.throws(
      () => policyLoss(input, { kind: "ppo", [key]: [-0.1, 2] }),
      (e: unknown) => e instanceof ValidationError && e.message.includes(`config.${key}[0]`),
    );
  }
  const py = `
import json
from reins_worker.fields import RequestError
from reins_worker.validate import parse_loss
out = []
for band in ([2, 0.5], [-0.1, 2], [1], "x"):
    try:
        parse_loss({"kind": "ppo", "seq_is_band": band})
        out.append(None)
    except RequestError as e:
        out.append([e.status, e.field, e.message])
print(json.dumps(out))
`;
  const refused = await workerJson(py) as [number, string, string][];
  assert.deepEqual(refused.map((r) => [r[0], r[1]]), [
    [400, "loss.seq_is_band"],
    [400, "loss.seq_is_band[0]"],
    [400, "loss.seq_is_band"],
    [400, "loss.seq_is_band"],
  ]);
  assert.match(refused[0][2], /low end 2(\.0)? exceeds its high end 0\.5/);
});
