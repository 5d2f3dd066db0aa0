/**
 * Shared plumbing of the wire-format conformance tests: a proxy fixture whose scripted policy
 * answers by a marker in the last user turn, raw HTTP calls, an SSE reader, and schema checks
 * that name every violated field.
 *
 * Markers (anywhere in the last user turn; a tool result gets the final answer):
 * - none: plain text `Hello there, friend.`
 * - `[think]`: reasoning, then text
 * - `[tool]`: reasoning, a sentence, then a call `add({"a": 1, "b": 2})`
 * - `[long]`: a long text (the tests cut it with a small max-tokens limit)
 * - `[utf8]`: text with characters that span several tokens (`UTF8`)
 *
 * @module
 */
import assert from "node:assert/strict";
import { createParser } from "eventsource-parser";
import type { z } from "zod";
import type { ScriptedTurn } from "../../../lib/proxy/scripted_upstream.ts";
import type { ProxyFixture } from "../../proxy_helpers.ts";
import { startProxyFixture } from "../../proxy_helpers.ts";
import type { ScriptedFailure } from "../../../lib/proxy/scripted_upstream.ts";

export const TEXT = "Hello there, friend.";
export const THOUGHT = "The user greets me; greet back.";
export const TOOL_PREFACE = "Let me add.";
export const FINAL = "1 + 2 = 3.";
export const LONG = "One two three four five six seven eight nine ten eleven twelve thirteen.";
export const UTF8 = "Grüße, 東京 😀🎉 — naïve café";

/** The scripted turn for a rendered prompt (see the module doc). */
export function turnFor(promptText: string): ScriptedTurn {
  const last = promptText.slice(Math.max(0, promptText.lastIndexOf("<|im_start|>user")));
  if (last.includes("<tool_response>")) return { content: FINAL };
  if (last.includes("[tool]")) {
    return {
      reasoning: "I should add.",
      content: TOOL_PREFACE,
      tool_calls: [{ name: "add", arguments: { a: 1, b: 2 } }],
    };
  }
  if (last.includes("[think]")) return { reasoning: THOUGHT, content: TEXT };
  if (last.includes("[long]")) return { content: LONG };
  if (last.includes("[utf8]")) return { content: UTF8 };
  return { content: TEXT };
}

/** A proxy fixture with the marker policy; `fail` injects upstream failures. */
export function startConformanceFixture(
  fail?: (index: number) => ScriptedFailure,
): Promise<ProxyFixture> {
  return startProxyFixture({
    scripted: { policy: ({ promptText }) => turnFor(promptText), ...(fail ? { fail } : {}) },
    upstream: (url) => ({
      kind: "token_level",
      endpoints: [url!],
      max_retries: 0,
      backoff_base_ms: 1,
      backoff_max_ms: 2,
    }),
  });
}

/** The proxy fixture every conformance test runs against. */
export type ConformanceFixture = ProxyFixture;

/** Runs `fn` on a fresh conformance fixture (`fail` as in `startConformanceFixture`), then
 * closes it whatever `fn` did. */
export async function withConformanceFixture(
  fn: (fx: ConformanceFixture) => Promise<void>,
  options: { fail?: (index: number) => ScriptedFailure } = {},
): Promise<void> {
  const fx = await startConformanceFixture(options.fail);
  try {
    await fn(fx);
  } finally {
    await fx.close();
  }
}

/** POSTs JSON with the fixture's key (`x-api-key` and bearer both set). */
export function post(fx: ProxyFixture, url: string, body: unknown): Promise<Response> {
  return fetch(url, {
    method: "POST",
    headers: {
      "content-type": "application/json",
      authorization: `Bearer ${fx.token}`,
      "x-api-key": fx.token,
      "anthropic-version": "2023-06-01",
    },
    body: JSON.stringify(body),
  });
}

/** One server-sent event. */
export interface SseEvent {
  event: string | undefined;
  data: string;
}

/** Reads a whole SSE body. */
export async function readSse(res: Response): Promise<SseEvent[]> {
  assert.equal(res.status, 200, "stream status");
  assert.match(res.headers.get("content-type") ?? "", /^text\/event-stream/);
  const events: SseEvent[] = [];
  const parser = createParser({
    onEvent: (message) => events.push({ event: message.event, data: message.data }),
  });
  parser.feed(await res.text());
  return events;
}

/** Parses `value` with `schema`, failing with every violated path. */
export function conform<T extends z.ZodType>(schema: T, value: unknown, label: string): z.infer<T> {
  const result = schema.safeParse(value);
  if (!result.success) {
    const issues = result.error.issues.map((i) => `${i.path.join(".") || "(root)"}: ${i.message}`);
    assert.fail(`${label} does not match the published schema:\n  ${issues.join("\n  ")}`);
  }
  return result.data;
}

/** Whether `values` is a contiguous run inside `all`; returns its start or -1. */
export function findRun(all: readonly number[], values: readonly number[]): number {
  if (values.length === 0) return 0;
  for (let i = 0; i + values.length <= all.length; i++) {
    if (values.every((v, j) => Object.is(Math.fround(all[i + j]), Math.fround(v)))) return i;
  }
  return -1;
}

/**
 * Asserts that `tokens` (the answer's logprob entries of some text) are exactly the sampled
 * tokens behind `text`: a contiguous run of the upstream's response, each with its decoded text,
 * exact bytes and logprob, and no alternatives.
 */
export function assertExactLogprobs(
  fx: ProxyFixture,
  call: { responseIds: number[]; logprobs: number[] },
  tokens: readonly {
    token: string;
    logprob: number;
    bytes: number[] | null;
    top_logprobs?: unknown[];
  }[],
  text: string,
): void {
  assert.ok(tokens.length > 0, "logprobs present");
  const start = findRun(call.logprobs, tokens.map((t) => t.logprob));
  assert.ok(start >= 0, "the logprobs are a run of the sampled tokens' logprobs");
  tokens.forEach((t, j) => {
    const id = call.responseIds[start + j];
    assert.equal(t.token, fx.tokenizer.decode([id]), `token ${j} text`);
    assert.deepEqual(t.bytes, Array.from(new TextEncoder().encode(t.token)), `token ${j} bytes`);
    if (t.top_logprobs) assert.deepEqual(t.top_logprobs, [], "no alternatives");
  });
  assert.equal(tokens.map((t) => t.token).join(""), text, "the tokens spell the text");
}
