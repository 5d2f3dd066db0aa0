/**
 * The default cell runner: one training-loop run per cell on the split-arithmetic environment
 * (`split_env.ts`), on an embedded CPU stack shared by the grid's cells. The policy of every
 * cell starts from the same SFT warm-start checkpoint (trained once, cached by its settings),
 * so cells differ only in advantage level, normalization, merge strategy and seed. The pilot
 * and the sized grid train on two questions whose rollouts split, with a wrong guess mixed into
 * the demonstrations ({@link cellTasks}, `split_env.ts`), and evaluate with common random
 * numbers (`crn_eval.ts`) 200 rollouts on held-out questions of the same environment, never
 * trained on and the same for every cell ({@link heldoutTasks}: the primary score), and 200
 * fresh rollouts of the training questions (the second score): once before RL for the whole
 * grid (same checkpoint, same prompts, same seeds: `<grid>/start_heldout_eval.json`,
 * `<grid>/start_eval.json`) and after each cell's last step (`<cell>/eval.json`, rollout by
 * rollout, so before/after pairs prompt by prompt). Each
 * step's trained batch (per rollout: reward and trained tokens per sample) goes to
 * `<cell>/batches.jsonl`, the material of the mechanism analysis on the project's own runs.
 *
 * Reward: 1 for the exact answer, otherwise partial credit for a numeric answer close to it
 * (`0.5 · max(0, 1 − |answer − expected| / 10)`), 0 without a bare number (a guess in a
 * sentence scores 0).
 *
 * @module
 */
import { parseEnvInput, readAnswerFile } from "../lib/harness/envs/common.ts";
import { builtinResolver } from "../lib/harness/builtin/resolver.ts";
import type { RewardContext } from "../lib/controller/reward_hooks.ts";
import { type JsonObject, parseOrThrow } from "../lib/schema.ts";
import type { ArithmeticTask } from "../lib/harness/schema.ts";
import {
  type LoopConfigInput,
  LoopConfigSchema,
  type LoopStepMetrics,
} from "../lib/loop/schema.ts";
import { loadCharTokenizer } from "../lib/tokens/mod.ts";
import type { LossConfig } from "../lib/schema.ts";
import {
  type EmbeddedOptions,
  type EmbeddedStack,
  type LoopResult,
  runLoop,
  runSft,
  silentProgress,
  startEmbedded,
  toyArithmeticTasks,
  toyLoopTasks,
  toyModel,
  writeToyDataset,
} from "../lib/loop/mod.ts";
import { mulberry32 } from "../lib/util/random.ts";
import type { GatewayClient } from "../lib/gateway/client.ts";
import { assembleRollout } from "../lib/samples/mod.ts";
import { trainedTokens } from "../lib/algo/validate.ts";
import { crnEvaluate, type CrnEvaluation } from "./crn_eval.ts";
import type { Cell } from "./grid.ts";
import type { CellRunner } from "./runner.ts";
import { splitHarness, splitSftRows, splitsOnScript } from "./split_env.ts";

/** Default SFT checkpoint cache (`runs/experiments`, git-ignored). */
export const DEFAULT_CACHE_DIR: string = decodeURIComponent(
  new URL("../runs/experiments", import.meta.url).pathname,
);

/** Settings of the loop cells (the grid's `base`). */
export interface LoopCellSettings {
  steps: number;
  group_size: number;
  groups_per_step: number;
  sft_steps: number;
  d_model: number;
  n_layers: number;
  lr: number;
  /** Linear AdamW warmup (optimizer steps) and optimizer steps per batch: see docs/loop.md. */
  warmup_steps: number;
  ppo_epochs: number;
  /**
   * Training questions (0: every task not held out). With a few, the policy can learn them in
   * CPU minutes; the evaluation then scores fresh rollouts of those questions ({@link cellTasks}).
   */
  train_tasks: number;
  /** Wrong guessing demonstrations per task in the SFT warm start (see `split_env.ts`). */
  guesses: number;
  /**
   * Evaluation rollouts of the training questions ({@link cellTasks}), scored before the first
   * step and after the last (0: none).
   */
  val_tasks: number;
  /**
   * Evaluation rollouts on held-out questions ({@link heldoutTasks}), scored before the first
   * step and after the last (0: none): the grid's primary score when measured.
   */
  heldout_tasks: number;
  /** Also score them every `val_every` steps (0: only at the end). */
  val_every: number;
  /**
   * Sampling seed base of the evaluation (common random numbers, `crn_eval.ts`): evaluation
   * rollout i samples with seeds from `eval_seed + 1000·i` in every cell.
   */
  eval_seed: number;
  max_tokens: number;
  temperature: number;
}

/**
 * The cells of the pilot and of the sized grid: 12 RL steps × 2 groups × 8 rollouts on 2
 * training questions; 200 evaluation rollouts on held-out questions and 200 on the training
 * questions, with common random numbers, before RL (shared by every cell: same checkpoint,
 * same seeds) and after the last step. (The grid committed before `heldout_tasks` existed ran
 * without the held-out evaluation.)
 */
export const CELL_SETTINGS: LoopCellSettings = {
  steps: 12,
  group_size: 8,
  groups_per_step: 2,
  sft_steps: 300,
  d_model: 64,
  n_layers: 2,
  // The demo's recipe: small steps after a warmup, 4 PPO epochs per batch (one AdamW step at
  // lr 1e-3 per batch degraded the policy in every cell).
  lr: 3e-4,
  warmup_steps: 12,
  ppo_epochs: 4,
  train_tasks: 2,
  guesses: 1,
  val_tasks: 200,
  heldout_tasks: 200,
  val_every: 0,
  eval_seed: 10_000,
  max_tokens: 80,
  temperature: 1,
};

/** Reward of the split-arithmetic environment (see the module doc). */
export function closenessReward(answer: string | null, expected: string): number {
  if (answer === null) return 0;
  const clean = answer.trim().replace(/[,\s]/g, "").replace(/\.$/, "");
  if (!/^-?\d+(\.\d+)?$/.test(clean)) return 0;
  const diff = Math.abs(Number(clean) - Number(expected));
  if (diff < 1e-6) return 1;
  return 0.5 * Math.max(0, 1 - diff / 10);
}

function seededOrder(): ArithmeticTask[] {
  const rand = mulberry32(7);
  return toyArithmeticTasks().map((t) => ({ t, k: rand() })).sort((a, b) => a.k - b.k).map((x) =>
    x.t
  );
}

/** Train/validation split of the toy tasks, fixed (seed 7) for every cell. */
export function splitTasks(valCount: number): { train: ArithmeticTask[]; val: ArithmeticTask[] } {
  const order = seededOrder();
  return { train: order.slice(valCount), val: order.slice(0, valCount) };
}

/** The tasks of a cell and what its evaluation measures. */
export interface CellTasks {
  train: ArithmeticTask[];
  /** Evaluation rollouts, one per entry. */
  val: ArithmeticTask[];
  /** `heldout`: questions never trained on; `train`: fresh rollouts of the training questions. */
  val_kind: "heldout" | "train";
}

/**
 * The questions of a cell, fixed for every cell of a grid. With `train_tasks` = 0 the policy
 * trains on every task but `val_tasks` held-out ones and is scored on those. With
 * `train_tasks` = k it trains on the first k questions of a fixed order whose rollouts split on
 * the script (so every tool-using rollout yields two samples) and is scored on `val_tasks`
 * fresh rollouts of them: a tiny CPU policy does not generalise to unseen arithmetic in
 * minutes, so this measures what RL learned, not transfer.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cellTasks } from "./loop_cell.ts";
 * const t = cellTasks({ train_tasks: 2, val_tasks: 6 });
 * assert.deepEqual([t.train.length, t.val.length, t.val_kind], [2, 6, "train"]);
 * ```
 */
export function cellTasks(
  s: Pick<LoopCellSettings, "train_tasks" | "val_tasks">,
): CellTasks {
  if (s.train_tasks <= 0) return { ...splitTasks(s.val_tasks), val_kind: "heldout" };
  const train = seededOrder().filter(splitsOnScript).slice(0, s.train_tasks);
  const val = Array.from({ length: s.val_tasks }, (_, i) => train[i % train.length]);
  return { train, val, val_kind: "train" };
}

/**
 * The held-out evaluation of a cell: `heldout_tasks` rollouts on questions of the same
 * environment that no cell trains on, the same for every cell. With `train_tasks` = k the
 * questions are those after the k training questions in the same seeded order that split on
 * the script like them (so they are drawn from the training questions' distribution); with
 * `train_tasks` = 0 they are the `val_tasks` questions held out of training. The questions used
 * are the first q of that order, q the largest count not above the pool that divides
 * `heldout_tasks` (every question gets the same number of rollouts); rollout i asks question
 * i mod q, with its own CRN seed (`crn_eval.ts`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { cellTasks, heldoutTasks } from "./loop_cell.ts";
 * const s = { train_tasks: 2, val_tasks: 4, heldout_tasks: 200 };
 * const heldout = heldoutTasks(s);
 * const train = new Set(cellTasks(s).train.map((t) => t.id));
 * assert.equal(heldout.length, 200);
 * assert.ok(heldout.every((t) => !train.has(t.id)));
 * assert.equal(new Set(heldout.map((t) => t.id)).size, 100); // 100 questions × 2 rollouts
 * assert.deepEqual(heldoutTasks({ ...s, heldout_tasks: 0 }), []);
 * ```
 */
export function heldoutTasks(
  s: Pick<LoopCellSettings, "train_tasks" | "val_tasks" | "heldout_tasks">,
): ArithmeticTask[] {
  if (s.heldout_tasks <= 0) return [];
  const pool = s.train_tasks > 0
    ? seededOrder().filter(splitsOnScript).slice(s.train_tasks)
    : splitTasks(s.val_tasks).val;
  if (pool.length === 0) {
    throw new Error(
      `heldout_tasks: ${s.heldout_tasks} rollouts asked for, but no question is held out ` +
        `(train_tasks ${s.train_tasks}, val_tasks ${s.val_tasks})`,
    );
  }
  let questions = Math.min(pool.length, s.heldout_tasks);
  while (s.heldout_tasks % questions !== 0) questions--;
  return Array.from({ length: s.heldout_tasks }, (_, i) => pool[i % questions]);
}

/** Options of {@link startLoopCells}. */
export interface LoopCellOptions {
  /** Scratch directory (gateway DB, cell runs, the SFT checkpoint); removed by `close`. */
  workDir?: string;
  /**
   * Where SFT warm-start checkpoints are cached across sessions (default `runs/experiments`,
   * git-ignored), so a resumed grid does not warm-start again.
   */
  cacheDir?: string;
  /** Harness processes at once. */
  concurrency?: number;
  /** Torch threads of the worker. */
  threads?: number;
  /**
   * Part of the SFT cache key (e.g. the experiment's code hash), so that a checkpoint trained
   * by other code is not reused.
   */
  cacheTag?: string;
  /**
   * Seed every training rollout's sampling (`rollout_seeds` of the loop config): what makes a
   * cell reproducible bit for bit (the canary's cell, `canary.ts`). The grid's cells ran
   * without it.
   */
  rolloutSeeds?: boolean;
  /**
   * Sample with llama.cpp instead of the worker (the mismatch grid, `mismatch_grid.ts`): the
   * embedded stack's engine, synced to every policy version at its GGUF `type`.
   */
  engine?: EmbeddedOptions["engine"];
  /** Loss fields of a cell on top of `{kind: "ppo"}` (e.g. a mismatch correction). */
  cellLoss?: (cell: Cell) => Partial<LossConfig>;
  log?: (line: string) => void;
}

/** A started loop cell runner. */
export interface LoopCells extends AsyncDisposable {
  runner: CellRunner;
  close(): Promise<void>;
}

function settingsOf(base: JsonObject): LoopCellSettings {
  const out = { ...CELL_SETTINGS };
  for (const key of Object.keys(out) as (keyof LoopCellSettings)[]) {
    const value = base[key];
    if (value === undefined) continue;
    if (typeof value !== "number" || !Number.isFinite(value)) {
      throw new Error(`grid.base.${key}: expected a number, got ${JSON.stringify(value)}`);
    }
    out[key] = value;
  }
  return out;
}

/**
 * Starts the embedded stack and returns a cell runner for `runGrid`.
 *
 * @example
 * ```ts ignore
 * await using cells = await startLoopCells();
 * await runGrid(grid, cells.runner);
 * ```
 */
export async function startLoopCells(options: LoopCellOptions = {}): Promise<LoopCells> {
  const log = options.log ?? (() => {});
  const workDir = options.workDir ?? await Deno.makeTempDir({ prefix: "reins_experiments_" });
  const tokenizer = await loadCharTokenizer();
  const all = toyArithmeticTasks();
  const dataDir = await writeToyDataset(`${workDir}/data`, all);
  const byId = new Map(all.map((t) => [t.id, t]));
  const reward = (ctx: RewardContext) => {
    const input = parseEnvInput(ctx.rollout.input, "arithmetic");
    const task = byId.get(input.id);
    if (!task) throw new Error(`rollout.input.id: unknown task ${input.id}`);
    return closenessReward(readAnswerFile(ctx.dir), task.answer);
  };
  const stack: EmbeddedStack = await startEmbedded({
    outDir: workDir,
    tokenizer,
    concurrency: options.concurrency ?? 16,
    threads: options.threads ?? 2,
    ...(options.engine ? { engine: options.engine } : {}),
    registry: {
      dataDir,
      extra: {
        "split-arithmetic": builtinResolver({ env: "arithmetic", rewardFunction: "closeness" }),
      },
      extraRewards: { closeness: reward },
    },
  });
  const sftCache = new Map<string, string>();
  const cacheDir = options.cacheDir ?? DEFAULT_CACHE_DIR;

  const warmStart = async (s: LoopCellSettings, train: ArithmeticTask[]): Promise<string> => {
    const tasks = s.train_tasks > 0 ? `t${s.train_tasks}` : `v${s.val_tasks}`;
    const tag = options.cacheTag ? `-${options.cacheTag}` : "";
    const key = `sft-d${s.d_model}-l${s.n_layers}-n${s.sft_steps}-${tasks}-g${s.guesses}${tag}`;
    const cached = sftCache.get(key);
    if (cached) return cached;
    await Deno.mkdir(cacheDir, { recursive: true });
    const path = `${await Deno.realPath(cacheDir)}/${key}.pt`;
    try {
      await Deno.stat(path);
      log(`[cells] SFT warm start ${key}: cached (${path})`);
      sftCache.set(key, path);
      return path;
    } catch {
      // not cached yet
    }
    const t0 = performance.now();
    await stack.worker.client.init({
      model: toyModel(tokenizer, { d_model: s.d_model, n_layers: s.n_layers, max_seq_len: 1024 }),
      optimizer: { lr: 3e-3 },
    });
    const rows = splitSftRows(tokenizer, train, { guesses: s.guesses });
    const loss = await runSft(stack.worker.client, rows, {
      steps: s.sft_steps,
      batchSize: 8,
      seed: 0,
    });
    await stack.worker.client.save(path);
    log(
      `[cells] SFT warm start ${key}: loss ${loss.toFixed(3)} in ${
        ((performance.now() - t0) / 1000).toFixed(1)
      }s`,
    );
    sftCache.set(key, path);
    return path;
  };

  // One evaluation before RL per (checkpoint, evaluation): every cell starts from the same
  // checkpoint and evaluates the same prompts with the same seeds, so it is measured once.
  const startEvals = new Map<string, CrnEvaluation>();
  let runs = 0;
  const runner: CellRunner = async (cell: Cell, { grid, dir }) => {
    if (cell.env !== "split-arithmetic") {
      throw new Error(`cell.env: the loop cell runner knows "split-arithmetic", not "${cell.env}"`);
    }
    const s = settingsOf(grid.base);
    const { train, val, val_kind } = cellTasks(s);
    const heldout = heldoutTasks(s);
    const checkpoint = await warmStart(s, train);
    const harness = splitHarness(dataDir, s.max_tokens);
    harness.name = "split-arithmetic";
    (harness.options as JsonObject).temperature = s.temperature;
    const configOf = (name: string): LoopConfigInput => ({
      name,
      out_dir: `${workDir}/runs/${name}`,
      tasks: toyLoopTasks(train),
      harness,
      model: { kind: "checkpoint", path: checkpoint },
      group_size: s.group_size,
      groups_per_step: s.groups_per_step,
      steps: s.steps,
      merge_strategy: cell.merge,
      advantage: { level: cell.advantage },
      normalization: { mode: cell.normalization },
      optimizer: { lr: s.lr, warmup_steps: s.warmup_steps },
      ppo_epochs: s.ppo_epochs,
      ...(options.cellLoss ? { loss: { kind: "ppo", ...options.cellLoss(cell) } } : {}),
      // Short rows: CPU attention cost grows with the row length squared.
      micro_token_budget: 1024,
      schedule: { mode: "sync", poll_ms: 50 },
      checkpoint_every: 0,
      seed: cell.seed,
      ...(options.rolloutSeeds ? { rollout_seeds: true } : {}),
    });
    const startKey = `${checkpoint}|${s.val_tasks}|${s.eval_seed}|${s.max_tokens}|${s.temperature}`;
    const startFile = `${dir.slice(0, dir.lastIndexOf("/"))}/start_eval.json`;
    const heldoutKey = `${checkpoint}|heldout|${s.heldout_tasks}|${s.train_tasks}|${s.val_tasks}|` +
      `${s.eval_seed}|${s.max_tokens}|${s.temperature}`;
    const heldoutStartFile = `${dir.slice(0, dir.lastIndexOf("/"))}/start_heldout_eval.json`;
    const evals = new Map<number, CrnEvaluation>();
    let heldoutFinal: CrnEvaluation | null = null;
    const batches: BatchRecord[] = [];
    let startEval: CrnEvaluation | null = null;
    let heldoutStart: CrnEvaluation | null = null;
    let result: LoopResult | undefined;
    let name = "";
    for (let attempt = 1; result === undefined; attempt++) {
      name = `${grid.name}-${cell.id}-${runs++}`.replace(/[^A-Za-z0-9_.-]/g, "_");
      const config = parseOrThrow(LoopConfigSchema, configOf(name), "config");
      const evaluate = (label: string) =>
        crnEvaluate(stack.client, config, label, toyLoopTasks(val), s.eval_seed);
      // Same seeds as the training-question evaluation (other prompts): rollout i of every
      // cell draws the same numbers, before and after RL.
      const evaluateHeldout = (label: string) =>
        crnEvaluate(stack.client, config, `heldout-${label}`, toyLoopTasks(heldout), s.eval_seed);
      try {
        result = await runLoop(config, stack.services, {
          progress: silentProgress(),
          beforeSteps: async () => {
            if (s.val_tasks > 0) {
              startEval = startEvals.get(startKey) ?? await readStartEval(startFile, startKey);
              if (!startEval) {
                startEval = await evaluate("start");
                log(
                  `[cells] evaluation before RL (shared by every cell): ${startEval.reward_mean}`,
                );
                await Deno.writeTextFile(
                  startFile,
                  JSON.stringify({ key: startKey, ...startEval }),
                );
              }
              startEvals.set(startKey, startEval);
            }
            if (heldout.length > 0) {
              heldoutStart = startEvals.get(heldoutKey) ??
                await readStartEval(heldoutStartFile, heldoutKey);
              if (!heldoutStart) {
                heldoutStart = await evaluateHeldout("start");
                log(
                  `[cells] held-out evaluation before RL (shared by every cell): ${heldoutStart.reward_mean}`,
                );
                await Deno.writeTextFile(
                  heldoutStartFile,
                  JSON.stringify({ key: heldoutKey, ...heldoutStart }),
                );
              }
              startEvals.set(heldoutKey, heldoutStart);
            }
          },
          hooks: {
            afterStep: async (m, update) => {
              log(
                `[cells] ${cell.id} step ${m.step + 1}/${s.steps} reward ${
                  m.reward_mean.toFixed(3)
                }`,
              );
              batches.push(await recordBatch(stack.client, m.step, update.trained, cell.merge));
              const last = m.step + 1 === s.steps;
              const every = s.val_every > 0 && (m.step + 1) % s.val_every === 0;
              if (s.val_tasks > 0 && (last || every)) {
                evals.set(m.step, await evaluate(`s${m.step}`));
              }
              if (heldout.length > 0 && last) heldoutFinal = await evaluateHeldout(`s${m.step}`);
            },
          },
        });
      } catch (error) {
        // A run's bookkeeping rollout can be claimed by the already-running controller before
        // the loop closes it (a race of a shared stack); nothing has trained yet, so retry.
        const message = error instanceof Error ? error.message : String(error);
        if (attempt >= 3 || !/-run' cannot go from/.test(message)) throw error;
        log(`[cells] ${cell.id}: run record race (${message}); retrying`);
        evals.clear();
        heldoutFinal = null;
        batches.length = 0;
      }
    }
    const metrics = result.metrics.map((m: LoopStepMetrics) => ({
      ...m,
      val_reward: evals.get(m.step)?.reward_mean ?? null,
    }));
    await Deno.remove(`${workDir}/runs/${name}`, { recursive: true }).catch(() => undefined);
    const final = evals.get(s.steps - 1) ?? null;
    await Deno.mkdir(dir, { recursive: true });
    await Deno.writeTextFile(
      `${dir}/eval.json`,
      JSON.stringify({
        start: startEval,
        final,
        heldout_start: heldoutStart,
        heldout_final: heldoutFinal,
      }) +
        "\n",
    );
    await Deno.writeTextFile(
      `${dir}/batches.jsonl`,
      batches.map((b) => JSON.stringify(b) + "\n").join(""),
    );
    // The task list is deterministic (cellTasks); record its size and split, not 200 inputs.
    const recorded = JSON.parse(JSON.stringify(result.config)) as JsonObject;
    recorded.tasks = `${train.length} train tasks (${train.map((t) => t.id).join(", ")}): ` +
      `cellTasks(train_tasks ${s.train_tasks}, val_tasks ${s.val_tasks}).train; ` +
      `evaluation on ${val_kind === "train" ? "the training questions" : "held-out questions"}` +
      (heldout.length > 0
        ? `; held-out evaluation: heldoutTasks(heldout_tasks ${s.heldout_tasks}), ` +
          `${new Set(heldout.map((t) => t.id)).size} questions never trained on`
        : "");
    return {
      config: { ...recorded, settings: { ...s } } as JsonObject,
      metrics,
      final_val_reward: final?.reward_mean ?? null,
      start_val_reward: (startEval as CrnEvaluation | null)?.reward_mean ?? null,
      ...(heldout.length > 0
        ? {
          final_heldout_reward: (heldoutFinal as CrnEvaluation | null)?.reward_mean ?? null,
          start_heldout_reward: (heldoutStart as CrnEvaluation | null)?.reward_mean ?? null,
        }
        : {}),
    };
  };

  const close = async () => {
    await stack.close();
    if (!options.workDir) await Deno.remove(workDir, { recursive: true }).catch(() => undefined);
  };
  return { runner, close, [Symbol.asyncDispose]: close };
}

/** One RL step's batch as trained: per rollout its reward and its samples' trained tokens. */
export interface BatchRecord {
  step: number;
  rollouts: { rollout_id: string; group_id: string; reward: number; lengths: number[] }[];
}

/**
 * Rebuilds the composition of a step's trained batch from the gateway (the same assembly the
 * loop ran): the material of the mechanism analysis on the project's own runs.
 */
async function recordBatch(
  gateway: GatewayClient,
  step: number,
  trained: readonly { rollout_id: string; group_id: string }[],
  strategy: Cell["merge"],
): Promise<BatchRecord> {
  const rollouts = await Promise.all(trained.map(async (t) => {
    const rollout = await gateway.getRollout(t.rollout_id);
    const events = await gateway.listEvents(t.rollout_id, { type: "model_request" });
    const reward = rollout.reward ?? 0;
    const { samples } = assembleRollout(events, { strategy, group_id: t.group_id, reward });
    return {
      rollout_id: t.rollout_id,
      group_id: t.group_id,
      reward,
      lengths: samples.map(trainedTokens),
    };
  }));
  return { step, rollouts };
}

async function readStartEval(path: string, key: string): Promise<CrnEvaluation | null> {
  try {
    const stored = JSON.parse(await Deno.readTextFile(path)) as CrnEvaluation & { key: string };
    return stored.key === key ? stored : null;
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return null;
    throw error;
  }
}
