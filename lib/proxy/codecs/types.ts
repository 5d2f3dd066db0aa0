/**
 * What every wire codec shares: the normalized request, the finished call it answers from,
 * the streaming encoder contract, the readers of request fields and the proxy's HTTP error.
 * Codecs import it whole (`import * as wire from "./types.ts"`), so a call site shows which
 * helpers are the shared toolkit (`wire.optBool(body, "stream")`) and which are the codec's own.
 *
 * @module
 */
import { HttpError } from "../../util/error.ts";
import type { ChatMessage, Flavor, JsonObject } from "../../schema.ts";
import type { ToolDefinition } from "../../tokens/types.ts";
import type { AssistantOutput, OutputPart } from "../../tokens/parse_output.ts";

/** Sampling parameters every flavor maps onto. */
export interface Sampling {
  max_tokens: number;
  temperature: number;
  top_p: number;
  /** Stop strings (the generated text is cut before the first one). */
  stop: string[];
  seed: number | null;
}

/** A request in the proxy's own terms, whatever flavor it arrived in. */
export interface NormalizedRequest {
  flavor: Flavor;
  model: string;
  stream: boolean;
  /** Chat flavors: the conversation to render with the chat template. */
  messages: ChatMessage[] | null;
  /** Completions flavor: the raw prompt text, or ids when the caller sent token ids. */
  prompt: string | null;
  promptIds: number[] | null;
  /** OpenAI function-tool shape: `{type: "function", function: {name, description, parameters}}`. */
  tools: ToolDefinition[];
  sampling: Sampling;
  /** Qwen3 `enable_thinking`, when the caller said. */
  enableThinking?: boolean;
  /** OpenAI chat/completions streaming: `stream_options.include_usage`. */
  includeUsage: boolean;
  /**
   * The caller asked for the sampled tokens' logprobs in the answer (chat `logprobs: true`,
   * completions `logprobs: 0`, responses `include: ["message.output_text.logprobs"]`).
   */
  logprobs?: boolean;
  /**
   * Request settings a codec reports back in its answer (the Responses `ResponseResource` echoes
   * instructions, tools, tool choice, sampling parameters, metadata, …), as decoded.
   */
  echo?: JsonObject;
}

/** Limits and defaults a codec applies while decoding. */
export interface DecodeOptions {
  defaultMaxTokens: number;
  maxTokensLimit: number;
}

/** How a generation ended, in the proxy's terms. */
export type FinishReason = "stop" | "length";

/** Everything a codec needs to write the final answer. */
export interface FinishedCall {
  id: string;
  model: string;
  /** Unix seconds. */
  created: number;
  output: AssistantOutput;
  /** Raw generated text (completions flavor). */
  text: string;
  finish_reason: FinishReason;
  /** The stop string that ended generation, when one did. */
  stop_sequence: string | null;
  prompt_tokens: number;
  completion_tokens: number;
}

/** Call identity a streaming encoder knows from the start. */
export interface StreamStart {
  id: string;
  model: string;
  created: number;
  prompt_tokens: number;
}

/** Turns output parts into the SSE text of one flavor. */
export interface StreamEncoder {
  /** Events sent before any token (e.g. `message_start`). */
  start(): string;
  /** Events for one output part. */
  part(part: OutputPart): string;
  /** Closing events (the final byte is written after the call was captured). */
  finish(call: FinishedCall): string;
  /** An error event for a stream that already started. */
  error(message: string): string;
}

/** One wire format: decode a request, encode answers and errors. */
export interface Codec {
  flavor: Flavor;
  decode(body: unknown, options: DecodeOptions): NormalizedRequest;
  respond(call: FinishedCall, request: NormalizedRequest): JsonObject;
  stream(start: StreamStart, request: NormalizedRequest): StreamEncoder;
  /** An error body in the caller's own format. */
  errorBody(status: number, message: string, param?: string): JsonObject;
}

/** Throws a 400 naming `field`. */
export function badRequest(field: string, message: string): never {
  throw new HttpError(400, `${field}: ${message}`, { field });
}

/** Formats one SSE event. */
export function sse(data: unknown, event?: string): string {
  const payload = typeof data === "string" ? data : JSON.stringify(data);
  return (event ? `event: ${event}\n` : "") + `data: ${payload}\n\n`;
}

// ---------------------------------------------------------------------------------------------
// Small field readers shared by the codecs; each names the field it rejects.

/** Asserts a JSON object body. */
export function asObject(value: unknown, field: string): Record<string, unknown> {
  if (typeof value !== "object" || value === null || Array.isArray(value)) {
    badRequest(field, "must be a JSON object");
  }
  return value as Record<string, unknown>;
}

/**
 * Reads an optional field (absent or null: undefined) that must pass `valid`, else a 400 naming
 * `field` with `message`.
 */
function optional<T>(
  obj: Record<string, unknown>,
  key: string,
  field: string,
  valid: (value: unknown) => value is T,
  message: string,
): T | undefined {
  const value = obj[key];
  if (value === undefined || value === null) return undefined;
  if (!valid(value)) badRequest(field, message);
  return value;
}

const isFiniteNumber = (v: unknown): v is number => typeof v === "number" && Number.isFinite(v);

/** Reads an optional finite number within [min, max]. */
export function optNumber(
  obj: Record<string, unknown>,
  key: string,
  min: number,
  max: number,
  field = key,
): number | undefined {
  const value = optional(obj, key, field, isFiniteNumber, "must be a number");
  if (value !== undefined && (value < min || value > max)) {
    badRequest(field, `must be between ${min} and ${max}`);
  }
  return value;
}

/** Reads an optional positive integer. */
export function optPositiveInt(
  obj: Record<string, unknown>,
  key: string,
  field = key,
): number | undefined {
  const valid = (v: unknown): v is number => Number.isInteger(v) && (v as number) >= 1;
  return optional(obj, key, field, valid, "must be a positive integer");
}

/** Reads an optional boolean. */
export function optBool(
  obj: Record<string, unknown>,
  key: string,
  field = key,
): boolean | undefined {
  const valid = (v: unknown): v is boolean => typeof v === "boolean";
  return optional(obj, key, field, valid, "must be a boolean");
}

/** Reads a required non-empty string. */
export function reqString(obj: Record<string, unknown>, key: string, field = key): string {
  const value = obj[key];
  if (typeof value !== "string" || value === "") badRequest(field, "must be a non-empty string");
  return value;
}

/** Reads `stop` as a list of strings (string or array form). */
export function readStop(value: unknown, field: string): string[] {
  if (value === undefined || value === null) return [];
  if (typeof value === "string") return value === "" ? [] : [value];
  if (Array.isArray(value) && value.every((s) => typeof s === "string")) {
    if (value.length > 16) badRequest(field, "at most 16 stop sequences");
    return (value as string[]).filter((s) => s !== "");
  }
  return badRequest(field, "must be a string or an array of strings");
}

/** Reads an optional penalty: only 0 is accepted (the policy samples without penalties). */
export function zeroPenalty(obj: Record<string, unknown>, key: string): void {
  const value = optNumber(obj, key, -2, 2);
  if (value !== undefined && value !== 0) {
    badRequest(key, "not supported: the policy samples with temperature and top_p only");
  }
}

/** Reads `top_logprobs`: only 0 is accepted (the upstream returns no alternatives). */
export function zeroTopLogprobs(obj: Record<string, unknown>, key = "top_logprobs"): void {
  const value = obj[key];
  if (value === undefined || value === null) return;
  if (typeof value !== "number" || !Number.isInteger(value) || value < 0 || value > 20) {
    badRequest(key, "must be an integer between 0 and 20");
  }
  if (value > 0) {
    badRequest(
      key,
      "not supported: the policy server returns the sampled token's logprob only, no alternatives",
    );
  }
}

/** Reads the seed. */
export function readSeed(obj: Record<string, unknown>): number | null {
  const value = obj.seed;
  if (value === undefined || value === null) return null;
  if (typeof value !== "number" || !Number.isInteger(value)) {
    badRequest("seed", "must be an integer");
  }
  return value;
}

/** Clamps/defaults `max_tokens`. */
export function resolveMaxTokens(value: number | undefined, options: DecodeOptions): number {
  return Math.min(value ?? options.defaultMaxTokens, options.maxTokensLimit);
}

/** Joins OpenAI/Anthropic content parts of type text; rejects images and other media. */
export function textOfContent(value: unknown, field: string): string {
  if (value === undefined || value === null) return "";
  if (typeof value === "string") return value;
  if (!Array.isArray(value)) badRequest(field, "must be a string or an array of content parts");
  let text = "";
  value.forEach((part, i) => {
    const p = asObject(part, `${field}[${i}]`);
    const type = p.type;
    if (
      type === "text" || type === "input_text" || type === "output_text" ||
      type === "summary_text" || type === "reasoning_text"
    ) {
      if (typeof p.text !== "string") badRequest(`${field}[${i}].text`, "must be a string");
      text += p.text;
    } else {
      badRequest(`${field}[${i}].type`, `unsupported content part type ${JSON.stringify(type)}`);
    }
  });
  return text;
}

/** Validates one OpenAI-shaped function tool and returns it normalized. */
export function normalizeFunctionTool(
  name: unknown,
  description: unknown,
  parameters: unknown,
  field: string,
): ToolDefinition {
  if (typeof name !== "string" || name === "") {
    badRequest(`${field}.name`, "must be a non-empty string");
  }
  const fn: JsonObject = { name };
  if (typeof description === "string") fn.description = description;
  if (parameters !== undefined && parameters !== null) {
    fn.parameters = asObject(parameters, `${field}.parameters`) as JsonObject;
  }
  return { type: "function", function: fn };
}

/**
 * Reads a request's `tools` array: absent or null is no tools, anything else must be an array
 * of objects, each passed to `pick` with its field name; a `null` from `pick` skips the tool
 * (a hosted or server tool the policy cannot call).
 */
export function decodeToolList(
  value: unknown,
  field: string,
  pick: (tool: Record<string, unknown>, field: string) => ToolDefinition | null,
): ToolDefinition[] {
  if (value === undefined || value === null) return [];
  if (!Array.isArray(value)) badRequest(field, "must be an array");
  const tools: ToolDefinition[] = [];
  value.forEach((raw, i) => {
    const toolField = `${field}[${i}]`;
    const tool = pick(asObject(raw, toolField), toolField);
    if (tool) tools.push(tool);
  });
  return tools;
}

/** Unix seconds now. */
export function nowSeconds(): number {
  return Math.floor(Date.now() / 1000);
}
