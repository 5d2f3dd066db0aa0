/**
 * OpenAI Chat Completions and (legacy) Completions, from the API reference
 * (platform.openai.com/docs/api-reference/chat, …/completions; the `ChatCompletion`,
 * `ChatCompletionChunk`, `Completion` objects), as zod schemas for the conformance tests.
 * Required fields, nullability and enums are as published; objects are open (extensions such as
 * `reasoning_content` are allowed).
 *
 * @module
 */
import { z } from "zod";

const int = z.number().int();

/** `finish_reason` values of a chat choice. */
export const ChatFinishReason = z.enum([
  "stop",
  "length",
  "tool_calls",
  "content_filter",
  "function_call",
]);

/** `ChatCompletionTokenLogprob`. */
export const TokenLogprob = z.looseObject({
  token: z.string(),
  logprob: z.number(),
  bytes: z.array(int.min(0).max(255)).nullable(),
  top_logprobs: z.array(z.looseObject({
    token: z.string(),
    logprob: z.number(),
    bytes: z.array(int.min(0).max(255)).nullable(),
  })),
});
/** A choice's `logprobs`. */
export const ChoiceLogprobs = z.looseObject({
  content: z.array(TokenLogprob).nullable(),
  refusal: z.array(TokenLogprob).nullable(),
});

export const CompletionUsage = z.looseObject({
  prompt_tokens: int.min(0),
  completion_tokens: int.min(0),
  total_tokens: int.min(0),
  completion_tokens_details: z.looseObject({ reasoning_tokens: int.min(0).optional() }).optional(),
  prompt_tokens_details: z.looseObject({ cached_tokens: int.min(0).optional() }).optional(),
});

export const ToolCall = z.looseObject({
  id: z.string(),
  type: z.literal("function"),
  function: z.looseObject({ name: z.string(), arguments: z.string() }),
});

/** `ChatCompletion`. */
export const ChatCompletion = z.looseObject({
  id: z.string(),
  object: z.literal("chat.completion"),
  created: int,
  model: z.string(),
  choices: z.array(z.looseObject({
    index: int.min(0),
    message: z.looseObject({
      role: z.literal("assistant"),
      content: z.string().nullable(),
      refusal: z.string().nullable(),
      tool_calls: z.array(ToolCall).optional(),
    }),
    logprobs: ChoiceLogprobs.nullable(),
    finish_reason: ChatFinishReason,
  })).min(1),
  usage: CompletionUsage.optional(),
  system_fingerprint: z.string().optional(),
  service_tier: z.string().nullable().optional(),
});
export type ChatCompletion = z.infer<typeof ChatCompletion>;

/** `ChatCompletionChunk`. */
export const ChatCompletionChunk = z.looseObject({
  id: z.string(),
  object: z.literal("chat.completion.chunk"),
  created: int,
  model: z.string(),
  choices: z.array(z.looseObject({
    index: int.min(0),
    delta: z.looseObject({
      role: z.enum(["developer", "system", "user", "assistant", "tool"]).optional(),
      content: z.string().nullable().optional(),
      refusal: z.string().nullable().optional(),
      tool_calls: z.array(z.looseObject({
        index: int.min(0),
        id: z.string().optional(),
        type: z.literal("function").optional(),
        function: z.looseObject({
          name: z.string().optional(),
          arguments: z.string().optional(),
        }).optional(),
      })).optional(),
    }),
    logprobs: ChoiceLogprobs.nullable().optional(),
    finish_reason: ChatFinishReason.nullable(),
  })),
  usage: CompletionUsage.nullable().optional(),
  system_fingerprint: z.string().optional(),
  service_tier: z.string().nullable().optional(),
});
export type ChatCompletionChunk = z.infer<typeof ChatCompletionChunk>;

/** The legacy `logprobs` object of a Completions choice. */
export const LegacyLogprobs = z.looseObject({
  tokens: z.array(z.string()).optional(),
  token_logprobs: z.array(z.number()).optional(),
  top_logprobs: z.array(z.record(z.string(), z.number())).nullable().optional(),
  text_offset: z.array(int.min(0)).optional(),
});

/** `Completion` (the response, and each streamed chunk). */
export const Completion = z.looseObject({
  id: z.string(),
  object: z.literal("text_completion"),
  created: int,
  model: z.string(),
  choices: z.array(z.looseObject({
    index: int.min(0),
    text: z.string(),
    logprobs: LegacyLogprobs.nullable(),
    finish_reason: z.enum(["stop", "length", "content_filter"]).nullable(),
  })),
  usage: CompletionUsage.nullable().optional(),
  system_fingerprint: z.string().optional(),
});
export type Completion = z.infer<typeof Completion>;

/** The error a stream sends as its last `data:` line. */
export const StreamError = z.looseObject({
  error: z.looseObject({
    message: z.string(),
    type: z.string(),
    param: z.string().nullable(),
    code: z.string().nullable(),
  }),
});
