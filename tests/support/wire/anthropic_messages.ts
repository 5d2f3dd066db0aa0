/**
 * Anthropic Messages, from the API reference (docs.anthropic.com/en/api/messages and
 * …/messages-streaming: the `Message` object, its content blocks, `Usage`, the stream events
 * `message_start`, `content_block_start`/`_delta`/`_stop`, `message_delta`, `message_stop`,
 * `ping`, `error`), as zod schemas for the conformance tests. Required fields, nullability and
 * enums are as published; objects are open.
 *
 * @module
 */
import { z } from "zod";

const int = z.number().int();

export const StopReason = z.enum([
  "end_turn",
  "max_tokens",
  "stop_sequence",
  "tool_use",
  "pause_turn",
  "refusal",
  "model_context_window_exceeded",
]);

export const TextBlock = z.looseObject({
  type: z.literal("text"),
  text: z.string(),
  citations: z.array(z.unknown()).nullable().optional(),
});
export const ThinkingBlock = z.looseObject({
  type: z.literal("thinking"),
  thinking: z.string(),
  signature: z.string(),
});
export const ToolUseBlock = z.looseObject({
  type: z.literal("tool_use"),
  id: z.string(),
  name: z.string(),
  input: z.record(z.string(), z.unknown()),
});
export const ContentBlock = z.discriminatedUnion("type", [TextBlock, ThinkingBlock, ToolUseBlock]);

export const Usage = z.looseObject({
  input_tokens: int.min(0),
  output_tokens: int.min(0),
  cache_creation_input_tokens: int.min(0).nullable().optional(),
  cache_read_input_tokens: int.min(0).nullable().optional(),
  server_tool_use: z.looseObject({}).nullable().optional(),
  service_tier: z.enum(["standard", "priority", "batch"]).nullable().optional(),
});

/** `Message`. */
export const Message = z.looseObject({
  id: z.string(),
  type: z.literal("message"),
  role: z.literal("assistant"),
  content: z.array(ContentBlock),
  model: z.string(),
  stop_reason: StopReason.nullable(),
  stop_sequence: z.string().nullable(),
  usage: Usage,
});
export type Message = z.infer<typeof Message>;

export const ErrorType = z.enum([
  "invalid_request_error",
  "authentication_error",
  "billing_error",
  "permission_error",
  "not_found_error",
  "request_too_large",
  "rate_limit_error",
  "timeout_error",
  "api_error",
  "overloaded_error",
]);
/** The error body (HTTP) and the `error` stream event share this shape. */
export const ErrorBody = z.looseObject({
  type: z.literal("error"),
  error: z.looseObject({ type: ErrorType, message: z.string() }),
});

/** The stream events. */
export const StreamEvent = z.discriminatedUnion("type", [
  z.looseObject({ type: z.literal("message_start"), message: Message }),
  z.looseObject({
    type: z.literal("content_block_start"),
    index: int.min(0),
    content_block: ContentBlock,
  }),
  z.looseObject({
    type: z.literal("content_block_delta"),
    index: int.min(0),
    delta: z.discriminatedUnion("type", [
      z.looseObject({ type: z.literal("text_delta"), text: z.string() }),
      z.looseObject({ type: z.literal("input_json_delta"), partial_json: z.string() }),
      z.looseObject({ type: z.literal("thinking_delta"), thinking: z.string() }),
      z.looseObject({ type: z.literal("signature_delta"), signature: z.string() }),
    ]),
  }),
  z.looseObject({ type: z.literal("content_block_stop"), index: int.min(0) }),
  z.looseObject({
    type: z.literal("message_delta"),
    delta: z.looseObject({
      stop_reason: StopReason.nullable(),
      stop_sequence: z.string().nullable(),
    }),
    usage: z.looseObject({
      output_tokens: int.min(0),
      input_tokens: int.min(0).nullable().optional(),
      cache_creation_input_tokens: int.min(0).nullable().optional(),
      cache_read_input_tokens: int.min(0).nullable().optional(),
    }),
  }),
  z.looseObject({ type: z.literal("message_stop") }),
  z.looseObject({ type: z.literal("ping") }),
  ErrorBody,
]);
export type StreamEvent = z.infer<typeof StreamEvent>;
