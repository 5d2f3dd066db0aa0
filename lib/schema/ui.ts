/**
 * Schemas of the Live UI and the monitors (lib/ui, lib/monitors): training-step metrics the run
 * overview draws, monitor flags with their evidence, LLM auditor settings and verdicts, the
 * rollout-list filters, and the rollout export file.
 *
 * Conventions (how other areas feed the UI):
 * - a training loop reports one step as a `custom` event named {@link TRAIN_STEP_EVENT} (in any
 *   rollout, e.g. a bookkeeping rollout labelled `kind=run`) whose `data` is a
 *   {@link TrainStepMetrics}, or as one JSON line of the same shape in a metrics JSONL file;
 * - monitors store what they found as one `custom` event named {@link MONITOR_FLAGS_EVENT} per
 *   checked attempt (`data: {flags: MonitorFlag[]}`), and the auditor its verdict as a `custom`
 *   event named {@link AUDIT_VERDICT_EVENT}.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "./core.ts";
 * import { TrainStepMetricsSchema } from "./ui.ts";
 * const step = parseOrThrow(TrainStepMetricsSchema, { step: 3, reward_mean: 0.5 });
 * assert.equal(step.step, 3);
 * ```
 *
 * @module
 */
import { z } from "zod";
import { JsonValueSchema, RolloutModeSchema, RolloutStatusSchema } from "./core.ts";

/** Name of the custom event that carries one training step's metrics. */
export const TRAIN_STEP_EVENT = "train_step";
/** Name of the custom event that carries a monitor run's flags. */
export const MONITOR_FLAGS_EVENT = "monitor_flags";
/** Name of the custom event that carries an LLM auditor's verdict. */
export const AUDIT_VERDICT_EVENT = "audit_verdict";
/** `format` field of a rollout export file. */
export const ROLLOUT_EXPORT_FORMAT = "reins.rollout.v1";

const finite = z.number().refine(Number.isFinite, "must be a finite number");

/**
 * Metrics of one training step, as the run overview reads them. Only `step` is required; every
 * other field is drawn when present. Unknown fields are kept (entropy, grad norm, …) and listed
 * in the overview's table.
 */
export const TrainStepMetricsSchema = z.looseObject({
  step: z.number().int().min(0),
  /** Policy version after the step's optimizer update. */
  policy_version: z.number().int().min(0).optional(),
  /** Epoch ms when the step ended. */
  time: z.number().optional(),
  /** Mean outcome reward of the step's rollouts. */
  reward_mean: finite.optional(),
  /** Share (0..1) of the step's rollouts that passed (reward > 0 unless the loop says else). */
  pass_rate: z.number().min(0).max(1).optional(),
  /** Pearson correlation of exp(rollout logprob) vs exp(trainer logprob) on trained tokens. */
  alignment_corr: z.number().min(-1).max(1).optional(),
  rollouts: z.number().int().min(0).optional(),
  samples: z.number().int().min(0).optional(),
  samples_per_rollout: finite.optional(),
  /** Breaks of exact prefix merging by reason (docs/architecture.md#sample-assembly). */
  break_reasons: z.record(z.string(), z.number().min(0)).optional(),
  /** Phase wall times in ms (e.g. `rollout`, `assemble`, `train`, `sync`). */
  timings_ms: z.record(z.string(), z.number().min(0)).optional(),
});
/** Metrics of one training step. */
export type TrainStepMetrics = z.infer<typeof TrainStepMetricsSchema>;

/** How bad a finding is. `alert` = likely reward hacking or broken data. */
export const FlagSeveritySchema = z.enum(["info", "warn", "alert"]);
/** How bad a finding is. */
export type FlagSeverity = z.infer<typeof FlagSeveritySchema>;

/** One piece of evidence behind a flag: where it was seen and what exactly. */
export const FlagEvidenceSchema = z.object({
  /** Event seq it was found in (null: the rollout as a whole). */
  seq: z.number().int().nullable(),
  /** What part of the event (`tool_call`, `response`, `log`, `logprobs`, `custom`, …). */
  source: z.string(),
  /** The offending text or numbers, shortened. */
  excerpt: z.string(),
});
/** One piece of evidence behind a flag. */
export type FlagEvidence = z.infer<typeof FlagEvidenceSchema>;

/** A monitor's finding on one rollout. */
export const MonitorFlagSchema = z.object({
  /** Name of the monitor that raised it (e.g. `git_network`). */
  monitor: z.string().min(1),
  severity: FlagSeveritySchema,
  /** One sentence a human reads first. */
  message: z.string(),
  evidence: z.array(FlagEvidenceSchema),
});
/** A monitor's finding on one rollout. */
export type MonitorFlag = z.infer<typeof MonitorFlagSchema>;

/** `data` of a {@link MONITOR_FLAGS_EVENT} custom event. */
export const MonitorFlagsDataSchema = z.object({
  flags: z.array(MonitorFlagSchema),
  /** Monitors that ran (so a clean result is distinguishable from "not checked"). */
  monitors: z.array(z.string()),
  checked_at: z.number(),
});
/** `data` of a monitor-flags event. */
export type MonitorFlagsData = z.infer<typeof MonitorFlagsDataSchema>;

/** Settings of the optional LLM auditor (any OpenAI-compatible chat endpoint). */
export const AuditorConfigSchema = z.object({
  /** Base URL ending before `/chat/completions`, e.g. `http://127.0.0.1:8000/v1`. */
  base_url: z.string().url(),
  api_key: z.string().optional(),
  model: z.string().min(1),
  /** System prompt; the rollout summary goes in the user message. */
  prompt: z.string().min(1).optional(),
  /** Audit only rollouts whose worst flag is at least this severe. */
  min_severity: FlagSeveritySchema.default("warn"),
  timeout_ms: z.number().int().min(1).max(600_000).default(60_000),
  /** Longest rollout summary sent (characters). */
  max_chars: z.number().int().min(100).max(1_000_000).default(20_000),
});
/** Settings of the LLM auditor (input form). */
export type AuditorConfig = z.input<typeof AuditorConfigSchema>;

/** An auditor's judgement. */
export const AuditVerdictKindSchema = z.enum(["hacking", "suspicious", "clean", "unknown"]);
/** An auditor's judgement. */
export type AuditVerdictKind = z.infer<typeof AuditVerdictKindSchema>;

/** `data` of an {@link AUDIT_VERDICT_EVENT} custom event. */
export const AuditVerdictSchema = z.object({
  verdict: AuditVerdictKindSchema,
  reason: z.string(),
  model: z.string(),
  /** The auditor's raw answer (shortened). */
  raw: z.string(),
  /** Monitors whose flags were sent. */
  flagged_by: z.array(z.string()),
  audited_at: z.number(),
});
/** An auditor's verdict. */
export type AuditVerdict = z.infer<typeof AuditVerdictSchema>;

const optionalNumber = z.preprocess(
  (v) => (v === "" || v === undefined || v === null ? undefined : Number(v)),
  finite.optional(),
);
const optionalText = z.preprocess(
  (v) => (v === "" || v === null ? undefined : v),
  z.string().max(200).optional(),
);

/** Filters and paging of the UI's rollout list (query-string values). */
export const RolloutListQuerySchema = z.object({
  status: z.preprocess((v) => (v === "" ? undefined : v), RolloutStatusSchema.optional()),
  mode: z.preprocess((v) => (v === "" ? undefined : v), RolloutModeSchema.optional()),
  /** Training step: matches the rollout's `step` label. */
  step: optionalText,
  /** Group id (the loop's groups are `<run>-g<k>`). */
  group: optionalText,
  /** Run: the `run` label (the loop's run name). */
  run: optionalText,
  /** Role: the `role` label (`train` or `eval` for the loop's rollouts). */
  role: optionalText,
  /** Text that must occur (case-insensitive) in the input, prompts, responses or tool calls. */
  q: optionalText,
  /**
   * Sort key: `created` (default; `order` picks the direction) or `reward`, `updated`, `step`,
   * `attempts`, each ascending, or descending with a leading `-`.
   */
  sort: z.preprocess(
    (v) => (v === "" ? undefined : v),
    z.enum([
      "created",
      "reward",
      "-reward",
      "updated",
      "-updated",
      "step",
      "-step",
      "attempts",
      "-attempts",
    ]).default("created"),
  ),
  /** Harness name: the `harness` label, else `config.harness.name`. */
  harness: optionalText,
  reward_min: optionalNumber,
  reward_max: optionalNumber,
  /** `yes`: only rollouts with monitor flags; `no`: only without. */
  flagged: z.preprocess((v) => (v === "" ? undefined : v), z.enum(["yes", "no"]).optional()),
  /** `oldest` (default): creation order, the store's cursor; `newest`: newest first. */
  order: z.preprocess(
    (v) => (v === "" ? undefined : v),
    z.enum(["oldest", "newest"]).default("oldest"),
  ),
  /** Cursor of the page (from the previous page). */
  after: optionalText,
  limit: z.preprocess(
    (v) => (v === "" || v === undefined ? undefined : Number(v)),
    z.number().int().min(1).max(500).default(50),
  ),
});
/** Parsed rollout-list filters. */
export type RolloutListQuery = z.infer<typeof RolloutListQuerySchema>;

/** The rollout export file (one JSON document: rollout, events, samples, flags). */
export const RolloutExportSchema = z.object({
  format: z.literal(ROLLOUT_EXPORT_FORMAT),
  exported_at: z.number(),
  rollout: z.record(z.string(), JsonValueSchema),
  /** Every event in wire form (token ids and logprobs as number arrays). */
  events: z.array(z.record(z.string(), JsonValueSchema)),
  /** Samples of the chosen strategy, token arrays as number arrays. */
  samples: z.array(z.record(z.string(), JsonValueSchema)),
  strategy: z.string(),
  breaks: z.array(z.record(z.string(), JsonValueSchema)),
  dropped: z.array(z.record(z.string(), JsonValueSchema)),
  metrics: z.record(z.string(), JsonValueSchema),
  flags: z.array(MonitorFlagSchema),
});
/** The rollout export file. */
export type RolloutExport = z.infer<typeof RolloutExportSchema>;
