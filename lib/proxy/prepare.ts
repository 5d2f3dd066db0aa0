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
    return { promptIds: Uint32Array.from(request.promptIds), parser: null, mode: "faithful" };
  }
  return {
    promptIds: await encodeOffThread(ctx, request.prompt ?? ""),
    parser: null,
    mode: "faithful",
  };
}

const utf8 = new TextEncoder();

/**
 * 413 naming `max_prompt_bytes` when the request's prompt (its messages as JSON, tools
 * included, or its raw prompt) is larger: checked before the conversation is tagged and before
 * any rendering or tokenization, so a refused prompt costs one byte count and leaves nothing.
 */
export function checkPromptBytes(ctx: ProxyContext, request: NormalizedRequest): void {
  const max = ctx.options.max_prompt_bytes;
  // A string of n UTF-16 units is at least n and at most 3n UTF-8 bytes: count only when close.
  const text = request.messages
    ? JSON.stringify(request.messages) + (request.tools.length ? JSON.stringify(request.tools) : "")
    : typeof request.prompt === "string"
    ? request.prompt
    : "";
  const bytes = text.length * 3 <= max ? text.length : utf8.encode(text).length;
  if (bytes > max) {
    const field = request.messages ? "messages" : "prompt";
    throw new HttpError(
      413,
      `${field}: the prompt is ${bytes} bytes, more than max_prompt_bytes (${max}); it was ` +
        "refused before tokenization",
      { field },
    );
  }
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
