/**
 * mini-swe-agent trajectories: the plain message list the agent kept (`[...]`, or
 * `{messages: [...]}` in saved runs). Actions are bash blocks inside assistant text, so there are
 * no structured tool calls; the history only grows.
 *
 * @module
 */
import { z } from "zod";
import { type ChatMessage, parseOrThrow } from "../schema.ts";
import type { Trajectory } from "../schema/trajectories.ts";
import { contentText, linearTrajectory, RawContentSchema, safeId } from "./common.ts";

const MiniMessageSchema = z.object({
  role: z.enum(["system", "user", "assistant", "tool"]),
  content: RawContentSchema.optional(),
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
 * import { parseMiniSweAgent } from "./mini_swe_agent.ts";
 * const t = parseMiniSweAgent({ messages: [
 *   { role: "user", content: "task" }, { role: "assistant", content: "THOUGHT: look around. ls -la" },
 * ] }, "mini/x.traj.json");
 * t.calls.length; // 1
 * ```
 */
export function parseMiniSweAgent(data: unknown, file: string): Trajectory {
  const parsed = parseOrThrow(MiniFileSchema, data, file);
  const raw = Array.isArray(parsed) ? parsed : parsed.messages;
  const messages: ChatMessage[] = raw.map((m) => ({
    role: m.role,
    content: contentText(m.content),
  }));
  const base = file.slice(file.lastIndexOf("/") + 1).replace(/\.traj\.json$|\.json$/, "");
  return linearTrajectory({
    id: safeId(`mini-swe-agent:${base}`),
    group_id: safeId(`mini-swe-agent:${base}`),
    source: "mini-swe-agent",
    file,
    reward: null,
  }, messages);
}
