/**
 * What an agent did, extracted from a rollout's events so that monitors can read it uniformly:
 * the tool calls it made (parsed from each captured response, or taken from the harness's
 * normalized messages when no response text was recorded), its answers, and the harness logs.
 *
 * @module
 */
import { parseOutput } from "../tokens/parse_output.ts";
import type { ModelRequestEvent, Rollout, RolloutEvent } from "../schema.ts";

/** One tool call the policy made. */
export interface ToolCallAction {
  /** Seq of the model_request whose response made the call. */
  seq: number;
  name: string;
  /** Arguments as JSON text (as the model wrote them). */
  arguments: string;
}

/** One model answer, split into reasoning, content and tool calls. */
export interface AnswerAction {
  seq: number;
  reasoning: string;
  content: string;
  tool_calls: ToolCallAction[];
  response_tokens: number;
  finish_reason: string | null;
}

/** The agent's actions, in seq order. */
export interface RolloutActions {
  answers: AnswerAction[];
  toolCalls: ToolCallAction[];
  /** Harness output (`log` events), one entry per event. */
  logs: { seq: number; stream: string; text: string }[];
}

/**
 * Extracts the answers, tool calls and logs of a rollout's events.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { extractActions } from "./actions.ts";
 * const actions = extractActions([]);
 * assert.equal(actions.toolCalls.length, 0);
 * ```
 */
export function extractActions(events: readonly RolloutEvent[]): RolloutActions {
  const answers: AnswerAction[] = [];
  const logs: RolloutActions["logs"] = [];
  for (const event of events) {
    if (event.type === "log") {
      logs.push({
        seq: event.seq,
        stream: event.payload.stream,
        text: scanned(event.payload.text),
      });
    } else if (event.type === "model_request") {
      answers.push(answerOf(event));
    }
  }
  // Responses recorded without text: recover their tool calls from the next request's history,
  // where the harness echoes the assistant turn back.
  for (let i = 0; i < answers.length; i++) {
    const answer = answers[i];
    if (answer.tool_calls.length > 0 || answer.content || answer.reasoning) continue;
    const next = events.find((e): e is ModelRequestEvent =>
      e.type === "model_request" && e.seq > answer.seq
    );
    const messages = next?.payload.messages ?? [];
    for (let m = messages.length - 1; m >= 0; m--) {
      const message = messages[m];
      if (message.role !== "assistant") continue;
      answer.content = message.content ?? "";
      answer.reasoning = message.reasoning_content ?? "";
      answer.tool_calls = (message.tool_calls ?? []).map((call) => ({
        seq: answer.seq,
        name: call.function.name,
        arguments: call.function.arguments,
      }));
      break;
    }
  }
  return { answers, toolCalls: answers.flatMap((a) => a.tool_calls), logs };
}

function answerOf(event: ModelRequestEvent): AnswerAction {
  const p = event.payload;
  const text = scanned(p.response_text ?? "");
  const parsed = text ? parseOutput(text, { newToolCallId: () => "" }) : undefined;
  return {
    seq: event.seq,
    reasoning: parsed?.reasoning ?? "",
    content: parsed?.content ?? "",
    tool_calls: (parsed?.tool_calls ?? []).map((call) => ({
      seq: event.seq,
      name: call.name,
      arguments: call.arguments,
    })),
    response_tokens: p.response_token_ids.length,
    finish_reason: p.finish_reason,
  };
}

/**
 * Most characters of one event's text a monitor scans (64 KiB): with linear-time patterns this
 * bounds the CPU one agent-written event can cost a monitor (the rest is not scanned).
 */
export const MAX_SCAN_CHARS = 64 * 1024;

/** The part of `text` monitors scan ({@link MAX_SCAN_CHARS}). */
export function scanned(text: string): string {
  return text.length > MAX_SCAN_CHARS ? text.slice(0, MAX_SCAN_CHARS) : text;
}

/** Shortens `text` to `max` characters around `index` (for evidence excerpts). */
export function excerpt(text: string, index = 0, max = 160): string {
  if (text.length <= max) return text;
  const start = Math.max(0, Math.min(index - Math.floor(max / 3), text.length - max));
  return (start > 0 ? "…" : "") + text.slice(start, start + max) +
    (start + max < text.length ? "…" : "");
}

/** The text a tool call carries: its arguments, with JSON string escapes undone when possible. */
export function toolCallText(call: ToolCallAction): string {
  return scanned(rawToolCallText(call));
}

function rawToolCallText(call: ToolCallAction): string {
  try {
    const value: unknown = JSON.parse(call.arguments);
    if (typeof value === "string") return value;
    if (typeof value === "object" && value !== null) {
      return Object.values(value as Record<string, unknown>)
        .map((v) => (typeof v === "string" ? v : JSON.stringify(v)))
        .join("\n");
    }
  } catch {
    // Not JSON: scan the raw text.
  }
  return call.arguments;
}

/** String items of `attempt.info[key]` (the controller's sandbox facts), per attempt. */
export function attemptInfoList(
  rollout: Rollout,
  key: string,
): { attempt: number; values: string[] }[] {
  return rollout.attempts.map((a) => {
    const value = a.info[key];
    return {
      attempt: a.index,
      values: Array.isArray(value) ? value.filter((v): v is string => typeof v === "string") : [],
    };
  });
}
