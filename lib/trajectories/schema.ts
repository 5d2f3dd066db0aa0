/**
 * Schemas of the trajectories area: real agent runs imported from other harnesses' log formats
 * (SWE-agent, tau-bench, mini-swe-agent, Claude Code) into reins' message form, grouped into the
 * model calls a proxy would have seen.
 *
 * @module
 */
import { z } from "zod";
import {
  BreakReasonSchema,
  ChatMessageSchema,
  IdSchema,
  JsonObjectSchema,
  MergeStrategySchema,
} from "../schema/core.ts";

/** Log formats the importers read. */
export const TrajectorySourceSchema = z.enum([
  "swe-agent",
  "tau-bench",
  "mini-swe-agent",
  "claude-code",
]);
/** Log formats the importers read. */
export type TrajectorySource = z.infer<typeof TrajectorySourceSchema>;

/**
 * One stretch of a conversation whose history only grows. A compaction (the harness replaced the
 * history by a summary) starts the next segment.
 */
export const TrajectorySegmentSchema = z.object({
  index: z.number().int().min(0),
  opened_by: z.enum(["root", "branch", "compaction"]),
  /** Every message of the stretch, in order; assistant messages are the model's answers. */
  messages: z.array(ChatMessageSchema),
});
/** One stretch of a conversation whose history only grows. */
export type TrajectorySegment = z.infer<typeof TrajectorySegmentSchema>;

/** A conversation: the main agent, or a sub-agent the main agent started. */
export const TrajectoryConversationSchema = z.object({
  /** `main`, or `agent:<id>` for a sub-agent. */
  id: z.string().min(1),
  kind: z.enum(["main", "subagent"]),
  /** The conversation that started this one (sub-agents). */
  parent: z.string().nullable(),
  segments: z.array(TrajectorySegmentSchema).min(1),
});
/** A conversation of a trajectory. */
export type TrajectoryConversation = z.infer<typeof TrajectoryConversationSchema>;

/**
 * A model call: the assistant message at `segments[segment].messages[index]` of `conversation`.
 * Its prompt is every message of that segment before it.
 */
export const TrajectoryCallRefSchema = z.object({
  conversation: z.string().min(1),
  segment: z.number().int().min(0),
  index: z.number().int().min(0),
});
/** A model call, by position. */
export type TrajectoryCallRef = z.infer<typeof TrajectoryCallRefSchema>;

/**
 * Where an importer looked for the policy's logged reasoning and what it found: the record says
 * which fields were read, so a replay's `logged` policy output can be checked against the log.
 */
export const ReasoningImportSchema = z.object({
  /**
   * Every field the importer reads reasoning from, per assistant message, in the order it tries
   * them (the first non-empty one wins); paths are relative to the logged message.
   */
  fields_read: z.array(z.string()),
  /** Assistant messages whose reasoning came from each field (fields that gave none: absent). */
  found: z.record(z.string(), z.number().int().min(0)),
});
/** Where an importer looked for the policy's logged reasoning and what it found. */
export type ReasoningImport = z.infer<typeof ReasoningImportSchema>;

/** One imported agent run (one rollout). */
export const TrajectorySchema = z.object({
  /** Rollout id (IdSchema-safe), unique within the shared data. */
  id: IdSchema,
  /** Task id: runs of the same task form a GRPO group. */
  group_id: IdSchema,
  source: TrajectorySourceSchema,
  /** The file it came from (relative to the trajectories root when read from there). */
  file: z.string(),
  /** Outcome reward when the log has one (tau-bench); null otherwise. */
  reward: z.number().nullable(),
  /**
   * Tool definitions sent with every call. The logs do not keep them, so they are inferred from
   * the calls made (name and argument names only); null when no tool call was made.
   */
  tools: z.array(JsonObjectSchema).nullable(),
  conversations: z.array(TrajectoryConversationSchema).min(1),
  /** Every model call in the order a proxy would have seen them. */
  calls: z.array(TrajectoryCallRefSchema),
  /** The reasoning fields the importer read, and how often each held reasoning. */
  reasoning: ReasoningImportSchema,
});
/** One imported agent run. */
export type Trajectory = z.infer<typeof TrajectorySchema>;

/** Counts that describe a trajectory (what the importer tests pin per file). */
export const TrajectoryStatsSchema = z.object({
  conversations: z.number().int(),
  segments: z.number().int(),
  /** Messages over all segments (a compaction summary counts once, in its segment). */
  messages: z.number().int(),
  /** Assistant messages = model calls. */
  calls: z.number().int(),
  tool_calls: z.number().int(),
  /** `tool` messages (tool results). */
  tool_results: z.number().int(),
  /** Assistant messages that carry reasoning (`reasoning_content`). */
  reasoning: z.number().int(),
});
/** Counts that describe a trajectory. */
export type TrajectoryStats = z.infer<typeof TrajectoryStatsSchema>;

/**
 * What the replayed policy emits before its answer. The logs keep final messages only, so the
 * replay has to assume it; every figure built on a replay depends on this choice.
 *
 * - `logged`: what the transcript says: a `<think>` block with the logged reasoning where the log
 *   has some, none where it has none (a GPT-4o log replays as a policy that never thinks).
 * - `thinking`: a policy that always opens a think block (Qwen3 in thinking mode): the logged
 *   reasoning where there is some, an empty `<think>\n\n</think>\n\n` where there is none.
 * - `plain`: a policy that never opens one: logged reasoning is dropped.
 */
export const PolicyOutputSchema = z.enum(["logged", "thinking", "plain"]);
/** What the replayed policy emits before its answer. */
export type PolicyOutput = z.infer<typeof PolicyOutputSchema>;

/** Options of the replay ("what a proxy would have seen"). */
export const ReplayOptionsSchema = z.object({
  rollout_id: IdSchema.optional(),
  attempt_id: IdSchema.default("attempt-1"),
  /** `seq` of the first event; later events count up from it. */
  first_seq: z.number().int().min(1).default(1),
  /** Passed to the chat template as `enable_thinking` (Qwen3). */
  enable_thinking: z.boolean().optional(),
  /** What the policy emits before its answer (see {@link PolicyOutputSchema}). */
  policy_output: PolicyOutputSchema.default("logged"),
  /**
   * Encode each conversation with the tokens area's incremental encoder (exact: equal to
   * encoding whole prompts, and far faster on long histories); false encodes whole prompts.
   */
  incremental: z.boolean().default(true),
  /** Keep the rendered prompt text on each event (`request.prompt_text`). */
  keep_text: z.boolean().default(false),
});
/** Options of the replay (input form). */
export type ReplayOptions = z.input<typeof ReplayOptionsSchema>;

/** Settings of a samples-per-rollout measurement on transcripts (`deno task splits`). */
export const SplitsOptionsSchema = z.object({
  policy_output: PolicyOutputSchema.default("logged"),
  strategy: MergeStrategySchema.default("prefix_merge"),
  /** Passed to the chat template as `enable_thinking`; absent: the template's default. */
  enable_thinking: z.boolean().optional(),
});
/** Settings of a samples-per-rollout measurement (input form). */
export type SplitsOptions = z.input<typeof SplitsOptionsSchema>;

/** What a samples-per-rollout measurement found, with the settings it assumed. */
export const SplitsReportSchema = z.object({
  /** The chat template: `qwen3`, `qwen3_keep_reasoning`, or the tokenizer folder's name. */
  template: z.string(),
  policy_output: PolicyOutputSchema,
  strategy: MergeStrategySchema,
  /** `enable_thinking` as passed to the template; null: not passed (the template's default). */
  enable_thinking: z.boolean().nullable(),
  /** Transcript files read. */
  files: z.number().int().min(0),
  rollouts: z.number().int().min(0),
  calls: z.number().int().min(0),
  samples: z.number().int().min(0),
  samples_per_rollout: z.number(),
  /** Share (0..1) of rollouts that stayed one sample. */
  single_share: z.number(),
  /** Tokens the samples store (context + responses). */
  tokens_stored: z.number().int().min(0),
  /** tokens_stored / the tokens `per_call` would store (Σ prompt + response of every call). */
  storage_ratio: z.number(),
  /**
   * Splits of exact prefix merging per reason (for `tree` the same splits, kept as branches of
   * one tree; for `per_call` those that merging would have had).
   */
  break_reasons: z.record(BreakReasonSchema, z.number().int().min(0)),
});
/** What a samples-per-rollout measurement found. */
export type SplitsReport = z.infer<typeof SplitsReportSchema>;
