/**
 * `deno task ablation:mechanism [--quick]`: the policy-gradient testbed (`testbed.ts`) for the
 * four ablation settings, hundreds of seeds each, over regimes of split rate, correlation
 * between splitting and reward, credit model and optimizer.
 *
 * Every seed runs all four settings with common random numbers, so besides each setting's
 * final success (mean ± 95% CI over seeds) the study reports the paired difference of each
 * setting to `rollout/rollout_token_mean` and calls it a win, a loss or a tie (CI of the
 * difference excludes 0 or not).
 *
 * `--quick` runs the headline regime only (coding-like: 1.4 extra samples per rollout — the
 * paper's 2.41 samples per rollout — failing rollouts split more and are longer, all-token
 * credit, Adam); the full run sweeps every regime of {@link regimeGrid}. Output ends with one
 * line per setting of the headline regime, `setting <advantage>/<normalization>: success=<mean>
 * ± <ci95half>`, then `mechanism_seeds: N`. Results and their provenance go to
 * `experiments/results/mechanism_quick/` or `experiments/results/mechanism/`.
 *
 * Flags: `--quick`, `--seeds <n>` (default 500), `--results
 * <dir>`, `--no-write`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { ABLATION_SETTINGS, type Setting, settingLabel } from "./grid.ts";
import { codeFingerprint, type CodeSpecInput, writeProvenance } from "./provenance.ts";
import { MECHANISM_CANARY, recordCanary } from "./canary.ts";
import { type MeanCi, meanCi } from "../lib/util/stats.ts";
import {
  DEFAULT_STRATEGIES,
  runTestbed,
  type TestbedEnvInput,
  type TestbedRunInput,
} from "./testbed.ts";

/** What produced the mechanism results (see `provenance.ts` for the rule). */
export const MECHANISM_CODE: CodeSpecInput = { entries: ["experiments/mechanism.ts"] };

/** Where results go unless told otherwise (`experiments/results`). */
const DEFAULT_RESULTS_DIR = decodeURIComponent(new URL("./results", import.meta.url).pathname);

/** The reference setting every other one is paired against. */
export const REFERENCE_SETTING = "rollout/rollout_token_mean";

/** One regime of the study: an environment and a training recipe. */
export interface Regime {
  name: string;
  env: TestbedEnvInput;
  run: TestbedRunInput;
}

/** The learning rate of each optimizer (Adam on logits; SGD on Σ-weight-1 gradients). */
export const LEARNING_RATES = { adam: 0.05, sgd: 0.3 } as const;

/** The headline regime: coding-like splitting, all-token credit, Adam. */
export const HEADLINE: Regime = regime(1.4, -0.8, "all_tokens", "adam");

/**
 * The regime that resembles the loop grid's environment (`split_env.ts`): a rollout that uses
 * the tool succeeds and splits, a guess fails short and whole — splitting correlates with
 * success, failures are shorter.
 */
export const GRID_MATCHED: Regime = regime(0.5, 1, "all_tokens", "adam", 0.5, "split_env_like");

function regime(
  split_rate: number,
  split_reward_corr: number,
  credit: "all_tokens" | "first_token",
  optimizer: "adam" | "sgd",
  fail_length = 1.5,
  prefix = "",
): Regime {
  return {
    name: `${prefix ? `${prefix}_` : ""}split${split_rate}_corr${split_reward_corr}_${credit}_` +
      optimizer,
    env: {
      strategies: DEFAULT_STRATEGIES,
      split_rate,
      split_reward_corr,
      fail_length,
      sample_tokens: [8, 40],
    },
    run: {
      steps: 30,
      groups_per_step: 4,
      group_size: 8,
      lr: LEARNING_RATES[optimizer],
      credit,
      optimizer,
    },
  };
}

/**
 * The regimes of the full study: with all-token credit, split rate {0.25, 1.4, 3} extra
 * samples per rollout × correlation between splitting and reward {−0.8, 0, +0.8}; with
 * first-token credit, split rate 1.4 × the three correlations; Adam and failing rollouts 1.5×
 * longer throughout; plus {@link GRID_MATCHED} and the headline regime with SGD (the
 * optimizer's sensitivity).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { HEADLINE, regimeGrid } from "./mechanism.ts";
 * assert.equal(regimeGrid().length, 14);
 * assert.ok(regimeGrid().some((r) => r.name === HEADLINE.name));
 * ```
 */
export function regimeGrid(): Regime[] {
  // The grid-matched regime first: the power plan needs it, and a partial sweep has it.
  const out: Regime[] = [GRID_MATCHED];
  for (const corr of [-0.8, 0, 0.8]) {
    for (const rate of [0.25, 1.4, 3]) out.push(regime(rate, corr, "all_tokens", "adam"));
  }
  for (const corr of [-0.8, 0, 0.8]) out.push(regime(1.4, corr, "first_token", "adam"));
  out.push(regime(1.4, -0.8, "all_tokens", "sgd"));
  return out;
}

/** One setting's outcome in one regime. */
export interface SettingOutcome {
  setting: string;
  /** Final exact expected success over seeds. */
  final: MeanCi;
  /** Paired difference final − reference's final, over seeds (0 for the reference). */
  diff: MeanCi;
  /** `win`/`loss`: the CI of `diff` excludes 0; `tie` otherwise; `reference`. */
  verdict: "win" | "loss" | "tie" | "reference";
  /** Mean and CI half-width over seeds of the expected success after each step (0 = start). */
  curve: { mean: number; ci95: number }[];
  samples_per_rollout: number;
  split_share: number;
  split_weight_share: number;
}

/** One regime's results. */
export interface RegimeResult {
  regime: Regime;
  seeds: number;
  settings: SettingOutcome[];
}

/**
 * Runs every setting of `settings` for `seeds` seeds in one regime (seed s of every setting
 * shares its random numbers).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { HEADLINE, runRegime } from "./mechanism.ts";
 * const r = runRegime({ ...HEADLINE, run: { ...HEADLINE.run, steps: 3 } }, 4);
 * assert.equal(r.settings.length, 4);
 * assert.equal(r.settings[0].curve.length, 4);
 * ```
 */
export function runRegime(
  r: Regime,
  seeds: number,
  settings: readonly Setting[] = ABLATION_SETTINGS,
  onSeed?: (done: number) => void,
): RegimeResult {
  const traces = settings.map(() => [] as ReturnType<typeof runTestbed>[]);
  for (let seed = 0; seed < seeds; seed++) {
    settings.forEach((s, i) => traces[i].push(runTestbed(r.env, r.run, s, seed)));
    onSeed?.(seed + 1);
  }
  const labels = settings.map(settingLabel);
  const ref = labels.indexOf(REFERENCE_SETTING);
  const finals = traces.map((ts) => ts.map((t) => t.success[t.success.length - 1]));
  const outcomes = settings.map((_, i): SettingOutcome => {
    const ts = traces[i];
    const steps = ts[0].success.length;
    const curve = Array.from({ length: steps }, (_, k) => {
      const c = meanCi(ts.map((t) => t.success[k]));
      return { mean: c.mean, ci95: c.ci95 };
    });
    const diff = ref < 0 ? meanCi([]) : meanCi(finals[i].map((f, s) => f - finals[ref][s]));
    const verdict = i === ref
      ? "reference"
      : diff.mean - diff.ci95 > 0
      ? "win"
      : diff.mean + diff.ci95 < 0
      ? "loss"
      : "tie";
    const avg = (f: (t: (typeof ts)[number]) => number) =>
      ts.reduce((a, t) => a + f(t), 0) / ts.length;
    return {
      setting: labels[i],
      final: meanCi(finals[i]),
      diff: i === ref ? { n: seeds, mean: 0, std: 0, ci95: 0 } : diff,
      verdict,
      curve,
      samples_per_rollout: avg((t) => t.samples_per_rollout),
      split_share: avg((t) => t.split_share),
      split_weight_share: avg((t) => t.split_weight_share),
    };
  });
  return { regime: r, seeds, settings: outcomes };
}

/**
 * The figures-contract line of one setting.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { settingLine } from "./mechanism.ts";
 * assert.equal(settingLine("rollout/token_mean", 0.4812, 0.0021),
 *   "setting rollout/token_mean: success=0.481 ± 0.002");
 * ```
 */
export function settingLine(setting: string, mean: number, ci95: number): string {
  return `setting ${setting}: success=${mean.toFixed(3)} ± ${ci95.toFixed(3)}`;
}

/** What the study writes to `results.json`. */
export interface MechanismStudy {
  quick: boolean;
  seeds: number;
  headline: string;
  regimes: RegimeResult[];
  wall_s: number;
  /** False while a sweep is still running (results are saved after each regime). */
  complete?: boolean;
}

/** Where a study's results go. */
export function studyDir(resultsDir: string, quick: boolean): string {
  return `${resultsDir}/${quick ? "mechanism_quick" : "mechanism"}`;
}

/**
 * Runs the study: the headline regime (`quick`) or every regime.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { runStudy } from "./mechanism.ts";
 * const study = runStudy({ quick: true, seeds: 3, steps: 2 });
 * assert.equal(study.regimes.length, 1);
 * ```
 */
export function runStudy(options: {
  quick: boolean;
  seeds: number;
  steps?: number;
  log?: (line: string) => void;
  /** Called after each regime with the study so far (to save a partial sweep). */
  onRegime?: (partial: MechanismStudy) => void;
}): MechanismStudy {
  const t0 = performance.now();
  const regimes = options.quick ? [HEADLINE] : regimeGrid();
  const out: RegimeResult[] = [];
  for (const [i, r] of regimes.entries()) {
    const run = options.steps ? { ...r.run, steps: options.steps } : r.run;
    const result = runRegime({ ...r, run }, options.seeds);
    out.push(result);
    options.onRegime?.({
      quick: options.quick,
      seeds: options.seeds,
      headline: HEADLINE.name,
      regimes: [...out],
      wall_s: (performance.now() - t0) / 1000,
      complete: out.length === regimes.length,
    });
    options.log?.(
      `[mechanism] regime ${i + 1}/${regimes.length} ${r.name}: ` +
        result.settings.map((s) => `${s.setting} ${s.final.mean.toFixed(3)} (${s.verdict})`)
          .join(", ") +
        ` — ${((performance.now() - t0) / 1000).toFixed(0)}s`,
    );
  }
  return {
    quick: options.quick,
    seeds: options.seeds,
    headline: HEADLINE.name,
    regimes: out,
    wall_s: (performance.now() - t0) / 1000,
    complete: true,
  };
}

/** Reads a study's `results.json`. */
export async function readStudy(dir: string): Promise<MechanismStudy> {
  return JSON.parse(await Deno.readTextFile(`${dir}/results.json`)) as MechanismStudy;
}

async function main(): Promise<void> {
  const { values } = parseArgs({
    args: Deno.args,
    options: {
      quick: { type: "boolean", default: false },
      seeds: { type: "string", default: "500" },
      results: { type: "string", default: DEFAULT_RESULTS_DIR },
      "no-write": { type: "boolean", default: false },
    },
  });
  const seeds = Number(values.seeds);
  if (!Number.isInteger(seeds) || seeds < 2) throw new Error("--seeds: expected an integer ≥ 2");
  // The code that runs is the code on disk now; an edit during the run is caught on writing.
  const code = await codeFingerprint(MECHANISM_CODE);
  const dir = studyDir(values.results, values.quick);
  const save = (study: MechanismStudy) => {
    if (values["no-write"]) return;
    Deno.mkdirSync(dir, { recursive: true });
    Deno.writeTextFileSync(`${dir}/results.json`, JSON.stringify(study) + "\n");
  };
  // Provenance now (a partial sweep, saved after each regime, still names its code) and
  // again at the end, which also checks that the code did not change meanwhile.
  const provenance = () =>
    writeProvenance(dir, {
      command: `deno task ablation:mechanism${values.quick ? " --quick" : ""} --seeds ${seeds}`,
      config: {
        quick: values.quick,
        seeds,
        regimes: values.quick ? [HEADLINE] : regimeGrid(),
        settings: ABLATION_SETTINGS,
      },
      code,
    });
  if (!values["no-write"]) {
    await Deno.remove(`${dir}/results.json`).catch(() => undefined);
    await provenance();
  }
  const study = runStudy({
    quick: values.quick,
    seeds,
    log: (l) => console.log(l),
    onRegime: save,
  });
  if (!values["no-write"]) {
    save(study);
    await provenance();
    await recordCanary(dir, MECHANISM_CANARY);
    console.log(`[mechanism] results, provenance and canary in ${dir}`);
  }
  console.log(`mechanism_wall_s: ${study.wall_s.toFixed(1)}`);
  const headline = study.regimes.find((r) => r.regime.name === study.headline)!;
  console.log(`headline regime: ${headline.regime.name}`);
  for (const s of headline.settings) {
    console.log(settingLine(s.setting, s.final.mean, s.final.ci95));
  }
  console.log(`mechanism_seeds: ${seeds}`);
}

if (import.meta.main) await main();
