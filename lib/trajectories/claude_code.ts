/**
 * Claude Code session logs (`~/.claude/projects/<project>/<session>.jsonl`).
 *
 * What the format does, and how it maps to calls:
 * - One JSON record per line. Claude Code writes an assistant message one content block per line
 *   as it streams; lines with the same `message.id` are one API response (one model call), even
 *   when tool results of its first tool calls were logged between them.
 * - `thinking` blocks become `reasoning_content`; `tool_use` blocks become `tool_calls` (input
 *   serialized as JSON); `tool_result` blocks in user records become `tool` messages.
 * - Sub-agents (the Task tool) run their own conversation. Newer versions log them in
 *   `<session>/subagents/agent-<id>.jsonl` (`isSidechain: true`, `agentId`); older ones embed
 *   them in the parent's `progress` records (`data.type == "agent_progress"`, `data.agentId`,
 *   `data.message`). Both become a separate conversation `agent:<id>` (a branch).
 * - Compaction: a `system` record with `subtype: "compact_boundary"` (and/or a user record with
 *   `isCompactSummary: true`) replaces the history by a summary; the next calls' prompts start
 *   from the summary, so a new segment begins.
 * - Progress, hook, snapshot, queue and local-command records are UI state, not model input.
 *
 * @module
 */
import { z } from "zod";
import { type ChatMessage, formatPath, ValidationError } from "../schema.ts";
import type { Trajectory, TrajectoryCallRef, TrajectoryConversation } from "./schema.ts";
import { contentText, inferTools, RawContentSchema, ReasoningReader, safeId } from "./common.ts";

/**
 * Where Claude Code logs keep reasoning: `thinking` content blocks of assistant records (the
 * blocks of one API response, spread over several lines, are joined by a blank line).
 * `redacted_thinking` blocks carry only ciphertext and give no reasoning text.
 */
export const CLAUDE_CODE_REASONING_FIELDS = ["message.content[type=thinking].thinking"] as const;

const BlockSchema = z.object({ type: z.string() }).passthrough();

const ApiMessageSchema = z.object({
  role: z.enum(["user", "assistant"]),
  id: z.string().optional(),
  content: z.union([z.string(), z.array(BlockSchema)]),
}).passthrough();

const MessageRecordSchema = z.object({
  type: z.enum(["user", "assistant"]),
  uuid: z.string().optional(),
  timestamp: z.string().optional(),
  isSidechain: z.boolean().optional(),
  agentId: z.string().optional(),
  isCompactSummary: z.boolean().optional(),
  message: ApiMessageSchema,
}).passthrough();
type MessageRecord = z.infer<typeof MessageRecordSchema>;

const TextBlockSchema = z.object({ type: z.literal("text"), text: z.string() });
const ThinkingBlockSchema = z.object({ type: z.literal("thinking"), thinking: z.string() });
const ToolUseBlockSchema = z.object({
  type: z.literal("tool_use"),
  id: z.string(),
  name: z.string(),
  input: z.unknown(),
});
const ToolResultBlockSchema = z.object({
  type: z.literal("tool_result"),
  tool_use_id: z.string(),
  content: RawContentSchema.optional(),
  is_error: z.boolean().optional(),
});

/** A record routed to a conversation, with its place in the file(s). */
interface Entry {
  conversation: string;
  parent: string | null;
  record: MessageRecord | { type: "compact_boundary"; uuid?: string };
  order: number;
  timestamp: string | undefined;
}

/** Assistant message under construction (its lines may be far apart). */
interface Pending {
  message: ChatMessage;
  texts: string[];
  thinking: string[];
}

function parseLine(line: string, where: string): unknown {
  try {
    return JSON.parse(line);
  } catch (error) {
    throw new Error(`${where}: not valid JSON: ${(error as Error).message}`);
  }
}

function parseRecord(value: unknown, where: string): MessageRecord {
  const result = MessageRecordSchema.safeParse(value);
  if (result.success) return result.data;
  const issues = result.error.issues.map((i) => `${formatPath([where, ...i.path])}: ${i.message}`);
  throw new ValidationError(formatPath([where, ...(result.error.issues[0]?.path ?? [])]), issues);
}

function block<S extends z.ZodType>(schema: S, value: unknown, where: string): z.infer<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = result.error.issues.map((i) => `${formatPath([where, ...i.path])}: ${i.message}`);
  throw new ValidationError(formatPath([where, ...(result.error.issues[0]?.path ?? [])]), issues);
}

/** Routes the records of one JSONL file to conversations. */
function collectEntries(text: string, file: string, start: number): Entry[] {
  const entries: Entry[] = [];
  const lines = text.split("\n");
  lines.forEach((line, i) => {
    if (!line.trim()) return;
    const where = `${file}:${i + 1}`;
    const raw = parseLine(line, where) as Record<string, unknown>;
    if (raw === null || typeof raw !== "object") {
      throw new ValidationError(where, [`${where}: expected a JSON object per line`]);
    }
    const order = start + i;
    const timestamp = typeof raw.timestamp === "string" ? raw.timestamp : undefined;
    const sidechain = raw.isSidechain === true;
    const agentKey = `agent:${String(raw.agentId ?? raw.sessionId ?? "sidechain")}`;
    const conversation = sidechain ? agentKey : "main";
    const parent = sidechain ? "main" : null;
    if (raw.type === "user" || raw.type === "assistant") {
      entries.push({ conversation, parent, record: parseRecord(raw, where), order, timestamp });
    } else if (raw.type === "system" && raw.subtype === "compact_boundary") {
      const uuid = typeof raw.uuid === "string" ? raw.uuid : undefined;
      entries.push({
        conversation,
        parent,
        record: { type: "compact_boundary", uuid },
        order,
        timestamp,
      });
    } else if (raw.type === "progress") {
      const data = raw.data as Record<string, unknown> | undefined;
      if (data?.type !== "agent_progress" || !data.message) return;
      const inner = data.message as Record<string, unknown>;
      if (inner.type !== "user" && inner.type !== "assistant") return;
      entries.push({
        conversation: `agent:${String(data.agentId ?? raw.parentToolUseID ?? "progress")}`,
        parent: "main",
        record: parseRecord(inner, `${where}.data.message`),
        order,
        timestamp: typeof inner.timestamp === "string" ? inner.timestamp : timestamp,
      });
    }
  });
  return entries;
}

interface CallOrder {
  ref: TrajectoryCallRef;
  order: number;
  timestamp: string | undefined;
}

function buildConversation(
  id: string,
  parent: string | null,
  entries: Entry[],
  calls: CallOrder[],
  reader: ReasoningReader,
): TrajectoryConversation {
  const conversation: TrajectoryConversation = {
    id,
    kind: id === "main" ? "main" : "subagent",
    parent,
    segments: [{ index: 0, opened_by: id === "main" ? "root" : "branch", messages: [] }],
  };
  let segment = conversation.segments[0];
  let pending = new Map<string, Pending>();
  const all: Pending[] = [];
  const seen = new Set<string>();
  const newSegment = () => {
    segment = { index: segment.index + 1, opened_by: "compaction", messages: [] };
    conversation.segments.push(segment);
    pending = new Map();
  };
  for (const entry of entries) {
    const record = entry.record;
    // A sub-agent both embedded in progress records and logged in its own file appears twice.
    if (record.uuid !== undefined) {
      if (seen.has(record.uuid)) continue;
      seen.add(record.uuid);
    }
    if (record.type === "compact_boundary") {
      if (segment.messages.length > 0) newSegment();
      continue;
    }
    const where = `${id}@${entry.order}`;
    if (record.type === "user") {
      if (record.isCompactSummary && segment.messages.length > 0) newSegment();
      const content = record.message.content;
      if (typeof content === "string") {
        segment.messages.push({ role: "user", content });
        continue;
      }
      let parts: z.infer<typeof BlockSchema>[] = [];
      const flush = () => {
        if (parts.length === 0) return;
        segment.messages.push({ role: "user", content: contentText(parts) });
        parts = [];
      };
      content.forEach((raw, j) => {
        if (raw.type === "tool_result") {
          flush();
          const result = block(ToolResultBlockSchema, raw, `${where}.message.content[${j}]`);
          segment.messages.push({
            role: "tool",
            content: contentText(result.content),
            tool_call_id: result.tool_use_id,
          });
        } else parts.push(raw);
      });
      flush();
      continue;
    }
    const key = record.message.id ?? record.uuid ?? `line${entry.order}`;
    let current = pending.get(key);
    if (!current) {
      current = { message: { role: "assistant", content: "" }, texts: [], thinking: [] };
      pending.set(key, current);
      all.push(current);
      calls.push({
        ref: { conversation: id, segment: segment.index, index: segment.messages.length },
        order: entry.order,
        timestamp: entry.timestamp,
      });
      segment.messages.push(current.message);
    }
    const content = record.message.content;
    if (typeof content === "string") {
      current.texts.push(content);
      continue;
    }
    content.forEach((raw, j) => {
      const at = `${where}.message.content[${j}]`;
      if (raw.type === "text") current.texts.push(block(TextBlockSchema, raw, at).text);
      else if (raw.type === "thinking") {
        current.thinking.push(block(ThinkingBlockSchema, raw, at).thinking);
      } else if (raw.type === "tool_use") {
        const use = block(ToolUseBlockSchema, raw, at);
        (current.message.tool_calls ??= []).push({
          id: use.id,
          type: "function",
          function: { name: use.name, arguments: JSON.stringify(use.input ?? {}) },
        });
      }
      // redacted_thinking and other blocks carry no text a template could render.
    });
  }
  for (const item of all) {
    // Claude streams a whitespace-only text block before thinking; it is not part of the answer.
    item.message.content = item.texts.filter((t) => t.trim() !== "").join("\n\n");
    const reasoning = item.thinking.filter((t) => t.trim() !== "").join("\n\n");
    if (reasoning) {
      item.message.reasoning_content = reasoning;
      reader.count(CLAUDE_CODE_REASONING_FIELDS[0]);
    }
  }
  return conversation;
}

/** One file's text, named for error messages. */
export interface JsonlFile {
  file: string;
  text: string;
}

/**
 * Converts a Claude Code session (its main JSONL and any sub-agent JSONL files) into one
 * trajectory: conversation `main` plus one `agent:<id>` conversation per sub-agent, calls in the
 * order they happened (timestamps, else file order).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseClaudeCode } from "./claude_code.ts";
 * const line = (o: unknown) => JSON.stringify(o);
 * const text = [
 *   line({ type: "user", uuid: "u1", message: { role: "user", content: "hi" } }),
 *   line({ type: "assistant", uuid: "a1", message: { role: "assistant", id: "m1",
 *     content: [{ type: "thinking", thinking: "greet" }] } }),
 *   line({ type: "assistant", uuid: "a2", message: { role: "assistant", id: "m1",
 *     content: [{ type: "text", text: "hello" }] } }),
 * ].join("\n");
 * const t = parseClaudeCode({ file: "s.jsonl", text });
 * assert.equal(t.calls.length, 1); // two lines, one message id
 * ```
 */
export function parseClaudeCode(main: JsonlFile, subagents: JsonlFile[] = []): Trajectory {
  let start = 0;
  const entries: Entry[] = [];
  for (const part of [main, ...subagents]) {
    entries.push(...collectEntries(part.text, part.file, start));
    start += part.text.length + 1;
  }
  const grouped = new Map<string, Entry[]>();
  for (const entry of entries) {
    const list = grouped.get(entry.conversation) ?? [];
    list.push(entry);
    grouped.set(entry.conversation, list);
  }
  if (!grouped.has("main")) grouped.set("main", []);
  const calls: CallOrder[] = [];
  const reader = new ReasoningReader(CLAUDE_CODE_REASONING_FIELDS, { inline: false });
  const conversations = [...grouped].map(([id, list]) =>
    buildConversation(id, list[0]?.parent ?? null, list, calls, reader)
  );
  conversations.sort((a, b) => (a.id === "main" ? -1 : b.id === "main" ? 1 : 0));
  const timed = calls.every((call) => call.timestamp !== undefined);
  calls.sort((a, b) =>
    timed && a.timestamp !== b.timestamp
      ? (a.timestamp! < b.timestamp! ? -1 : 1)
      : a.order - b.order
  );
  const base = main.file.slice(main.file.lastIndexOf("/") + 1).replace(/\.jsonl$/, "");
  const messages = conversations.flatMap((c) => c.segments.flatMap((s) => s.messages));
  return {
    id: safeId(`claude-code:${base}`),
    group_id: safeId(`claude-code:${base}`),
    source: "claude-code",
    file: main.file,
    reward: null,
    tools: inferTools(messages),
    conversations,
    calls: calls.map((call) => call.ref),
    reasoning: reader.record(),
  };
}
