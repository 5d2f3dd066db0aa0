/**
 * SWE-agent `.traj` files: `history[]` holds every message the agent loop appended (system,
 * demonstrations, observations as user or tool messages, assistant turns with optional OpenAI
 * `tool_calls`). The history only grows, so each assistant turn's prompt is all that precedes it.
 *
 * Reasoning: SWE-agent copies a model's Anthropic-style `thinking_blocks` onto the history item
 * ({@link SWE_AGENT_REASONING_FIELDS}); its `thought` field is the text before the action, part of
 * `content`, not hidden reasoning, so it is not read as such.
 *
 * @module
 */
import { z } from "zod";
import { parseOrThrow } from "../schema.ts";
import type { Trajectory } from "./schema.ts";
import { logMessage, logTrajectory, RAW_MESSAGE_FIELDS, safeId } from "./common.ts";

/** Where SWE-agent history items keep reasoning (`HistoryItem.thinking_blocks`, from LiteLLM). */
export const SWE_AGENT_REASONING_FIELDS = ["thinking_blocks[].thinking"] as const;

const SweAgentMessageSchema = z.object({
  role: z.enum(["system", "user", "assistant", "tool"]),
  ...RAW_MESSAGE_FIELDS,
  tool_call_ids: z.array(z.string()).nullable().optional(),
}).passthrough();

const SweAgentFileSchema = z.object({
  history: z.array(SweAgentMessageSchema),
}).passthrough();

function baseName(file: string): string {
  return file.slice(file.lastIndexOf("/") + 1).replace(/\.traj(\.json)?$/, "");
}

/**
 * Converts a parsed SWE-agent `.traj` object into a trajectory. The group id is the instance
 * (file base name), so several runs of one issue form a group.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseSweAgent } from "./swe_agent.ts";
 * const t = parseSweAgent({ history: [
 *   { role: "system", content: "sys" }, { role: "user", content: "fix it" },
 *   { role: "assistant", content: "ls" },
 * ] }, "demo/x.traj");
 * assert.equal(t.calls.length, 1);
 * ```
 */
export function parseSweAgent(data: unknown, file: string): Trajectory {
  const parsed = parseOrThrow(SweAgentFileSchema, data, file);
  const stem = file.replace(/\.traj$/, "");
  return logTrajectory(
    {
      id: safeId(stem.startsWith("swe-agent/") ? stem : `swe-agent/${stem}`),
      group_id: safeId(`swe-agent:${baseName(file)}`),
      source: "swe-agent",
      file,
      reward: null,
    },
    SWE_AGENT_REASONING_FIELDS,
    parsed.history,
    (raw, reader) =>
      logMessage(raw, reader, { toolCallId: raw.tool_call_id ?? raw.tool_call_ids?.[0] }),
  );
}
