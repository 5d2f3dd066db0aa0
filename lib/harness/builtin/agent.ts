/**
 * The built-in agent loop: chat completions with tools through the official `openai` SDK,
 * context compaction, sub-agents (`delegate`), client retries and a final answer.
 *
 * Every behaviour that makes a harness break the one-rollout-one-sample assumption (SPEC §5) is
 * a switch, and the loop counts each time it happened *and was followed by another call of the
 * same conversation* (only then does the sample split), so tests can compare the sample
 * assembly's break counts with {@link AgentStats}.
 *
 * @module
 */
import type OpenAI from "openai";
import type { JsonObject } from "../../schema.ts";
import type { BuiltinHarnessOptions } from "../schema.ts";
import type { AgentTool } from "./tool.ts";

/** One message of the harness's own history (OpenAI chat shape, plus `reasoning_content`). */
export interface AgentMessage {
  /** Chat role. */
  role: "system" | "user" | "assistant" | "tool";
  /** Text (null for a tool-call-only turn). */
  content: string | null;
  /** The model's reasoning, when sent back. */
  reasoning_content?: string;
  /** Tool calls of an assistant turn. */
  tool_calls?: { id: string; type: "function"; function: { name: string; arguments: string } }[];
  /** The call a tool message answers. */
  tool_call_id?: string;
}

/** What one model call returned. */
export interface Completion {
  /** Answer text. */
  content: string;
  /** Reasoning text (empty when none). */
  reasoning: string;
  /** Tool calls, in order. */
  tool_calls: { id: string; name: string; arguments: string }[];
  /** `stop`, `tool_calls`, `length`, … */
  finish_reason: string | null;
}

/** Counters of one run (what the sample assembly should find). */
export interface AgentStats {
  /** Model calls made (main, summaries, sub-agents, confirmation). */
  calls: number;
  /** Calls of the main conversation. */
  main_calls: number;
  /** Tool calls run (sub-agents' included). */
  tool_calls: number;
  /** Tool calls that returned an error. */
  tool_errors: number;
  /** History replacements (each splits the main conversation once). */
  compactions: number;
  /** Summary calls made in a separate conversation (each a `branch`). */
  summary_branches: number;
  /** Sub-agent conversations started (each a `branch`). */
  delegations: number;
  /**
   * Assistant turns sent back with re-serialised tool calls that a template renders
   * differently (key order changed), followed by another call.
   */
  rewritten_turns: number;
  /** Assistant turns sent back without their reasoning and followed by another call. */
  dropped_reasoning_turns: number;
  /**
   * Calls whose history makes a Qwen3-style template re-render earlier turns: reasoning
   * dropped by the harness, or a new user turn (confirmation, inline summary request) after
   * turns whose reasoning the template now strips. Each is one `template_rewrite` (unless the
   * same call also re-serialised a turn: then it counts as a rewrite).
   */
  template_rewrites: number;
  /** Confirmation turns asked (each a template rewrite under Qwen3). */
  confirmations: number;
}

/** The outcome of {@link runAgent}. */
export interface AgentResult {
  /** The final answer (extracted from the last assistant message), or null. */
  answer: string | null;
  /** Why the loop ended. */
  stop: "answer" | "max_turns";
  /** Counters of the run. */
  stats: AgentStats;
  /** The main conversation's final history. */
  messages: AgentMessage[];
}

/** Inputs of {@link runAgent}. */
export interface RunAgentOptions {
  /** An `openai` client pointed at the proxy. */
  client: OpenAI;
  /** Validated harness options. */
  options: BuiltinHarnessOptions;
  /** The task text (the first user message). */
  task: string;
  /** The system prompt of the main conversation. */
  systemPrompt: string;
  /** The environment's tools (`delegate` is added by `subagents`). */
  tools: AgentTool[];
  /** Model name (default `reins-policy`). */
  model?: string;
  /** Progress lines (stderr under `main.ts`). */
  log?: (line: string) => void;
  /** Aborts the model call in flight and every later one (the attempt was stopped). */
  signal?: AbortSignal;
}

/** The user message asking for a summary (inline compaction). */
export const SUMMARY_REQUEST: string =
  "Your context is full. Summarise the work so far: what the task is, " +
  "what you found, and what is left to do. Reply with the summary only.";
/** System prompt of a separate summary conversation. */
export const SUMMARY_SYSTEM: string =
  "You summarise an agent's progress on a task for the agent itself.";
/** The user message asking to confirm the final answer. */
export const CONFIRM_REQUEST: string =
  "Check your work. Reply with the final answer only, inside " +
  "<answer></answer>.";
/** System prompt of a sub-agent conversation. */
export const SUBAGENT_SYSTEM: string =
  "You are a sub-agent. Solve the sub-task you are given with your tools " +
  "and reply with a short final answer inside <answer></answer>.";

/**
 * Extracts the final answer from an assistant message: the last `<answer>…</answer>`, else
 * the text after a last `Final answer:`, else the whole text, trimmed.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { extractAnswer } from "./agent.ts";
 * assert.equal(extractAnswer("so <answer> 42 </answer>"), "42");
 * assert.equal(extractAnswer("Work...\nFinal answer: Paris"), "Paris");
 * ```
 */
export function extractAnswer(text: string): string {
  const tags = [...text.matchAll(/<answer>([\s\S]*?)<\/answer>/g)];
  if (tags.length > 0) return tags[tags.length - 1][1].trim();
  const final = /final answer\s*[:：]\s*([\s\S]*)$/i.exec(text);
  if (final) return final[1].trim();
  return text.trim();
}

function sortKeys(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeys);
  if (value && typeof value === "object") {
    return Object.fromEntries(
      Object.keys(value).sort().map((k) => [k, sortKeys((value as Record<string, unknown>)[k])]),
    );
  }
  return value;
}

/**
 * Re-serialises tool-call arguments the way a harness that keeps them in a sorted map does
 * (Go's `encoding/json` on a map, Rust's `serde_json` without `preserve_order`): parsed, keys
 * sorted, compact. `changed` says whether the result differs from the sampled arguments as a
 * chat template renders them (templates parse the JSON and re-emit it with `tojson`, so
 * whitespace alone is invisible; key order and values are not).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { reserializeArguments } from "./agent.ts";
 * assert.deepEqual(reserializeArguments('{"path": "a.txt", "content": "hi"}'), {
 *   text: '{"content":"hi","path":"a.txt"}',
 *   changed: true,
 * });
 * assert.equal(reserializeArguments('{"expression": "1 + 2"}').changed, false);
 * ```
 */
export function reserializeArguments(raw: string): { text: string; changed: boolean } {
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    return { text: raw, changed: false };
  }
  const text = JSON.stringify(sortKeys(parsed));
  return { text, changed: text !== JSON.stringify(parsed) };
}

/** Characters of a history after its first two messages (system, task). */
export function historyChars(messages: readonly AgentMessage[]): number {
  let n = 0;
  for (const m of messages.slice(2)) {
    n += (m.content ?? "").length + (m.reasoning_content ?? "").length;
    for (const call of m.tool_calls ?? []) {
      n += call.function.name.length + call.function.arguments.length;
    }
  }
  return n;
}

function emptyStats(): AgentStats {
  return {
    calls: 0,
    main_calls: 0,
    tool_calls: 0,
    tool_errors: 0,
    compactions: 0,
    summary_branches: 0,
    delegations: 0,
    rewritten_turns: 0,
    dropped_reasoning_turns: 0,
    template_rewrites: 0,
    confirmations: 0,
  };
}

/** A conversation with the breaks its last assistant turn will cause at the next call. */
class Conversation {
  messages: AgentMessage[];
  pendingRewrite = false;
  pendingDrop = false;
  /** A user turn was added after assistant turns whose reasoning the template shows. */
  pendingUserTurn = false;
  /** An assistant turn with reasoning was kept since the last user message. */
  reasoningSinceUser = false;
  constructor(system: string, task: string) {
    this.messages = [{ role: "system", content: system }, { role: "user", content: task }];
  }
}

/**
 * Runs the agent loop until a final answer or `max_turns`.
 *
 * @example
 * ```ts ignore
 * import OpenAI from "openai";
 * import { runAgent } from "./agent.ts";
 * const client = new OpenAI({ baseURL: Deno.env.get("OPENAI_BASE_URL") });
 * const result = await runAgent({
 *   client, options, task: "What is (3 + 4) * 5?", systemPrompt: "Use the calculator.", tools,
 * });
 * result.answer; // "35"
 * ```
 */
export async function runAgent(run: RunAgentOptions): Promise<AgentResult> {
  const { client, options } = run;
  const model = run.model ?? options.model ?? "reins-policy";
  const log = run.log ?? (() => {});
  const stats = emptyStats();
  const toolDefs = (tools: AgentTool[]) =>
    tools.map((t) => ({
      type: "function" as const,
      function: { name: t.name, description: t.description, parameters: t.parameters },
    }));

  const request = run.signal ? { signal: run.signal } : undefined;
  const complete = async (
    messages: AgentMessage[],
    tools: AgentTool[],
    maxTokens: number,
  ): Promise<Completion> => {
    run.signal?.throwIfAborted();
    const seed = options.seed !== undefined ? options.seed + stats.calls : undefined;
    stats.calls++;
    const body = {
      model,
      messages: messages as unknown as OpenAI.Chat.Completions.ChatCompletionMessageParam[],
      max_tokens: maxTokens,
      ...(options.temperature !== undefined ? { temperature: options.temperature } : {}),
      ...(seed !== undefined ? { seed } : {}),
      ...(tools.length > 0 ? { tools: toolDefs(tools) } : {}),
    };
    if (!options.stream) {
      const response = await client.chat.completions.create({ ...body, stream: false }, request);
      const choice = response.choices[0];
      const message = choice.message as typeof choice.message & { reasoning_content?: string };
      return {
        content: message.content ?? "",
        reasoning: message.reasoning_content ?? "",
        tool_calls: (message.tool_calls ?? []).flatMap((call) =>
          call.type === "function"
            ? [{ id: call.id, name: call.function.name, arguments: call.function.arguments }]
            : []
        ),
        finish_reason: choice.finish_reason,
      };
    }
    const stream = await client.chat.completions.create({ ...body, stream: true }, request);
    const out: Completion = { content: "", reasoning: "", tool_calls: [], finish_reason: null };
    for await (const chunk of stream) {
      const choice = chunk.choices[0];
      if (!choice) continue;
      const delta = choice.delta as typeof choice.delta & { reasoning_content?: string };
      if (delta.content) out.content += delta.content;
      if (delta.reasoning_content) out.reasoning += delta.reasoning_content;
      for (const part of delta.tool_calls ?? []) {
        const slot = out.tool_calls[part.index] ??= { id: "", name: "", arguments: "" };
        if (part.id) slot.id = part.id;
        if (part.function?.name) slot.name += part.function.name;
        if (part.function?.arguments) slot.arguments += part.function.arguments;
      }
      if (choice.finish_reason) out.finish_reason = choice.finish_reason;
    }
    return out;
  };

  const toHistory = (conv: Conversation, out: Completion): AgentMessage => {
    const message: AgentMessage = {
      role: "assistant",
      content: out.content === "" && out.tool_calls.length > 0 ? null : out.content,
    };
    if (out.reasoning) {
      if (options.drop_reasoning) conv.pendingDrop = true;
      else {
        message.reasoning_content = out.reasoning;
        conv.reasoningSinceUser = true;
      }
    }
    if (out.tool_calls.length > 0) {
      message.tool_calls = out.tool_calls.map((call, i) => {
        let args = call.arguments;
        if (options.rewrite_tool_calls) {
          const rewritten = reserializeArguments(call.arguments);
          args = rewritten.text;
          if (rewritten.changed) conv.pendingRewrite = true;
        }
        return {
          id: call.id || `call_${stats.calls}_${i}`,
          type: "function" as const,
          function: { name: call.name, arguments: args },
        };
      });
    }
    return message;
  };

  const pushUser = (conv: Conversation, content: string) => {
    if (conv.reasoningSinceUser) conv.pendingUserTurn = true;
    conv.reasoningSinceUser = false;
    conv.messages.push({ role: "user", content });
  };

  /** Calls the model on `conv`, counting the breaks its previous turn causes now. */
  const step = async (conv: Conversation, tools: AgentTool[], maxTokens: number) => {
    if (conv.pendingRewrite) stats.rewritten_turns++;
    else if (conv.pendingDrop || conv.pendingUserTurn) stats.template_rewrites++;
    if (conv.pendingDrop && !conv.pendingRewrite) stats.dropped_reasoning_turns++;
    conv.pendingRewrite = false;
    conv.pendingDrop = false;
    conv.pendingUserTurn = false;
    return await complete(conv.messages, tools, maxTokens);
  };

  const runTool = async (tools: AgentTool[], name: string, raw: string): Promise<string> => {
    stats.tool_calls++;
    const tool = tools.find((t) => t.name === name);
    let text: string;
    try {
      if (!tool) {
        throw new Error(`unknown tool "${name}" (tools: ${tools.map((t) => t.name).join(", ")})`);
      }
      let args: JsonObject;
      try {
        const parsed: unknown = raw.trim() === "" ? {} : JSON.parse(raw);
        if (!parsed || typeof parsed !== "object" || Array.isArray(parsed)) {
          throw new Error("not an object");
        }
        args = parsed as JsonObject;
      } catch (error) {
        throw new Error(`arguments are not a JSON object (${(error as Error).message})`);
      }
      text = await tool.run(args);
    } catch (error) {
      stats.tool_errors++;
      text = `error: ${error instanceof Error ? error.message : String(error)}`;
    }
    log(`tool ${name}(${raw.slice(0, 200)}) → ${text.slice(0, 200).replaceAll("\n", "\\n")}`);
    return text.length > options.max_tool_output_chars
      ? `${text.slice(0, options.max_tool_output_chars)}\n[output truncated]`
      : text;
  };

  /** Runs tool calls of the last assistant turn, appending their results. */
  const answerTools = async (conv: Conversation, tools: AgentTool[], out: Completion) => {
    const sent = conv.messages[conv.messages.length - 1].tool_calls ?? [];
    for (const [i, call] of out.tool_calls.entries()) {
      const result = await runTool(tools, call.name, call.arguments);
      conv.messages.push({ role: "tool", tool_call_id: sent[i].id, content: result });
    }
  };

  const compact = async (conv: Conversation) => {
    const compaction = options.compaction!;
    let summary: Completion;
    if (compaction.mode === "inline") {
      pushUser(conv, SUMMARY_REQUEST);
      // Same tools as the conversation: a different tool list would re-render the system turn.
      summary = await step(conv, tools, compaction.summary_max_tokens);
    } else {
      stats.summary_branches++;
      const transcript = conv.messages.slice(1).map((m) =>
        `${m.role}: ${m.content ?? ""}${
          (m.tool_calls ?? []).map((c) => ` [${c.function.name} ${c.function.arguments}]`).join("")
        }`
      ).join("\n");
      const side = new Conversation(SUMMARY_SYSTEM, `${SUMMARY_REQUEST}\n\n${transcript}`);
      summary = await step(side, [], compaction.summary_max_tokens);
    }
    stats.compactions++;
    const [system, task] = conv.messages;
    conv.messages = [system, task, {
      role: "user",
      content:
        `Summary of your earlier work (the history was compacted):\n${summary.content.trim()}`,
    }];
    conv.pendingDrop = false;
    conv.pendingRewrite = false;
    conv.pendingUserTurn = false;
    conv.reasoningSinceUser = false;
    log(`compacted the history (${stats.compactions})`);
  };

  const subTools = run.tools;
  const delegate: AgentTool = {
    name: "delegate",
    description: "Hands a self-contained sub-task to a sub-agent with the same tools, which " +
      "works in a separate conversation and returns its answer.",
    parameters: {
      type: "object",
      properties: { task: { type: "string", description: "The sub-task, fully specified." } },
      required: ["task"],
    },
    run: async (args) => {
      const task = args.task;
      if (typeof task !== "string" || task.trim() === "") {
        throw new Error('argument "task" must be a non-empty string');
      }
      stats.delegations++;
      const conv = new Conversation(SUBAGENT_SYSTEM, task);
      for (let turn = 0; turn < options.subagent_max_turns; turn++) {
        const out = await step(conv, subTools, options.max_tokens);
        conv.messages.push(toHistory(conv, out));
        if (out.tool_calls.length === 0) return extractAnswer(out.content);
        await answerTools(conv, subTools, out);
      }
      return "the sub-agent ran out of turns without an answer";
    },
  };
  const tools = options.subagents ? [...run.tools, delegate] : run.tools;

  const main = new Conversation(run.systemPrompt, run.task);
  let confirmed = !options.confirm_answer;
  for (let turn = 0; turn < options.max_turns; turn++) {
    if (options.compaction && historyChars(main.messages) > options.compaction.max_chars) {
      await compact(main);
    }
    stats.main_calls++;
    const out = await step(main, tools, options.max_tokens);
    main.messages.push(toHistory(main, out));
    if (out.tool_calls.length === 0) {
      if (!confirmed) {
        confirmed = true;
        stats.confirmations++;
        pushUser(main, CONFIRM_REQUEST);
        continue;
      }
      return { answer: extractAnswer(out.content), stop: "answer", stats, messages: main.messages };
    }
    await answerTools(main, tools, out);
  }
  return { answer: null, stop: "max_turns", stats, messages: main.messages };
}
