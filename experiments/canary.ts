/**
 * Canaries: a short, deterministic slice of the computation behind a result set, with its
 * outputs recorded to the last bit, so that a later checkout can tell whether it still
 * computes the same numbers without rerunning the experiment (`results_status.ts`).
 *
 * | kind            | the slice                                                                  | outputs recorded |
 * | --------------- | -------------------------------------------------------------------------- | ---------------- |
 * | `mechanism`     | the testbed (`testbed.ts` through `lib/algo`), a few seeds and steps of one regime | every setting's final and curve means |
 * | `torch_testbed` | the torch testbed through the real worker's PPO loss, 2 seeds × 2 steps, 1 thread | per seed and setting: the success trace |
 * | `loop_cell`     | one grid cell on the full stack (SFT warm start, 2 RL steps, seeded rollouts, 1 torch thread, a 4-rollout CRN evaluation) | per step: rewards, losses, entropy, gradient norm, advantages, tokens; every trained rollout's reward and sample lengths; the evaluation's rewards |
 * | `mismatch`      | the mismatch study (`mismatch.ts`) at one checkpoint: a few SFT steps, llama.cpp on f32, q8_0 and q4_0 exports, a few seeded calls, 1 thread, 1 slot | per engine: every sampled id, the engine's and the trainer's logprobs, the pooled metrics |
 * | `mismatch_grid` | one cell of the mismatch grid (`mismatch_grid.ts`): the loop-cell canary sampling through llama.cpp at a GGUF precision (1 slot, 1 thread) under a correction | per step: the loop-cell fields, the engine–trainer mismatch and the correction's masked tokens and ESS; the evaluation's rewards |
 *
 * The loop cell's canary seeds its training rollouts (`rollout_seeds`): the grid's cells
 * sampled them unseeded, so only the canary is reproducible bit for bit; it runs the same code.
 * Exact means exact: numbers are compared with `Object.is` (so `-0`, `NaN` and the last bit
 * count), and {@link firstDifference} names the first path that differs.
 *
 * **Platforms.** Bit-exact agreement is only expected on one numeric platform (same torch,
 * BLAS, llama.cpp and CPU kind: `provenance.ts` `samePlatform`). Across CPU kinds the slices
 * diverge far beyond rounding: on an AVX-512 Xeon against the machine the results were
 * recorded on, the loop-cell canary's first-step entropy moved 25% (300 SFT steps amplify the
 * last bits) and llama.cpp's q8_0 sampled other tokens from the 27th on, so no tolerance would
 * separate a code change from a CPU change. A canary therefore keeps one reference per
 * platform: the recording, plus `platforms`, each the outputs of code whose fingerprint was
 * already vouched for: `canary_platform.ts` computes it in a clean checkout of the commit the
 * results were recorded or confirmed on, so every reference is what the results' code computes
 * there. A rerun is exact when it equals any reference bit for bit; it *differs* (and CI fails)
 * only when a reference from this very platform exists; with none, the canary is *unchecked*
 * here, and says so. Recordings made before the CPU kind was recorded belong to no known platform: a
 * machine that reproduces one exactly can record it as its own reference, so that a later
 * difference there fails. The `mechanism` kind runs in TypeScript alone and is one platform
 * everywhere.
 *
 * @module
 */
import { z } from "zod";
import { parseOrThrow } from "../lib/schema.ts";
import { AdvantageLevelSchema, NormalizationModeSchema } from "../lib/schema/core.ts";
import { type Setting, settingLabel } from "./grid.ts";
import {
  type GitState,
  gitState,
  GitStateSchema,
  type Runtime,
  runtimeDifference,
  runtimeInfo,
  RuntimeSchema,
  samePlatform,
} from "./provenance.ts";

const SettingSchema = z.object({
  advantage: AdvantageLevelSchema,
  normalization: NormalizationModeSchema,
});

/** What a canary runs. */
export const CanarySpecSchema = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("mechanism"),
    regime: z.enum(["headline", "grid_matched"]),
    seeds: z.number().int().min(1).max(50),
    steps: z.number().int().min(1).max(50),
  }).strict(),
  z.object({
    kind: z.literal("torch_testbed"),
    regime: z.enum(["headline", "grid_matched"]),
    seeds: z.number().int().min(1).max(4),
    steps: z.number().int().min(1).max(5),
  }).strict(),
  z.object({
    kind: z.literal("loop_cell"),
    setting: SettingSchema,
    seed: z.number().int().min(0),
    /** Overrides of the grid's cell settings (`loop_cell.ts` `CELL_SETTINGS`). */
    base: z.record(z.string(), z.number()),
  }).strict(),
  z.object({
    kind: z.literal("mismatch"),
    sft_steps: z.number().int().min(0).max(100),
    prompts: z.number().int().min(1).max(8),
    max_tokens: z.number().int().min(1).max(64),
    engines: z.array(z.enum(["torch", "f32", "f16", "q8_0", "q4_0"])).min(1),
  }).strict(),
  z.object({
    kind: z.literal("mismatch_grid"),
    engine: z.enum(["f32", "f16", "q8_0", "q4_0"]),
    /** A correction of `mismatch_grid.ts` `CORRECTIONS` (`none`, `tis`, `seq_is`, `icepop`). */
    correction: z.string().min(1),
    seed: z.number().int().min(0),
    /** Overrides of the cell settings (`loop_cell.ts` `CELL_SETTINGS`). */
    base: z.record(z.string(), z.number()),
  }).strict(),
]);
/** What a canary runs. */
export type CanarySpec = z.infer<typeof CanarySpecSchema>;

/** A canary's outputs on one more platform, computed by code the canary already vouched for. */
export const PlatformReferenceSchema = z.object({
  outputs: z.json(),
  seconds: z.number(),
  git: GitStateSchema,
  runtime: RuntimeSchema,
  /** The code fingerprint that computed it: the recorded one or a confirmed one. */
  code_hash: z.string(),
  recorded_at: z.string(),
});
/** A canary's outputs on one more platform. */
export type PlatformReference = z.infer<typeof PlatformReferenceSchema>;

/** `canary.json`: the spec and what it computed when recorded. */
export const CanaryRecordSchema = z.object({
  spec: CanarySpecSchema,
  outputs: z.json(),
  seconds: z.number(),
  git: GitStateSchema,
  runtime: RuntimeSchema,
  recorded_at: z.string(),
  /** The same canary's outputs on other platforms (see the module doc). */
  platforms: z.array(PlatformReferenceSchema).default([]),
});
/** `canary.json`: the spec and what it computed when recorded. */
export type CanaryRecord = z.infer<typeof CanaryRecordSchema>;

/** The path of a results folder's canary. */
export function canaryPath(dir: string): string {
  return `${dir}/canary.json`;
}

/**
 * The short cell both loop-cell canaries run: 2 RL steps from the grids' 300-step warm start
 * (after 20 SFT steps every rollout scored 0, nothing trained and no correction's mask was
 * exercised), one group of 4, a 4-rollout CRN evaluation.
 */
const SHORT_CELL_BASE = {
  steps: 2,
  sft_steps: 300,
  group_size: 4,
  groups_per_step: 1,
  val_tasks: 4,
  ppo_epochs: 2,
  warmup_steps: 2,
  // Pinned so that a new cell setting's default (e.g. a held-out evaluation) does not change
  // what the canary runs.
  heldout_tasks: 0,
};

/** The loop-cell canary of the ablation grids: the reference setting, seed 0. */
export const LOOP_CELL_CANARY: CanarySpec = {
  kind: "loop_cell",
  setting: { advantage: "rollout", normalization: "rollout_token_mean" },
  seed: 0,
  base: SHORT_CELL_BASE,
};

/** The canary of the mechanism studies (the full sweep and the quick one). */
export const MECHANISM_CANARY: CanarySpec = {
  kind: "mechanism",
  regime: "headline",
  seeds: 6,
  steps: 8,
};

/** The canary of the torch testbed. */
export const TORCH_CANARY: CanarySpec = {
  kind: "torch_testbed",
  regime: "headline",
  seeds: 2,
  steps: 2,
};

/** The canary of the mismatch study: one checkpoint, f32, q8_0 and q4_0, 3 calls of 32 tokens. */
export const MISMATCH_CANARY: CanarySpec = {
  kind: "mismatch",
  sft_steps: 20,
  prompts: 3,
  max_tokens: 32,
  engines: ["f32", "q8_0", "q4_0"],
};

/**
 * The canary of the mismatch grid: a short q4_0 cell under masked sequence-level IS (the sized
 * grid's precision, and a correction whose mask decides which tokens train), seeded rollouts, a
 * 4-rollout CRN evaluation.
 */
export const MISMATCH_GRID_CANARY: CanarySpec = {
  kind: "mismatch_grid",
  engine: "q4_0",
  correction: "seq_is",
  seed: 0,
  base: SHORT_CELL_BASE,
};

/**
 * The first place where two JSON values differ, as a path with both values (null: equal).
 * Numbers are compared with `Object.is`: exact, `-0` ≠ `0`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { firstDifference } from "./canary.ts";
 * assert.equal(firstDifference({ a: [1, 2] }, { a: [1, 2] }), null);
 * assert.equal(
 *   firstDifference({ a: [1, 0.1 + 0.2] }, { a: [1, 0.3] }, "outputs"),
 *   "outputs.a[1]: recorded 0.30000000000000004, now 0.3",
 * );
 * assert.equal(firstDifference({ a: 1 }, { b: 1 }), "a: recorded 1, now absent");
 * ```
 */
export function firstDifference(recorded: unknown, now: unknown, path = ""): string | null {
  const show = (v: unknown) => v === undefined ? "absent" : JSON.stringify(v);
  const at = path || "(root)";
  if (typeof recorded === "number" && typeof now === "number") {
    return Object.is(recorded, now) ? null : `${at}: recorded ${recorded}, now ${now}`;
  }
  if (Array.isArray(recorded) && Array.isArray(now)) {
    const n = Math.min(recorded.length, now.length);
    for (let i = 0; i < n; i++) {
      const d = firstDifference(recorded[i], now[i], `${path}[${i}]`);
      if (d) return d;
    }
    return recorded.length === now.length
      ? null
      : `${at}: recorded ${recorded.length} items, now ${now.length}`;
  }
  if (
    recorded !== null && now !== null && typeof recorded === "object" &&
    typeof now === "object" && !Array.isArray(recorded) && !Array.isArray(now)
  ) {
    const a = recorded as Record<string, unknown>;
    const b = now as Record<string, unknown>;
    for (const key of [...new Set([...Object.keys(a), ...Object.keys(b)])]) {
      const d = firstDifference(a[key], b[key], path ? `${path}.${key}` : key);
      if (d) return d;
    }
    return null;
  }
  return recorded === now ? null : `${at}: recorded ${show(recorded)}, now ${show(now)}`;
}

/** Runs a canary and returns its outputs (plain JSON). */
export async function runCanary(spec: CanarySpec): Promise<unknown> {
  switch (spec.kind) {
    case "mechanism":
      return await mechanismCanary(spec);
    case "torch_testbed":
      return await torchCanary(spec);
    case "loop_cell":
      return await loopCellCanary(spec);
    case "mismatch":
      return await mismatchCanary(spec);
    case "mismatch_grid":
      return await loopCellCanary(spec);
  }
}

async function mechanismCanary(
  spec: Extract<CanarySpec, { kind: "mechanism" }>,
): Promise<unknown> {
  const { GRID_MATCHED, HEADLINE, runRegime } = await import("./mechanism.ts");
  const r = spec.regime === "headline" ? HEADLINE : GRID_MATCHED;
  const result = runRegime({ ...r, run: { ...r.run, steps: spec.steps } }, spec.seeds);
  return result.settings.map((s) => ({
    setting: s.setting,
    final_mean: s.final.mean,
    final_std: s.final.std,
    curve: s.curve.map((c) => c.mean),
    split_share: s.split_share,
    split_weight_share: s.split_weight_share,
  }));
}

async function torchCanary(
  spec: Extract<CanarySpec, { kind: "torch_testbed" }>,
): Promise<unknown> {
  const { GRID_MATCHED, HEADLINE } = await import("./mechanism.ts");
  const { runTorchTestbed, TORCH_RUN } = await import("./testbed_torch.ts");
  const { startLocalWorker } = await import("../lib/trainer/local_worker.ts");
  const { ABLATION_SETTINGS } = await import("./grid.ts");
  const env = (spec.regime === "headline" ? HEADLINE : GRID_MATCHED).env;
  await using worker = await startLocalWorker({ threads: 1 });
  const out: { setting: string; seed: number; trace: number[] }[] = [];
  for (let seed = 0; seed < spec.seeds; seed++) {
    for (const s of ABLATION_SETTINGS) {
      const trace = await runTorchTestbed(worker.client, env, s, seed, {
        ...TORCH_RUN,
        steps: spec.steps,
      });
      out.push({ setting: settingLabel(s), seed, trace });
    }
  }
  return out;
}

async function mismatchCanary(spec: Extract<CanarySpec, { kind: "mismatch" }>): Promise<unknown> {
  const { MISMATCH_CONFIG, runMismatch } = await import("./mismatch.ts");
  const calls: Record<string, unknown> = {};
  const study = await runMismatch({
    ...MISMATCH_CONFIG,
    sft_steps: [spec.sft_steps],
    prompts: spec.prompts,
    max_tokens: spec.max_tokens,
    engines: spec.engines,
    length_buckets: [0, spec.max_tokens],
    slots: 1,
    threads: 1,
  }, { onCalls: (_step, engine, c) => (calls[engine] = c) });
  return { calls, by_engine: study.by_engine };
}

/** The step metrics a loop-cell canary records (timings and counters of waiting left out). */
const LOOP_FIELDS = [
  "step",
  "rollouts",
  "reward_mean",
  "reward_std",
  "samples",
  "trained_rollouts",
  "trained_samples",
  "trained_tokens",
  "advantage_mean",
  "advantage_std",
  "advantage_abs_max",
  "loss",
  "entropy",
  "clip_fraction",
  "grad_norm",
  "alignment_corr",
  "alignment_max_abs_dp",
  "break_reasons",
] as const;

/** What a mismatch-grid canary records on top: the mismatch and the correction's cost. */
const MISMATCH_FIELDS = [
  "alignment_mean_abs_dp",
  "alignment_max_abs_dlogprob",
  "alignment_k3_kl",
  "is_masked_tokens",
  "is_masked_sequences",
  "is_ess",
] as const;

/**
 * The SFT warm-start cache the loop-cell canaries of one process share: the ablation's and the
 * mismatch grid's canaries start from the same warm start (same settings, same key), and RL
 * loads it from the file whether it was just trained or found, so sharing changes no number
 * and saves the second canary its 300 SFT steps. Removed when the process exits.
 */
let sharedSftCache: string | null = null;

function canarySftCache(): string {
  if (sharedSftCache) return sharedSftCache;
  const dir = Deno.makeTempDirSync({ prefix: "reins_canary_sft_" });
  globalThis.addEventListener("unload", () => {
    try {
      Deno.removeSync(dir, { recursive: true });
    } catch { /* already gone */ }
  });
  return sharedSftCache = dir;
}

async function loopCellCanary(
  spec: Extract<CanarySpec, { kind: "loop_cell" | "mismatch_grid" }>,
): Promise<unknown> {
  const { startLoopCells } = await import("./loop_cell.ts");
  const mm = spec.kind === "mismatch_grid" ? await import("./mismatch_grid.ts") : null;
  if (spec.kind === "mismatch_grid" && !(spec.correction in mm!.CORRECTIONS)) {
    throw new Error(
      `canary.correction: "${spec.correction}" is none of ${
        Object.keys(mm!.CORRECTIONS).join(", ")
      }`,
    );
  }
  const work = await Deno.makeTempDir({ prefix: "reins_canary_" });
  try {
    await using cells = await startLoopCells({
      workDir: `${work}/stack`,
      cacheDir: canarySftCache(),
      threads: 1,
      concurrency: 1,
      rolloutSeeds: true,
      ...(spec.kind === "mismatch_grid" && mm
        ? {
          engine: {
            kind: "llama_cpp" as const,
            tokenizerDir: decodeURIComponent(
              new URL("../data/tokenizers/char/", import.meta.url).pathname,
            ),
            type: spec.engine,
            slots: 1,
            threads: 1,
          },
          cellLoss: () => ({
            old_logprobs: "recompute" as const,
            ...mm.CORRECTIONS[spec.correction],
          }),
        }
        : {}),
    });
    const setting: Setting = spec.kind === "loop_cell"
      ? spec.setting
      : { advantage: "rollout", normalization: "rollout_token_mean" };
    const fields = spec.kind === "mismatch_grid"
      ? [...LOOP_FIELDS, ...MISMATCH_FIELDS]
      : LOOP_FIELDS;
    const cell = {
      id: `canary-${settingLabel(setting).replace("/", "-")}-s${spec.seed}`,
      setting: settingLabel(setting),
      advantage: setting.advantage,
      normalization: setting.normalization,
      merge: "prefix_merge" as const,
      seed: spec.seed,
      env: "split-arithmetic",
    };
    const grid = {
      name: "canary",
      base: spec.base,
    } as unknown as Parameters<typeof cells.runner>[1]["grid"];
    const dir = `${work}/cell`;
    const output = await cells.runner(cell as Parameters<typeof cells.runner>[0], { grid, dir });
    const evals = JSON.parse(await Deno.readTextFile(`${dir}/eval.json`));
    const batches = (await Deno.readTextFile(`${dir}/batches.jsonl`)).split("\n").filter(Boolean)
      .map((l) => JSON.parse(l) as { step: number; rollouts: { rollout_id: string }[] });
    return {
      steps: output.metrics.map((m) =>
        Object.fromEntries(fields.map((k) => [k, (m as Record<string, unknown>)[k] ?? null]))
      ),
      batches: batches.map((b) => ({
        step: b.step,
        rollouts: [...b.rollouts].sort((x, y) => x.rollout_id.localeCompare(y.rollout_id)),
      })),
      eval_start: evals.start?.rewards ?? null,
      eval_final: evals.final?.rewards ?? null,
    };
  } finally {
    await Deno.remove(work, { recursive: true }).catch(() => undefined);
  }
}

/** Runs a canary and writes `canary.json` into a results folder. */
export async function recordCanary(dir: string, spec: CanarySpec): Promise<CanaryRecord> {
  const parsed = parseOrThrow(CanarySpecSchema, spec, "canary");
  const t0 = performance.now();
  const outputs = await runCanary(parsed);
  const record: CanaryRecord = {
    spec: parsed,
    outputs: JSON.parse(JSON.stringify(outputs)),
    seconds: (performance.now() - t0) / 1000,
    git: await gitState(),
    runtime: await runtimeInfo(),
    recorded_at: new Date().toISOString(),
    // New outputs: the references of other platforms were of the code before.
    platforms: [],
  };
  await Deno.mkdir(dir, { recursive: true });
  await Deno.writeTextFile(canaryPath(dir), JSON.stringify(record, null, 1) + "\n");
  return record;
}

/** Reads a folder's `canary.json` (null when there is none). */
export async function readCanary(dir: string): Promise<CanaryRecord | null> {
  let text: string;
  try {
    text = await Deno.readTextFile(canaryPath(dir));
  } catch (error) {
    if (error instanceof Deno.errors.NotFound) return null;
    throw error;
  }
  return parseOrThrow(CanaryRecordSchema, JSON.parse(text), canaryPath(dir));
}

/** What a rerun of a recorded canary found. */
export interface CanaryOutcome {
  /** True when the outputs equal one reference (the recording or a platform's) bit for bit. */
  exact: boolean;
  /**
   * The first path that differs (null when exact): from this platform's reference when there
   * is one, else from the recording.
   */
  difference: string | null;
  /**
   * Whether a reference from this platform exists: a difference then means the code changed
   * the numbers; without one, the canary cannot be checked here.
   */
  platform_recorded: boolean;
  /** The reference matched or compared: `recording`, or `platform <cpu>`. */
  reference: string;
  seconds: number;
  /** Runtime fields that differ from the reference compared (empty: same runtime). */
  runtime_changed: string;
  runtime: Runtime;
  git: GitState;
}

/** One reference of a canary: its name in messages, its outputs and where they were computed. */
export interface CanaryReference {
  /** `recording`, or `platform <cpu>`. */
  name: string;
  outputs: unknown;
  runtime: Runtime;
}

function references(record: CanaryRecord): CanaryReference[] {
  return [
    { name: "recording", outputs: record.outputs, runtime: record.runtime },
    ...record.platforms.map((p) => ({
      name: `platform ${p.runtime.cpu ?? "unrecorded"}`,
      outputs: p.outputs,
      runtime: p.runtime,
    })),
  ];
}

/**
 * The canary's reference from the platform of `runtime` (undefined: none recorded there).
 * The mechanism testbed is TypeScript alone (IEEE doubles, V8's own `Math` functions): one
 * platform everywhere, so its recording is every machine's reference.
 */
export function platformReference(
  record: CanaryRecord,
  runtime: Runtime,
): CanaryReference | undefined {
  const all = references(record);
  return record.spec.kind === "mechanism"
    ? all[0]
    : all.find((r) => samePlatform(r.runtime, runtime));
}

/**
 * Compares a rerun's outputs with every reference of a canary (see the module doc).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { compareWithReferences, MECHANISM_CANARY, TORCH_CANARY } from "./canary.ts";
 * const runtime = (cpu: string | null) => ({
 *   deno: "2.9.6", v8: "", typescript: "", os: "linux", arch: "x86_64", cpus: 2,
 *   python: null, torch: null, numpy: null, blas: null, torch_threads: null, device: "cpu", cpu,
 * });
 * const git = { commit: null, dirty: false, diff_sha256: null };
 * const record = {
 *   spec: TORCH_CANARY, outputs: [0.5], seconds: 1, git, runtime: runtime(null),
 *   recorded_at: "", platforms: [{
 *     outputs: [0.25], seconds: 1, git, runtime: runtime("B (avx512f)"), code_hash: "h",
 *     recorded_at: "",
 *   }],
 * };
 * assert.equal(compareWithReferences(record, [0.25], runtime("B (avx512f)")).exact, true);
 * const elsewhere = compareWithReferences(record, [0.3], runtime("C (avx2)"));
 * assert.equal(elsewhere.exact, false);
 * assert.equal(elsewhere.platform_recorded, false); // unchecked on C, not failed
 * assert.equal(compareWithReferences(record, [0.3], runtime("B (avx512f)")).platform_recorded, true);
 * // The mechanism testbed (TypeScript alone) is one platform everywhere: a difference fails.
 * const portable = { ...record, spec: MECHANISM_CANARY };
 * assert.equal(compareWithReferences(portable, [0.3], runtime("C (avx2)")).platform_recorded, true);
 * ```
 */
export function compareWithReferences(
  record: CanaryRecord,
  now: unknown,
  runtime: Runtime,
): Pick<
  CanaryOutcome,
  "exact" | "difference" | "platform_recorded" | "reference" | "runtime_changed"
> {
  const all = references(record);
  const matched = all.find((r) => firstDifference(r.outputs, now) === null);
  const own = platformReference(record, runtime);
  const compared = matched ?? own ?? all[0];
  return {
    exact: matched !== undefined,
    difference: matched ? null : firstDifference(compared.outputs, now, "outputs"),
    platform_recorded: own !== undefined,
    reference: compared.name,
    runtime_changed: runtimeDifference(compared.runtime, runtime),
  };
}

/** Reruns a recorded canary and compares its outputs with its references. */
export async function rerunCanary(record: CanaryRecord): Promise<CanaryOutcome> {
  const t0 = performance.now();
  const now = JSON.parse(JSON.stringify(await runCanary(record.spec)));
  const runtime = await runtimeInfo();
  return {
    ...compareWithReferences(record, now, runtime),
    seconds: (performance.now() - t0) / 1000,
    runtime,
    git: await gitState(),
  };
}
