/**
 * The config file of `deno task train --config <file>`: one YAML (parsed with `yaml`) or JSON
 * document, validated by a strict zod schema (an unknown or misspelt key is an error naming its
 * path: `algorithm.klcoef: unknown key`), and resolved into the loop's {@link LoopConfigInput}
 * plus what the loop itself does not own: the model's tokenizer, the engine, the train /
 * held-out split of the tasks and the evaluation schedule.
 *
 * ```yaml
 * name: my-run
 * model: {kind: builtin, d_model: 64, n_layers: 2}
 * harness: {builtin: arithmetic}
 * environment: {tasks: toy-arithmetic, train: 4}
 * split: {heldout: 8}
 * algorithm: {loss: ppo, clip: {low: 0.2, high: 0.28}, kl: {coef: 0.01, estimator: k3}}
 * steps: 20
 * eval: {every: 5, rollouts: 32}
 * checkpoints: {every: 2, keep_last: 2}
 * ```
 *
 * @module
 */
import { parse as parseYaml } from "yaml";
import { z } from "zod";
import { AdvantageOptionsSchema, NormalizationOptionsSchema } from "../algo/schema.ts";
import { IdSchema, JsonObjectSchema } from "../schema/core.ts";
import { type LoopConfigInput, type LoopTask, LoopTaskSchema } from "./schema.ts";
import type { HarnessSpec, WorkerModelSpec } from "../schema.ts";

const positiveInt = z.number().int().min(1);

/** The policy: the built-in decoder of a given size, or weights in HF or reins layout. */
export const RunModelSchema = z.discriminatedUnion("kind", [
  z.strictObject({
    kind: z.literal("builtin"),
    d_model: positiveInt.default(64),
    n_layers: positiveInt.default(2),
    n_heads: positiveInt.default(4),
    n_kv_heads: positiveInt.default(2),
    max_seq_len: positiveInt.default(512),
    /** Initial weights are a pure function of the size and this seed. */
    seed: z.number().int().default(0),
  }),
  /** A Hugging Face layout directory (config.json, weights, tokenizer files) or hub id. */
  z.strictObject({ kind: z.literal("hf"), path: z.string().min(1) }),
  /** A file written by the worker's `POST /save` (reins layout; HF policies resume too). */
  z.strictObject({ kind: z.literal("checkpoint"), path: z.string().min(1) }),
]);

/** Where the policy runs: the PyTorch worker (default) or llama.cpp (`lib/engine`). */
export const RunEngineSchema = z.strictObject({
  kind: z.enum(["torch_worker", "llama_cpp"]).default("torch_worker"),
  /** A running worker to use instead of starting a local one (e.g. a GPU host). */
  url: z.url().optional(),
  /** Torch threads of a local worker. */
  threads: positiveInt.optional(),
  /** Python interpreter of a local worker. */
  python: z.string().min(1).optional(),
  /** Torch device of the worker (`cpu`, `cuda`, `cuda:1`). */
  device: z.string().min(1).optional(),
});

/** What each rollout runs: exactly one of `builtin`, `cli`, `command`, `name`. */
export const RunHarnessSchema = z.strictObject({
  /**
   * A built-in harness: `arithmetic` (the toy environment with its calculator), `split` (the
   * same, with inline context compaction, so rollouts split into several samples) or
   * `<env>` of the registry (`builtin-<env>`).
   */
  builtin: z.string().min(1).optional(),
  /** An agent CLI by name (`claude-code`, `codex`, …: `lib/harness/cli`). */
  cli: z.string().min(1).optional(),
  /** A command run per rollout (argv). */
  command: z.array(z.string().min(1)).min(1).optional(),
  /** Any harness name of the registry. */
  name: z.string().min(1).optional(),
  options: JsonObjectSchema.default({}),
}).refine(
  (h) => [h.builtin, h.cli, h.command, h.name].filter((x) => x !== undefined).length === 1,
  { message: "give exactly one of builtin, cli, command, name" },
);

/** The environment's tasks and how many train. */
export const RunEnvironmentSchema = z.strictObject({
  /**
   * `toy-arithmetic` (the 243 built-in questions) or a JSONL file of `{id, input}` lines
   * (relative paths are relative to the config file).
   */
  tasks: z.string().min(1),
  /** Training tasks taken after the seeded shuffle (default: all not held out). */
  train: positiveInt.optional(),
  /** Data directory the environment reads (default: the shipped one). */
  data_dir: z.string().min(1).optional(),
});

/** The train / held-out split: the tasks are shuffled by a seeded hash of their ids. */
export const RunSplitSchema = z.strictObject({
  /** Held-out tasks: a count (≥ 1), or a share of the tasks (0 < x < 1). */
  heldout: z.number().positive(),
  seed: z.number().int().default(0),
});

/** The RL algorithm. */
export const RunAlgorithmSchema = z.strictObject({
  advantage: AdvantageOptionsSchema.optional(),
  normalization: NormalizationOptionsSchema.optional(),
  loss: z.enum(["ppo", "gspo"]).default("ppo"),
  clip: z.strictObject({
    low: z.number().min(0).lt(1).default(0.2),
    high: z.number().min(0).default(0.2),
    dual: z.number().gt(1).optional(),
  }).optional(),
  /** Cap of the truncated importance weight of stale samples (decoupled PPO). */
  tis_cap: z.number().positive().default(2),
  /** KL to the reference policy: coefficient and estimator (k1, k2 or k3). */
  kl: z.strictObject({
    coef: z.number().min(0),
    estimator: z.enum(["k1", "k2", "k3"]).default("k3"),
  }).optional(),
  old_logprobs: z.enum(["rollout", "recompute"]).optional(),
  /** Which rollouts never train: failed ones, groups with equal rewards (no signal). */
  filters: z.strictObject({
    drop_errors: z.boolean().default(true),
    drop_zero_variance: z.boolean().default(true),
  }).optional(),
  ppo_epochs: positiveInt.max(64).default(1),
  optimizer: z.strictObject({
    lr: z.number().positive(),
    grad_clip: z.number().min(0).optional(),
    warmup_steps: z.number().int().min(0).optional(),
    weight_decay: z.number().min(0).optional(),
  }).optional(),
});

/** The schedule (`collocated_async` or `sync`) and its staleness bound. */
export const RunAsyncSchema = z.strictObject({
  mode: z.enum(["sync", "collocated_async"]).default("collocated_async"),
  max_staleness: z.number().int().min(0).default(1),
  stale_policy: z.enum(["drop", "tis"]).default("drop"),
  extra_groups_in_flight: z.number().int().min(0).default(0),
  poll_ms: z.number().int().min(10).default(200),
});

/** The whole config file. */
export const RunConfigSchema = z.strictObject({
  name: IdSchema,
  /** Run directory (default `runs/<name>`). */
  out_dir: z.string().min(1).optional(),
  seed: z.number().int().default(0),
  model: RunModelSchema,
  /** `char` (the built-in model's), `qwen3`, or a directory with tokenizer.json (default: the
   * HF model's directory, else `char`). */
  tokenizer: z.string().min(1).optional(),
  engine: RunEngineSchema.prefault({}),
  harness: RunHarnessSchema,
  environment: RunEnvironmentSchema,
  split: RunSplitSchema,
  /** SFT warm start on the environment's scripted demonstrations (toy environments only). */
  sft: z.strictObject({
    steps: z.number().int().min(0).default(0),
    lr: z.number().positive().optional(),
    /** Wrong guessing demonstrations per task next to the correct one. */
    guesses: z.number().int().min(0).default(0),
  }).prefault({}),
  algorithm: RunAlgorithmSchema.prefault({}),
  async: RunAsyncSchema.prefault({}),
  batch: z.strictObject({
    group_size: positiveInt.max(256).default(4),
    groups_per_step: positiveInt.max(1024).default(4),
    micro_token_budget: positiveInt.default(4096),
    /** Harness runs at once. */
    concurrency: positiveInt.max(1024).default(8),
  }).prefault({}),
  steps: positiveInt.max(1_000_000),
  /** Held-out evaluation: before RL, every `every` steps (0: only before and after), after. */
  eval: z.strictObject({
    every: z.number().int().min(0).default(0),
    /** Rollouts per evaluation (task i mod n, each with its fixed sampling seed). */
    rollouts: positiveInt.min(2).default(32),
    /** Also evaluate on the training tasks (same rollouts count), as `eval/train_*`. */
    train_tasks: z.boolean().default(false),
  }).prefault({}),
  checkpoints: z.strictObject({
    every: z.number().int().min(0).default(1),
    keep_last: positiveInt.default(1),
  }).prefault({}),
  rollout_timeout_s: z.number().positive().default(300),
  max_attempts: positiveInt.max(10).default(2),
  /** Continue the run in the run directory from its last checkpoint. */
  resume: z.boolean().default(false),
  /**
   * Run the worker, the gateway and the rollout controller as separate processes that are
   * restarted when they die; the loop resumes from its last checkpoint after a worker restart
   * (`lib/loop/supervisor.ts`). Off: one process hosts gateway and controller.
   */
  supervise: z.boolean().default(false),
});
/** A parsed config file. */
export type RunConfig = z.infer<typeof RunConfigSchema>;
/** A config file as written. */
export type RunConfigInput = z.input<typeof RunConfigSchema>;

/** A config file that does not parse; `issues` holds one `path: message` each. */
export class RunConfigError extends Error {
  readonly issues: string[];
  constructor(source: string, issues: string[]) {
    super(
      `${source}: ${issues.length} problem${issues.length === 1 ? "" : "s"}:\n` +
        issues.map((i) => `  ${i}`).join("\n"),
    );
    this.name = "RunConfigError";
    this.issues = issues;
  }
}

function issuePath(path: readonly PropertyKey[]): string {
  return path.map((p) => (typeof p === "number" ? `[${p}]` : String(p))).join(".")
    .replace(/\.\[/g, "[");
}

/**
 * Parses a config document (YAML or JSON text; JSON is YAML) or throws {@link RunConfigError}
 * with every problem on its own line, unknown keys named with their full path.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseRunConfig, RunConfigError } from "./run_config.ts";
 * const text = [
 *   "name: r1",
 *   "model: {kind: builtin}",
 *   "harness: {builtin: arithmetic}",
 *   "environment: {tasks: toy-arithmetic}",
 *   "split: {heldout: 8}",
 *   "steps: 3",
 * ].join("\n");
 * assert.equal(parseRunConfig(text, "r1.yaml").algorithm.loss, "ppo");
 * assert.throws(
 *   () => parseRunConfig(text + "\nalgorithm: {klcoef: 0.1}", "r1.yaml"),
 *   (e: unknown) => e instanceof RunConfigError && /algorithm\.klcoef: unknown key/.test(e.message),
 * );
 * ```
 */
export function parseRunConfig(text: string, source: string): RunConfig {
  return validateRunConfig(parseConfigText(text, source), source);
}

/** The document of a YAML or JSON config text (not yet validated). */
export function parseConfigText(text: string, source: string): unknown {
  try {
    return parseYaml(text);
  } catch (error) {
    throw new RunConfigError(source, [`not valid YAML or JSON: ${(error as Error).message}`]);
  }
}

/** Validates a config document (see {@link parseRunConfig}). */
export function validateRunConfig(raw: unknown, source: string): RunConfig {
  const parsed = RunConfigSchema.safeParse(raw);
  if (parsed.success) return parsed.data;
  const issues: string[] = [];
  for (const issue of parsed.error.issues) {
    if (issue.code === "unrecognized_keys") {
      for (const key of issue.keys) {
        issues.push(`${issuePath([...issue.path, key])}: unknown key`);
      }
    } else {
      issues.push(`${issuePath(issue.path) || "(top level)"}: ${issue.message}`);
    }
  }
  throw new RunConfigError(source, issues);
}

/** Reads and parses a config file (see {@link parseRunConfig}). */
export async function readRunConfig(path: string): Promise<RunConfig> {
  let text: string;
  try {
    text = await Deno.readTextFile(path);
  } catch (error) {
    throw new RunConfigError(path, [`cannot read: ${(error as Error).message}`]);
  }
  return parseRunConfig(text, path);
}

/** FNV-1a of a string (the split's shuffle key). */
export function fnv1a(s: string): number {
  let h = 2166136261;
  for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619) >>> 0;
  return h;
}

/** Tasks split into the ones trained on and the held-out ones (never trained on). */
export interface TaskSplit<T> {
  train: T[];
  heldout: T[];
}

/**
 * The seeded train / held-out split: tasks ordered by the hash of their id (seed 0: of the id
 * alone, so the demo's order is kept), the first `train` train, the next `heldout` are held
 * out. Disjoint by construction; the same for the same ids and seed whatever their file order.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { splitTasks } from "./run_config.ts";
 * const tasks = Array.from({ length: 10 }, (_, i) => ({ id: `t${i}` }));
 * const s = splitTasks(tasks, { heldout: 0.3, seed: 1 }, 4);
 * assert.equal(s.heldout.length, 3);
 * assert.equal(s.train.length, 4);
 * assert.equal(s.train.some((t) => s.heldout.includes(t)), false);
 * ```
 */
export function splitTasks<T extends { id: string }>(
  tasks: readonly T[],
  split: { heldout: number; seed: number },
  train?: number,
): TaskSplit<T> {
  const key = (t: T) => fnv1a(split.seed === 0 ? t.id : `${split.seed}:${t.id}`);
  const ordered = [...tasks].sort((a, b) => key(a) - key(b) || (a.id < b.id ? -1 : 1));
  const heldout = split.heldout < 1
    ? Math.max(1, Math.round(split.heldout * tasks.length))
    : Math.floor(split.heldout);
  const nTrain = train ?? tasks.length - heldout;
  if (nTrain < 1 || nTrain + heldout > tasks.length) {
    throw new RunConfigError("split", [
      `split.heldout: ${heldout} held-out + ${nTrain} training tasks need ${nTrain + heldout} ` +
      `tasks; the environment has ${tasks.length}`,
    ]);
  }
  return {
    train: ordered.slice(0, nTrain),
    heldout: ordered.slice(nTrain, nTrain + heldout),
  };
}

/**
 * Reads a JSONL task file: one `{id, input}` per line, each validated (errors name the line).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readTaskFile } from "./run_config.ts";
 * const path = await Deno.makeTempFile({ suffix: ".jsonl" });
 * await Deno.writeTextFile(path, '{"id": "a", "input": {"prompt": "hi"}}\n');
 * assert.deepEqual(await readTaskFile(path), [{ id: "a", input: { prompt: "hi" } }]);
 * await Deno.remove(path);
 * ```
 */
export async function readTaskFile(path: string): Promise<LoopTask[]> {
  const text = await Deno.readTextFile(path).catch((error) => {
    throw new RunConfigError(path, [`environment.tasks: cannot read: ${error.message}`]);
  });
  const tasks: LoopTask[] = [];
  const issues: string[] = [];
  for (const [i, line] of text.split("\n").entries()) {
    if (line.trim() === "") continue;
    let json: unknown;
    try {
      json = JSON.parse(line);
    } catch (error) {
      issues.push(`line ${i + 1}: not JSON (${(error as Error).message})`);
      continue;
    }
    const task = LoopTaskSchema.safeParse(json);
    if (task.success) tasks.push(task.data);
    else issues.push(`line ${i + 1}: ${task.error.issues.map((x) => x.message).join("; ")}`);
  }
  if (issues.length) throw new RunConfigError(path, issues);
  return tasks;
}

/** The harness spec of a config's `harness` section (built-in toy ones resolved by caller). */
export function harnessSpecOf(h: RunConfig["harness"]): HarnessSpec {
  if (h.command) return { name: "command", options: { ...h.options, command: h.command } };
  if (h.cli) return { name: h.cli, options: h.options };
  if (h.name) return { name: h.name, options: h.options };
  return { name: `builtin-${h.builtin}`, options: h.options };
}

/** The worker's model spec of a config's `model` section (`vocabSize` from the tokenizer). */
export function workerModelOf(m: RunConfig["model"], vocabSize: number): WorkerModelSpec {
  if (m.kind !== "builtin") return m;
  return {
    kind: "builtin",
    config: {
      vocab_size: vocabSize,
      d_model: m.d_model,
      n_layers: m.n_layers,
      n_heads: m.n_heads,
      n_kv_heads: m.n_kv_heads,
      d_ff: 2 * m.d_model,
      max_seq_len: m.max_seq_len,
      tie_embeddings: true,
      rope_theta: 10_000,
      qk_norm: true,
      norm_eps: 1e-6,
    },
    seed: m.seed,
  };
}

/**
 * The loop's config of a run config, given the resolved pieces (tasks, harness, model).
 * `algorithm.kl` maps onto the worker loss's `kl_coef` and `kl_estimator`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loopConfigOf, parseRunConfig } from "./run_config.ts";
 * const run = parseRunConfig(
 *   "name: r\nmodel: {kind: builtin}\nharness: {builtin: arithmetic}\n" +
 *     "environment: {tasks: toy-arithmetic}\nsplit: {heldout: 4}\nsteps: 2\n" +
 *     "algorithm: {kl: {coef: 0.05, estimator: k2}, clip: {low: 0.2, high: 0.28}}",
 *   "r.yaml",
 * );
 * const loop = loopConfigOf(run, {
 *   tasks: [{ id: "t", input: 1 }],
 *   harness: { name: "builtin-arithmetic", options: {} },
 * });
 * assert.deepEqual(
 *   [loop.loss?.kl_coef, (loop.loss as Record<string, unknown>).kl_estimator, loop.loss?.clip_high],
 *   [0.05, "k2", 0.28],
 * );
 * ```
 */
export function loopConfigOf(
  run: RunConfig,
  resolved: {
    tasks: LoopTask[];
    harness: HarnessSpec;
    model?: WorkerModelSpec;
    /** SFT batch size (default: the loop's). */
    sftBatchSize?: number;
  },
): LoopConfigInput {
  const a = run.algorithm;
  const loss: Record<string, unknown> = { kind: a.loss };
  if (a.clip) {
    loss.clip_low = a.clip.low;
    loss.clip_high = a.clip.high;
    if (a.clip.dual !== undefined) loss.dual_clip = a.clip.dual;
  }
  if (a.kl) {
    loss.kl_coef = a.kl.coef;
    // The worker's estimator field (added with the loss contract); older workers use k3.
    loss.kl_estimator = a.kl.estimator;
  }
  if (a.old_logprobs) loss.old_logprobs = a.old_logprobs;
  return {
    name: run.name,
    ...(run.out_dir ? { out_dir: run.out_dir } : {}),
    tasks: resolved.tasks,
    harness: resolved.harness,
    rollout_timeout_s: run.rollout_timeout_s,
    max_attempts: run.max_attempts,
    group_size: run.batch.group_size,
    groups_per_step: run.batch.groups_per_step,
    steps: run.steps,
    ...(a.advantage ? { advantage: a.advantage } : {}),
    ...(a.normalization ? { normalization: a.normalization } : {}),
    loss: loss as LoopConfigInput["loss"],
    ...(a.optimizer ? { optimizer: a.optimizer } : {}),
    ...(a.filters ? { filters: a.filters } : {}),
    ppo_epochs: a.ppo_epochs,
    micro_token_budget: run.batch.micro_token_budget,
    schedule: {
      mode: run.async.mode,
      max_staleness: run.async.max_staleness,
      stale_policy: run.async.stale_policy,
      extra_groups_in_flight: run.async.extra_groups_in_flight,
      tis_cap: a.tis_cap,
      poll_ms: run.async.poll_ms,
    },
    checkpoint_every: run.checkpoints.every,
    checkpoint_keep_last: run.checkpoints.keep_last,
    ...(resolved.model ? { model: resolved.model } : {}),
    ...(run.engine.device ? { device: run.engine.device } : {}),
    sft: {
      steps: run.sft.steps,
      ...(resolved.sftBatchSize ? { batch_size: resolved.sftBatchSize } : {}),
      ...(run.sft.lr !== undefined ? { lr: run.sft.lr } : {}),
    },
    seed: run.seed,
  };
}
