/** A small experiment grid on disk for the runs page's tests (two settings, two seeds). */

function steps(name: string, seed: number, slope: number): string {
  return Array.from({ length: 6 }, (_, step) =>
    JSON.stringify({
      step,
      reward_mean: 0.2 + slope * step + 0.02 * seed,
      reward_std: 0.4,
      rollouts: 16,
      val_reward: step % 2 ? 0.3 + slope * step : undefined,
      entropy: 1 - 0.05 * step,
      alignment_corr: 0.999998 - 1e-6 * step,
      name,
    }) + "\n").join("");
}

/** Writes `ablation/{seq-s0,seq-s1,tok-s0}` (metrics, cell.json, done.json) to a temp dir. */
export async function writeRunsDir(): Promise<string> {
  const root = await Deno.makeTempDir({ prefix: "reins_ui_runs_" });
  const cells = [
    ["seq-s0", "sequence_mean", 0, 0.05],
    ["seq-s1", "sequence_mean", 1, 0.05],
    ["tok-s0", "token_mean", 0, 0.1],
  ] as const;
  for (const [name, normalization, seed, slope] of cells) {
    const dir = `${root}/ablation/${name}`;
    await Deno.mkdir(dir, { recursive: true });
    await Deno.writeTextFile(`${dir}/metrics.jsonl`, steps(name, seed, slope));
    await Deno.writeTextFile(
      `${dir}/cell.json`,
      JSON.stringify({ cell: { id: name }, config: { normalization, seed, lr: 1e-5 } }),
    );
    await Deno.writeTextFile(
      `${dir}/done.json`,
      JSON.stringify({ id: name, final_reward: 0.2 + 5 * slope, seed }),
    );
  }
  return root;
}

/** Normalizations of the 24-run grid (4 settings × 6 seeds). */
export const GRID_SETTINGS = [
  "token_mean",
  "seq_mean_token_mean",
  "seq_mean_token_sum",
  "rollout_token_mean",
] as const;

/** The long name of a grid cell, as an experiment grid writes them. */
export function gridRunName(normalization: string, seed: number): string {
  return `ablation-2026-12-01-normalization-${normalization}-advantage-rollout-lr3e-4-s${seed}`;
}

/**
 * Writes `grid/<24 cells>` (4 normalizations × 6 seeds, long names): ten steps each with
 * ~a dozen metrics (a tiny loss, ms timings, a null alignment on odd steps, a held-out
 * evaluation every fifth step), `cell.json` configs that also differ in paths and names.
 */
export async function writeGridDir(root?: string): Promise<string> {
  const dir = root ?? await Deno.makeTempDir({ prefix: "reins_ui_grid_" });
  for (const [k, normalization] of GRID_SETTINGS.entries()) {
    for (let seed = 0; seed < 6; seed++) {
      const name = gridRunName(normalization, seed);
      const cell = `${dir}/grid/${name}`;
      await Deno.mkdir(cell, { recursive: true });
      const lines = Array.from({ length: 10 }, (_, step) =>
        JSON.stringify({
          step,
          time: 1764547200000 + 60_000 * step,
          reward_mean: 0.2 + 0.04 * (k + 1) * step / 3 + 0.01 * ((seed * 7 + step) % 5),
          reward_std: 0.4,
          rollouts: 24,
          entropy: 1.2 - 0.05 * step - 0.01 * k,
          loss: -2.3e-5 * (1 + seed),
          alignment_corr: step % 2 ? null : 0.999999999998,
          grad_norm: 0.5 + 0.1 * k,
          samples_per_rollout: 2.4 - 0.1 * k,
          timings_ms: { rollout: 41_000 + 100 * step, train: 12_000, step: 54_000 + 100 * step },
          filtered: { zero_variance: seed % 3, stale: 0 },
          ...(step % 5 === 4 ? { "eval/heldout_reward_mean": 0.1 + 0.05 * k + 0.02 * step } : {}),
        }) + "\n").join("");
      await Deno.writeTextFile(`${cell}/metrics.jsonl`, lines);
      await Deno.writeTextFile(
        `${cell}/cell.json`,
        JSON.stringify({
          cell: { id: name },
          config: {
            name,
            out_dir: `experiments/results/grid/${name}`,
            harness: { data_dir: `/tmp/reins-data-${seed}`, name: "toy" },
            normalization: { mode: normalization },
            advantage: { level: "rollout" },
            optimizer: { lr: 3e-4 },
            seed,
          },
        }),
      );
      await Deno.writeTextFile(
        `${cell}/done.json`,
        JSON.stringify({ id: name, final_reward: 0.3 + 0.05 * k, seed }),
      );
    }
  }
  return dir;
}
