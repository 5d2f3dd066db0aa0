/**
 * Trajectory transforms for "what if" measurements.
 *
 * @module
 */
import type { Trajectory } from "./schema.ts";

/** The reasoning {@link withPlaceholderReasoning} writes by default. */
export const PLACEHOLDER_REASONING = "(reasoning not logged)";

/**
 * A copy of `trajectory` in which every assistant message without reasoning gets `text` as its
 * reasoning: what the run would look like from a policy that thinks before every answer (as Qwen3
 * does in thinking mode), for measuring what a template's reasoning handling does to the split.
 * Synthetic by construction; say so wherever its numbers are shown.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseMiniSweAgent } from "./mini_swe_agent.ts";
 * import { withPlaceholderReasoning } from "./transform.ts";
 * const t = parseMiniSweAgent([{ role: "user", content: "q" }, { role: "assistant", content: "a" }], "x.json");
 * const [segment] = withPlaceholderReasoning(t).conversations[0].segments;
 * assert.equal(segment.messages[1].reasoning_content, "(reasoning not logged)");
 * ```
 */
export function withPlaceholderReasoning(
  trajectory: Trajectory,
  text: string = PLACEHOLDER_REASONING,
): Trajectory {
  if (!text.trim()) throw new Error("text: must not be empty (an empty reasoning is no reasoning)");
  return {
    ...trajectory,
    conversations: trajectory.conversations.map((conversation) => ({
      ...conversation,
      segments: conversation.segments.map((segment) => ({
        ...segment,
        messages: segment.messages.map((message) =>
          message.role === "assistant" && !message.reasoning_content
            ? { ...message, reasoning_content: text }
            : message
        ),
      })),
    })),
  };
}
