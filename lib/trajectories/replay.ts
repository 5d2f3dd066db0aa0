/**
 * "Replay as a proxy would see it": turn an imported trajectory into the `model_request` events a
 * reins proxy in front of a Qwen3 token-level upstream would have recorded, had the policy
 * produced exactly these messages.
 *
 * - Prompt: `encode(render(history, {tools, addGenerationPrompt: true}))` — what the harness sent,
 *   rendered by the chat template, faithfully (no reuse of earlier sampled ids).
 * - Response: the assistant message as sampled: its reasoning as `<think>\n…\n</think>\n\n`, its
 *   content, its tool calls written as the template writes them, then the end-of-turn token.
 * - Policy output (`policy_output`, default `logged`): what the policy is assumed to emit before
 *   its answer, applied alike to each response and to the earlier turns in its history (the
 *   harness sends back what the policy produced; the template then decides what it keeps):
 *   `logged` — the reasoning the log holds, none where it holds none; `thinking` — always a think
 *   block, empty where nothing was logged; `plain` — never one. Figures built on a replay depend
 *   on this choice; name it next to them.
 * - Logprobs: FAKE. The logs carry none; the replay fills in deterministic placeholder values
 *   (a hash of position and id, in [-2.5, -0.0025]) so that the events validate and assemble. Do
 *   not read anything into them.
 *
 * @module
 */
import { type ChatMessage, type Flavor, type ModelRequestEvent, parseOrThrow } from "../schema.ts";
import {
  type PolicyOutput,
  type ReplayOptions,
  ReplayOptionsSchema,
  type Trajectory,
} from "./schema.ts";
import type { ChatTokenizer, RenderOptions } from "../tokens/types.ts";
import { IncrementalChatEncoder } from "../tokens/incremental.ts";
import { trajectoryCalls } from "./stats.ts";

/** Writes an assistant message as the text the model generated (without the end token). */
export type ResponseFormatter = (message: ChatMessage, tokenizer: ChatTokenizer) => string;

const ASSISTANT_HEADER = "<|im_start|>assistant\n";
const END = "<|im_end|>";

/**
 * The default {@link ResponseFormatter}, for ChatML templates (Qwen3's and its variants): the
 * template renders the message without its reasoning (so content and tool calls come out exactly
 * as the template writes them in a later prompt) and the reasoning goes in front, the way Qwen3
 * emits it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * import { chatmlResponseText } from "./replay.ts";
 * const qwen = await loadQwen3Tokenizer();
 * assert.equal(
 *   chatmlResponseText({ role: "assistant", content: "4", reasoning_content: "2+2" }, qwen),
 *   "<think>\n2+2\n</think>\n\n4",
 * );
 * assert.equal(
 *   chatmlResponseText({ role: "assistant", content: "4", reasoning_content: "" }, qwen),
 *   "<think>\n\n</think>\n\n4",
 * );
 * ```
 */
export function chatmlResponseText(message: ChatMessage, tokenizer: ChatTokenizer): string {
  const { reasoning_content: reasoning, ...rest } = message;
  // A following user turn keeps the template from treating the message as the one being generated.
  const text = tokenizer.render([{ ...rest, role: "assistant" }, { role: "user", content: "." }]);
  const start = text.indexOf(ASSISTANT_HEADER);
  const end = text.indexOf(END, start + ASSISTANT_HEADER.length);
  if (start < 0 || end < 0) {
    throw new Error(
      `chatmlResponseText: the ${tokenizer.name} template does not write ChatML assistant turns; ` +
        `pass a formatResponse for it`,
    );
  }
  const body = text.slice(start + ASSISTANT_HEADER.length, end);
  // An empty reasoning is an opened, empty think block (Qwen3 in thinking mode writes one).
  if (reasoning === undefined || reasoning === null) return body;
  return `<think>\n${reasoning.replace(/^\n+|\n+$/g, "")}\n</think>\n\n${body.replace(/^\n+/, "")}`;
}

/**
 * An assistant message as a policy with output `policy` would have produced it (other roles and
 * `logged` unchanged): `plain` drops the reasoning, `thinking` gives an empty one where none was
 * logged.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { withPolicyOutput } from "./replay.ts";
 * const m = { role: "assistant" as const, content: "ls" };
 * assert.deepEqual(
 *   withPolicyOutput(m, "thinking"),
 *   { role: "assistant", content: "ls", reasoning_content: "" },
 * );
 * assert.deepEqual(withPolicyOutput({ ...m, reasoning_content: "r" }, "plain"), m);
 * assert.equal(withPolicyOutput(m, "logged"), m);
 * ```
 */
export function withPolicyOutput(message: ChatMessage, policy: PolicyOutput): ChatMessage {
  if (message.role !== "assistant" || policy === "logged") return message;
  const { reasoning_content: reasoning, ...rest } = message;
  if (policy === "plain") return rest;
  return { ...rest, reasoning_content: reasoning ?? "" };
}

/**
 * Deterministic placeholder logprob for response token `id` at `position` (NOT a model's).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { fakeLogprob } from "./replay.ts";
 * assert.equal(fakeLogprob(5, 0) === fakeLogprob(5, 0), true);
 * ```
 */
export function fakeLogprob(id: number, position: number): number {
  let h = Math.imul(id ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(position + 1, 0xc2b2ae35);
  h ^= h >>> 13;
  h = Math.imul(h, 0x27d4eb2f);
  h ^= h >>> 16;
  return -(((h >>> 0) % 1000) + 1) / 400;
}

function flavorOf(trajectory: Trajectory): Flavor {
  return trajectory.source === "claude-code" ? "anthropic_messages" : "openai_chat";
}

/** Everything {@link replayTrajectory} accepts beside the tokenizer. */
export interface ReplayTrajectoryOptions extends ReplayOptions {
  /** How a response was sampled as text; default {@link chatmlResponseText}. */
  formatResponse?: ResponseFormatter;
}

/**
 * Replays `trajectory` through `tokenizer`'s chat template: one `model_request` event per call,
 * in proxy order, `seq` counting up from `first_seq`, each tagged with its conversation segment
 * (`opened_by` set on the first call of a conversation or of a post-compaction segment).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * import { parseMiniSweAgent } from "./mini_swe_agent.ts";
 * import { replayTrajectory } from "./replay.ts";
 * const qwen = await loadQwen3Tokenizer();
 * const t = parseMiniSweAgent([
 *   { role: "user", content: "list files" }, { role: "assistant", content: "ls" },
 *   { role: "user", content: "a.txt" }, { role: "assistant", content: "done" },
 * ], "demo.json");
 * const events = replayTrajectory(t, qwen);
 * assert.deepEqual(events.map((e) => e.seq), [1, 2]);
 * ```
 */
export function replayTrajectory(
  trajectory: Trajectory,
  tokenizer: ChatTokenizer,
  options: ReplayTrajectoryOptions = {},
): ModelRequestEvent[] {
  const { formatResponse = chatmlResponseText, ...plain } = options;
  const config = parseOrThrow(ReplayOptionsSchema, plain, "options");
  const rolloutId = config.rollout_id ?? trajectory.id;
  const end = tokenizer.tokenId(END) ?? tokenizer.eosTokenIds[0];
  if (end === undefined) throw new Error(`tokenizer ${tokenizer.name}: no end-of-turn token`);
  const render: RenderOptions = { addGenerationPrompt: true };
  if (trajectory.tools) render.tools = trajectory.tools;
  if (config.enable_thinking !== undefined) render.enableThinking = config.enable_thinking;

  const encoders = new Map<string, IncrementalChatEncoder>();
  const started = new Set<string>();
  const events: ModelRequestEvent[] = [];
  trajectoryCalls(trajectory).forEach((call, i) => {
    const seq = config.first_seq + i;
    const key = call.conversation.id;
    let encoder = encoders.get(key);
    if (!encoder && config.incremental) {
      encoder = new IncrementalChatEncoder(tokenizer);
      encoders.set(key, encoder);
    }
    const policy = config.policy_output;
    const history = policy === "logged"
      ? call.prompt
      : call.prompt.map((m) => withPolicyOutput(m, policy));
    const promptText = tokenizer.render(history, render);
    const prompt = encoder ? encoder.encodeText(promptText) : tokenizer.encode(promptText);
    const responseText = formatResponse(withPolicyOutput(call.response, policy), tokenizer);
    const body = tokenizer.encode(responseText);
    const response = new Uint32Array(body.length + 1);
    response.set(body);
    response[body.length] = end;
    const logprobs = new Float32Array(response.length);
    for (let j = 0; j < response.length; j++) logprobs[j] = fakeLogprob(response[j], j);
    const segmentKey = `${key}/${call.segment.index}`;
    const opened = started.has(segmentKey) ? null : call.segment.opened_by;
    started.add(segmentKey);
    const request: Record<string, string | number | boolean> = {
      source: trajectory.source,
      file: trajectory.file,
      call_index: i,
      fake_logprobs: true,
      policy_output: policy,
    };
    if (config.keep_text) request.prompt_text = promptText;
    events.push({
      seq,
      rollout_id: rolloutId,
      attempt_id: config.attempt_id,
      event_key: `${rolloutId}#${i}`,
      created_at: seq,
      type: "model_request",
      payload: {
        flavor: flavorOf(trajectory),
        request,
        messages: history,
        prompt_token_ids: prompt,
        response_token_ids: response,
        response_logprobs: logprobs,
        response_text: responseText + END,
        policy_version: 0,
        finish_reason: call.response.tool_calls?.length ? "tool_calls" : "stop",
        upstream: "replay",
        latency_ms: 0,
        retry_count: 0,
        http_status: 200,
        error: null,
        segment: { conversation: key, index: call.segment.index, opened_by: opened },
        mode: "faithful",
        client_disconnected: false,
      },
    });
  });
  return events;
}
