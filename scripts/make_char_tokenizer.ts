/**
 * Writes the char-level toy tokenizer (`data/tokenizers/char/`) as real Hugging Face files:
 * a BPE model over single characters with no merges, so that both `@huggingface/tokenizers`
 * and the Rust/Python `tokenizers` library load it.
 *
 * Run: `deno run -A scripts/make_char_tokenizer.ts` (idempotent; the files are committed).
 *
 * @module
 */

/** Added tokens, in id order: chat markers first so that their ids are stable and small. */
const SPECIAL = [
  ["<|endoftext|>", true],
  ["<|im_start|>", true],
  ["<|im_end|>", true],
  ["<think>", false],
  ["</think>", false],
  ["<tool_call>", false],
  ["</tool_call>", false],
  ["<tool_response>", false],
  ["</tool_response>", false],
  ["<unk>", true],
] as const;

/**
 * A Qwen3-like chat template, shortened so that tiny models can learn it. Unlike Qwen3 it keeps
 * the reasoning of every assistant turn (no stripping of earlier `<think>` blocks), so a
 * multi-turn conversation renders as one growing prefix.
 */
const CHAT_TEMPLATE = [
  "{%- if messages and messages[0].role == 'system' -%}",
  "{%- set sys = messages[0].content -%}{%- set rest = messages[1:] -%}",
  "{%- else -%}{%- set sys = '' -%}{%- set rest = messages -%}{%- endif -%}",
  "{%- if sys or tools -%}",
  "{{- '<|im_start|>system\\n' + sys -}}",
  "{%- if tools -%}",
  "{%- if sys -%}{{- '\\n' -}}{%- endif -%}",
  "{{- '# Tools' -}}",
  "{%- for tool in tools -%}",
  "{%- set fn = tool.function if tool.function is defined else tool -%}",
  "{{- '\\n' -}}{{- fn | tojson -}}",
  "{%- endfor -%}",
  "{%- endif -%}",
  "{{- '<|im_end|>\\n' -}}",
  "{%- endif -%}",
  "{%- for m in rest -%}",
  "{%- if m.role == 'assistant' -%}",
  "{{- '<|im_start|>assistant\\n' -}}",
  "{%- if m.reasoning_content is defined and m.reasoning_content is not none " +
  "and m.reasoning_content -%}",
  "{{- '<think>' + m.reasoning_content + '</think>' -}}",
  "{%- endif -%}",
  "{%- if m.content is not none -%}{{- m.content -}}{%- endif -%}",
  "{%- if m.tool_calls is defined and m.tool_calls -%}",
  "{%- for tc in m.tool_calls -%}",
  "{%- set f = tc.function if tc.function is defined else tc -%}",
  "{{- '<tool_call>{\"name\": ' -}}{{- f.name | tojson -}}{{- ', \"arguments\": ' -}}",
  "{%- if f.arguments is string -%}{{- f.arguments -}}{%- else -%}{{- f.arguments | tojson -}}" +
  "{%- endif -%}",
  "{{- '}</tool_call>' -}}",
  "{%- endfor -%}",
  "{%- endif -%}",
  "{{- '<|im_end|>\\n' -}}",
  "{%- elif m.role == 'tool' -%}",
  "{{- '<|im_start|>tool\\n<tool_response>' + m.content + '</tool_response><|im_end|>\\n' -}}",
  "{%- else -%}",
  "{{- '<|im_start|>' + m.role + '\\n' + m.content + '<|im_end|>\\n' -}}",
  "{%- endif -%}",
  "{%- endfor -%}",
  "{%- if add_generation_prompt -%}",
  "{{- '<|im_start|>assistant\\n' -}}",
  "{%- if enable_thinking is defined and enable_thinking is false -%}" +
  "{{- '<think></think>' -}}{%- endif -%}",
  "{%- endif -%}",
].join("");

/** Builds the two JSON documents. */
export function buildCharTokenizerFiles(): { tokenizer: object; config: object } {
  const vocab: Record<string, number> = {};
  const addedTokens = SPECIAL.map(([content, special], id) => {
    vocab[content] = id;
    return {
      id,
      content,
      single_word: false,
      lstrip: false,
      rstrip: false,
      normalized: false,
      special,
    };
  });
  let next = SPECIAL.length;
  for (const ch of ["\t", "\n"]) vocab[ch] = next++;
  for (let c = 0x20; c <= 0x7e; c++) vocab[String.fromCharCode(c)] = next++;
  const tokenizer = {
    version: "1.0",
    truncation: null,
    padding: null,
    added_tokens: addedTokens,
    normalizer: null,
    pre_tokenizer: null,
    post_processor: null,
    decoder: { type: "Fuse" },
    model: {
      type: "BPE",
      dropout: null,
      unk_token: "<unk>",
      continuing_subword_prefix: null,
      end_of_word_suffix: null,
      fuse_unk: false,
      byte_fallback: false,
      ignore_merges: false,
      vocab,
      merges: [],
    },
  };
  const addedTokensDecoder: Record<string, object> = {};
  for (const token of addedTokens) {
    const { id, ...rest } = token;
    addedTokensDecoder[String(id)] = rest;
  }
  const config = {
    add_bos_token: false,
    add_prefix_space: false,
    added_tokens_decoder: addedTokensDecoder,
    bos_token: null,
    chat_template: CHAT_TEMPLATE,
    clean_up_tokenization_spaces: false,
    eos_token: "<|im_end|>",
    model_max_length: 32768,
    pad_token: "<|endoftext|>",
    tokenizer_class: "PreTrainedTokenizerFast",
    unk_token: "<unk>",
  };
  return { tokenizer, config };
}

if (import.meta.main) {
  const { cliMain, parseFlags } = await import("../lib/flags.ts");
  await cliMain("make_char_tokenizer", async () => {
    const usage = "usage: deno run -A scripts/make_char_tokenizer.ts\n" +
      "  writes data/tokenizers/char/tokenizer.json and tokenizer_config.json (no flags)";
    if (!parseFlags(Deno.args, {}, usage)) return;
    await writeFiles();
  });
}

async function writeFiles(): Promise<void> {
  const dir = new URL("../data/tokenizers/char/", import.meta.url);
  await Deno.mkdir(dir, { recursive: true });
  const { tokenizer, config } = buildCharTokenizerFiles();
  await Deno.writeTextFile(
    new URL("tokenizer.json", dir),
    JSON.stringify(tokenizer, null, 2) + "\n",
  );
  await Deno.writeTextFile(
    new URL("tokenizer_config.json", dir),
    JSON.stringify(config, null, 2) + "\n",
  );
  console.log(`wrote ${dir.pathname}tokenizer.json and tokenizer_config.json`);
}
