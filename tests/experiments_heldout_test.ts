/**
 * Issue #27 item 4: the ablation grid is scored on held-out questions. The held-out questions
 * are disjoint from the training questions and the same for every cell; a grid with the
 * held-out evaluation is scored on it (with the training questions' score as the second
 * figure), and a grid without it (the committed one) falls back to the training questions'
 * score and says so — in `gridEffects`, the report and the independent Python recomputation.
 */
import assert from "node:assert/strict";
import { ablationGrid } from "../experiments/ablation.ts";
import { LOOP_CELL_CANARY } from "../experiments/canary.ts";
import { readGridEffects } from "../experiments/grid_effects.ts";
import { CELL_SETTINGS, cellTasks, heldoutTasks, splitTasks } from "../experiments/loop_cell.ts";
import { REPO_ROOT } from "../experiments/provenance.ts";
import { renderGrid } from "../experiments/report.ts";
import { evalScoreKind } from "../experiments/results.ts";
import { type CellRunner, runGrid, silentGridProgress } from "../experiments/runner.ts";
import { splitsOnScript } from "../experiments/split_env.ts";
import { summarise } from "../experiments/stats.ts";
import { mulberry32 } from "../lib/util/random.ts";

Deno.test("held-out questions: never trained on, the same for every cell, balanced", () => {
  const heldout = heldoutTasks(CELL_SETTINGS);
  const train = cellTasks(CELL_SETTINGS).train;
  assert.equal(CELL_SETTINGS.heldout_tasks, 200);
  assert.equal(heldout.length, 200);
  const trainIds = new Set(train.map((t) => t.id));
  assert.ok(heldout.every((t) => !trainIds.has(t.id)), "disjoint from the training questions");
  assert.ok(heldout.every(splitsOnScript), "drawn like the training questions");
  // Fixed: a second call (another cell, another process) gets the same questions in order.
  assert.deepEqual(heldoutTasks({ ...CELL_SETTINGS }).map((t) => t.id), heldout.map((t) => t.id));
  // 100 questions × 2 rollouts: rollout i asks question i mod 100.
  const ids = heldout.map((t) => t.id);
  assert.equal(new Set(ids).size, 100);
  assert.deepEqual(ids.slice(100), ids.slice(0, 100));

  // Property: for any training size and rollout count, disjoint and equally weighted.
  const rand = mulberry32(27);
  for (let k = 0; k < 50; k++) {
    const s = {
      train_tasks: 1 + Math.floor(rand() * 12),
      val_tasks: 4,
      heldout_tasks: 1 + Math.floor(rand() * 400),
    };
    const h = heldoutTasks(s);
    const t = new Set(cellTasks(s).train.map((x) => x.id));
    assert.equal(h.length, s.heldout_tasks);
    assert.ok(h.every((x) => !t.has(x.id)), JSON.stringify(s));
    const counts = new Map<string, number>();
    for (const x of h) counts.set(x.id, (counts.get(x.id) ?? 0) + 1);
    assert.equal(new Set(counts.values()).size, 1, `balanced: ${JSON.stringify(s)}`);
  }

  // Training on every question but the validation ones: the held-out pool is those.
  const all = { train_tasks: 0, val_tasks: 24, heldout_tasks: 48 };
  const val = new Set(splitTasks(24).val.map((t) => t.id));
  assert.ok(heldoutTasks(all).every((t) => val.has(t.id)));
  assert.deepEqual(heldoutTasks({ ...CELL_SETTINGS, heldout_tasks: 0 }), []);
  assert.throws(
    () => heldoutTasks({ train_tasks: 0, val_tasks: 0, heldout_tasks: 5 }),
    /heldout_tasks: 5 rollouts asked for, but no question is held out/,
  );
});

Deno.test("held-out evaluation: new grids ask for it, the canary stays without it", () => {
  assert.equal(ablationGrid(false, 3).base?.heldout_tasks, 200);
  assert.equal(ablationGrid(true).base?.heldout_tasks, 200);
  assert.equal(LOOP_CELL_CANARY.kind, "loop_cell");
  if (LOOP_CELL_CANARY.kind === "loop_cell") assert.equal(LOOP_CELL_CANARY.base.heldout_tasks, 0);
});

const SETTINGS = [
  { advantage: "rollout" as const, normalization: "rollout_token_mean" as const },
  { advantage: "rollout" as const, normalization: "seq_mean_token_mean" as const },
  { advantage: "rollout" as const, normalization: "token_mean" as const },
  { advantage: "sample" as const, normalization: "seq_mean_token_mean" as const },
];

/** 0/1-ish rewards with a given success rate, deterministic per seed. */
function rewards(seed: number, rate: number, n = 40): number[] {
  const rand = mulberry32(seed);
  return Array.from({ length: n }, () => (rand() < rate ? 1 : rand() < 0.3 ? 0.25 : 0));
}
const mean = (xs: number[]) => xs.reduce((a, b) => a + b, 0) / xs.length;

/**
 * A fake loop-cell runner writing what the real one writes: eval.json (both evaluations, rollout
 * by rollout), the shared start files, and the summary scores. Held-out scores sit well below
 * the training questions' so that a test can tell which one a figure uses.
 */
function fakeCells(heldout: boolean): CellRunner {
  return async (cell, { dir }) => {
    const gridDir = dir.slice(0, dir.lastIndexOf("/"));
    const setting = SETTINGS.findIndex((s) => `${s.advantage}/${s.normalization}` === cell.setting);
    const start = { label: "start", rewards: rewards(1, 0.4) };
    const final = { label: "s1", rewards: rewards(100 + 10 * setting + cell.seed, 0.7) };
    const hStart = { label: "heldout-start", rewards: rewards(2, 0.1) };
    const hFinal = {
      label: "heldout-s1",
      rewards: rewards(200 + 10 * setting + cell.seed, 0.15 + 0.03 * setting),
    };
    await Deno.writeTextFile(`${gridDir}/start_eval.json`, JSON.stringify(start));
    if (heldout) {
      await Deno.writeTextFile(`${gridDir}/start_heldout_eval.json`, JSON.stringify(hStart));
    }
    await Deno.mkdir(dir, { recursive: true });
    await Deno.writeTextFile(
      `${dir}/eval.json`,
      JSON.stringify({
        start,
        final,
        heldout_start: heldout ? hStart : null,
        heldout_final: heldout ? hFinal : null,
      }),
    );
    return {
      config: {
        tasks: "2 train tasks: evaluation on the training questions" +
          (heldout ? "; held-out evaluation: heldoutTasks(heldout_tasks 40)" : ""),
        settings: { heldout_tasks: heldout ? 40 : 0 },
      },
      metrics: [{ step: 0, reward_mean: 0.5 }],
      final_val_reward: mean(final.rewards),
      start_val_reward: mean(start.rewards),
      ...(heldout
        ? { final_heldout_reward: mean(hFinal.rewards), start_heldout_reward: mean(hStart.rewards) }
        : {}),
    };
  };
}

async function fakeGrid(resultsDir: string, heldout: boolean) {
  await runGrid(
    { name: "ablation", settings: SETTINGS, seeds: [0, 1, 2], env: ["split-arithmetic"] },
    fakeCells(heldout),
    { resultsDir, parquet: false, progress: silentGridProgress() },
  );
}

async function python(resultsDir: string): Promise<Map<string, number>> {
  const out = await new Deno.Command("/usr/bin/python3", {
    args: [`${REPO_ROOT}/experiments/recompute_grid.py`, resultsDir, "ablation"],
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.ok(out.success, new TextDecoder().decode(out.stderr));
  return new Map(
    new TextDecoder().decode(out.stdout).trim().split("\n").map((line) => {
      const at = line.lastIndexOf(": ");
      return [line.slice(0, at), Number(line.slice(at + 2))];
    }),
  );
}

const REFERENCE = "rollout/rollout_token_mean";

Deno.test("a grid with the held-out evaluation is scored on it; the training questions' is the second figure", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_heldout_" });
  try {
    await fakeGrid(dir, true);
    const { cells, effects } = await readGridEffects(dir, "ablation", REFERENCE);
    assert.equal(cells.length, 12);
    assert.equal(evalScoreKind(cells), "heldout");
    assert.equal(effects.score_kind, "heldout");
    const done = cells[0].summary;
    assert.equal(typeof done.final_heldout_reward, "number");
    assert.equal(typeof done.start_heldout_reward, "number");
    // Every figure is the held-out one: finals, gains against the held-out start, the start's
    // noise from start_heldout_eval.json, the evaluation variance from heldout_final.
    const heldoutFinals = (s: string) =>
      cells.filter((c) => c.cell.setting === s).map((c) => c.summary.final_heldout_reward!);
    const ref = effects.settings.find((s) => s.setting === REFERENCE)!;
    assert.equal(ref.final.mean, mean(heldoutFinals(REFERENCE)));
    assert.ok(
      Math.abs(ref.gain.mean - (mean(heldoutFinals(REFERENCE)) - mean(rewards(2, 0.1)))) < 1e-12,
    );
    const py = await python(dir);
    assert.equal(py.get("heldout"), 1);
    for (const s of effects.settings) {
      assert.ok(Math.abs(py.get(`final[${s.setting}]`)! - s.final.mean) < 1e-9, s.setting);
      assert.ok(
        Math.abs(py.get(`gain_with_start_ci95[${s.setting}]`)! - s.gain_with_start_ci95!) < 1e-9,
      );
    }
    assert.ok(effects.evaluation_share !== null);
    // The second figure: the training questions' finals.
    const second = effects.second!.find((s) => s.setting === REFERENCE)!;
    assert.equal(
      second.final.mean,
      mean(
        cells.filter((c) => c.cell.setting === REFERENCE).map((c) => c.summary.final_val_reward!),
      ),
    );
    assert.ok(second.final.mean > ref.final.mean + 0.2, "the fake's two scores differ");
    assert.match(effects.lines.at(-2)!, /^second figure, evaluation reward on the training/);
    assert.equal(summarise(cells)[0].score_kind, "heldout_reward");
    const block = await renderGrid(dir);
    assert.match(block, /\| final held-out evaluation reward \(95% CI\) \|/);
    assert.match(block, /every figure above is the held-out score: 40 rollouts per cell/);
    assert.match(block, new RegExp(`Second figure.*${REFERENCE} ${second.final.mean.toFixed(3)}`));
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("a grid without the held-out evaluation falls back to the training questions' score, saying so", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_heldout_" });
  try {
    await fakeGrid(dir, false);
    const { cells, effects } = await readGridEffects(dir, "ablation", REFERENCE);
    assert.equal(effects.score_kind, "train");
    assert.equal(effects.second, null);
    assert.equal(cells[0].summary.final_heldout_reward, undefined, "done.json has no held-out key");
    const ref = effects.settings.find((s) => s.setting === REFERENCE)!;
    assert.equal(
      ref.final.mean,
      mean(
        cells.filter((c) => c.cell.setting === REFERENCE).map((c) => c.summary.final_val_reward!),
      ),
    );
    const py = await python(dir);
    assert.equal(py.get("heldout"), 0);
    assert.ok(Math.abs(py.get(`final[${REFERENCE}]`)! - ref.final.mean) < 1e-9);
    assert.equal(summarise(cells)[0].score_kind, "val_reward");
    const block = await renderGrid(dir);
    assert.match(block, /\| final evaluation reward \(95% CI\) \|/);
    assert.match(
      block,
      /Evaluation: 200 fresh rollouts of the two training questions \(not held-out/,
    );

    // A mixed grid (one cell without the held-out score) is scored on what every cell has.
    await fakeGrid(`${dir}/mixed`, true);
    const mixedCells = (await readGridEffects(`${dir}/mixed`, "ablation", REFERENCE)).cells;
    delete mixedCells[0].summary.final_heldout_reward;
    assert.equal(evalScoreKind(mixedCells), "train");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test({
  name: "the loop cell records both evaluations before and after RL (real stack, a tiny cell)",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const { startLoopCells } = await import("../experiments/loop_cell.ts");
    const work = await Deno.makeTempDir({ prefix: "reins_heldout_cell_" });
    try {
      await using cells = await startLoopCells({
        workDir: `${work}/stack`,
        cacheDir: `${work}/cache`,
        threads: 1,
        concurrency: 4,
      });
      const base = {
        steps: 1,
        sft_steps: 5,
        d_model: 16,
        n_layers: 1,
        group_size: 2,
        groups_per_step: 1,
        val_tasks: 2,
        heldout_tasks: 3,
        ppo_epochs: 1,
        warmup_steps: 1,
        max_tokens: 24,
      };
      const grid = { name: "tiny", base } as unknown as Parameters<typeof cells.runner>[1]["grid"];
      const cell = {
        id: "rollout-rollout_token_mean-s0",
        setting: "rollout/rollout_token_mean",
        advantage: "rollout" as const,
        normalization: "rollout_token_mean" as const,
        merge: "prefix_merge" as const,
        seed: 0,
        env: "split-arithmetic",
      };
      const dir = `${work}/results/tiny/${cell.id}`;
      await Deno.mkdir(`${work}/results/tiny`, { recursive: true }); // as runGrid does
      const out = await cells.runner(cell, { grid, dir });
      const evals = JSON.parse(await Deno.readTextFile(`${dir}/eval.json`));
      const heldout = heldoutTasks({ train_tasks: 2, val_tasks: 2, heldout_tasks: 3 });
      const train = cellTasks({ train_tasks: 2, val_tasks: 2 });
      assert.deepEqual(evals.heldout_start.tasks, heldout.map((t) => t.id));
      assert.deepEqual(evals.heldout_final.tasks, heldout.map((t) => t.id));
      assert.deepEqual(evals.final.tasks, train.val.map((t) => t.id));
      // Common random numbers: the same seeds before and after, for both evaluations.
      assert.deepEqual(evals.heldout_final.seeds, evals.heldout_start.seeds);
      assert.equal(out.final_heldout_reward, evals.heldout_final.reward_mean);
      assert.equal(out.start_heldout_reward, evals.heldout_start.reward_mean);
      assert.equal(out.final_val_reward, evals.final.reward_mean);
      // The held-out start is shared by the grid, like the training questions' one.
      const shared = JSON.parse(
        await Deno.readTextFile(`${work}/results/tiny/start_heldout_eval.json`),
      );
      assert.deepEqual(shared.rewards, evals.heldout_start.rewards);
      assert.match(
        String(out.config.tasks),
        /held-out evaluation: heldoutTasks\(heldout_tasks 3\)/,
      );
    } finally {
      await Deno.remove(work, { recursive: true });
    }
  },
});
