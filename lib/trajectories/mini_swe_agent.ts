/**
 * mini-swe-agent trajectories: the message list the agent kept (`[...]`, or `{messages: [...]}`
 * in saved runs, `trajectory_format` `mini-swe-agent-1` or `-1.1`). In the text-based format
 * actions are bash blocks inside assistant text and observations come back as user messages; in
 * the tool-calling format (v2) assistant messages carry OpenAI `tool_calls` and observations are
 * `tool` messages. `exit` messages record how the run ended and were never sent to the model. The
 * history only grows.
 *
 * Assistant messages are LiteLLM message dumps with the whole API response under
 * `extra.response`, so the policy's reasoning can sit in several places: every one of
 * {@link MINI_SWE_AGENT_REASONING_FIELDS} is read (the first non-empty wins), and the record's
 * `reasoning` says which ones held it.
 *
 * @module
 */
import { z } from "zod";
import { parseOrThrow } from "../schema.ts";
import type { Trajectory } from "./schema.ts";
import { logMessage, logTrajectory, RAW_MESSAGE_FIELDS, safeId } from "./common.ts";

/**
 * Where mini-swe-agent logs keep reasoning, relative to an assistant message, in the order they
 * are tried: the message itself (v2 stores LiteLLM's message dump: `reasoning_content` from
 * DeepSeek/vLLM-style APIs, `reasoning` from OpenRouter-style ones, Anthropic `thinking_blocks`),
 * then the raw response under `extra.response` (chat completions `choices[0].message`, also
 * LiteLLM's `provider_specific_fields`, and the Responses API's `reasoning` output items).
 */
export const MINI_SWE_AGENT_REASONING_FIELDS = [
  "reasoning_content",
  "reasoning",
  "thinking_blocks[].thinking",
  "extra.response.choices[0].message.reasoning_content",
  "extra.response.choices[0].message.reasoning",
  "extra.response.choices[0].message.thinking_blocks[].thinking",
  "extra.response.choices[0].message.provider_specific_fields.reasoning_content",
  "extra.response.choices[0].message.provider_specific_fields.reasoning",
  "extra.response.output[type=reasoning].summary[].text",
  "extra.response.output[type=reasoning].content[].text",
] as const;

const MiniMessageSchema = z.object({
  role: z.enum(["system", "user", "assistant", "tool", "exit"]),
  ...RAW_MESSAGE_FIELDS,
}).passthrough();

const MiniFileSchema = z.union([
  z.array(MiniMessageSchema),
  z.object({ messages: z.array(MiniMessageSchema) }).passthrough(),
]);

/**
 * Converts a parsed mini-swe-agent trajectory into a trajectory.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseMiniSweAgent } from "./mini_swe_agent.ts";
 * const t = parseMiniSweAgent({ messages: [
 *   { role: "user", content: "task" },
 *   { role: "assistant", content: "THOUGHT: look around. ls -la", extra: { response: {
 *     choices: [{ message: { content: "THOUGHT: look around. ls -la", reasoning: "start small" } }],
 *   } } },
 * ] }, "mini/x.traj.json");
 * assert.equal(t.calls.length, 1);
 * assert.equal(t.conversations[0].segments[0].messages[1].reasoning_content, "start small");
 * assert.deepEqual(t.reasoning.found, { "extra.response.choices[0].message.reasoning": 1 });
 * ```
 */
export function parseMiniSweAgent(data: unknown, file: string): Trajectory {
  const parsed = parseOrThrow(MiniFileSchema, data, file);
  const raw = Array.isArray(parsed) ? parsed : parsed.messages;
  const base = file.slice(file.lastIndexOf("/") + 1).replace(/\.traj\.json$|\.json$/, "");
  const id = safeId(`mini-swe-agent:${base}`);
  const meta = { id, group_id: id, source: "mini-swe-agent" as const, file, reward: null };
  // `exit` messages record how the run ended; the model never saw them.
  return logTrajectory(
    meta,
    MINI_SWE_AGENT_REASONING_FIELDS,
    raw,
    (m, reader) => m.role === "exit" ? null : logMessage({ ...m, role: m.role }, reader),
  );
}
