/**
 * Issue #27 item 4: an independent recomputation (Python, standard library only, its own
 * Student-t quantile) of every number the committed ablation grid reports agrees with the
 * TypeScript code to 1e-9, and the numbers the README and docs state are the ones it computes.
 */
import assert from "node:assert/strict";
import { readGridEffects } from "../experiments/grid_effects.ts";
import { REPO_ROOT } from "../experiments/provenance.ts";
import { DEFAULT_RESULTS_DIR } from "../experiments/results.ts";

const REFERENCE = "rollout/rollout_token_mean";

async function recompute(score: "auto" | "train" = "auto"): Promise<Map<string, number>> {
  const out = await new Deno.Command("/usr/bin/python3", {
    args: [`${REPO_ROOT}/experiments/recompute_grid.py`, DEFAULT_RESULTS_DIR, "ablation", score],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return new Map(
    text.trim().split("\n").map((line) => {
      const at = line.lastIndexOf(": ");
      return [line.slice(0, at), Number(line.slice(at + 2))];
    }),
  );
}

async function agree(score: "auto" | "train"): Promise<Map<string, number>> {
  const py = await recompute(score);
  // Both sides score the grid on the same evaluation (held-out when every cell has it, or the
  // training questions' when asked: the second figure).
  const { cells, effects } = await readGridEffects(
    DEFAULT_RESULTS_DIR,
    "ablation",
    REFERENCE,
    score === "train" ? "train" : undefined,
  );
  assert.equal(py.get("heldout"), effects.score_kind === "heldout" ? 1 : 0);
  const close = (name: string, ts: number) => {
    const value = py.get(name);
    assert.ok(value !== undefined, `python printed ${name}`);
    assert.ok(Math.abs(value - ts) < 1e-9, `${name}: python ${value}, typescript ${ts}`);
  };
  assert.equal(py.get("cells"), cells.length);
  for (const s of effects.settings) {
    close(`final[${s.setting}]`, s.final.mean);
    close(`final_ci95[${s.setting}]`, s.final.ci95);
    close(`gain[${s.setting}]`, s.gain.mean);
    close(`gain_ci95[${s.setting}]`, s.gain.ci95);
    close(`gain_with_start_ci95[${s.setting}]`, s.gain_with_start_ci95!);
    if (s.diff) {
      close(`diff[${s.setting}]`, s.diff.mean);
      close(`diff_ci95[${s.setting}]`, s.diff.ci95);
      close(`diff_ci_family[${s.setting}]`, s.diff.ci_family);
    }
  }
  close("sd", effects.sd);
  close("detectable", effects.detectable);
  for (const c of effects.contrasts) {
    close(`contrast[${c.name}]`, c.mean);
    close(`contrast_ci95[${c.name}]`, c.ci95);
  }
  return py;
}

Deno.test("grid: the Python recomputation from the raw files equals the TypeScript effects", async () => {
  const py = await agree("auto");
  const train = await agree("train");
  // The numbers the README, docs/experiments.md and the notebook state: the held-out score ...
  assert.equal(py.get("heldout"), 1);
  const r3 = (from: Map<string, number>, name: string) => from.get(name)!.toFixed(3);
  const settings = [
    REFERENCE,
    "rollout/seq_mean_token_mean",
    "rollout/token_mean",
    "sample/seq_mean_token_mean",
  ];
  assert.deepEqual(settings.map((s) => r3(py, `final[${s}]`)), [
    "0.035",
    "0.041",
    "0.044",
    "0.029",
  ]);
  assert.equal(r3(py, "diff[sample/seq_mean_token_mean]"), "-0.006");
  assert.equal(r3(py, "diff_ci_family[sample/seq_mean_token_mean]"), "0.010");
  assert.equal(r3(py, "contrast[advantage_level]"), "0.013");
  assert.equal(r3(py, "contrast_ci95[advantage_level]"), "0.007");
  assert.equal(r3(py, "contrast[normalization_rtm_vs_smtm]"), "-0.007");
  assert.equal(r3(py, "contrast_ci95[normalization_rtm_vs_smtm]"), "0.006");
  assert.equal(r3(py, "detectable"), "0.012");
  assert.equal(r3(py, `gain_ci95[${REFERENCE}]`), "0.005");
  assert.equal(r3(py, `gain_with_start_ci95[${REFERENCE}]`), "0.010");
  // ... and the second figure, the training questions'.
  assert.equal(train.get("heldout"), 0);
  assert.deepEqual(
    settings.map((s) => r3(train, `final[${s}]`)),
    ["0.570", "0.614", "0.654", "0.422"],
  );
  assert.equal(r3(train, "diff[sample/seq_mean_token_mean]"), "-0.147");
  assert.equal(r3(train, "diff_ci_family[sample/seq_mean_token_mean]"), "0.160");
  assert.equal(r3(train, "contrast[advantage_level]"), "0.192");
  assert.equal(r3(train, "contrast_ci95[advantage_level]"), "0.126");
  assert.equal(r3(train, "contrast[normalization_rtm_vs_smtm]"), "-0.044");
  assert.equal(r3(train, "detectable"), "0.174");
  assert.equal(r3(train, `gain_ci95[${REFERENCE}]`), "0.071");
  assert.equal(r3(train, `gain_with_start_ci95[${REFERENCE}]`), "0.096");
});

Deno.test("grid: the Python t quantile matches the table", async () => {
  const out = await new Deno.Command("/usr/bin/python3", {
    args: [
      "-c",
      "import sys; sys.path.insert(0, sys.argv[1]); from recompute_grid import t_quantile; " +
      "print(' '.join(f'{t_quantile(p, d):.4f}' for p, d in [(0.975, 2), (0.975, 11), (0.975, 44), (0.8, 22)]))",
      `${REPO_ROOT}/experiments`,
    ],
    stdout: "piped",
  }).output();
  // t(0.975, 2) = 4.3027, t(0.975, 11) = 2.2010, t(0.975, 44) = 2.0154, t(0.8, 22) = 0.8583
  assert.equal(new TextDecoder().decode(out.stdout).trim(), "4.3027 2.2010 2.0154 0.8583");
});
