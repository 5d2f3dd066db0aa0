/**
 * Scripted policies for driving the built-in harness through the proxy's scripted upstream
 * (tests, demos, SFT warm-start data): route each call to the main script, the sub-agent script
 * or the summary answer by looking at the prompt, and sample non-canonical token splits on
 * purpose to produce `token_boundary` breaks.
 *
 * @module
 */
import type { ScriptedPolicyInput, ScriptedTurn } from "../../proxy/scripted_upstream.ts";
import type { ChatTokenizer } from "../../tokens/types.ts";
import { CONFIRM_REQUEST, SUBAGENT_SYSTEM, SUMMARY_REQUEST, SUMMARY_SYSTEM } from "./agent.ts";

/** Which conversation of the built-in harness a prompt belongs to. */
export type PromptRole = "main" | "subagent" | "summary" | "confirm";

/** The text after the last `user` turn marker (template-agnostic enough for ChatML). */
function lastUserText(prompt: string): string {
  const at = prompt.lastIndexOf("user\n");
  return at >= 0 ? prompt.slice(at) : prompt;
}

/**
 * Tells which conversation of the built-in harness a rendered prompt belongs to.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { promptRole } from "./scripted.ts";
 * const prompt = "<|im_start|>system\nYou solve…<|im_end|>\n<|im_start|>user\n2+2?";
 * assert.equal(promptRole(prompt), "main");
 * ```
 */
export function promptRole(promptText: string): PromptRole {
  if (promptText.includes(SUMMARY_SYSTEM)) return "summary";
  if (promptText.includes(SUBAGENT_SYSTEM)) return "subagent";
  const last = lastUserText(promptText);
  if (last.includes(SUMMARY_REQUEST)) return "summary";
  if (last.includes(CONFIRM_REQUEST)) return "confirm";
  return "main";
}

/** Scripts of {@link builtinScriptedPolicy}. */
export interface BuiltinScript {
  /** Turns of the main conversation, in order (the last repeats). */
  main: ScriptedTurn[];
  /** Turns of sub-agent conversations, in order over all sub-agents (the last repeats). */
  subagent?: ScriptedTurn[];
  /** The answers to summary requests, in order (the last repeats). */
  summary?: ScriptedTurn | ScriptedTurn[];
  /** The answer to the confirmation request. */
  confirm?: ScriptedTurn;
}

/**
 * A policy for `startScriptedUpstream({ policy })` that serves the built-in harness's main
 * conversation, sub-agents, summaries and confirmations from separate scripts, so that a test
 * can configure compaction or delegation without counting calls by hand.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { builtinScriptedPolicy } from "./scripted.ts";
 * const policy = builtinScriptedPolicy({ main: [{ content: "<answer>4</answer>" }] });
 * const reply = policy({ promptIds: [], promptText: "user\nWhat is 2+2?", call: 0 });
 * assert.equal(reply.content, "<answer>4</answer>");
 * ```
 */
export function builtinScriptedPolicy(
  script: BuiltinScript,
): (input: ScriptedPolicyInput) => ScriptedTurn {
  const next = { main: 0, subagent: 0, summary: 0 };
  const take = (list: ScriptedTurn[], key: "main" | "subagent" | "summary") =>
    list[Math.min(next[key]++, list.length - 1)];
  return ({ promptText }) => {
    switch (promptRole(promptText)) {
      case "summary":
        return take(
          Array.isArray(script.summary)
            ? script.summary
            : [script.summary ?? { reasoning: "Summarising.", content: "Progress so far." }],
          "summary",
        );
      case "confirm":
        return script.confirm ?? take(script.main, "main");
      case "subagent":
        return take(script.subagent ?? [{ content: "<answer>done</answer>" }], "subagent");
      default:
        return take(script.main, "main");
    }
  };
}

/**
 * Wraps a tokenizer so that its `encode` splits every occurrence of `marker` into two tokens
 * at a non-canonical place (its first character, then the rest). Given to the scripted
 * upstream, this makes the "policy" sample ids that the proxy's canonical re-tokenization of
 * the next prompt will not reproduce: a `token_boundary` break each time the marker is sampled.
 * Rendering and decoding are unchanged.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "../../tokens/qwen3.ts";
 * import { nonCanonicalTokenizer } from "./scripted.ts";
 * const qwen = await loadQwen3Tokenizer();
 * const policyTokenizer = nonCanonicalTokenizer(qwen, "Calculating");
 * assert.equal(qwen.encode("Calculating").length, 2);
 * // "C", then the 3 ids of "alculating":
 * assert.equal(policyTokenizer.encode("Calculating").length, 4);
 * // then: startScriptedUpstream({ tokenizer: policyTokenizer, policy })
 * ```
 */
export function nonCanonicalTokenizer(base: ChatTokenizer, marker: string): ChatTokenizer {
  if (marker.length < 2) throw new Error("marker: must have at least two characters");
  const encode = (text: string): Uint32Array => {
    const parts = text.split(marker);
    if (parts.length === 1) return base.encode(text);
    const ids: number[] = [];
    parts.forEach((part, i) => {
      if (i > 0) ids.push(...base.encode(marker[0]), ...base.encode(marker.slice(1)));
      ids.push(...base.encode(part));
    });
    return Uint32Array.from(ids);
  };
  return {
    name: `${base.name}+split(${marker})`,
    vocabSize: base.vocabSize,
    eosTokenIds: base.eosTokenIds,
    encode,
    decode: (ids) => base.decode(ids),
    render: (messages, options) => base.render(messages, options),
    tokenId: (token) => base.tokenId(token),
  };
}
