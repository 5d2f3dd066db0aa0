/**
 * The OpenResponses specification (openresponses.org; `schema/responses.tsp`, `items.tsp`,
 * `content.tsp`, `tools.tsp`, `configuration.tsp`, `events.tsp` of openresponses/openresponses),
 * written as zod schemas for the conformance tests: the `ResponseResource` with its 32 required
 * fields, the output items the proxy produces (message, function_call, reasoning), and the
 * streaming events. Objects are open (the spec allows extra fields); required fields, types,
 * nullability and enums are as published. Reasoning text events use the names the OpenAI API
 * and SDKs use (`response.reasoning_text.delta` / `.done`).
 *
 * @module
 */
import { z } from "zod";

const int = z.number().int();

/** `TopLogProb` / `LogProb` (content.tsp). */
export const TopLogProb = z.looseObject({
  token: z.string(),
  logprob: z.number(),
  bytes: z.array(int.min(0).max(255)),
});
export const LogProb = TopLogProb.extend({ top_logprobs: z.array(TopLogProb) });

export const UrlCitation = z.looseObject({
  type: z.literal("url_citation"),
  url: z.string(),
  start_index: int,
  end_index: int,
  title: z.string(),
});

export const OutputTextContent = z.looseObject({
  type: z.literal("output_text"),
  text: z.string(),
  annotations: z.array(UrlCitation),
  logprobs: z.array(LogProb).optional(),
});
export const ReasoningTextContent = z.looseObject({
  type: z.literal("reasoning_text"),
  text: z.string(),
});
export const SummaryTextContent = z.looseObject({
  type: z.literal("summary_text"),
  text: z.string(),
});
export const RefusalContent = z.looseObject({ type: z.literal("refusal"), refusal: z.string() });
export const ContentPart = z.discriminatedUnion("type", [
  OutputTextContent,
  ReasoningTextContent,
  SummaryTextContent,
  RefusalContent,
  z.looseObject({ type: z.literal("input_text"), text: z.string() }),
  z.looseObject({ type: z.literal("text"), text: z.string() }),
]);

const ItemStatus = z.enum(["in_progress", "completed", "incomplete"]);

export const MessageItem = z.looseObject({
  type: z.literal("message"),
  id: z.string(),
  status: ItemStatus,
  role: z.enum(["user", "assistant", "system", "developer"]),
  content: z.array(ContentPart),
});
export const FunctionCallItem = z.looseObject({
  type: z.literal("function_call"),
  id: z.string(),
  call_id: z.string(),
  name: z.string(),
  arguments: z.string(),
  status: ItemStatus,
});
export const ReasoningItem = z.looseObject({
  type: z.literal("reasoning"),
  id: z.string(),
  content: z.array(ContentPart).optional(),
  summary: z.array(ContentPart),
  encrypted_content: z.string().optional(),
});
export const ItemField = z.discriminatedUnion("type", [
  MessageItem,
  FunctionCallItem,
  ReasoningItem,
]);

export const FunctionTool = z.looseObject({
  type: z.literal("function"),
  name: z.string(),
  description: z.string().nullable(),
  parameters: z.record(z.string(), z.unknown()).nullable(),
  strict: z.boolean().nullable(),
});
const ToolChoiceValue = z.enum(["none", "auto", "required"]);
const FunctionToolChoice = z.looseObject({
  type: z.literal("function"),
  name: z.string().optional(),
});
export const ToolChoice = z.union([
  ToolChoiceValue,
  FunctionToolChoice,
  z.looseObject({
    type: z.literal("allowed_tools"),
    tools: z.array(FunctionToolChoice),
    mode: ToolChoiceValue,
  }),
]);

export const TextField = z.looseObject({
  format: z.discriminatedUnion("type", [
    z.looseObject({ type: z.literal("text") }),
    z.looseObject({ type: z.literal("json_object") }),
    z.looseObject({ type: z.literal("json_schema"), name: z.string() }),
  ]),
  verbosity: z.enum(["low", "medium", "high"]).optional(),
});

export const Usage = z.looseObject({
  input_tokens: int.min(0),
  output_tokens: int.min(0),
  total_tokens: int.min(0),
  input_tokens_details: z.looseObject({ cached_tokens: int.min(0) }),
  output_tokens_details: z.looseObject({ reasoning_tokens: int.min(0) }),
});

/** `Error` (responses.tsp): what a failed response carries. */
export const ResponseError = z.looseObject({ code: z.string(), message: z.string() });

/** `ResponseResource` (responses.tsp): every field the spec lists as required. */
export const ResponseResource = z.looseObject({
  id: z.string(),
  object: z.literal("response"),
  created_at: int,
  completed_at: int.nullable(),
  status: z.enum(["queued", "in_progress", "completed", "incomplete", "failed", "cancelled"]),
  incomplete_details: z.looseObject({ reason: z.string() }).nullable(),
  model: z.string(),
  previous_response_id: z.string().nullable(),
  instructions: z.string().nullable(),
  output: z.array(ItemField),
  error: ResponseError.nullable(),
  tools: z.array(FunctionTool),
  tool_choice: ToolChoice,
  truncation: z.enum(["auto", "disabled"]),
  parallel_tool_calls: z.boolean(),
  text: TextField,
  top_p: z.number(),
  presence_penalty: z.number(),
  frequency_penalty: z.number(),
  top_logprobs: int,
  temperature: z.number(),
  reasoning: z.looseObject({
    effort: z.string().nullable(),
    summary: z.string().nullable(),
  }).nullable(),
  user: z.string().nullable(),
  usage: Usage.nullable(),
  max_output_tokens: int.nullable(),
  max_tool_calls: int.nullable(),
  store: z.boolean(),
  background: z.boolean(),
  service_tier: z.string(),
  metadata: z.record(z.string(), z.string()),
  safety_identifier: z.string().nullable(),
  prompt_cache_key: z.string().nullable(),
});
export type ResponseResource = z.infer<typeof ResponseResource>;

const seq = { sequence_number: int.min(0) };
const at = { ...seq, item_id: z.string(), output_index: int.min(0) };
const atContent = { ...at, content_index: int.min(0) };

function lifecycle<T extends string>(type: T) {
  return z.looseObject({ type: z.literal(type), ...seq, response: ResponseResource });
}

/** The streaming events (events.tsp), discriminated by `type`. */
export const StreamEvent = z.discriminatedUnion("type", [
  lifecycle("response.created"),
  lifecycle("response.queued"),
  lifecycle("response.in_progress"),
  lifecycle("response.completed"),
  lifecycle("response.failed"),
  lifecycle("response.incomplete"),
  z.looseObject({
    type: z.literal("response.output_item.added"),
    ...seq,
    output_index: int.min(0),
    item: ItemField,
  }),
  z.looseObject({
    type: z.literal("response.output_item.done"),
    ...seq,
    output_index: int.min(0),
    item: ItemField,
  }),
  z.looseObject({
    type: z.literal("response.content_part.added"),
    ...atContent,
    part: ContentPart,
  }),
  z.looseObject({ type: z.literal("response.content_part.done"), ...atContent, part: ContentPart }),
  z.looseObject({
    type: z.literal("response.output_text.delta"),
    ...atContent,
    delta: z.string(),
    logprobs: z.array(LogProb),
  }),
  z.looseObject({
    type: z.literal("response.output_text.done"),
    ...atContent,
    text: z.string(),
    logprobs: z.array(LogProb),
  }),
  z.looseObject({
    type: z.literal("response.reasoning_text.delta"),
    ...atContent,
    delta: z.string(),
  }),
  z.looseObject({
    type: z.literal("response.reasoning_text.done"),
    ...atContent,
    text: z.string(),
  }),
  z.looseObject({
    type: z.literal("response.reasoning_summary_part.added"),
    ...at,
    summary_index: int.min(0),
    part: ContentPart,
  }),
  z.looseObject({
    type: z.literal("response.reasoning_summary_part.done"),
    ...at,
    summary_index: int.min(0),
    part: ContentPart,
  }),
  z.looseObject({
    type: z.literal("response.reasoning_summary_text.delta"),
    ...at,
    summary_index: int.min(0),
    delta: z.string(),
  }),
  z.looseObject({
    type: z.literal("response.reasoning_summary_text.done"),
    ...at,
    summary_index: int.min(0),
    text: z.string(),
  }),
  z.looseObject({ type: z.literal("response.refusal.delta"), ...atContent, delta: z.string() }),
  z.looseObject({ type: z.literal("response.refusal.done"), ...atContent, refusal: z.string() }),
  z.looseObject({
    type: z.literal("response.function_call_arguments.delta"),
    ...at,
    delta: z.string(),
  }),
  z.looseObject({
    type: z.literal("response.function_call_arguments.done"),
    ...at,
    arguments: z.string(),
  }),
  z.looseObject({
    type: z.literal("error"),
    ...seq,
    error: z.looseObject({
      type: z.string(),
      code: z.string().nullable(),
      message: z.string(),
      param: z.string().nullable(),
    }),
  }),
]);
export type StreamEvent = z.infer<typeof StreamEvent>;

/** The HTTP error body of the OpenAI APIs (`{error: {message, type, param, code}}`). */
export const OpenAIErrorBody = z.looseObject({
  error: z.looseObject({
    message: z.string(),
    type: z.string(),
    param: z.string().nullable(),
    code: z.string().nullable(),
  }),
});
