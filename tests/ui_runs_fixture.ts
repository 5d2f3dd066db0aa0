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
