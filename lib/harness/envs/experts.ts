/**
 * Scripted expert policies for the environments: given the rendered prompt, they act like a
 * competent agent of the built-in harness (call the right tool, read its result from the
 * prompt, answer). They drive integration tests through the proxy's scripted upstream and can
 * produce SFT warm-start trajectories for the toy tasks.
 *
 * @module
 */
import type { ScriptedPolicyInput, ScriptedTurn } from "../../proxy/scripted_upstream.ts";
import { promptRole } from "../builtin/scripted.ts";
import { evaluateExpression, formatNumber } from "../calculator.ts";

/** A scripted policy: prompt in, assistant turn out. */
export type ScriptedPolicy = (input: ScriptedPolicyInput) => ScriptedTurn;

/** Tool results in a ChatML/Qwen3 prompt, in order. */
export function toolResponses(promptText: string): string[] {
  return [...promptText.matchAll(/<tool_response>\n?([\s\S]*?)\n?<\/tool_response>/g)]
    .map((m) => m[1]);
}

const SUMMARY: ScriptedTurn = {
  reasoning: "I summarise what I did.",
  content: "I called the tools and I am about to answer.",
};

/** Options of {@link arithmeticExpert}. */
export interface ArithmeticExpertOptions {
  /** Answer `value + 1` instead of the value for questions this returns true for. */
  wrong?: (question: string) => boolean;
}

/**
 * Solves "What is <expression>?" with one calculator call, then answers with its result.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { arithmeticExpert } from "./experts.ts";
 * const policy = arithmeticExpert();
 * const reply = policy({ promptIds: [], promptText: "user\nWhat is 2 + 3?", call: 0 });
 * assert.equal(reply.tool_calls?.[0].name, "calculator");
 * ```
 */
export function arithmeticExpert(options: ArithmeticExpertOptions = {}): ScriptedPolicy {
  return ({ promptText }) => {
    const results = toolResponses(promptText);
    if (promptRole(promptText) === "summary") {
      return {
        reasoning: "I keep the calculator's result.",
        content: `Calculator result: ${results.at(-1)?.trim() ?? "none yet"}`,
      };
    }
    const questions = [...promptText.matchAll(/What is ([^?\n]+)\?/g)];
    const question = questions.at(-1)?.[0] ?? "";
    const expression = questions.at(-1)?.[1] ?? "0";
    // After a compaction the result survives only in the summary.
    const summarized = [...promptText.matchAll(/Calculator result: (-?[\d.]+)/g)].at(-1)?.[1];
    if (summarized !== undefined) results.push(summarized);
    if (results.length === 0) {
      return {
        reasoning: `I use the calculator on ${expression}.`,
        tool_calls: [{ name: "calculator", arguments: { expression } }],
      };
    }
    let answer = results.at(-1)!.trim();
    if (options.wrong?.(question)) answer = formatNumber(evaluateExpression(answer) + 1);
    return { reasoning: `The calculator says ${answer}.`, content: `<answer>${answer}</answer>` };
  };
}

/**
 * Answers the search environment's question shapes with one or two `search` calls, reading the
 * documents the tool returned from the prompt.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { searchExpert } from "./experts.ts";
 * const turn = searchExpert()({
 *   promptIds: [], promptText: "user\nWhat is the capital of Kaquatin?", call: 0,
 * });
 * assert.deepEqual(turn.tool_calls?.[0].arguments, { query: "Kaquatin" });
 * ```
 */
export function searchExpert(): ScriptedPolicy {
  const search = (query: string, why: string): ScriptedTurn => ({
    reasoning: why,
    tool_calls: [{ name: "search", arguments: { query } }],
  });
  const answer = (value: string): ScriptedTurn => ({
    reasoning: `The documents say ${value}.`,
    content: `<answer>${value}</answer>`,
  });
  return ({ promptText }) => {
    if (promptRole(promptText) === "summary") return SUMMARY;
    const q = [...promptText.matchAll(
      /(What is the capital of|In which year was the capital of|Who founded the capital of) (\w+)/g,
    )].at(-1);
    if (!q) return answer("unknown");
    const [, shape, country] = q;
    const results = toolResponses(promptText).join("\n");
    const capital = new RegExp(`${country} is a country[^\\n]*?Its capital is (\\w+)`).exec(
      results,
    )?.[1];
    if (!capital) return search(country, `I look up ${country}.`);
    if (shape === "What is the capital of") return answer(capital);
    const city = new RegExp(
      `${capital} is the capital of ${country}\\. The city was founded in (\\d+) by ` +
        `\\w+ (\\w+ \\w+)`,
    ).exec(results);
    if (!city) return search(`${capital} founded`, `Now I look up the city ${capital}.`);
    return answer(shape === "Who founded the capital of" ? city[2] : city[1]);
  };
}
