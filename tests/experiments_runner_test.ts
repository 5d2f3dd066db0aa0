/**
 * The experiment runner with a fake cell runner: grid expansion, the results layout, resume
 * without rerunning finished cells, failures, and the summary statistics the ablation prints.
 */
import assert from "node:assert/strict";
import pl from "nodejs-polars";
import { ablationGrid, cellLine } from "../experiments/ablation.ts";
import { gpuCellConfig, gpuTargetFromEnv, startRemoteStack } from "../experiments/gpu_cell.ts";
import { startLocalWorker } from "../lib/trainer/mod.ts";
import { cellTasks, closenessReward, splitTasks } from "../experiments/loop_cell.ts";
import { splitSftRows, splitsOnScript } from "../experiments/split_env.ts";
import { loadCharTokenizer } from "../lib/tokens/mod.ts";
import { parseOrThrow } from "../lib/schema.ts";
import { LoopConfigSchema } from "../lib/loop/schema.ts";
import { progressLine } from "../experiments/progress.ts";
import {
  type Cell,
  type CellRunner,
  expandGrid,
  readGridResults,
  runGrid,
  silentGridProgress,
} from "../experiments/runner.ts";
import { orderingVerdict, summarise } from "../experiments/stats.ts";
import { meanCi } from "../lib/util/stats.ts";

/** A fake cell: reward rises by a per-setting slope, seed adds a fixed offset. */
function fakeRunner(slopes: Record<string, number>, calls: string[]): CellRunner {
  return (cell: Cell) => {
    calls.push(cell.id);
    const slope = slopes[cell.setting] ?? 0;
    const metrics = Array.from({ length: 4 }, (_, step) => ({
      step,
      reward_mean: slope * (step + 1) + cell.seed * 0.01,
      entropy: 1 - 0.1 * step,
      break_reasons: { compaction: step },
    }));
    return Promise.resolve({
      config: { seed: cell.seed, advantage: cell.advantage },
      metrics,
      final_val_reward: metrics[3].reward_mean,
      start_val_reward: cell.seed * 0.01,
    });
  };
}

Deno.test("grid: expands settings × merge × seeds × env with stable, unique ids", () => {
  const cells = expandGrid({
    name: "g",
    advantage: ["sample", "rollout"],
    normalization: ["token_mean", "rollout_token_mean"],
    merge: ["prefix_merge", "per_call"],
    seeds: [0, 1, 2],
    env: ["a", "b"],
  });
  assert.equal(cells.length, 2 * 2 * 2 * 3 * 2);
  assert.equal(new Set(cells.map((c) => c.id)).size, cells.length);
  assert.equal(cells[0].id, "sample-token_mean-prefix_merge-a-s0");
  assert.deepEqual(cells.slice(0, 3).map((c) => c.seed), [0, 1, 2]);
  assert.equal(cells[0].setting, "sample/token_mean");

  const ablation = expandGrid(ablationGrid(true));
  assert.equal(ablation.length, 4 * 2);
  assert.equal(expandGrid(ablationGrid(false, 7)).length, 4 * 7);
  // The sized grid runs seed by seed: stopped after any round, its settings have equal seeds.
  const sized = expandGrid(ablationGrid(false, 3));
  assert.deepEqual(sized.map((c) => c.seed), [0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2]);
  assert.equal(new Set(sized.slice(0, 4).map((c) => c.setting)).size, 4);
  // The pilot runs the primary comparison's two settings first.
  assert.deepEqual([...new Set(ablation.map((c) => c.setting))], [
    "rollout/rollout_token_mean",
    "sample/seq_mean_token_mean",
    "rollout/seq_mean_token_mean",
    "rollout/token_mean",
  ]);
});

Deno.test("grid: bad input names the field", () => {
  assert.throws(
    () => expandGrid({ name: "g", normalization: ["token_avg" as "token_mean"] }),
    /grid\.normalization/,
  );
  assert.throws(() => expandGrid({ name: "a b" }), /grid\.name/);
  assert.throws(() => expandGrid({ name: "g", seeds: [] }), /grid\.seeds/);
  assert.throws(
    () =>
      expandGrid({
        name: "g",
        settings: [
          { advantage: "rollout", normalization: "token_mean" },
          { advantage: "rollout", normalization: "token_mean" },
        ],
      }),
    /appears twice/,
  );
});

Deno.test("runner: writes the results layout, then resumes without rerunning done cells", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_experiments_" });
  try {
    const grid = {
      name: "resume",
      advantage: ["sample", "rollout"] as ("sample" | "rollout")[],
      normalization: ["rollout_token_mean" as const],
      seeds: [0, 1],
      env: ["fake"],
    };
    const calls: string[] = [];
    const runner = fakeRunner({ "sample/rollout_token_mean": 0.1 }, calls);
    // First session: only 3 of the 4 cells (as if it was stopped).
    const first = await runGrid(grid, runner, {
      resultsDir: dir,
      limit: 3,
      progress: silentGridProgress(),
    });
    assert.equal(first.ran.length, 3);
    assert.equal(first.results.length, 3);

    const cellPath = `${dir}/resume/${first.ran[0]}`;
    const files = [];
    for await (const e of Deno.readDir(cellPath)) files.push(e.name);
    assert.deepEqual(files.sort(), ["cell.json", "done.json", "metrics.jsonl", "metrics.parquet"]);
    const stored = JSON.parse(await Deno.readTextFile(`${cellPath}/cell.json`));
    assert.equal(stored.seed, stored.cell.seed);
    assert.equal(stored.config.seed, stored.cell.seed);
    const lines = (await Deno.readTextFile(`${cellPath}/metrics.jsonl`)).trim().split("\n");
    assert.equal(lines.length, 4);
    const frame = pl.readParquet(`${cellPath}/metrics.parquet`);
    assert.equal(frame.height, 4);
    assert.ok(frame.columns.includes("break_reasons.compaction"));
    const grid_json = JSON.parse(await Deno.readTextFile(`${dir}/resume/grid.json`));
    assert.equal(grid_json.name, "resume");

    // A half-written cell (no done.json) counts as not done and is rerun.
    await Deno.mkdir(`${dir}/resume/stray`, { recursive: true });
    const second = await runGrid(grid, runner, { resultsDir: dir, progress: silentGridProgress() });
    assert.deepEqual(second.skipped.sort(), [...first.ran].sort());
    assert.equal(second.ran.length, 1);
    assert.equal(calls.length, 4, "every cell ran exactly once over both sessions");
    assert.equal(new Set(calls).size, 4);
    assert.equal(second.results.length, 4);

    const third = await runGrid(grid, runner, { resultsDir: dir, progress: silentGridProgress() });
    assert.equal(third.ran.length, 0);
    assert.equal(calls.length, 4);

    const summary = JSON.parse(await Deno.readTextFile(`${cellPath}/done.json`));
    const cell = (await readGridResults(dir, "resume")).find((r) => r.cell.id === first.ran[0])!;
    assert.equal(summary.final_reward, cell.metrics.at(-1)!.reward_mean);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("runner: a failing cell fails the grid, finished cells stay done", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_experiments_" });
  try {
    const grid = { name: "fail", seeds: [0, 1, 2], env: ["fake"] };
    const calls: string[] = [];
    const ok = fakeRunner({}, calls);
    const runner: CellRunner = (cell, ctx) => {
      if (cell.seed === 1) return Promise.reject(new Error("worker died"));
      return ok(cell, ctx);
    };
    await assert.rejects(
      () => runGrid(grid, runner, { resultsDir: dir, progress: silentGridProgress() }),
      /fail: 1 cell\(s\) failed:\n.*-s1: worker died/,
    );
    const done = await readGridResults(dir, "fail");
    assert.deepEqual(done.map((r) => r.cell.seed), [0]);
    await assert.rejects(
      () => runGrid(grid, ok, { resultsDir: dir, concurrency: 0 }),
      /options\.concurrency/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("runner: concurrent cells each run once and all land on disk", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_experiments_" });
  try {
    const calls: string[] = [];
    const report = await runGrid(
      { name: "par", seeds: [0, 1, 2, 3, 4], env: ["fake"] },
      fakeRunner({}, calls),
      { resultsDir: dir, concurrency: 3, progress: silentGridProgress(), parquet: false },
    );
    assert.equal(report.ran.length, 5);
    assert.equal(new Set(calls).size, 5);
    assert.equal((await readGridResults(dir, "par")).length, 5);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("stats: mean ± 95% CI, ordering verdict computed from the data", async () => {
  const ci = meanCi([1, 2, 3]);
  assert.equal(ci.mean, 2);
  // t(0.975, 2) = 4.30265…
  assert.ok(Math.abs(ci.ci95 - 4.302652729749462 / Math.sqrt(3)) < 1e-9);
  assert.ok(Number.isNaN(meanCi([1]).ci95));

  const dir = await Deno.makeTempDir({ prefix: "reins_experiments_" });
  try {
    const grid = { ...ablationGrid(false, 3), name: "order" };
    const calls: string[] = [];
    // The paper's order: rollout/rollout_token_mean > sample/smtm > rollout/smtm.
    const report = await runGrid(
      grid,
      fakeRunner({
        "sample/seq_mean_token_mean": 0.1,
        "rollout/seq_mean_token_mean": 0.05,
        "rollout/rollout_token_mean": 0.2,
        "rollout/token_mean": 0.15,
      }, calls),
      { resultsDir: dir, progress: silentGridProgress(), parquet: false },
    );
    const summaries = summarise(report.results);
    assert.equal(summaries.length, 4);
    assert.equal(summaries[0].score_kind, "val_reward");
    const verdict = orderingVerdict(summaries);
    assert.ok(verdict.reproduces);
    assert.ok(verdict.separated);
    assert.match(verdict.sentence, /reproduces/);
    const best = summaries.find((s) => s.setting === "rollout/rollout_token_mean")!;
    // start = seed·0.01, final = 4·0.2 + seed·0.01: the paired gain is 0.8 for every seed.
    assert.ok(Math.abs(best.start.mean - 0.01) < 1e-9);
    assert.ok(Math.abs(best.gain.mean - 0.8) < 1e-9);
    assert.ok(best.gain.ci95 < 1e-9);
    assert.equal(report.results[0].summary.start_val_reward, 0);
    const line = cellLine(best.setting, best.score.mean, best.score.ci95);
    assert.match(line, /^cell rollout\/rollout_token_mean: final_reward=0\.810 ± \d+\.\d{3}$/);

    // Swap two settings: the verdict says it does not reproduce.
    const swapped = summaries.map((s) =>
      s.setting === "sample/seq_mean_token_mean" ? { ...s, score: { ...s.score, mean: 0.99 } } : s
    );
    const no = orderingVerdict(swapped);
    assert.equal(no.reproduces, false);
    assert.equal(no.best_is_rollout_token_mean, false);
    assert.match(no.sentence, /does not reproduce/);
    assert.match(orderingVerdict(summaries.slice(0, 2)).sentence, /cannot judge/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("split env: closeness reward and a fixed train/val split", () => {
  assert.equal(closenessReward("56", "56"), 1);
  assert.equal(closenessReward(" 56. ", "56"), 1);
  assert.equal(closenessReward("51", "56"), 0.25);
  assert.equal(closenessReward("99", "56"), 0);
  assert.equal(closenessReward("fifty", "56"), 0);
  assert.equal(closenessReward(null, "56"), 0);
  const a = splitTasks(24);
  const b = splitTasks(24);
  assert.equal(a.val.length, 24);
  assert.equal(a.train.length + a.val.length, 243);
  assert.deepEqual(a.val.map((t) => t.id), b.val.map((t) => t.id));
  const train = new Set(a.train.map((t) => t.id));
  assert.ok(a.val.every((t) => !train.has(t.id)));

  // A few training questions: all split on the script, evaluated on fresh rollouts of them.
  const few = cellTasks({ train_tasks: 2, val_tasks: 5 });
  assert.equal(few.val_kind, "train");
  assert.equal(few.train.length, 2);
  assert.ok(few.train.every(splitsOnScript));
  assert.deepEqual(few.val.map((t) => t.id), [0, 1, 0, 1, 0].map((i) => few.train[i].id));
  assert.deepEqual(cellTasks({ train_tasks: 2, val_tasks: 5 }).train, few.train);
  const all = cellTasks({ train_tasks: 0, val_tasks: 24 });
  assert.equal(all.val_kind, "heldout");
  assert.deepEqual(all.val.map((t) => t.id), a.val.map((t) => t.id));
});

Deno.test("split env: SFT rows teach both compaction calls, and guesses beside them", async () => {
  const tokenizer = await loadCharTokenizer();
  const [task] = cellTasks({ train_tasks: 1, val_tasks: 0 }).train;
  const plain = splitSftRows(tokenizer, [task]);
  assert.deepEqual(plain.map((r) => r.rollout_id), [`${task.id}-a`, `${task.id}-b`]);
  const mixed = splitSftRows(tokenizer, [task], { guesses: 1 });
  assert.deepEqual(mixed.map((r) => r.rollout_id), [
    `${task.id}-guess0`,
    `${task.id}-a`,
    `${task.id}-b`,
  ]);
  const guess = tokenizer.decode(
    mixed[0].tokens.filter((_, i) => mixed[0].loss_mask[i] === 1),
  );
  assert.match(guess, /I think it is -?\d+\./);
  assert.doesNotMatch(guess, new RegExp(`\\b${task.answer}\\.`));
});

Deno.test("progress: the line shows done, running, queued and the ETA", () => {
  assert.equal(
    progressLine({ total: 12, done: 4, running: ["a"], left: 7, secondsPerCell: 30 }),
    "[grid] 4/12 done, 1 running, 7 queued, ETA 4m00s",
  );
  assert.match(
    progressLine({ total: 2, done: 0, running: [], left: 2, secondsPerCell: null }),
    /ETA \?/,
  );
});

Deno.test("gpu cell: target from the environment, a valid real-run config", () => {
  const none = gpuTargetFromEnv({});
  assert.equal(none.target, null);
  assert.match(none.reason, /REINS_GPU_WORKER_URL/);
  const url = gpuTargetFromEnv({ REINS_GPU_WORKER_URL: "http://gpu:8300" });
  assert.deepEqual(url.target, { url: "http://gpu:8300", checkpoint: "Qwen/Qwen3-0.6B" });
  const cmd = gpuTargetFromEnv({ REINS_GPU_LAUNCH_CMD: "ssh gpu x", REINS_HF_CHECKPOINT: "/m" });
  assert.deepEqual(cmd.target, { command: "ssh gpu x", checkpoint: "/m" });
  assert.throws(
    () => gpuTargetFromEnv({ REINS_GPU_WORKER_URL: "gpu:8300" }),
    /REINS_GPU_WORKER_URL/,
  );
  const [cell] = expandGrid({ name: "g", env: ["coding"], seeds: [4] });
  const config = parseOrThrow(LoopConfigSchema, gpuCellConfig(cell, "/models/qwen3"), "config");
  assert.deepEqual(config.model, { kind: "hf", path: "/models/qwen3" });
  assert.equal(config.seed, 4);
  assert.equal(config.normalization.mode, "rollout_token_mean");
  assert.ok(config.tasks.length > 0);
});

Deno.test("gpu cell: the remote stack trains through the worker at the given URL", async () => {
  // A local worker stands in for the GPU host; the stack must use it, not start its own.
  await using remote = await startLocalWorker({ threads: 1 });
  const dir = await Deno.makeTempDir({ prefix: "reins_remote_" });
  try {
    const stack = await startRemoteStack(
      { url: `${remote.url}/`, checkpoint: "unused" },
      await loadCharTokenizer(),
      dir,
    );
    try {
      assert.equal(stack.services.workerUrl, remote.url);
      assert.equal(stack.worker.logs(), "", "connected, not started");
      assert.equal((await stack.services.worker.health()).initialized, false);
    } finally {
      await stack.close();
    }
    // Closing a stack that only connected leaves the remote worker running.
    assert.equal((await remote.client.health()).ok, true);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
