/**
 * Loads any Hugging Face `tokenizer.json` + `tokenizer_config.json` pair into a
 * {@link ChatTokenizer}: ids through `@huggingface/tokenizers`, prompts through the
 * `chat_template` compiled once with `@huggingface/jinja`.
 *
 * @module
 */
import { Tokenizer } from "@huggingface/tokenizers";
import { Template } from "@huggingface/jinja";
import type { z } from "zod";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { type ChatMessage, formatPath, ValidationError } from "../schema.ts";
import {
  type AddedToken,
  type TokenizerConfig,
  TokenizerConfigSchema,
  type TokenizerJson,
  TokenizerJsonSchema,
} from "./schema.ts";
import type { ChatTokenizer, RenderOptions } from "./types.ts";
import { replaceBpeCache } from "./bpe_cache.ts";

/** Options of {@link loadHfTokenizer}. */
export interface HfTokenizerOptions {
  /** Short name reported by {@link ChatTokenizer.name} (default `"hf"`). */
  name?: string;
  /**
   * Tokens that end generation. Defaults to the config's `eos_token`; models whose
   * `generation_config.json` lists several (Qwen3: `<|im_end|>`, `<|endoftext|>`) pass them here.
   */
  eosTokens?: string[];
  /** Overrides the config's `chat_template` (e.g. read from a `chat_template.jinja` file). */
  chatTemplate?: string;
}

/** A directory (a `file:` URL) and the options a tokenizer was loaded with. */
export interface HfTokenizerOrigin {
  dir: string;
  options: HfTokenizerOptions;
}

const ROLES = new Set(["system", "user", "assistant", "tool"]);

/** GPT-2 byte-level alphabet: which printable character stands for each byte 0..255. */
function byteLevelUnicodeToByte(): Map<string, number> {
  const map = new Map<string, number>();
  let extra = 0;
  for (let b = 0; b < 256; b++) {
    const printable = (b >= 0x21 && b <= 0x7e) || (b >= 0xa1 && b <= 0xac) ||
      (b >= 0xae && b <= 0xff);
    const cp = printable ? b : 256 + extra++;
    map.set(String.fromCodePoint(cp), b);
  }
  return map;
}

let unicodeToByte: Map<string, number> | undefined;
const utf8 = new TextEncoder();

function specialTokenString(value: TokenizerConfig["bos_token"]): string | undefined {
  if (value === null || value === undefined) return undefined;
  return typeof value === "string" ? value : value.content;
}

function parseToolArguments(text: string): unknown {
  // Official renderings (HF transformers with dict arguments, vLLM, SGLang) see an object here and
  // emit it with `tojson`; a string that is not a JSON object/array stays as written.
  const first = text.trimStart()[0];
  if (first !== "{" && first !== "[") return text;
  try {
    return JSON.parse(text);
  } catch {
    return text;
  }
}

function toTemplateMessage(message: ChatMessage, index: number): Record<string, unknown> {
  if (message === null || typeof message !== "object") {
    throw new ValidationError(`messages[${index}]`, [`messages[${index}]: must be an object`]);
  }
  if (!ROLES.has(message.role)) {
    const field = formatPath(["messages", index, "role"]);
    throw new ValidationError(field, [
      `${field}: expected one of system, user, assistant, tool, got ${
        JSON.stringify(message.role)
      }`,
    ]);
  }
  const content = message.content ?? "";
  if (typeof content !== "string") {
    const field = formatPath(["messages", index, "content"]);
    throw new ValidationError(field, [`${field}: must be a string or null`]);
  }
  const out: Record<string, unknown> = { role: message.role, content };
  if (message.reasoning_content !== undefined) out.reasoning_content = message.reasoning_content;
  if (message.tool_calls !== undefined) {
    out.tool_calls = message.tool_calls.map((call, j) => {
      const args = call?.function?.arguments;
      if (typeof call?.function?.name !== "string" || typeof args !== "string") {
        const field = formatPath(["messages", index, "tool_calls", j, "function"]);
        throw new ValidationError(field, [
          `${field}: needs a string name and a string arguments (JSON text)`,
        ]);
      }
      const converted: Record<string, unknown> = {
        type: call.type ?? "function",
        function: { name: call.function.name, arguments: parseToolArguments(args) },
      };
      if (call.id !== undefined) converted.id = call.id;
      return converted;
    });
  }
  if (message.tool_call_id !== undefined) out.tool_call_id = message.tool_call_id;
  if (message.name !== undefined) out.name = message.name;
  return out;
}

/**
 * A Hugging Face tokenizer with its chat template. Beyond {@link ChatTokenizer} it exposes the
 * facts the incremental encoder, offsets and streaming decoder rely on (added tokens, per-token
 * bytes).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadHfTokenizerFromDir } from "./hf.ts";
 * const tok = await loadHfTokenizerFromDir(new URL("../../data/tokenizers/char/", import.meta.url));
 * const ids = tok.encode("<|im_start|>user\nhi<|im_end|>");
 * assert.equal(tok.decode(ids), "<|im_start|>user\nhi<|im_end|>");
 * ```
 */
export class HfChatTokenizer implements ChatTokenizer {
  readonly name: string;
  readonly vocabSize: number;
  readonly eosTokenIds: readonly number[];
  /** Added tokens (`tokenizer.json` `added_tokens`): split out of text before the model runs. */
  readonly addedTokens: readonly AddedToken[];
  /** The chat template source, when the config has one. */
  readonly chatTemplate: string | undefined;
  /**
   * True when the text of a sequence is exactly the concatenation of its tokens' bytes
   * ({@link tokenBytes}) decoded as UTF-8, runs of byte tokens decoded together and added tokens
   * kept verbatim (ByteLevel and Fuse decoders without clean-up). Offsets and streaming are exact
   * then; otherwise they fall back to decoding windows of ids.
   */
  readonly bytePieces: boolean;
  /**
   * Added tokens matched in raw text before normalization (all of them when the tokenizer has no
   * normalizer): the text between two of them is normalized, pre-tokenized and run through the
   * model on its own, which is what makes the incremental encoder's chunking exact.
   */
  readonly rawSplitTokens: readonly AddedToken[];
  /**
   * Where {@link loadHfTokenizerFromDir} read it from: another thread can load the same
   * tokenizer from here (the proxy's tokenizer worker). Unset for one built from objects.
   */
  origin: HfTokenizerOrigin | undefined = undefined;
  readonly #tokenizer: Tokenizer;
  readonly #templates = new Map<string, Template>();
  readonly #templateSources: Map<string, string>;
  readonly #templateVars: Record<string, string>;
  readonly #isAdded: Uint8Array;
  readonly #byteLevel: boolean;
  readonly #bytes: (Uint8Array | undefined)[];
  readonly #textDecoder = new TextDecoder("utf-8", { fatal: false, ignoreBOM: true });

  constructor(tokenizerJson: unknown, tokenizerConfig: unknown, options: HfTokenizerOptions = {}) {
    const json: TokenizerJson = parseField(TokenizerJsonSchema, tokenizerJson, "tokenizer.json");
    const config: TokenizerConfig = parseField(
      TokenizerConfigSchema,
      tokenizerConfig,
      "tokenizer_config.json",
    );
    this.name = options.name ?? "hf";
    try {
      this.#tokenizer = new Tokenizer(tokenizerJson as object, tokenizerConfig as object);
    } catch (error) {
      throw new Error(`tokenizer.json: cannot build the tokenizer: ${(error as Error).message}`);
    }
    replaceBpeCache(this.#tokenizer); // same ids, fewer map operations per word (bpe_cache.ts)
    this.addedTokens = json.added_tokens;
    const hasNormalizer = json.normalizer !== null && json.normalizer !== undefined;
    this.rawSplitTokens = json.added_tokens.filter((token) => !(token.normalized && hasNormalizer));
    let maxId = -1;
    const vocab = json.model.vocab;
    if (Array.isArray(vocab)) maxId = vocab.length - 1;
    else for (const id of Object.values(vocab)) if (id > maxId) maxId = id;
    for (const token of json.added_tokens) if (token.id > maxId) maxId = token.id;
    this.vocabSize = maxId + 1;
    this.#isAdded = new Uint8Array(this.vocabSize);
    for (const token of json.added_tokens) this.#isAdded[token.id] = 1;
    this.#bytes = new Array(this.vocabSize);

    const decoderType = (json.decoder as { type?: unknown } | null | undefined)?.type;
    const cleanUp = config.clean_up_tokenization_spaces ?? true;
    this.#byteLevel = decoderType === "ByteLevel";
    this.bytePieces = !cleanUp && (decoderType === "ByteLevel" || decoderType === "Fuse");

    this.#templateSources = new Map();
    const template = options.chatTemplate ?? config.chat_template;
    if (typeof template === "string") this.#templateSources.set("default", template);
    else if (template) {
      for (const { name, template: source } of template) this.#templateSources.set(name, source);
    }
    this.chatTemplate = this.#templateSources.get("default") ??
      this.#templateSources.values().next().value;
    if (this.chatTemplate !== undefined) this.#compile(this.#pickTemplateName(false));

    this.#templateVars = {};
    for (const key of ["bos_token", "eos_token", "unk_token", "pad_token"] as const) {
      const value = specialTokenString(config[key]);
      if (value !== undefined) this.#templateVars[key] = value;
    }

    const eosTokens = options.eosTokens ??
      (this.#templateVars.eos_token ? [this.#templateVars.eos_token] : []);
    const eosIds: number[] = [];
    for (const token of eosTokens) {
      const id = this.tokenId(token);
      if (id === undefined) {
        throw new Error(`eosTokens: ${JSON.stringify(token)} is not in the vocabulary`);
      }
      if (!eosIds.includes(id)) eosIds.push(id);
    }
    this.eosTokenIds = eosIds;
  }

  /** Encodes text; added/special tokens written in it map to their ids; no BOS/EOS is added. */
  encode(text: string): Uint32Array {
    if (typeof text !== "string") throw new TypeError("text: must be a string");
    if (text.length === 0) return new Uint32Array(0);
    return Uint32Array.from(this.#tokenizer.encode(text, { add_special_tokens: false }).ids);
  }

  /** Decodes ids to text (special tokens kept). Throws naming the index of an unknown id. */
  decode(ids: ArrayLike<number>): string {
    const n = ids.length;
    if (n === 0) return "";
    this.#checkIds(ids);
    if (!this.bytePieces) return this.#tokenizer.decode(Array.from(ids));
    let out = "";
    let buffer = new Uint8Array(256);
    let used = 0;
    for (let i = 0; i < n; i++) {
      const id = ids[i];
      if (this.#isAdded[id] && this.#byteLevel) {
        if (used > 0) out += this.#textDecoder.decode(buffer.subarray(0, used));
        used = 0;
        out += this.#tokenizer.id_to_token(id)!;
        continue;
      }
      const bytes = this.tokenBytes(id);
      if (used + bytes.length > buffer.length) {
        const grown = new Uint8Array(Math.max(buffer.length * 2, used + bytes.length));
        grown.set(buffer.subarray(0, used));
        buffer = grown;
      }
      buffer.set(bytes, used);
      used += bytes.length;
    }
    if (used > 0) out += this.#textDecoder.decode(buffer.subarray(0, used));
    return out;
  }

  /** Renders messages through the chat template (no tokenization). */
  render(messages: ChatMessage[], options: RenderOptions = {}): string {
    if (!Array.isArray(messages)) throw new TypeError("messages: must be an array");
    const tools = options.tools;
    if (tools !== undefined && !Array.isArray(tools)) {
      throw new TypeError("options.tools: must be an array of tool definitions");
    }
    const template = this.#compile(this.#pickTemplateName((tools?.length ?? 0) > 0));
    const vars: Record<string, unknown> = {
      ...this.#templateVars,
      messages: messages.map(toTemplateMessage),
      add_generation_prompt: options.addGenerationPrompt ?? false,
    };
    if (tools !== undefined && tools.length > 0) vars.tools = tools;
    if (options.enableThinking !== undefined) vars.enable_thinking = options.enableThinking;
    return template.render(vars);
  }

  /** Token id of a token string (added tokens included), or undefined. */
  tokenId(token: string): number | undefined {
    return this.#tokenizer.token_to_id(token);
  }

  /** The vocabulary string of an id (byte-level alphabet for BPE pieces), or undefined. */
  tokenString(id: number): string | undefined {
    return this.#tokenizer.id_to_token(id);
  }

  /** True when `id` is an added token (special or not: `<|im_start|>`, `<think>`, …). */
  isAddedToken(id: number): boolean {
    return this.#isAdded[id] === 1;
  }

  /**
   * The bytes a token contributes to the text: raw bytes for byte-level pieces (possibly part of a
   * UTF-8 character), the UTF-8 of its content otherwise.
   */
  tokenBytes(id: number): Uint8Array {
    const cached = this.#bytes[id];
    if (cached) return cached;
    const piece = this.#tokenizer.id_to_token(id);
    if (piece === undefined) {
      throw new RangeError(`token id ${id} is not in the vocabulary of ${this.name}`);
    }
    let bytes: Uint8Array;
    if (this.#byteLevel && !this.#isAdded[id]) {
      unicodeToByte ??= byteLevelUnicodeToByte();
      const chars = Array.from(piece);
      bytes = new Uint8Array(chars.length);
      for (let i = 0; i < chars.length; i++) {
        const b = unicodeToByte.get(chars[i]);
        if (b === undefined) {
          throw new Error(`token ${id} (${JSON.stringify(piece)}) is not in the byte alphabet`);
        }
        bytes[i] = b;
      }
    } else if (this.bytePieces) {
      bytes = utf8.encode(piece);
    } else {
      bytes = utf8.encode(this.#tokenizer.decode([id]));
    }
    this.#bytes[id] = bytes;
    return bytes;
  }

  #checkIds(ids: ArrayLike<number>): void {
    for (let i = 0; i < ids.length; i++) {
      const id = ids[i];
      if (!Number.isInteger(id) || id < 0 || id >= this.vocabSize) {
        throw new RangeError(
          `ids[${i}]: token id ${id} is not in the vocabulary of ${this.name} ` +
            `(size ${this.vocabSize})`,
        );
      }
    }
  }

  #pickTemplateName(hasTools: boolean): string {
    if (this.#templateSources.size === 0) {
      throw new Error(`tokenizer_config.json: ${this.name} has no chat_template`);
    }
    if (hasTools && this.#templateSources.has("tool_use")) return "tool_use";
    if (this.#templateSources.has("default")) return "default";
    return this.#templateSources.keys().next().value!;
  }

  #compile(name: string): Template {
    let template = this.#templates.get(name);
    if (!template) {
      try {
        template = new Template(this.#templateSources.get(name)!);
      } catch (error) {
        throw new Error(
          `tokenizer_config.json: chat_template ${JSON.stringify(name)} does not compile: ${
            (error as Error).message
          }`,
        );
      }
      this.#templates.set(name, template);
    }
    return template;
  }
}

function parseField<S extends z.ZodType>(schema: S, value: unknown, file: string): z.infer<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = result.error.issues.map((issue) =>
    `${file}: ${formatPath(issue.path)}: ${issue.message}`
  );
  const field = `${file}:${formatPath(result.error.issues[0]?.path ?? [])}`;
  throw new ValidationError(field, issues);
}

/**
 * Builds a {@link HfChatTokenizer} from parsed `tokenizer.json` and `tokenizer_config.json`.
 *
 * @example
 * ```ts
 * import { loadHfTokenizer } from "./hf.ts";
 * const dir = new URL("../../data/tokenizers/char/", import.meta.url);
 * const tok = loadHfTokenizer(
 *   JSON.parse(await Deno.readTextFile(new URL("tokenizer.json", dir))),
 *   JSON.parse(await Deno.readTextFile(new URL("tokenizer_config.json", dir))),
 *   { name: "char" },
 * );
 * tok.render([{ role: "user", content: "hi" }], { addGenerationPrompt: true });
 * ```
 */
export function loadHfTokenizer(
  tokenizerJson: unknown,
  tokenizerConfig: unknown,
  options: HfTokenizerOptions = {},
): HfChatTokenizer {
  return new HfChatTokenizer(tokenizerJson, tokenizerConfig, options);
}

async function readJson(url: URL): Promise<unknown> {
  let text: string;
  try {
    text = await Deno.readTextFile(url);
  } catch (error) {
    throw new Error(`cannot read ${url.pathname}: ${(error as Error).message}`);
  }
  try {
    return JSON.parse(text);
  } catch (error) {
    throw new Error(`${url.pathname}: not valid JSON: ${(error as Error).message}`);
  }
}

/**
 * Loads `tokenizer.json` and `tokenizer_config.json` (and `chat_template.jinja` when the config
 * has no template) from a directory path or `file:` URL.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadHfTokenizerFromDir } from "./hf.ts";
 * const tok = await loadHfTokenizerFromDir("data/tokenizers/char", { name: "char" });
 * assert.equal(tok.vocabSize, 107);
 * ```
 */
export async function loadHfTokenizerFromDir(
  dir: string | URL,
  options: HfTokenizerOptions = {},
): Promise<HfChatTokenizer> {
  let base: URL;
  if (dir instanceof URL) base = new URL(dir.href.endsWith("/") ? dir.href : dir.href + "/");
  else base = pathToFileURL(resolve(dir) + "/");
  const [tokenizerJson, tokenizerConfig] = await Promise.all([
    readJson(new URL("tokenizer.json", base)),
    readJson(new URL("tokenizer_config.json", base)),
  ]);
  let chatTemplate = options.chatTemplate;
  const hasTemplate = typeof tokenizerConfig === "object" && tokenizerConfig !== null &&
    "chat_template" in tokenizerConfig;
  if (chatTemplate === undefined && !hasTemplate) {
    try {
      chatTemplate = await Deno.readTextFile(new URL("chat_template.jinja", base));
    } catch (error) {
      if (!(error instanceof Deno.errors.NotFound)) throw error;
    }
  }
  const loaded = new HfChatTokenizer(tokenizerJson, tokenizerConfig, {
    ...options,
    ...(chatTemplate !== undefined ? { chatTemplate } : {}),
  });
  loaded.origin = { dir: base.href, options: { ...options } };
  return loaded;
}
