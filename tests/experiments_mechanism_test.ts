/**
 * Issue #18 and #17 item 7: the provenance rule, the mechanism measured exactly with lib/algo,
 * the policy-gradient testbed and its command, the power calculation and the grid plan.
 */
import assert from "node:assert/strict";
import { ABLATION_SETTINGS, settingLabel } from "../experiments/grid.ts";
import {
  baselineShift,
  type BatchRollout,
  rolloutShares,
  shareVsSplits,
  splitShare,
  syntheticBatch,
} from "../experiments/mechanism_exact.ts";
import { HEADLINE, runRegime, settingLine } from "../experiments/mechanism.ts";
import { detectableEffect, power, seedsFor } from "../experiments/power.ts";
import { planGrid, pooledSd } from "../experiments/grid_plan.ts";
import { gridEffects } from "../experiments/grid_effects.ts";
import {
  codeFingerprint,
  diffFingerprints,
  readProvenance,
  StaleResultsError,
  verifyProvenance,
  writeProvenance,
} from "../experiments/provenance.ts";
import { runGrid, silentGridProgress } from "../experiments/runner.ts";
import type { CellResult } from "../experiments/results.ts";
import { runTestbed, updateWeights } from "../experiments/testbed.ts";
import { EXPERIMENTS_DOC, fillBlocks, renderBlocks } from "../experiments/report.ts";

/** A tiny repository: an experiment importing a numerics module and a service module. */
async function tempRepo(): Promise<string> {
  const root = await Deno.makeTempDir({ prefix: "reins_provenance_" });
  for (const d of ["experiments", "lib/algo", "lib/controller", "lib/trainer/worker", "data"]) {
    await Deno.mkdir(`${root}/${d}`, { recursive: true });
  }
  await Deno.writeTextFile(
    `${root}/experiments/a.ts`,
    'import { b } from "../lib/algo/b.ts";\nimport { k } from "../lib/controller/k.ts";\n' +
      "console.log(b, k);\n",
  );
  await Deno.writeTextFile(`${root}/lib/algo/b.ts`, "export const b = 1;\n");
  await Deno.writeTextFile(`${root}/lib/controller/k.ts`, "export const k = 1;\n");
  await Deno.writeTextFile(`${root}/experiments/c.ts`, "export const c = 1;\n");
  await Deno.writeTextFile(`${root}/lib/trainer/worker/w.py`, "print(1)\n");
  await Deno.writeTextFile(`${root}/lib/trainer/worker/notes.md`, "not code\n");
  await Deno.writeTextFile(`${root}/data/tasks.json`, "[1, 2]\n");
  return root;
}

const SPEC = {
  entries: ["experiments/a.ts"],
  extra: ["lib/trainer/worker/*.py"],
  data: ["data/tasks.json"],
};

Deno.test("provenance: the hash covers the numerics the entry imports, the extra and the data files, nothing else", async () => {
  const root = await tempRepo();
  try {
    const fp = await codeFingerprint(SPEC, root);
    // The service module the experiment imports is outside the numerics scope.
    assert.deepEqual(Object.keys(fp.files), [
      "experiments/a.ts",
      "lib/algo/b.ts",
      "lib/trainer/worker/w.py",
    ]);
    assert.deepEqual(Object.keys(fp.data), ["data/tasks.json"]);
    // An unrelated edit, an edit of an imported service module, a doc or comment edit: same hash.
    await Deno.writeTextFile(`${root}/experiments/c.ts`, "export const c = 2;\n");
    await Deno.writeTextFile(`${root}/lib/trainer/worker/notes.md`, "changed\n");
    await Deno.writeTextFile(
      `${root}/lib/controller/k.ts`,
      "export const k = 1;\nexport const u = 0;\n",
    );
    const b = await Deno.readTextFile(`${root}/lib/algo/b.ts`);
    await Deno.writeTextFile(`${root}/lib/algo/b.ts`, `/** The b. */\n// why b\n\n${b}`);
    await Deno.writeTextFile(`${root}/lib/trainer/worker/w.py`, "# a note\nprint(1)\n");
    assert.equal((await codeFingerprint(SPEC, root)).hash, fp.hash);
    // A numerics module, a worker file or a data file changes it.
    await Deno.writeTextFile(`${root}/lib/algo/b.ts`, "export const b = 2;\n");
    assert.notEqual((await codeFingerprint(SPEC, root)).hash, fp.hash);
    await Deno.writeTextFile(`${root}/lib/algo/b.ts`, "export const b = 1;\n");
    await Deno.writeTextFile(`${root}/lib/trainer/worker/w.py`, "print(2)\n");
    assert.notEqual((await codeFingerprint(SPEC, root)).hash, fp.hash);
    await Deno.writeTextFile(`${root}/lib/trainer/worker/w.py`, "print(1)\n");
    await Deno.writeTextFile(`${root}/data/tasks.json`, "[1, 3]\n");
    const moved = await codeFingerprint(SPEC, root);
    assert.notEqual(moved.hash, fp.hash);
    assert.deepEqual(diffFingerprints(fp, moved).data_changed, ["data/tasks.json"]);
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("provenance: records commit, dirty flag, data hashes and runtime; refuses code that moved during the run", async () => {
  const root = await tempRepo();
  try {
    const dir = `${root}/results/x`;
    await assert.rejects(verifyProvenance(dir, root), (e: Error) => {
      assert.ok(e instanceof StaleResultsError);
      assert.match(e.message, /no provenance\.json/);
      return true;
    });
    const written = await writeProvenance(dir, {
      command: "deno run experiments/a.ts",
      config: { seeds: 3 },
      code: SPEC,
    }, root);
    assert.equal(written.git?.commit, null, "not a git checkout");
    assert.equal(written.git?.dirty, false);
    assert.equal(written.runtime?.deno, Deno.version.deno);
    assert.ok(written.runtime && "torch" in written.runtime && "blas" in written.runtime);
    assert.match(written.code.data["data/tasks.json"], /^[0-9a-f]{64}$/);
    const ok = await verifyProvenance(dir, root);
    assert.deepEqual(ok.config, { seeds: 3 });
    await Deno.writeTextFile(`${root}/lib/algo/b.ts`, "export const b = 3;\n");
    await assert.rejects(verifyProvenance(dir, root), (e: Error) => {
      assert.ok(e instanceof StaleResultsError);
      assert.deepEqual(e.diff?.changed, ["lib/algo/b.ts"]);
      assert.match(e.message, /changed: lib\/algo\/b\.ts/);
      assert.match(e.message, /rerun `deno run experiments\/a\.ts`/);
      return true;
    });
    // A fingerprint taken before an edit is not recorded as the code that ran.
    const before = await codeFingerprint({ entries: ["experiments/a.ts"] }, root);
    await Deno.writeTextFile(`${root}/lib/algo/b.ts`, "export const b = 4;\n");
    await assert.rejects(
      writeProvenance(`${root}/results/y`, { command: "c", config: {}, code: before }, root),
      /the code changed while the experiment ran \(changed: lib\/algo\/b\.ts\)/,
    );
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("runner: cells carry the code hash; a grid is not resumed across code changes", async () => {
  const root = await tempRepo();
  const results = `${root}/results`;
  try {
    const grid = { name: "g", seeds: [0, 1] };
    const runner = () => Promise.resolve({ config: {}, metrics: [{ step: 0, reward_mean: 1 }] });
    const options = {
      resultsDir: results,
      progress: silentGridProgress(),
      parquet: false,
      code: { entries: ["experiments/a.ts"] },
      codeRoot: root,
      command: "run it",
      limit: 1,
    };
    const first = await runGrid(grid, runner, options);
    const hash = (await readProvenance(`${results}/g`))!.code.hash;
    assert.equal(first.results[0].summary.code_hash, hash);
    await Deno.writeTextFile(`${root}/lib/algo/b.ts`, "export const b = 9;\n");
    await assert.rejects(runGrid(grid, runner, options), (e: Error) => {
      assert.ok(e instanceof StaleResultsError);
      assert.match(e.message, /1 finished cell\(s\) were produced by other code.*lib\/algo\/b\.ts/);
      return true;
    });
  } finally {
    await Deno.remove(root, { recursive: true });
  }
});

const r = (id: string, reward: number, lengths: number[], group_id = "g"): BatchRollout => ({
  rollout_id: id,
  group_id,
  reward,
  lengths,
});

Deno.test("mechanism exact: Figure 5's shares, and the closed forms on random batches", () => {
  const fig5 = [r("A", 1, [50, 100]), r("B", 0, [30, 30, 30]), r("C", 1, [40])];
  const share = (mode: Parameters<typeof rolloutShares>[1]) =>
    [...rolloutShares(fig5, mode).values()].map((x) => +x.toFixed(6));
  assert.deepEqual(share("token_mean"), [150 / 280, 90 / 280, 40 / 280].map((x) => +x.toFixed(6)));
  assert.deepEqual(share("seq_mean_token_mean"), [2 / 6, 3 / 6, 1 / 6].map((x) => +x.toFixed(6)));
  assert.deepEqual(share("rollout_token_mean"), [1 / 3, 1 / 3, 1 / 3].map((x) => +x.toFixed(6)));
  for (let seed = 0; seed < 20; seed++) {
    const batch = syntheticBatch({
      groups: 3,
      split_rate: 1.5,
      split_reward_corr: -0.5,
      fail_length: 2,
      seed,
    });
    const T = batch.reduce((a, x) => a + x.lengths.reduce((p, q) => p + q, 0), 0);
    const N = batch.reduce((a, x) => a + x.lengths.length, 0);
    const tm = rolloutShares(batch, "token_mean");
    const sm = rolloutShares(batch, "seq_mean_token_mean");
    const rm = rolloutShares(batch, "rollout_token_mean");
    for (const x of batch) {
      const t = x.lengths.reduce((p, q) => p + q, 0);
      assert.ok(Math.abs(tm.get(x.rollout_id)! - t / T) < 1e-12);
      assert.ok(Math.abs(sm.get(x.rollout_id)! - x.lengths.length / N) < 1e-12);
      assert.ok(Math.abs(rm.get(x.rollout_id)! - 1 / batch.length) < 1e-12);
    }
  }
  // A rollout split into k pieces weighs k/(k + 7) of 8 rollouts under seq_mean_token_mean.
  const rows = shareVsSplits({ max_splits: 5 }).filter((x) => x.mode === "seq_mean_token_mean");
  rows.forEach((x) => assert.ok(Math.abs(x.share - x.splits / (x.splits + 7)) < 1e-12));
});

Deno.test("mechanism exact: the sample-level baseline moves only when rollouts split, towards the splitters", () => {
  // Figure 4: rollout 1 (reward 1) in 3 samples, rollout 2 (reward 0) in one: 3/4 vs 1/2.
  assert.equal(baselineShift([r("1", 1, [5, 5, 5]), r("2", 0, [5])]).mean_shift, 0.25);
  const none = syntheticBatch({ split_rate: 0, split_reward_corr: 0 });
  assert.equal(baselineShift(none).mean_abs_shift, 0);
  const shift = (corr: number, rate: number) =>
    baselineShift(syntheticBatch({ split_rate: rate, split_reward_corr: corr })).mean_shift;
  assert.ok(shift(0.8, 1) > 0.05, "successes split more: the baseline rises");
  assert.ok(shift(-0.8, 1) < -0.05, "failures split more: it falls");
  assert.ok(Math.abs(shift(-0.8, 3)) > Math.abs(shift(-0.8, 0.5)), "more splitting, more shift");
  // Under rollout_token_mean the update is spread by rollout, whatever splits.
  const b = [r("a", 1, [10, 10, 10]), r("b", 0, [10]), r("c", 0, [10]), r("d", 1, [10])];
  const rtm = splitShare(b, { advantage: "rollout", normalization: "rollout_token_mean" });
  const smtm = splitShare(b, { advantage: "rollout", normalization: "seq_mean_token_mean" });
  assert.equal(rtm.split_update, 0.25);
  assert.equal(smtm.split_update, 0.5);
});

Deno.test("testbed: per-rollout coefficients from lib/algo; rollout-level + rollout_token_mean sums to 0 per group", () => {
  const batch = [
    { group: 0, task: 0, action: 0, reward: 1, lengths: [10, 10, 10] },
    { group: 0, task: 0, action: 1, reward: 0, lengths: [10] },
    { group: 0, task: 0, action: 1, reward: 0, lengths: [30] },
  ];
  const rtm = updateWeights(batch, { advantage: "rollout", normalization: "rollout_token_mean" });
  assert.ok(Math.abs(rtm.coef.reduce((a, b) => a + b, 0)) < 1e-6);
  const smtm = updateWeights(batch, { advantage: "sample", normalization: "seq_mean_token_mean" });
  // Sample-level baseline (1·3 + 0 + 0)/5 = 0.6 instead of 1/3.
  assert.ok(smtm.advantage[0] < rtm.advantage[0]);
  assert.deepEqual(smtm.share.map((x) => +x.toFixed(3)), [0.6, 0.2, 0.2]);
  const first = updateWeights(
    batch,
    { advantage: "rollout", normalization: "token_mean" },
    "first_token",
    1,
  );
  // token_mean gives the decision token of every rollout the same weight 1/T.
  assert.deepEqual(first.coef.map((c, i) => +(c / first.advantage[i]).toFixed(6)), [
    0.014286,
    0.014286,
    0.014286,
  ]);
});

Deno.test("testbed: deterministic, common random numbers across settings, learns", () => {
  const env = { strategies: [{ name: "a", p: 0.8 }, { name: "b", p: 0.2 }] };
  const s0 = ABLATION_SETTINGS[0];
  const s2 = ABLATION_SETTINGS[2];
  const a = runTestbed(env, { steps: 10 }, s0, 3);
  assert.deepEqual(runTestbed(env, { steps: 10 }, s0, 3), a);
  // Same seed, other setting: same start, same first batch (so same split statistics at step 0).
  const b = runTestbed(env, { steps: 1 }, s2, 3);
  assert.equal(b.success[0], a.success[0]);
  assert.equal(b.samples_per_rollout, runTestbed(env, { steps: 1 }, s0, 3).samples_per_rollout);
  const learned = runTestbed(env, { steps: 40 }, s2, 1);
  assert.ok(learned.final_pi[0] > 0.6, `π(best) = ${learned.final_pi[0]}`);
  assert.throws(() => runTestbed({ strategies: [] }, {}, s0, 0), /env\.strategies/);
  assert.throws(() => runTestbed(env, { lr: -1 }, s0, 0), /run\.lr/);
});

Deno.test("mechanism study: paired verdicts, the reference, CIs that shrink with seeds", () => {
  const small = runRegime({ ...HEADLINE, run: { ...HEADLINE.run, steps: 5 } }, 8);
  const more = runRegime({ ...HEADLINE, run: { ...HEADLINE.run, steps: 5 } }, 32);
  assert.deepEqual(small.settings.map((s) => s.setting), ABLATION_SETTINGS.map(settingLabel));
  const ref = small.settings.find((s) => s.verdict === "reference")!;
  assert.equal(ref.setting, "rollout/rollout_token_mean");
  assert.equal(ref.diff.mean, 0);
  for (const [i, s] of more.settings.entries()) {
    assert.ok(s.final.ci95 < small.settings[i].final.ci95);
    assert.equal(s.curve.length, 6);
  }
  assert.equal(settingLine("a/b", 0.5, 0.01), "setting a/b: success=0.500 ± 0.010");
});

Deno.test("deno task ablation:mechanism prints one line per setting and the seeds", async () => {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "experiments/mechanism.ts", "--quick", "--seeds", "24", "--no-write"],
    cwd: new URL("..", import.meta.url).pathname,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  const lines = text.split("\n").filter((l) => l.startsWith("setting "));
  assert.deepEqual(
    lines.map((l) => l.split(":")[0]),
    ABLATION_SETTINGS.map((s) => `setting ${settingLabel(s)}`),
  );
  for (const l of lines) assert.match(l, /: success=0\.\d{3} ± 0\.\d{3}$/);
  assert.match(text, /\nmechanism_seeds: 24\n/);
  const bad = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "experiments/mechanism.ts", "--seeds", "1", "--no-write"],
    cwd: new URL("..", import.meta.url).pathname,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(bad.success, false);
  assert.match(new TextDecoder().decode(bad.stderr), /--seeds: expected an integer ≥ 2/);
});

Deno.test("power: textbook values (d = 0.5 → 64 per group; paired → 34) and issue #18's numbers", () => {
  assert.equal(seedsFor(0.5, { sd: 1 }), 64);
  assert.equal(seedsFor(0.8, { sd: 1 }), 26);
  assert.equal(seedsFor(0.5, { sd: 1, design: "paired" }), 34);
  assert.ok(Math.abs(power(0.5, 64, { sd: 1 }) - 0.8) < 0.01);
  assert.equal(detectableEffect(3, { sd: 0.123 }).toFixed(2), "0.37");
  const n = seedsFor(0.032, { sd: 0.123 });
  assert.ok(n > 220 && n < 240, `${n}`);
  // Bonferroni over three comparisons asks for more.
  assert.ok(seedsFor(0.5, { sd: 1, comparisons: 3 }) > 64);
  assert.throws(() => power(0.1, 1, { sd: 1 }), /n: expected an integer ≥ 2/);
  assert.throws(() => seedsFor(0, { sd: 1 }), /non-zero effect/);
});

/** A finished grid cell with the given evaluation rewards before and after RL. */
function fakeCell(setting: string, seed: number, start: number, final: number): CellResult {
  return {
    cell: {
      id: `${setting}-${seed}`,
      setting,
      advantage: setting.split("/")[0] as "rollout",
      normalization: setting.split("/")[1] as "token_mean",
      merge: "prefix_merge",
      env: "split-arithmetic",
      seed,
    },
    config: {},
    metrics: [],
    summary: {
      id: `${setting}-${seed}`,
      setting,
      seed,
      steps: 1,
      final_reward: 0,
      final_val_reward: final,
      start_val_reward: start,
      wall_s: 100,
      finished_at: "",
    },
  };
}

Deno.test("grid plan: pooled SD from the pilot, the testbed's relative effect scaled by the pilot's gain", () => {
  assert.deepEqual(pooledSd(new Map([["a", [1, 3]], ["b", [2]]])), { sd: Math.SQRT2, df: 1 });
  const cell = fakeCell;
  const pilot = [
    cell("rollout/rollout_token_mean", 0, 0.4, 0.6),
    cell("rollout/rollout_token_mean", 1, 0.4, 0.5),
    cell("sample/seq_mean_token_mean", 0, 0.4, 0.5),
    cell("sample/seq_mean_token_mean", 1, 0.4, 0.4),
  ];
  const setting = (name: string, final: number, diff: number) => ({
    setting: name,
    final: { n: 10, mean: final, std: 0.1, ci95: 0.01 },
    diff: { n: 10, mean: diff, std: 0.1, ci95: 0.01 },
    verdict: "tie" as const,
    curve: [{ mean: 0.3, ci95: 0 }],
    samples_per_rollout: 1,
    split_share: 0,
    split_weight_share: 0,
  });
  const study = {
    quick: false,
    seeds: 10,
    headline: "h",
    wall_s: 1,
    regimes: [{
      regime: { ...HEADLINE, name: "split_env_like_x" },
      seeds: 10,
      settings: [
        setting("sample/seq_mean_token_mean", 0.45, -0.05),
        setting("rollout/rollout_token_mean", 0.5, 0),
      ],
    }],
  };
  const plan = planGrid(pilot, study, { settings: 2, budget_s: 3600 });
  // SD: both settings spread ±0.05 → pooled 0.0707; reference gain 0.15; testbed −0.05 / 0.2.
  assert.equal(plan.sd.toFixed(4), "0.0707");
  assert.equal(plan.pilot_gain.toFixed(3), "0.150");
  assert.equal(plan.comparisons[0].testbed_relative_effect, -0.25);
  assert.equal(plan.comparisons[0].predicted_effect.toFixed(4), "-0.0375");
  assert.equal(plan.seeds_per_setting, seedsFor(0.0375, { sd: plan.sd, comparisons: 3 }));
  assert.equal(plan.seeds_in_budget, 18);
  assert.equal(plan.predicted_wall_s, 2 * plan.seeds_per_setting * 100);
  assert.throws(() => planGrid(pilot, { ...study, regimes: [] }), /no regime/);
});

Deno.test("gridEffects: Welch differences to the reference, the grid's power, the evaluation's share", () => {
  const cell = (setting: string, seed: number, final: number) =>
    fakeCell(setting, seed, 0.4, final);
  const ref = "rollout/rollout_token_mean";
  const cells = [
    ...[0.6, 0.62, 0.58, 0.6].map((f, i) => cell(ref, i, f)),
    ...[0.4, 0.42, 0.38, 0.4].map((f, i) => cell("sample/seq_mean_token_mean", i, f)),
    ...[0.5, 0.7, 0.3, 0.6].map((f, i) => cell("rollout/token_mean", i, f)),
  ];
  const variances = new Map(cells.map((c) => [c.cell.id, 0.0001] as [string, number]));
  const g = gridEffects(cells, ref, variances);
  const by = (s: string) => g.settings.find((x) => x.setting === s)!;
  assert.equal(by(ref).verdict, "reference");
  assert.equal(by("sample/seq_mean_token_mean").diff!.mean.toFixed(3), "-0.200");
  assert.equal(by("sample/seq_mean_token_mean").verdict, "lower");
  assert.equal(by("rollout/token_mean").verdict, "tie");
  // Family-wise over the 2 comparisons: the same standard error, a wider quantile.
  const d = by("sample/seq_mean_token_mean").diff!;
  assert.ok(d.ci_family > d.ci95);
  assert.equal(by(ref).gain.mean.toFixed(3), "0.200");
  // Pooled SD over the three settings (df = 12 − 3), and the power of 4 seeds at α = 0.05/2.
  const { sd, df } = pooledSd(
    new Map([
      ["a", [0.6, 0.62, 0.58, 0.6]],
      ["b", [0.4, 0.42, 0.38, 0.4]],
      ["c", [0.5, 0.7, 0.3, 0.6]],
    ]),
  );
  assert.equal(g.sd, sd);
  assert.equal(g.sd_df, df);
  assert.equal(g.comparisons, 2);
  assert.equal(g.detectable, detectableEffect(4, { sd, comparisons: 2 }));
  assert.ok(Math.abs(g.evaluation_share! - 0.0001 / sd ** 2) < 1e-15);
  assert.match(g.lines.at(-1)!, /detects a difference of/);
  assert.equal(g.power_line, g.lines.at(-1));
  assert.throws(() => gridEffects(cells.slice(4), ref), /no cell of the reference/);
});

Deno.test("docs/experiments.md quotes the committed results (deno task ablation:report)", async () => {
  const text = await Deno.readTextFile(EXPERIMENTS_DOC);
  assert.match(text, /<!-- generated:mechanism_quick -->/);
  assert.equal(text, fillBlocks(text, await renderBlocks()), "run deno task ablation:report");
});
