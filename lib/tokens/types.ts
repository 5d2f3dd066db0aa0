/**
 * The tokenizer contract every reins module codes against.
 *
 * @module
 */
import type { ChatMessage, JsonObject } from "../schema.ts";

/** A tool definition as given to a chat template (OpenAI function-tool shape). */
export type ToolDefinition = JsonObject;

/** Options for rendering a conversation with a chat template. */
export interface RenderOptions {
  tools?: ToolDefinition[];
  /** Append the assistant header so that the model continues as the assistant. */
  addGenerationPrompt?: boolean;
  /** Qwen3-style switch; passed to the template as `enable_thinking`. */
  enableThinking?: boolean;
}

/**
 * A tokenizer with its chat template: text ↔ ids, and messages → prompt text.
 * Ids are `Uint32Array`; special tokens written in text (e.g. `<|im_start|>`) encode to their ids.
 */
export interface ChatTokenizer {
  /** Short name (e.g. "qwen3", "char"). */
  readonly name: string;
  readonly vocabSize: number;
  /** Token ids that end generation (e.g. `<|im_end|>`, `<|endoftext|>`). */
  readonly eosTokenIds: readonly number[];
  encode(text: string): Uint32Array;
  decode(ids: ArrayLike<number>): string;
  /** Renders messages through the chat template (no tokenization). */
  render(messages: ChatMessage[], options?: RenderOptions): string;
  /** Token id of a special token string, or undefined when the vocabulary lacks it. */
  tokenId(token: string): number | undefined;
}
