/**
 * Pieces every importer shares: ids, text extraction, tool inference, linear conversations.
 *
 * @module
 */
import { z } from "zod";
import type { ChatMessage, JsonObject } from "../schema.ts";
import type { Trajectory, TrajectoryCallRef, TrajectorySource } from "../schema/trajectories.ts";

/**
 * Makes an IdSchema-safe id (letters, digits, `. _ : @ -`, at most 200 characters) from free text.
 *
 * @example
 * ```ts
 * import { safeId } from "./common.ts";
 * safeId("swe-agent/demo/ctf web"); // "swe-agent:demo:ctf_web"
 * ```
 */
export function safeId(text: string): string {
  const cleaned = text.replace(/\//g, ":").replace(/[^A-Za-z0-9._:@-]+/g, "_");
  if (cleaned.length <= 200) return cleaned || "_";
  // Long paths keep their tail (the informative part) plus a short hash of the whole.
  let hash = 0;
  for (let i = 0; i < text.length; i++) hash = (hash * 31 + text.charCodeAt(i)) >>> 0;
  return `${hash.toString(36)}~${cleaned.slice(-190)}`;
}

/** Message content as logs write it: a string, null, or a list of typed parts. */
export const RawContentSchema = z.union([
  z.string(),
  z.null(),
  z.array(z.union([
    z.object({ type: z.string(), text: z.string().optional() }).passthrough(),
    z.string(),
  ])),
]);
/** Message content as logs write it. */
export type RawContent = z.infer<typeof RawContentSchema>;

/**
 * Flattens raw content to text: text parts joined by newlines, other parts (images) as a
 * `[type]` placeholder so that the history keeps a trace of them.
 *
 * @example
 * ```ts
 * import { contentText } from "./common.ts";
 * contentText([{ type: "text", text: "a" }, { type: "image" }]); // "a\n[image]"
 * ```
 */
export function contentText(content: RawContent | undefined): string {
  if (content === null || content === undefined) return "";
  if (typeof content === "string") return content;
  return content.map((part) => {
    if (typeof part === "string") return part;
    if (typeof part.text === "string") return part.text;
    return `[${part.type}]`;
  }).join("\n");
}

/** OpenAI-style tool call as the logs store it. */
export const RawToolCallSchema = z.object({
  id: z.string().optional(),
  type: z.string().optional(),
  function: z.object({
    name: z.string(),
    arguments: z.union([z.string(), z.record(z.string(), z.unknown())]),
  }),
});

/** Converts a logged tool call (arguments as text or object) to reins' form. */
export function toolCall(
  raw: z.infer<typeof RawToolCallSchema>,
): NonNullable<ChatMessage["tool_calls"]>[number] {
  const args = raw.function.arguments;
  return {
    ...(raw.id !== undefined ? { id: raw.id } : {}),
    type: "function",
    function: {
      name: raw.function.name,
      arguments: typeof args === "string" ? args : JSON.stringify(args),
    },
  };
}

function jsonType(value: unknown): string {
  if (Array.isArray(value)) return "array";
  if (value === null) return "null";
  if (typeof value === "number") return Number.isInteger(value) ? "integer" : "number";
  return typeof value;
}

/**
 * Infers tool definitions (OpenAI function-tool shape) from the calls in `messages`: one per
 * tool name, its parameters the argument names seen with their JSON types. Logs do not keep the
 * definitions the harness sent, and a prompt without any would misstate its length; the inferred
 * ones are constant over the run, so they never cause a split. Null when no tool was called.
 *
 * @example
 * ```ts
 * import { inferTools } from "./common.ts";
 * const tools = inferTools([{ role: "assistant", content: "", tool_calls: [
 *   { type: "function", function: { name: "ls", arguments: '{"path":"."}' } },
 * ] }]);
 * tools?.[0]; // { type: "function", function: { name: "ls", description: "", parameters: ... } }
 * ```
 */
export function inferTools(messages: Iterable<ChatMessage>): JsonObject[] | null {
  const tools = new Map<string, Map<string, string>>();
  for (const message of messages) {
    for (const call of message.tool_calls ?? []) {
      const params = tools.get(call.function.name) ?? new Map<string, string>();
      tools.set(call.function.name, params);
      let args: unknown;
      try {
        args = JSON.parse(call.function.arguments);
      } catch {
        args = undefined;
      }
      if (args && typeof args === "object" && !Array.isArray(args)) {
        for (const [key, value] of Object.entries(args)) {
          if (!params.has(key)) params.set(key, jsonType(value));
        }
      }
    }
  }
  if (tools.size === 0) return null;
  return [...tools].sort(([a], [b]) => a.localeCompare(b)).map(([name, params]) => ({
    type: "function",
    function: {
      name,
      description: "",
      parameters: {
        type: "object",
        properties: Object.fromEntries(
          [...params].sort(([a], [b]) => a.localeCompare(b)).map(([key, type]) => [key, { type }]),
        ),
        required: [],
      },
    },
  }));
}

/**
 * Builds a one-conversation, one-segment trajectory from an append-only message list (SWE-agent,
 * tau-bench, mini-swe-agent): each assistant message is a call whose prompt is everything before.
 */
export function linearTrajectory(meta: {
  id: string;
  group_id: string;
  source: TrajectorySource;
  file: string;
  reward: number | null;
}, messages: ChatMessage[]): Trajectory {
  const calls: TrajectoryCallRef[] = [];
  messages.forEach((message, index) => {
    if (message.role === "assistant") calls.push({ conversation: "main", segment: 0, index });
  });
  return {
    ...meta,
    tools: inferTools(messages),
    conversations: [{
      id: "main",
      kind: "main",
      parent: null,
      segments: [{ index: 0, opened_by: "root", messages }],
    }],
    calls,
  };
}

/** Parses JSON text or throws an error naming the file. */
export function parseJson(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`${file}: not valid JSON: ${(error as Error).message}`);
  }
}
