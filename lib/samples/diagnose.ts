/**
 * Break diagnosis: why a call's prompt did not extend `prompt ∥ response` of an earlier call
 * at the token level. Evidence is used in order of reliability: the proxy's segment tag, the
 * normalized messages, then decoded text.
 *
 * @module
 */
import type { BreakReason, ChatMessage, ModelRequest } from "../schema.ts";
import type { BreakDiagnosis, DiagnosisBasis } from "./schema.ts";
import { commonPrefixConcat, sliceConcat } from "./token_seq.ts";

/** Turns token ids into text (a `ChatTokenizer`'s `decode`, bound). */
export type DecodeFn = (ids: Uint32Array) => string;

/** A call as the diagnosis needs it. */
export interface DiagnosedCall {
  seq: number;
  request: ModelRequest;
}

/** Options of {@link diagnoseBreak}. */
export interface DiagnoseOptions {
  /** Needed for every text-level judgement; without it those end as `unknown`. */
  decode?: DecodeFn;
  /** Ids of context on each side of the difference kept as evidence (default 8). */
  evidenceTokens?: number;
}

interface Verdict {
  reason: BreakReason;
  basis: DiagnosisBasis;
  detail: string;
}

/**
 * Says why `cur`'s prompt does not start with `prev`'s `prompt ∥ response`, with evidence.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { diagnoseBreak } from "./diagnose.ts";
 * const call = (seq: number, prompt: number[], response: number[]) => ({
 *   seq,
 *   request: {
 *     flavor: "generate" as const, request: {}, prompt_token_ids: Uint32Array.from(prompt),
 *     response_token_ids: Uint32Array.from(response),
 *     response_logprobs: new Float32Array(response.length), policy_version: 0,
 *     finish_reason: null, upstream: null, latency_ms: 0, retry_count: 0, http_status: 200,
 *     error: null, segment: null, mode: "faithful" as const, client_disconnected: false,
 *   },
 * });
 * // "ab" + "cd" re-tokenized as "ab" + "c" + "d": same text, different ids.
 * const d = diagnoseBreak(call(1, [97, 98], [25444]), call(2, [97, 98, 99, 100, 101], [102]), {
 *   decode: (ids) => [...ids].map((id) => id === 25444 ? "cd" : String.fromCharCode(id)).join(""),
 * });
 * assert.equal(d.reason, "token_boundary");
 * ```
 */
export function diagnoseBreak(
  prev: DiagnosedCall | null,
  cur: DiagnosedCall,
  options: DiagnoseOptions = {},
): BreakDiagnosis {
  const k = options.evidenceTokens ?? 8;
  const decode = options.decode;
  const curP = cur.request.prompt_token_ids;
  if (prev === null) {
    return {
      seq: cur.seq,
      previous_seq: null,
      reason: "unknown",
      basis: "tokens",
      first_diff_token: 0,
      context_ids: [],
      expected_ids: [],
      actual_ids: Array.from(curP.subarray(0, k)),
      context_text: null,
      expected_text: null,
      actual_text: decode ? decode(curP.subarray(0, k)) : null,
      detail: "no earlier call to compare with",
    };
  }
  const prevP = prev.request.prompt_token_ids;
  const prevR = prev.request.response_token_ids;
  const lcp = commonPrefixConcat(curP, prevP, prevR);
  const contextIds = sliceConcat(prevP, prevR, lcp - k, lcp);
  const expectedIds = sliceConcat(prevP, prevR, lcp, lcp + k);
  const actualIds = Array.from(curP.subarray(lcp, lcp + k));
  const verdict = judge(prev.request, cur.request, lcp, decode);
  const text = (ids: number[]) => decode ? decode(Uint32Array.from(ids)) : null;
  return {
    seq: cur.seq,
    previous_seq: prev.seq,
    ...verdict,
    first_diff_token: lcp,
    context_ids: contextIds,
    expected_ids: expectedIds,
    actual_ids: actualIds,
    context_text: text(contextIds),
    expected_text: text(expectedIds),
    actual_text: text(actualIds),
  };
}

function judge(
  prev: ModelRequest,
  cur: ModelRequest,
  lcp: number,
  decode: DecodeFn | undefined,
): Verdict {
  const prevLen = prev.prompt_token_ids.length + prev.response_token_ids.length;
  if (lcp >= prevLen) {
    return { reason: "unknown", basis: "tokens", detail: "no break: the prompt extends exactly" };
  }
  // Hard evidence first: a prompt that is a prefix of the earlier sequence replaced nothing,
  // whatever a segment tag inferred from messages says.
  if (lcp === cur.prompt_token_ids.length) {
    return {
      reason: "branch",
      basis: "tokens",
      detail: "the prompt is a prefix of the earlier sequence: a fork from an earlier point",
    };
  }
  const bySegment = judgeSegment(prev, cur);
  if (bySegment) return bySegment;
  if (prev.messages?.length && cur.messages?.length) {
    const byMessages = judgeMessages(prev, cur, decode);
    if (byMessages) return byMessages;
    if (!decode) {
      return {
        reason: "unknown",
        basis: "messages",
        detail: "history extends and the response was sent back unchanged, but without a " +
          "decoder the template and token-boundary cases cannot be told apart",
      };
    }
    return earlierTextIsPrefix(prev, cur.prompt_token_ids, lcp, decode, "as_is")
      ? {
        reason: "token_boundary",
        basis: "messages",
        detail: "history extends and the decoded text prefix holds, but the ids differ",
      }
      : {
        reason: "template_rewrite",
        basis: "messages",
        detail: "history extends and the response was sent back unchanged, but the rendered " +
          "text of the earlier turns changed",
      };
  }
  return judgeText(prev, cur, lcp, decode);
}

function judgeSegment(prev: ModelRequest, cur: ModelRequest): Verdict | null {
  const cs = cur.segment;
  if (!cs) return null;
  if (cs.opened_by === "branch" || cs.opened_by === "compaction") {
    return {
      reason: cs.opened_by,
      basis: "segment",
      detail: `the proxy tagged this call as opening a new segment by ${cs.opened_by}`,
    };
  }
  const ps = prev.segment;
  if (!ps) return null;
  if (cs.conversation !== ps.conversation) {
    return {
      reason: "branch",
      basis: "segment",
      detail: `conversation "${cs.conversation}" differs from "${ps.conversation}"`,
    };
  }
  if (cs.index !== ps.index) {
    return {
      reason: "compaction",
      basis: "segment",
      detail: `segment index moved from ${ps.index} to ${cs.index} in one conversation`,
    };
  }
  return null;
}

function normalized(m: ChatMessage): string {
  return JSON.stringify([
    m.role,
    m.content ?? "",
    m.reasoning_content ?? "",
    (m.tool_calls ?? []).map((t) => [t.function.name, t.function.arguments]),
    m.tool_call_id ?? "",
    m.name ?? "",
  ]);
}

function sameMessage(a: ChatMessage, b: ChatMessage): boolean {
  return normalized(a) === normalized(b);
}

function sameExceptReasoning(a: ChatMessage, b: ChatMessage): boolean {
  return a.role === "assistant" && b.role === "assistant" &&
    sameMessage({ ...a, reasoning_content: undefined }, { ...b, reasoning_content: undefined });
}

/** True when the message says what was sampled: text verbatim, tool arguments up to whitespace. */
function faithful(message: ChatMessage, sampled: string): boolean {
  const parts: string[] = [];
  const content = (message.content ?? "").trim();
  if (content) parts.push(content);
  const reasoning = (message.reasoning_content ?? "").trim();
  if (reasoning) parts.push(reasoning);
  if (!parts.every((part) => sampled.includes(part))) return false;
  // Tool-call arguments are compared without whitespace: the renderer parses them and the
  // template re-serialises them, so `{"a":1}` passed on as `{"a": 1}` cannot change the prompt.
  const compactSampled = withoutWhitespace(sampled);
  return (message.tool_calls ?? []).every((call) =>
    sampled.includes(call.function.name) &&
    compactSampled.includes(withoutWhitespace(call.function.arguments))
  );
}

function withoutWhitespace(text: string): string {
  return text.replace(/\s+/g, "");
}

function judgeMessages(
  prev: ModelRequest,
  cur: ModelRequest,
  decode: DecodeFn | undefined,
): Verdict | null {
  const pm = prev.messages!;
  const cm = cur.messages!;
  const n = pm.length;
  let anchor = pm.findIndex((m) => m.role !== "system");
  if (anchor < 0) anchor = n - 1;
  for (let i = 0; i <= anchor; i++) {
    if (i >= cm.length || !sameMessage(pm[i], cm[i])) {
      return {
        reason: "branch",
        basis: "messages",
        detail: `the conversation's opening messages differ (message ${i})`,
      };
    }
  }
  if (cm.length <= n) {
    const prefix = cm.every((m, i) => sameMessage(m, pm[i]));
    return prefix
      ? {
        reason: "branch",
        basis: "messages",
        detail: "the prompt re-samples from an earlier point of the same conversation",
      }
      : {
        reason: "compaction",
        basis: "messages",
        detail: `history shortened from ${n} to ${cm.length} messages`,
      };
  }
  const diffs: number[] = [];
  for (let i = anchor + 1; i < n; i++) if (!sameMessage(pm[i], cm[i])) diffs.push(i);
  if (diffs.length > 0) {
    if (diffs.every((i) => sameExceptReasoning(pm[i], cm[i]))) {
      return {
        reason: "template_rewrite",
        basis: "messages",
        detail: `reasoning of earlier assistant message(s) ${diffs.join(", ")} was dropped`,
      };
    }
    return {
      reason: "compaction",
      basis: "messages",
      detail: `earlier history replaced from message ${diffs[0]} on, opening messages kept`,
    };
  }
  const reply = cm[n];
  if (reply.role !== "assistant") {
    return {
      reason: "compaction",
      basis: "messages",
      detail: `message ${n} should stand for the sampled response but is a ${reply.role} message`,
    };
  }
  const sampled = prev.response_text ?? (decode ? decode(prev.response_token_ids) : undefined);
  if (sampled !== undefined && !faithful(reply, sampled)) {
    return {
      reason: "response_rewrite",
      basis: "messages",
      detail: `assistant message ${n} is not verbatim what was sampled (content or tool call ` +
        "arguments changed)",
    };
  }
  return null;
}

/** Decodes `ids[start…]`, growing the window until the text reaches `minChars`. */
function decodeAtLeast(
  ids: Uint32Array,
  start: number,
  minChars: number,
  guess: number,
  decode: DecodeFn,
): string {
  let n = Math.max(1, guess);
  for (;;) {
    const end = Math.min(ids.length, start + n);
    const text = decode(ids.subarray(start, end));
    if (text.length >= minChars || end === ids.length) return text;
    n *= 2;
  }
}

function concatFrom(a: Uint32Array, b: Uint32Array, start: number): Uint32Array {
  if (start >= a.length) return b.subarray(start - a.length);
  const out = new Uint32Array(a.length - start + b.length);
  out.set(a.subarray(start));
  out.set(b, a.length - start);
  return out;
}

// Backing off a few ids before the difference keeps multi-byte characters split across
// byte-level tokens whole on both sides.
const BACKOFF = 4;

const REASONING_BLOCKS = /<think>[\s\S]*?<\/think>\s*/g;

/**
 * True when the earlier call's text (prompt ∥ response, decoded from a few ids before the
 * common prefix `lcp` on) is a prefix of the current prompt's text: as it is (`"as_is"`), or
 * only once its `<think>…</think>` blocks are removed (`"without_reasoning"`; false when it has
 * none).
 */
function earlierTextIsPrefix(
  prev: ModelRequest,
  curPrompt: Uint32Array,
  lcp: number,
  decode: DecodeFn,
  mode: "as_is" | "without_reasoning",
): boolean {
  const start = Math.max(0, lcp - BACKOFF);
  const prevTail = decode(concatFrom(prev.prompt_token_ids, prev.response_token_ids, start));
  const prevLen = prev.prompt_token_ids.length + prev.response_token_ids.length;
  const expected = mode === "as_is" ? prevTail : prevTail.replace(REASONING_BLOCKS, "");
  if (mode === "without_reasoning" && expected === prevTail) return false;
  const minIds = prevLen - start + (mode === "as_is" ? 4 : 0);
  return decodeAtLeast(curPrompt, start, expected.length, minIds, decode).startsWith(expected);
}

function judgeText(
  prev: ModelRequest,
  cur: ModelRequest,
  lcp: number,
  decode: DecodeFn | undefined,
): Verdict {
  if (lcp === 0) {
    return { reason: "branch", basis: "tokens", detail: "the prompt shares no token" };
  }
  if (!decode) {
    return {
      reason: "unknown",
      basis: "tokens",
      detail: "no segment tag, no messages and no decoder: only the token difference is known",
    };
  }
  if (earlierTextIsPrefix(prev, cur.prompt_token_ids, lcp, decode, "as_is")) {
    return {
      reason: "token_boundary",
      basis: "text",
      detail: "the decoded text prefix holds, but the ids differ",
    };
  }
  if (earlierTextIsPrefix(prev, cur.prompt_token_ids, lcp, decode, "without_reasoning")) {
    return {
      reason: "template_rewrite",
      basis: "text",
      detail: "the earlier text reappears with its reasoning block(s) removed",
    };
  }
  if (lcp >= prev.prompt_token_ids.length) {
    return {
      reason: "response_rewrite",
      basis: "text",
      detail: "the prompt diverges inside the earlier response's text",
    };
  }
  return {
    reason: "unknown",
    basis: "text",
    detail: "the earlier history changed; without messages or a segment tag it cannot be " +
      "told whether by branch, compaction or template",
  };
}
