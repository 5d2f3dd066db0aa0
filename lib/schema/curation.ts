/**
 * Schemas of task curation: the SWE-smith task record (the format SWE-smith publishes and
 * Agent Lightning's coding example trains on), the pipeline's configuration, and a curated
 * task (a record plus what the difficulty probe measured and its split).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "./core.ts";
 * import { SweTaskSchema } from "./curation.ts";
 * const task = parseOrThrow(SweTaskSchema, {
 *   instance_id: "datekit__op_swap__0a1b2c3d",
 *   repo: "datekit",
 *   patch: "",
 *   problem_statement: "weekday(2024, 1, 1) returns 1; it should be 0 (a Monday).",
 *   FAIL_TO_PASS: '["tests.test_calendar_math.WeekdayTest.test_known_mondays"]',
 *   PASS_TO_PASS: [],
 *   image_name: "reins.coding.datekit",
 * });
 * // SWE-bench files store the test lists as JSON strings; both shapes load as arrays.
 * assert.deepEqual(task.FAIL_TO_PASS, ["tests.test_calendar_math.WeekdayTest.test_known_mondays"]);
 * ```
 *
 * @module
 */
import { z } from "zod";

/** A test list: an array of test ids, or (SWE-bench style) a JSON string holding one. */
const TestListSchema = z.preprocess((value) => {
  if (typeof value !== "string") return value;
  try {
    return JSON.parse(value);
  } catch {
    return value;
  }
}, z.array(z.string().min(1)));

/**
 * One SWE-smith task instance. `patch` is the diff that, applied to the environment's base
 * tree, plants the bug (SWE-smith's convention; the task's branch is that tree); the gold fix
 * is its inverse unless `gold_patch` says otherwise.
 */
export const SweTaskSchema = z.object({
  instance_id: z.string().min(1).max(200).regex(
    /^[A-Za-z0-9._-]+$/,
    "must use only letters, digits and . _ -",
  ),
  /** Repository name (a directory of the environment's repositories). */
  repo: z.string().min(1),
  /** Content hash of the environment's base tree the patch applies to (null: not pinned). */
  base_commit: z.string().nullable().default(null),
  /** Branch holding the buggy tree (SWE-smith names it after the instance). */
  branch: z.string().nullable().default(null),
  /** Unified diff that plants the bug ("" when the environment's tree already holds it). */
  patch: z.string(),
  /** The fix, when it is not the inverse of `patch` (null: the inverse). */
  gold_patch: z.string().nullable().default(null),
  problem_statement: z.string().nullable().transform((s) => s ?? ""),
  FAIL_TO_PASS: TestListSchema,
  PASS_TO_PASS: TestListSchema,
  /** Environment (Docker image in SWE-smith; a repositories directory entry here). */
  image_name: z.string().nullable().default(null),
  /** Test directory of the repository (reins extension). */
  test_dir: z.string().min(1).default("tests"),
  /** Test files added to the tree at verification only (reins extension). */
  hidden_tests: z.record(z.string().regex(/^test_[a-z0-9_]+\.py$/), z.string()).default({}),
  created_at: z.string().nullable().default(null),
  /** How the task was made (e.g. the mutation kind). */
  source: z.string().nullable().default(null),
});
/** A SWE-smith task record. */
export type SweTask = z.infer<typeof SweTaskSchema>;
/** A SWE-smith task record as written. */
export type SweTaskInput = z.input<typeof SweTaskSchema>;

/** The probe's outcome class of a task. */
export const ProbeClassSchema = z.enum(["all_solved", "mixed", "all_failed"]);
/** The probe's outcome class of a task. */
export type ProbeClass = z.infer<typeof ProbeClassSchema>;

/** A curated task: the record, the probe's measurement and the split it landed in. */
export const CuratedTaskSchema = SweTaskSchema.extend({
  split: z.enum(["train", "validation"]),
  /** Finished probe rollouts (0: the probe was off). */
  probe_rollouts: z.number().int().min(0),
  probe_solved: z.number().int().min(0),
  /** Solved / finished rollouts (null: not probed). */
  probe_pass_rate: z.number().min(0).max(1).nullable(),
  /** null: not probed. */
  probe_class: ProbeClassSchema.nullable(),
});
/** A curated task. */
export type CuratedTask = z.infer<typeof CuratedTaskSchema>;

/** Options of the probe's policy. */
export const ProbePolicySchema = z.enum(["scripted", "worker"]);
/** Which policy the probe runs. */
export type ProbePolicy = z.infer<typeof ProbePolicySchema>;

/**
 * Configuration of the curation pipeline: every stage's knobs, with the paper's defaults. Unknown
 * keys are errors (a misspelt knob would otherwise be silently ignored).
 */
export const CurationConfigSchema = z.strictObject({
  /** Seed of every random choice (all-failed sample, split, scripted policy). */
  seed: z.number().int().default(0),
  statement: z.strictObject({
    enabled: z.boolean().default(true),
    /** Shorter statements count as trivial. */
    min_chars: z.number().int().min(0).default(40),
    min_words: z.number().int().min(0).default(6),
  }).prefault({}),
  environment: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
  max_tests: z.strictObject({
    enabled: z.boolean().default(true),
    /** Agent Lightning's recipe drops tasks with more than 200 tests. */
    max: z.number().int().positive().default(200),
  }).prefault({}),
  duplicates: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
  leak: z.strictObject({
    enabled: z.boolean().default(true),
    /** Added lines shorter than this (stripped) are too generic to count as a leak. */
    min_chars: z.number().int().min(1).default(12),
  }).prefault({}),
  already_solved: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
  broken: z.strictObject({ enabled: z.boolean().default(true) }).prefault({}),
  /** Test runs at once in the execution stages. */
  test_concurrency: z.number().int().min(1).max(64).default(2),
  /** Per test run. */
  test_timeout_ms: z.number().int().positive().default(30_000),
  /**
   * A seeded sample (stratified by repository) of at most `size` tasks (null: all), taken
   * before the sandboxed test stages or right before the probe.
   */
  sample: z.strictObject({
    size: z.number().int().positive().nullable().default(null),
    before: z.enum(["tests", "probe"]).default("probe"),
  }).prefault({}),
  probe: z.strictObject({
    enabled: z.boolean().default(true),
    /** Rollouts per task (the recipe's 4). */
    k: z.number().int().min(1).max(64).default(4),
    policy: ProbePolicySchema.default("scripted"),
    /** Harness processes at once. */
    concurrency: z.number().int().min(1).max(64).default(4),
    /** Model calls a rollout may make. */
    max_turns: z.number().int().min(1).max(100).default(10),
    max_tokens: z.number().int().positive().default(512),
    timeout_s: z.number().positive().default(180),
    /** Fraction of the all-failed tasks kept (the recipe adds 1,000 to ≈ 5,000 mixed). */
    all_failed_fraction: z.number().min(0).max(1).default(0.2),
    /** Or an absolute number of all-failed tasks (wins over the fraction). */
    all_failed_count: z.number().int().min(0).nullable().default(null),
    /** Scripted policy: candidate edits it tries per rollout. */
    scripted_tries: z.number().int().min(1).max(20).default(4),
  }).prefault({}),
  split: z.strictObject({
    /** Validation share per repository (stratified). */
    validation_fraction: z.number().min(0).max(1).default(0.2),
  }).prefault({}),
});
/** Configuration of the curation pipeline. */
export type CurationConfig = z.infer<typeof CurationConfigSchema>;
/** Configuration as written. */
export type CurationConfigInput = z.input<typeof CurationConfigSchema>;

/** One stage's line of the funnel. */
export const FunnelRowSchema = z.object({
  stage: z.string(),
  /** What the stage checks. */
  description: z.string(),
  in: z.number().int().min(0),
  out: z.number().int().min(0),
  /** Dropped tasks by reason. */
  dropped: z.record(z.string(), z.number().int().min(0)),
});
/** One stage's line of the funnel. */
export type FunnelRow = z.infer<typeof FunnelRowSchema>;
