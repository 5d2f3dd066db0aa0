/**
 * Real Claude Code sessions (`data/trajectories/claude-code/`) replayed
 * as the Anthropic Messages requests Claude Code would have sent at each assistant turn: the
 * proxy decodes every one (thinking, tool_use, tool_result blocks as they occur in the wild),
 * the tool calls and results pair up, and the Qwen3 template renders the prompt, incrementally
 * and exactly.
 */
import assert from "node:assert/strict";
import { anthropicMessagesCodec } from "../lib/proxy/codecs/anthropic_messages.ts";
import { SessionTracker } from "../lib/proxy/sessions.ts";
import { IncrementalChatEncoder } from "../lib/tokens/incremental.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { trajectoriesRoot } from "../lib/trajectories/load.ts";

const DIR = new URL(`${trajectoriesRoot()}/claude-code/`, "file://");

interface LogLine {
  type?: string;
  isSidechain?: boolean;
  message?: { id?: string; role?: string; content?: unknown };
}

type Block = Record<string, unknown>;

/** The API-level messages of the main chain: assistant lines merged by message id. */
function apiMessages(lines: LogLine[]): { role: string; content: Block[] | string }[] {
  const out: { role: string; content: Block[] | string; id?: string }[] = [];
  for (const line of lines) {
    if ((line.type !== "user" && line.type !== "assistant") || line.isSidechain) continue;
    const m = line.message;
    if (!m?.role || m.content === undefined) continue;
    const last = out.at(-1);
    if (m.role === "assistant" && last?.role === "assistant" && last.id === m.id) {
      (last.content as Block[]).push(...(m.content as Block[]));
      continue;
    }
    const content = typeof m.content === "string"
      ? m.content
      : structuredClone(m.content as Block[]);
    out.push({ role: m.role, content, ...(m.id ? { id: m.id } : {}) });
  }
  return out.map(({ role, content }) => ({ role, content }));
}

Deno.test("replay: every request of three real Claude Code sessions decodes, pairs tool calls with results and renders exactly", async () => {
  const tokenizer = await loadQwen3Tokenizer();
  const decodeOptions = { defaultMaxTokens: 1024, maxTokensLimit: 32768 };
  let requests = 0;
  let toolResults = 0;
  let thinking = 0;
  for (const file of ["short.jsonl", "tool_heavy.jsonl", "subagent.jsonl"]) {
    const text = await Deno.readTextFile(new URL(file, DIR));
    const lines = text.split("\n").filter((l) => l.trim()).map((l) => JSON.parse(l) as LogLine);
    const messages = apiMessages(lines);
    const sessions = new SessionTracker();
    const encoder = new IncrementalChatEncoder(tokenizer);
    for (let i = 1; i < messages.length; i++) {
      if (messages[i].role !== "assistant" || messages[i - 1].role !== "user") continue;
      const body = {
        model: "claude-opus-4-6",
        max_tokens: 1024,
        stream: true,
        system: [{
          type: "text",
          text: "You are Claude Code.",
          cache_control: { type: "ephemeral" },
        }],
        messages: messages.slice(0, i),
        tools: [{ name: "Bash", description: "Run a command", input_schema: { type: "object" } }],
      };
      const request = anthropicMessagesCodec.decode(body, decodeOptions);
      requests++;
      const normalized = request.messages!;
      const callIds = new Set<string>();
      for (const m of normalized) {
        for (const call of m.tool_calls ?? []) {
          callIds.add(call.id!);
          JSON.parse(call.function.arguments);
        }
        if (m.role === "tool") {
          assert.ok(
            callIds.has(m.tool_call_id!),
            `${file}: tool result ${m.tool_call_id} follows its call`,
          );
        }
        if (m.reasoning_content) thinking++;
      }
      const blocks = body.messages.flatMap((m) => (Array.isArray(m.content) ? m.content : []));
      const results = blocks.filter((b) => b.type === "tool_result").length;
      assert.equal(normalized.filter((m) => m.role === "tool").length, results, file);
      toolResults += results;
      // Later requests of one session extend the earlier ones: one conversation, no compaction.
      const segment = sessions.tag("r", "a", normalized).segment;
      assert.equal(segment.conversation, "main");
      assert.equal(segment.index, 0);
      const options = { addGenerationPrompt: true, tools: request.tools };
      const ids = encoder.encodeChat(normalized, options);
      assert.deepEqual(
        ids,
        tokenizer.encode(tokenizer.render(normalized, options)),
        `${file} turn ${i}`,
      );
    }
  }
  assert.ok(requests >= 15, `replayed ${requests} requests`);
  assert.ok(toolResults > 0 && thinking > 0);
});
