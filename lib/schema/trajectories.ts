/**
 * Schemas of the trajectories area: real agent runs imported from other harnesses' log formats
 * (SWE-agent, tau-bench, mini-swe-agent, Claude Code) into reins' message form, grouped into the
 * model calls a proxy would have seen.
 *
 * @module
 */
import { z } from "zod";
import { ChatMessageSchema, IdSchema, JsonObjectSchema } from "./core.ts";

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

/** Options of the replay ("what a proxy would have seen"). */
export const ReplayOptionsSchema = z.object({
  rollout_id: IdSchema.optional(),
  attempt_id: IdSchema.default("attempt-1"),
  /** `seq` of the first event; later events count up from it. */
  first_seq: z.number().int().min(1).default(1),
  /** Passed to the chat template as `enable_thinking` (Qwen3). */
  enable_thinking: z.boolean().optional(),
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
