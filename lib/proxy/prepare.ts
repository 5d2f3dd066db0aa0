/**
 * Turns a proxied request into a {@link PreparedCall}: decodes it with its codec (400 naming
 * the field), tags its conversation, and for token-level upstreams renders and tokenizes the
 * prompt (incrementally per conversation, or reusing sampled ids in `substitute` mode).
 *
 * @module
 */
import { readJson } from "../http/body.ts";
import { HttpError } from "../util/error.ts";
import type { PromptMode } from "../schema.ts";
import { type ChunkOffload, IncrementalChatEncoder } from "../tokens/incremental.ts";
import { encodeWorkerFor } from "../tokens/encode_worker.ts";
import type { ChatTokenizer, RenderOptions } from "../tokens/types.ts";
import type { PreparedCall, ProxyContext } from "./call.ts";
import type { Codec, NormalizedRequest } from "./codecs/types.ts";
import type { OutputParserOptions } from "../tokens/parse_output.ts";
import { substitutePrompt } from "./substitute.ts";

/** The chat-template options of a request (tools, thinking). */
export function renderOptions(ctx: ProxyContext, request: NormalizedRequest): RenderOptions {
  const enableThinking = request.enableThinking ?? ctx.options.enable_thinking;
  return {
    addGenerationPrompt: true,
    ...(request.tools.length ? { tools: request.tools } : {}),
    ...(enableThinking !== undefined ? { enableThinking } : {}),
  };
}

/** Reads and decodes the request body (the byte limit is the app's middleware). */
export async function decodeRequest(
  ctx: ProxyContext,
  codec: Codec,
  request: Request,
): Promise<{ body: unknown; request: NormalizedRequest }> {
  const body = await readJson(request, { malformed: "invalid JSON" });
  return { body, request: codec.decode(body, ctx.decodeOptions) };
}

/**
 * Chunks of a prompt at least this long are tokenized on the tokenizer worker (~16 KiB is
 * ~10–30 ms of tokenizing here); shorter ones on this thread, where the round trip would cost
 * more than it saves.
 */
export const OFF_THREAD_MIN_CHARS = 16_384;

/**
 * The tokenizer worker as the encoder's offload, or `null` when the tokenizer has none. One
 * worker serves every proxy of this process that shares `tokenizer` (a test process builds
 * dozens): a thread and a vocabulary each would cost 40–100 ms of this thread to start and the
 * tokenizer's memory again.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadCharTokenizer } from "../tokens/char.ts";
 * import { tokenizerOffload } from "./prepare.ts";
 * const tokenizer = await loadCharTokenizer();
 * const offload = tokenizerOffload(tokenizer)!;
 * assert.equal(tokenizerOffload(tokenizer), offload); // one worker per tokenizer
 * const text = "abc ".repeat(offload.minChars);
 * assert.deepEqual(await offload.encode(text), tokenizer.encode(text));
 * ```
 */
export function tokenizerOffload(
  tokenizer: ChatTokenizer,
): (ChunkOffload & { warm(): void }) | null {
  if (OFFLOADS.has(tokenizer)) return OFFLOADS.get(tokenizer)!;
  const worker = encodeWorkerFor(tokenizer);
  const offload = worker && {
    minChars: OFF_THREAD_MIN_CHARS,
    encode: (chunk: string) => worker.encode(chunk),
    warm: () => worker.warm(),
  };
  OFFLOADS.set(tokenizer, offload);
  return offload;
}

const OFFLOADS = new WeakMap<ChatTokenizer, (ChunkOffload & { warm(): void }) | null>();

/** `tokenizer.encode(text)`, on the worker when the text is long. */
export function encodeOffThread(ctx: ProxyContext, text: string): Promise<Uint32Array> {
  const offload = ctx.offload;
  return offload && text.length >= offload.minChars
    ? offload.encode(text)
    : Promise.resolve(ctx.tokenizer.encode(text));
}

/** The prompt ids of a token-level call, and how to parse its output. */
async function tokenize(
  ctx: ProxyContext,
  request: NormalizedRequest,
  conversation: PreparedCall["conversation"],
): Promise<{ promptIds: Uint32Array; parser: OutputParserOptions | null; mode: PromptMode }> {
  const { tokenizer, options } = ctx;
  if (request.messages) {
    const render = renderOptions(ctx, request);
    let promptIds: Uint32Array | null = null;
    let mode: PromptMode = "faithful";
    if (options.mode === "substitute" && conversation?.last) {
      promptIds = substitutePrompt(tokenizer, conversation.last, request.messages, render);
      if (promptIds) mode = "substitute";
    }
    let text: string;
    if (promptIds) {
      text = tokenizer.decode(promptIds.subarray(Math.max(0, promptIds.length - 4)));
    } else {
      let encoder = conversation?.encoderState as IncrementalChatEncoder | undefined;
      if (!encoder) {
        encoder = new IncrementalChatEncoder(tokenizer);
        if (conversation) conversation.encoderState = encoder;
      }
      try {
        const rendered = ctx.offload
          ? await encoder.renderAndEncodeOffThread(request.messages, render, ctx.offload)
          : encoder.renderAndEncode(request.messages, render);
        promptIds = rendered.ids;
        text = rendered.text;
      } catch (err) {
        throw new HttpError(
          400,
          `messages: cannot render the chat template: ${(err as Error).message}`,
          { field: "messages" },
        );
      }
    }
    return { promptIds, parser: { startInReasoning: /<think>\s*$/.test(text) }, mode };
  }
  if (request.promptIds) {
    for (const [i, id] of request.promptIds.entries()) {
      if (id >= tokenizer.vocabSize) {
        throw new HttpError(400, `prompt[${i}]: token id ${id} is outside the vocabulary`, {
          field: "prompt",
        });
      }
    }
    return { promptIds: new Uint32Array(request.promptIds), parser: null, mode: "faithful" };
  }
  return {
    promptIds: await encodeOffThread(ctx, request.prompt ?? ""),
    parser: null,
    mode: "faithful",
  };
}

const utf8 = new TextEncoder();

const EMPTY_SIZE = (): JsonSize => ({ lower: 0, upper: 0 });

/** Bounds on the UTF-8 bytes of `JSON.stringify(value)`, from one walk that builds nothing. */
interface JsonSize {
  /** The UTF-16 length of every string, keys included: at least one byte each. */
  lower: number;
  /**
   * At most: 6 bytes a UTF-16 unit (`\u001f` is the longest escape; a surrogate pair is 4
   * bytes for 2 units), 2 quotes a string, 25 characters a number, and the brackets, colons
   * and commas. `Infinity` when a value is not plain JSON data (a `toJSON`, a class instance).
   */
  upper: number;
}

/**
 * {@link JsonSize} of `value` added to `size`, walking until the lower bound passes `limit`:
 * stringifying a 1.5 MB prompt held the loop 9–23 ms, and stringifying every prompt to count it
 * cost a 63 KB conversation ~0.3 ms a call, where this walk costs a few µs.
 */
function jsonSize(value: unknown, limit: number, size: JsonSize): JsonSize {
  if (typeof value === "string") {
    size.lower += value.length;
    size.upper += 6 * value.length + 2;
    return size;
  }
  if (typeof value === "number") size.upper += 25;
  else if (typeof value === "boolean" || value === null || value === undefined) size.upper += 5;
  else if (typeof value !== "object") size.upper = Infinity; // bigint: JSON.stringify throws
  else if (Array.isArray(value)) {
    size.upper += 2 + value.length;
    for (const item of value) {
      jsonSize(item, limit, size);
      if (size.lower > limit) return size;
    }
  } else {
    const proto = Object.getPrototypeOf(value);
    if ((proto !== Object.prototype && proto !== null) || "toJSON" in value) size.upper = Infinity;
    size.upper += 2;
    for (const key in value) {
      const item = (value as Record<string, unknown>)[key];
      // Keys JSON.stringify leaves out are not counted: the lower bound stays one.
      if (item === undefined || typeof item === "function" || typeof item === "symbol") continue;
      size.lower += key.length;
      size.upper += 6 * key.length + 4;
      jsonSize(item, limit, size);
      if (size.lower > limit) return size;
    }
  }
  return size;
}

/**
 * 413 naming `max_prompt_bytes` when the request's prompt (its messages as JSON, tools
 * included, or its raw prompt) is larger: checked before the conversation is tagged and before
 * any rendering or tokenization, so a refused prompt costs one byte count and leaves nothing.
 * A prompt whose strings alone pass the limit is refused before it is stringified, and one whose
 * bound from above (6 bytes a UTF-16 unit, as the longest escape) is within it is let through
 * without being stringified; only a prompt between the two is counted exactly.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { checkPromptBytes } from "./prepare.ts";
 * const ctx = { options: { max_prompt_bytes: 64 } } as unknown as Parameters<
 *   typeof checkPromptBytes
 * >[0];
 * const ask = (content: string) =>
 *   ({ messages: [{ role: "user", content }], tools: [] }) as unknown as Parameters<
 *     typeof checkPromptBytes
 *   >[1];
 * // Strings alone over the limit: refused before stringifying, with a lower bound.
 * assert.throws(() => checkPromptBytes(ctx, ask("x".repeat(70))), /prompt is at least 85 bytes/);
 * // Under it as strings, over it as JSON (keys, quotes) or as UTF-8: the exact count.
 * assert.throws(() => checkPromptBytes(ctx, ask("x".repeat(40))), /prompt is 70 bytes, more/);
 * assert.throws(() => checkPromptBytes(ctx, ask("é".repeat(30))), /prompt is 90 bytes, more/);
 * checkPromptBytes(ctx, ask("2+2?")); // within the limit
 * // Keys JSON leaves out (undefined values) are not counted against it.
 * const unset = { messages: [{ role: "user", content: "x".repeat(20), [`${"k".repeat(60)}`]: undefined }], tools: [] };
 * checkPromptBytes(ctx, unset as unknown as Parameters<typeof checkPromptBytes>[1]);
 * ```
 */
export function checkPromptBytes(ctx: ProxyContext, request: NormalizedRequest): void {
  const max = ctx.options.max_prompt_bytes;
  const field = request.messages ? "messages" : "prompt";
  const refuse = (size: string) => {
    throw new HttpError(
      413,
      `${field}: the prompt is ${size} bytes, more than max_prompt_bytes (${max}); it was ` +
        "refused before tokenization",
      { field },
    );
  };
  // UTF-8 takes at least one byte per UTF-16 unit: strings longer than the limit are over it.
  // A prompt whose bound from above is within the limit (any prompt under ~1/6 of it) is not
  // stringified at all.
  if (request.messages) {
    const size = jsonSize(request.tools, max, jsonSize(request.messages, max, EMPTY_SIZE()));
    if (size.lower > max) refuse(`at least ${size.lower}`);
    if (size.upper <= max) return;
  } else if (typeof request.prompt === "string" && request.prompt.length > max) {
    refuse(`at least ${request.prompt.length}`);
  }
  const text = request.messages
    ? JSON.stringify(request.messages) + (request.tools.length ? JSON.stringify(request.tools) : "")
    : typeof request.prompt === "string"
    ? request.prompt
    : "";
  // A string of n UTF-16 units is at most 3n UTF-8 bytes: count only when close.
  const bytes = text.length * 3 <= max ? text.length : utf8.encode(text).length;
  if (bytes > max) refuse(String(bytes));
}

/**
 * Tags the call's conversation and, for token-level upstreams, tokenizes its prompt (long
 * chunks on the tokenizer worker, so the gateway's thread stays free).
 */
export async function prepareCall(
  ctx: ProxyContext,
  init: Pick<
    PreparedCall,
    "callId" | "rolloutId" | "attemptId" | "codec" | "body" | "request" | "startedAt"
  >,
): Promise<PreparedCall> {
  const { request } = init;
  checkPromptBytes(ctx, request);
  const tagged = request.messages
    ? ctx.sessions.tag(init.rolloutId, init.attemptId, request.messages)
    : null;
  const conversation = tagged?.conversation ?? null;
  let tokens: Awaited<ReturnType<typeof tokenize>> | null = null;
  if (ctx.binding.kind === "token") {
    tokens = await tokenize(ctx, request, conversation);
    if (tokens.promptIds.length === 0) {
      throw new HttpError(400, "prompt: is empty", { field: "prompt" });
    }
  }
  return {
    ...init,
    segment: tagged?.segment ?? null,
    conversation,
    promptIds: tokens?.promptIds ?? null,
    parser: tokens?.parser ?? null,
    mode: tokens?.mode ?? "faithful",
  };
}
