/**
 * Reading a trajectory: each call's prompt and response, and summary counts.
 *
 * @module
 */
import type { ChatMessage } from "../schema.ts";
import type {
  Trajectory,
  TrajectoryCallRef,
  TrajectoryConversation,
  TrajectorySegment,
  TrajectoryStats,
} from "./schema.ts";

/** A model call resolved to its messages. */
export interface ResolvedCall {
  ref: TrajectoryCallRef;
  conversation: TrajectoryConversation;
  segment: TrajectorySegment;
  /** The history the harness sent (everything before the response in its segment). */
  prompt: ChatMessage[];
  /** The assistant message the model answered. */
  response: ChatMessage;
}

/**
 * Resolves every call of `trajectory`, in proxy order.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseMiniSweAgent } from "./mini_swe_agent.ts";
 * import { trajectoryCalls } from "./stats.ts";
 * const t = parseMiniSweAgent([{ role: "user", content: "q" }, { role: "assistant", content: "a" }], "x.json");
 * assert.equal(trajectoryCalls(t)[0].prompt.length, 1);
 * ```
 */
export function trajectoryCalls(trajectory: Trajectory): ResolvedCall[] {
  const byId = new Map(trajectory.conversations.map((c) => [c.id, c]));
  return trajectory.calls.map((ref, i) => {
    const conversation = byId.get(ref.conversation);
    const segment = conversation?.segments[ref.segment];
    const response = segment?.messages[ref.index];
    if (!conversation || !segment || response?.role !== "assistant") {
      throw new Error(
        `calls[${i}]: no assistant message at ${ref.conversation}/${ref.segment}/${ref.index}`,
      );
    }
    return { ref, conversation, segment, prompt: segment.messages.slice(0, ref.index), response };
  });
}

/**
 * Counts conversations, segments, messages, calls, tool calls, tool results and reasoning blocks.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseMiniSweAgent } from "./mini_swe_agent.ts";
 * import { trajectoryStats } from "./stats.ts";
 * const t = parseMiniSweAgent([{ role: "user", content: "q" }, { role: "assistant", content: "a" }], "x.json");
 * assert.equal(trajectoryStats(t).calls, 1);
 * ```
 */
export function trajectoryStats(trajectory: Trajectory): TrajectoryStats {
  const stats: TrajectoryStats = {
    conversations: trajectory.conversations.length,
    segments: 0,
    messages: 0,
    calls: trajectory.calls.length,
    tool_calls: 0,
    tool_results: 0,
    reasoning: 0,
  };
  for (const conversation of trajectory.conversations) {
    for (const segment of conversation.segments) {
      stats.segments++;
      for (const message of segment.messages) {
        stats.messages++;
        stats.tool_calls += message.tool_calls?.length ?? 0;
        if (message.role === "tool") stats.tool_results++;
        if (message.reasoning_content) stats.reasoning++;
      }
    }
  }
  return stats;
}
