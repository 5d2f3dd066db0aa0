/**
 * Pieces every importer shares: ids, text extraction, tool inference, linear conversations.
 *
 * @module
 */
import { z } from "zod";
import type { ChatMessage, JsonObject } from "../schema.ts";
import type { ReasoningImport, Trajectory, TrajectoryCallRef, TrajectorySource } from "./schema.ts";

/**
 * Makes an IdSchema-safe id (letters, digits, `. _ : @ -`, at most 200 characters) from free text.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { safeId } from "./common.ts";
 * assert.equal(safeId("swe-agent/demo/ctf web"), "swe-agent:demo:ctf_web");
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
 * import assert from "node:assert/strict";
 * import { contentText } from "./common.ts";
 * assert.equal(contentText([{ type: "text", text: "a" }, { type: "image" }]), "a\n[image]");
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
 * import assert from "node:assert/strict";
 * import { inferTools } from "./common.ts";
 * const tools = inferTools([{ role: "assistant", content: "", tool_calls: [
 *   { type: "function", function: { name: "ls", arguments: '{"path":"."}' } },
 * ] }]);
 * assert.equal(tools?.[0].type, "function");
 * const fn = tools?.[0].function as { name: string; description: string };
 * assert.deepEqual([fn.name, fn.description], ["ls", ""]);
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
 * Values at `path` inside `value`. A path is dot-separated keys; `key[N]` takes item N of an
 * array, `key[]` every item, `key[type=X]` the items whose `type` is X.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { readPath } from "./common.ts";
 * const raw = { extra: { response: { choices: [{ message: { reasoning: "r" } }] } } };
 * assert.deepEqual(readPath(raw, "extra.response.choices[0].message.reasoning"), ["r"]);
 * const blocks = { content: [{ type: "thinking", thinking: "a" }, { type: "text", text: "b" }] };
 * assert.deepEqual(readPath(blocks, "content[type=thinking].thinking"), ["a"]);
 * ```
 */
export function readPath(value: unknown, path: string): unknown[] {
  let current: unknown[] = [value];
  for (const segment of path.split(".")) {
    const match = /^([^[\]]+)(?:\[([^\]]*)\])?$/.exec(segment);
    if (!match) throw new Error(`readPath: bad segment "${segment}" in "${path}"`);
    const [, key, selector] = match;
    const next: unknown[] = [];
    for (const item of current) {
      if (item === null || typeof item !== "object" || Array.isArray(item)) continue;
      const child = (item as Record<string, unknown>)[key];
      if (selector === undefined) {
        if (child !== undefined) next.push(child);
        continue;
      }
      if (!Array.isArray(child)) continue;
      if (selector === "") next.push(...child);
      else if (/^\d+$/.test(selector)) {
        if (Number(selector) < child.length) next.push(child[Number(selector)]);
      } else if (selector.startsWith("type=")) {
        const type = selector.slice(5);
        next.push(...child.filter((c) => (c as { type?: unknown } | null)?.type === type));
      } else throw new Error(`readPath: bad selector "[${selector}]" in "${path}"`);
    }
    current = next;
  }
  return current;
}

/** The pseudo-field for a `<think>…</think>` block written at the start of a message's text. */
export const INLINE_THINK_FIELD = "content (leading <think>…</think>)";

/**
 * Splits a leading `<think>…</think>` block off `content` the way Qwen3's template does (the
 * reasoning without surrounding newlines, the answer without leading newlines); null when the
 * text does not start with one.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { splitInlineThink } from "./common.ts";
 * assert.deepEqual(
 *   splitInlineThink("<think>\nhmm\n</think>\n\nls"),
 *   { reasoning: "hmm", content: "ls" },
 * );
 * assert.equal(splitInlineThink("ls"), null);
 * ```
 */
export function splitInlineThink(content: string): { reasoning: string; content: string } | null {
  const match = /^\s*<think>([\s\S]*?)<\/think>/.exec(content);
  if (!match) return null;
  return {
    reasoning: match[1].replace(/^\n+|\n+$/g, ""),
    content: content.slice(match[0].length).replace(/^\n+/, ""),
  };
}

/**
 * Reads the logged reasoning of assistant messages from an importer's list of fields (tried in
 * order, the first non-empty one wins; several values at one path are joined by a blank line),
 * then from a `<think>` block at the start of the text, and counts where it found some: the
 * import record's {@link ReasoningImport}. An empty structured field counts as no reasoning (an
 * API's empty string cannot be told from "not requested"); an empty inline `<think></think>` is
 * kept as an empty reasoning, because the policy did write the block.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ReasoningReader } from "./common.ts";
 * const reader = new ReasoningReader(["reasoning_content", "extra.reasoning"]);
 * assert.deepEqual(reader.read({ extra: { reasoning: "think" } }, "ls"), {
 *   reasoning: "think", content: "ls",
 * });
 * assert.deepEqual(reader.read({}, "<think></think>ls"), { reasoning: "", content: "ls" });
 * assert.deepEqual(
 *   reader.record().found,
 *   { "extra.reasoning": 1, "content (leading <think>…</think>)": 1 },
 * );
 * ```
 */
export class ReasoningReader {
  readonly #fields: readonly string[];
  readonly #inline: boolean;
  readonly #found: Record<string, number> = {};

  /** `inline`: also split a leading `<think>` block off the text (not for Anthropic logs). */
  constructor(fields: readonly string[], options: { inline?: boolean } = {}) {
    this.#fields = fields;
    this.#inline = options.inline ?? true;
  }

  /** The reasoning of one logged assistant message and its text without an inline block. */
  read(raw: unknown, content: string): { reasoning: string | undefined; content: string } {
    for (const field of this.#fields) {
      const texts = readPath(raw, field).filter((v): v is string =>
        typeof v === "string" && v.trim() !== ""
      );
      if (texts.length > 0) {
        this.#found[field] = (this.#found[field] ?? 0) + 1;
        return { reasoning: texts.join("\n\n"), content };
      }
    }
    const inline = this.#inline ? splitInlineThink(content) : null;
    if (inline) {
      this.#found[INLINE_THINK_FIELD] = (this.#found[INLINE_THINK_FIELD] ?? 0) + 1;
      return inline;
    }
    return { reasoning: undefined, content };
  }

  /** Counts a reasoning found by the importer's own parsing under `field`. */
  count(field: string): void {
    this.#found[field] = (this.#found[field] ?? 0) + 1;
  }

  /** What was read and found, for the trajectory record. */
  record(): ReasoningImport {
    const fields = [...this.#fields];
    if (this.#inline) fields.push(INLINE_THINK_FIELD);
    return { fields_read: fields, found: { ...this.#found } };
  }
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
  reasoning: ReasoningImport;
}, messages: ChatMessage[]): Trajectory {
  const calls: TrajectoryCallRef[] = [];
  messages.forEach((message, index) => {
    if (message.role === "assistant") calls.push({ conversation: "main", segment: 0, index });
  });
  const { reasoning, ...rest } = meta;
  return {
    ...rest,
    tools: inferTools(messages),
    conversations: [{
      id: "main",
      kind: "main",
      parent: null,
      segments: [{ index: 0, opened_by: "root", messages }],
    }],
    calls,
    reasoning,
  };
}

/**
 * Builds a {@link linearTrajectory} from a log's raw messages: `toMessage` turns each into a chat
 * message (null leaves it out) with a reasoning reader over `fields`, and the trajectory records
 * what that reader found.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { logMessage, logTrajectory } from "./common.ts";
 * const raws = [
 *   { role: "user" as const, content: "hi" },
 *   { role: "assistant" as const, content: "hello", reasoning: "greet back" },
 * ];
 * const meta = { id: "t", group_id: "g", source: "tau-bench" as const, file: "f", reward: 1 };
 * const t = logTrajectory(meta, ["reasoning"], raws, (raw, reader) => logMessage(raw, reader));
 * assert.equal(t.calls.length, 1);
 * assert.deepEqual(t.reasoning.found, { reasoning: 1 });
 * ```
 */
export function logTrajectory<R>(
  meta: Omit<Parameters<typeof linearTrajectory>[0], "reasoning">,
  fields: readonly string[],
  raws: readonly R[],
  toMessage: (raw: R, reader: ReasoningReader) => ChatMessage | null,
): Trajectory {
  const reader = new ReasoningReader(fields);
  const messages: ChatMessage[] = [];
  for (const raw of raws) {
    const message = toMessage(raw, reader);
    if (message !== null) messages.push(message);
  }
  return linearTrajectory({ ...meta, reasoning: reader.record() }, messages);
}

/** Parses JSON text or throws an error naming the file. */
export function parseJson(text: string, file: string): unknown {
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`${file}: not valid JSON: ${(error as Error).message}`);
  }
}

/** The fields of an OpenAI-style log message that {@link logMessage} reads (readers add roles). */
export const RAW_MESSAGE_FIELDS = {
  content: RawContentSchema.optional(),
  tool_calls: z.array(RawToolCallSchema).nullable().optional(),
  tool_call_id: z.string().optional(),
};

/**
 * The chat message of an OpenAI-style log message: its content as text (null stays null with
 * `keepNull`, else becomes ""), an assistant's reasoning (as `reader` finds it) and tool calls,
 * and a tool result's call id (`toolCallId`, by default the message's `tool_call_id`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { logMessage, ReasoningReader } from "./common.ts";
 * const reader = new ReasoningReader(["reasoning_content"]);
 * const raw = {
 *   role: "assistant" as const,
 *   content: "ls",
 *   reasoning_content: "look first",
 *   tool_calls: [{ function: { name: "ls", arguments: {} } }],
 * };
 * assert.deepEqual(logMessage(raw, reader), {
 *   role: "assistant",
 *   content: "ls",
 *   reasoning_content: "look first",
 *   tool_calls: [{ type: "function", function: { name: "ls", arguments: "{}" } }],
 * });
 * ```
 */
export function logMessage(
  raw: {
    role: ChatMessage["role"];
    content?: RawContent;
    tool_calls?: z.infer<typeof RawToolCallSchema>[] | null;
    tool_call_id?: string;
  },
  reader: ReasoningReader,
  options: { toolCallId?: string; keepNull?: boolean } = {},
): ChatMessage {
  const message: ChatMessage = {
    role: raw.role,
    content: options.keepNull && raw.content === null ? null : contentText(raw.content),
  };
  if (raw.role === "assistant") {
    const text = message.content ?? "";
    const { reasoning, content } = reader.read(raw, text);
    if (content !== text) message.content = content;
    if (reasoning !== undefined) message.reasoning_content = reasoning;
    if (raw.tool_calls && raw.tool_calls.length > 0) {
      message.tool_calls = raw.tool_calls.map(toolCall);
    }
  }
  const toolCallId = options.toolCallId ?? raw.tool_call_id;
  if (raw.role === "tool" && toolCallId !== undefined) message.tool_call_id = toolCallId;
  return message;
}
