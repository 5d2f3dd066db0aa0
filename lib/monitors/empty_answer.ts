/**
 * The empty-answer monitor: flags rollouts whose final answer is empty.
 *
 * @module
 */
import { excerpt, extractActions } from "./actions.ts";
import type { Monitor } from "./types.ts";

/**
 * Flags empty answers: a successful call with no response token, or with only reasoning (no
 * content, no tool call), and a rollout whose final answer is empty.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { emptyAnswerMonitor } from "./empty_answer.ts";
 * assert.equal(emptyAnswerMonitor().name, "empty_answer");
 * ```
 */
export function emptyAnswerMonitor(): Monitor {
  return {
    name: "empty_answer",
    check({ events }) {
      const { answers } = extractActions(events);
      const ok = new Set<number>();
      const textKnown = new Set<number>();
      for (const event of events) {
        if (event.type !== "model_request") continue;
        if (event.payload.http_status < 300 && !event.payload.error) ok.add(event.seq);
        if (event.payload.response_text !== undefined) textKnown.add(event.seq);
      }
      const evidence = [];
      for (const answer of answers) {
        if (!ok.has(answer.seq)) continue;
        if (answer.response_tokens === 0) {
          evidence.push({ seq: answer.seq, source: "response", excerpt: "no response token" });
        } else if (
          textKnown.has(answer.seq) && !answer.content.trim() && answer.tool_calls.length === 0
        ) {
          evidence.push({
            seq: answer.seq,
            source: "response",
            excerpt: answer.reasoning
              ? `reasoning only: ${excerpt(answer.reasoning)}`
              : "empty text",
          });
        }
      }
      if (!evidence.length) return [];
      const last = answers.filter((a) => ok.has(a.seq)).at(-1);
      const finalEmpty = last !== undefined && evidence.some((e) => e.seq === last.seq);
      return [{
        severity: finalEmpty ? "alert" : "warn",
        message: finalEmpty
          ? "the final answer is empty"
          : `${evidence.length} empty answer(s) before the final one`,
        evidence,
      }];
    },
  };
}
