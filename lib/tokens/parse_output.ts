/**
 * Incremental parsing of generated text into reasoning, content and tool calls.
 *
 * Understands Qwen3/DeepSeek-style `<think>…</think>` reasoning and Hermes/Qwen
 * `<tool_call>{"name": …, "arguments": …}</tool_call>` blocks. Text is fed as it streams in;
 * anything that could still turn into a tag is held back until it is decided, so a streaming
 * caller never sees half a tag.
 *
 * @module
 */

/**
 * One sampled token of a part, with its exact behaviour logprob (token-level upstreams attach
 * these while generating: see `lib/proxy/codecs/logprobs.ts`).
 */
export interface TokenLogprob {
  /** The token's text on its own (U+FFFD where it holds only part of a UTF-8 character). */
  readonly token: string;
  readonly logprob: number;
  /** The token's exact UTF-8 bytes. */
  readonly bytes: number[];
  /** Character offset in the generated text where the token starts. */
  readonly offset: number;
}

/** What every part may carry besides its text. */
interface PartExtras {
  /**
   * `[start, end)` character offsets of the generated text the part was parsed from (tags and
   * whitespace the parser dropped inside it included); set by {@link OutputParser}.
   */
  span?: [number, number];
  /** The tokens whose text lies in `span` (the first part a token touches owns it). */
  logprobs?: TokenLogprob[];
}

/** A piece of assistant output, in the order it was generated. */
export type OutputPart =
  | ({ type: "reasoning"; text: string } & PartExtras)
  | ({ type: "content"; text: string } & PartExtras)
  | ({ type: "tool_call"; id: string; name: string; arguments: string } & PartExtras);

/** A tool call the model made, OpenAI-shaped (`arguments` is JSON text). */
export interface ParsedToolCall {
  id: string;
  name: string;
  arguments: string;
}

/** The whole assistant output, assembled from its parts. */
export interface AssistantOutput {
  content: string;
  reasoning: string;
  tool_calls: ParsedToolCall[];
  /**
   * The tokens of each kind with their logprobs, when the generation attached them (token-level
   * upstreams; absent for the OpenAI-compatible passthrough).
   */
  logprobs?: { content: TokenLogprob[]; reasoning: TokenLogprob[]; tool_calls: TokenLogprob[] };
}

/** Options of {@link OutputParser}. */
export interface OutputParserOptions {
  /** The prompt already opened `<think>` (the model starts inside its reasoning). */
  startInReasoning?: boolean;
  /** Parse `<think>` blocks (default true). */
  reasoning?: boolean;
  /** Parse `<tool_call>` blocks (default true). */
  toolCalls?: boolean;
  /** Makes tool call ids; defaults to `call_` + random hex. */
  newToolCallId?: () => string;
}

const THINK_OPEN = "<think>";
const THINK_CLOSE = "</think>";
const TOOL_OPEN = "<tool_call>";
const TOOL_CLOSE = "</tool_call>";

/** Makes an OpenAI-looking tool call id. */
export function randomToolCallId(): string {
  const bytes = crypto.getRandomValues(new Uint8Array(12));
  return "call_" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
}

/** Length of the longest suffix of `text` that is a proper prefix of `tag`. */
function partialTagLength(text: string, tag: string): number {
  const max = Math.min(tag.length - 1, text.length);
  for (let n = max; n > 0; n--) {
    if (text.endsWith(tag.slice(0, n))) return n;
  }
  return 0;
}

/**
 * Finds the raw text of the `"arguments"` value inside a tool-call JSON object, so the
 * caller gets the exact bytes the model wrote (the chat template re-inserts argument strings
 * verbatim; re-serialising them would change the next prompt's tokens).
 */
export function rawJsonMember(json: string, key: string): string | undefined {
  let depth = 0;
  let i = 0;
  const n = json.length;
  while (i < n) {
    const ch = json[i];
    if (ch === '"') {
      const start = i;
      i++;
      while (i < n && json[i] !== '"') i += json[i] === "\\" ? 2 : 1;
      i++;
      if (depth === 1) {
        let j = i;
        while (j < n && /\s/.test(json[j])) j++;
        if (json[j] === ":" && JSON.parse(json.slice(start, i)) === key) {
          j++;
          while (j < n && /\s/.test(json[j])) j++;
          const end = scanJsonValue(json, j);
          return end === -1 ? undefined : json.slice(j, end);
        }
      }
      continue;
    }
    if (ch === "{" || ch === "[") depth++;
    else if (ch === "}" || ch === "]") depth--;
    i++;
  }
  return undefined;
}

/** Index just past the JSON value starting at `start`, or -1. */
function scanJsonValue(json: string, start: number): number {
  let depth = 0;
  let i = start;
  const n = json.length;
  while (i < n) {
    const ch = json[i];
    if (ch === '"') {
      i++;
      while (i < n && json[i] !== '"') i += json[i] === "\\" ? 2 : 1;
      i++;
      if (depth === 0) return i;
      continue;
    }
    if (ch === "{" || ch === "[") depth++;
    else if (ch === "}" || ch === "]") {
      depth--;
      if (depth === 0) return i + 1;
      if (depth < 0) return i;
    } else if (depth === 0 && (ch === "," || /\s/.test(ch))) return i;
    i++;
  }
  return depth === 0 ? n : -1;
}

/** Parses one `<tool_call>` body; undefined when it is not a valid call. */
export function parseToolCallBody(
  body: string,
  newId: () => string = randomToolCallId,
): ParsedToolCall | undefined {
  let value: unknown;
  try {
    value = JSON.parse(body);
  } catch {
    return undefined;
  }
  if (typeof value !== "object" || value === null || Array.isArray(value)) return undefined;
  const record = value as Record<string, unknown>;
  if (typeof record.name !== "string" || record.name === "") return undefined;
  const args = record.arguments ?? {};
  let argText: string;
  if (typeof args === "string") {
    argText = args;
  } else {
    const raw = rawJsonMember(body.trim(), "arguments");
    argText = raw !== undefined && safeEqualJson(raw, args) ? raw : JSON.stringify(args);
  }
  return { id: newId(), name: record.name, arguments: argText };
}

function safeEqualJson(raw: string, value: unknown): boolean {
  try {
    return JSON.stringify(JSON.parse(raw)) === JSON.stringify(value);
  } catch {
    return false;
  }
}

type State = "start" | "reasoning" | "content" | "tool";

/**
 * Streaming parser: `push(text)` returns the parts that are decided so far, `finish()` the rest.
 * Every part carries its `span` in the text pushed so far, so that the tokens behind it can be
 * found (the proxy attaches each token's logprob to the part it produced).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { OutputParser } from "./parse_output.ts";
 * const parser = new OutputParser({ newToolCallId: () => "call_0" });
 * const parts = [
 *   ...parser.push("<think>\nadd them\n</think>\n\nSure.\n<tool_"),
 *   ...parser.push('call>\n{"name": "add", "arguments": {"a": 1}}\n</tool_call>'),
 *   ...parser.finish(),
 * ];
 * assert.deepEqual(parts.map((p) => [p.type, p.span]), [
 *   ["reasoning", [7, 17]],
 *   ["content", [27, 32]],
 *   ["tool_call", [32, 96]],
 * ]);
 * ```
 */
export class OutputParser {
  #state: State;
  #buffer = "";
  /** Offset of `#buffer[0]` in all the text pushed so far. */
  #offset = 0;
  #options: Required<Omit<OutputParserOptions, "startInReasoning">>;
  #sawToolCall = false;
  #sawContent = false;
  #reasoningStarted = false;
  /** Whitespace held back at the end of content (dropped before a tool call), and its offset. */
  #pendingSpace = "";
  #pendingStart = 0;
  #toolLead = "";
  /** Where the current tool block starts (its leading whitespace included). */
  #toolStart = 0;

  constructor(options: OutputParserOptions = {}) {
    this.#options = {
      reasoning: options.reasoning ?? true,
      toolCalls: options.toolCalls ?? true,
      newToolCallId: options.newToolCallId ?? randomToolCallId,
    };
    this.#state = options.startInReasoning && this.#options.reasoning ? "reasoning" : "start";
  }

  /** Feeds newly generated text; returns the parts it completes. */
  push(text: string): OutputPart[] {
    this.#buffer += text;
    const out: OutputPart[] = [];
    this.#drain(out, false);
    return merge(out);
  }

  /** Flushes everything held back (end of generation). */
  finish(): OutputPart[] {
    const out: OutputPart[] = [];
    this.#drain(out, true);
    const end = this.#offset + this.#buffer.length;
    if (this.#state === "tool" && this.#buffer) {
      // An unterminated tool call stays visible as text rather than vanishing.
      this.#content(out, this.#toolLead + TOOL_OPEN + this.#buffer, this.#toolStart, end);
    } else if (this.#buffer) {
      if (this.#state === "reasoning") this.#reasoning(out, this.#buffer, this.#offset, true);
      else this.#content(out, this.#buffer, this.#offset, end);
    }
    this.#drop(this.#buffer.length);
    if (this.#pendingSpace && !this.#sawToolCall) {
      const start = this.#pendingStart;
      out.push({
        type: "content",
        text: this.#pendingSpace,
        span: [start, start + this.#pendingSpace.length],
      });
    }
    this.#pendingSpace = "";
    return merge(out);
  }

  /** Consumes `n` characters from the front of the buffer. */
  #drop(n: number): void {
    this.#buffer = this.#buffer.slice(n);
    this.#offset += n;
  }

  #drain(out: OutputPart[], final: boolean): void {
    while (this.#buffer.length > 0) {
      if (this.#state === "start") {
        const lead = /^\s*/.exec(this.#buffer)![0].length;
        const trimmed = this.#buffer.slice(lead);
        if (!this.#options.reasoning) {
          this.#state = "content";
          continue;
        }
        if (trimmed.startsWith(THINK_OPEN)) {
          this.#drop(lead + THINK_OPEN.length);
          this.#state = "reasoning";
          continue;
        }
        if (!final && THINK_OPEN.startsWith(trimmed)) return;
        this.#state = "content";
        continue;
      }
      if (this.#state === "reasoning") {
        const end = this.#buffer.indexOf(THINK_CLOSE);
        if (end >= 0) {
          this.#reasoning(out, this.#buffer.slice(0, end), this.#offset, true);
          this.#drop(end + THINK_CLOSE.length);
          // Leading newlines after </think> may still be arriving.
          this.#drop(leadingNewlines(this.#buffer));
          this.#state = "content";
          continue;
        }
        if (final) return;
        // Newlines right before </think> are not reasoning: hold them with any partial tag.
        const tag = partialTagLength(this.#buffer, THINK_CLOSE);
        const hold = tag + trailingNewlines(this.#buffer.slice(0, this.#buffer.length - tag));
        const take = this.#buffer.length - hold;
        this.#reasoning(out, this.#buffer.slice(0, take), this.#offset, false);
        this.#drop(take);
        return;
      }
      if (this.#state === "content") {
        if (!this.#sawContent && !this.#sawToolCall) {
          this.#drop(leadingNewlines(this.#buffer));
          if (this.#buffer === "") return;
        }
        const start = this.#options.toolCalls ? this.#buffer.indexOf(TOOL_OPEN) : -1;
        if (start >= 0) {
          this.#content(out, this.#buffer.slice(0, start), this.#offset, this.#offset + start);
          // Whitespace before a tool call belongs to the template, unless the call is invalid.
          this.#toolLead = this.#pendingSpace;
          this.#toolStart = this.#pendingSpace ? this.#pendingStart : this.#offset + start;
          this.#pendingSpace = "";
          this.#drop(start + TOOL_OPEN.length);
          this.#state = "tool";
          continue;
        }
        if (final) return;
        const hold = this.#options.toolCalls ? partialTagLength(this.#buffer, TOOL_OPEN) : 0;
        const take = this.#buffer.length - hold;
        this.#content(out, this.#buffer.slice(0, take), this.#offset, this.#offset + take);
        this.#drop(take);
        return;
      }
      // tool
      const end = this.#buffer.indexOf(TOOL_CLOSE);
      if (end < 0) return;
      const body = this.#buffer.slice(0, end);
      this.#drop(end + TOOL_CLOSE.length);
      const span: [number, number] = [this.#toolStart, this.#offset];
      const call = parseToolCallBody(body.trim(), this.#options.newToolCallId);
      if (call) {
        this.#sawToolCall = true;
        out.push({ type: "tool_call", ...call, span });
      } else {
        this.#content(out, this.#toolLead + TOOL_OPEN + body + TOOL_CLOSE, ...span);
      }
      this.#state = "content";
    }
  }

  #reasoning(out: OutputPart[], text: string, start: number, closing: boolean): void {
    let piece = text;
    if (!this.#reasoningStarted) {
      piece = piece.replace(/^\n+/, "");
      if (piece === "" && !closing) return;
      this.#reasoningStarted = true;
    }
    if (closing) piece = piece.replace(/\n+$/, "");
    if (piece) out.push({ type: "reasoning", text: piece, span: [start, start + text.length] });
  }

  /** Content text that came from `[start, end)` of the generated text. */
  #content(out: OutputPart[], text: string, start: number, end: number): void {
    if (text === "") return;
    const body = text.replace(/\s+$/, "");
    const space = text.slice(body.length);
    if (body === "") {
      if (this.#pendingSpace === "") this.#pendingStart = start;
      this.#pendingSpace += space;
      return;
    }
    let piece = this.#pendingSpace + body;
    const from = this.#pendingSpace ? this.#pendingStart : start;
    if (!this.#sawContent && this.#sawToolCall) piece = piece.replace(/^\s+/, "");
    this.#pendingSpace = space;
    this.#pendingStart = end - space.length;
    if (piece) {
      this.#sawContent = true;
      out.push({ type: "content", text: piece, span: [from, end - space.length] });
    }
  }
}

function leadingNewlines(text: string): number {
  return /^\n*/.exec(text)![0].length;
}

function trailingNewlines(text: string): number {
  const match = /\n+$/.exec(text);
  return match ? match[0].length : 0;
}

/** Joins neighbouring parts of the same text kind (their spans and tokens too). */
function merge(parts: OutputPart[]): OutputPart[] {
  const out: OutputPart[] = [];
  for (const part of parts) {
    const last = out[out.length - 1];
    if (last && part.type !== "tool_call" && last.type === part.type) {
      (last as { text: string }).text += part.text;
      if (last.span && part.span) {
        last.span = [Math.min(last.span[0], part.span[0]), Math.max(last.span[1], part.span[1])];
      }
      if (part.logprobs) last.logprobs = [...last.logprobs ?? [], ...part.logprobs];
    } else out.push({ ...part });
  }
  return out;
}

/**
 * Folds parts into the assistant output they describe.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { collectOutput } from "./parse_output.ts";
 * assert.equal(collectOutput([{ type: "content", text: "hi" }]).content, "hi");
 * ```
 */
export function collectOutput(
  parts: Iterable<OutputPart>,
  into?: AssistantOutput,
): AssistantOutput {
  const out: AssistantOutput = into ?? { content: "", reasoning: "", tool_calls: [] };
  for (const part of parts) {
    if (part.type === "content") out.content += part.text;
    else if (part.type === "reasoning") out.reasoning += part.text;
    else out.tool_calls.push({ id: part.id, name: part.name, arguments: part.arguments });
    if (part.logprobs) {
      out.logprobs ??= { content: [], reasoning: [], tool_calls: [] };
      const kind = part.type === "tool_call" ? "tool_calls" : part.type;
      for (const token of part.logprobs) out.logprobs[kind].push(token);
    }
  }
  return out;
}

/**
 * Parses a whole generated text at once.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOutput } from "./parse_output.ts";
 * assert.equal(parseOutput("<think>hm</think>\n\nHello").reasoning, "hm");
 * ```
 */
export function parseOutput(text: string, options?: OutputParserOptions): AssistantOutput {
  const parser = new OutputParser(options);
  return collectOutput([...parser.push(text), ...parser.finish()]);
}
