/**
 * The ablation's environment: the toy arithmetic task run by the built-in harness with inline
 * context compaction, so that rollouts really split into several samples of different lengths.
 *
 * The compaction budget sits between the history of a one-character tool result and a
 * two-character one (`"7"` vs `"56"` or `"-3"`): a rollout whose calculator result has two or
 * more characters is summarised before its answer call, so it becomes two samples (a long
 * one: tool call + summary; a short one: the answer after the compacted history); a rollout
 * with a one-digit result stays one sample. A policy that strays from the format (no tool
 * call, a longer call) changes its own split, as real agents do.
 *
 * The SFT warm start teaches both compaction paths (summary = the tool's result, answer = the
 * summary's number) and, with `guesses`, a wrong answer without the tool next to them: the
 * warm-started policy then chooses at its first token between guessing (one short sample,
 * reward 0) and the tool (two samples of different lengths, reward 1 when it copies well), so
 * how many samples a rollout yields depends on what RL is learning, as in real agent runs.
 *
 * @module
 */
import { SUMMARY_REQUEST } from "../lib/harness/builtin/agent.ts";
import type { ChatMessage, HarnessSpec, TrainingRow } from "../lib/schema.ts";
import type { ArithmeticTask } from "../lib/harness/schema.ts";
import type { ChatTokenizer } from "../lib/tokens/types.ts";
import {
  scriptedArithmetic,
  scriptedGuess,
  sftRow,
  toyHarness,
  toyTools,
} from "../lib/loop/mod.ts";

/**
 * Compaction budget (characters after the task message): the tool-call name and arguments of
 * a one-digit-operand expression (`calculator` + `{"expression":"7 * 8"}` = 32) plus a
 * one-character result fit; a two-character result does not.
 */
export const SPLIT_MAX_CHARS = 33;

/** The user turn that replaces a compacted history (as the built-in harness writes it). */
function compactedTurn(summary: string): ChatMessage {
  return {
    role: "user",
    content: `Summary of your earlier work (the history was compacted):\n${summary}`,
  };
}

/**
 * The harness spec of the split environment: the toy harness plus inline compaction.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { splitHarness } from "./split_env.ts";
 * const spec = splitHarness("/tmp/data");
 * assert.equal((spec.options as { compaction: { max_chars: number } }).compaction.max_chars, 33);
 * ```
 */
export function splitHarness(dataDir: string, maxTokens = 80): HarnessSpec {
  const base = toyHarness(dataDir, { max_tokens: maxTokens, max_turns: 2 });
  return {
    name: base.name,
    options: {
      ...base.options,
      compaction: { max_chars: SPLIT_MAX_CHARS, mode: "inline", summary_max_tokens: 8 },
    },
  };
}

/** True when the task's rollouts are compacted (and so split) if the policy follows the script. */
export function splitsOnScript(task: ArithmeticTask): boolean {
  return task.answer.length >= 2;
}

/** Options of {@link splitSftRows}. */
export interface SplitSftOptions {
  /** Wrong guessing demonstrations ({@link scriptedGuess}) per task (default 0). */
  guesses?: number;
}

/**
 * SFT rows of the split environment: for a task whose rollouts compact, the two conversations
 * the harness sends (tool call + summary; answer after the compacted history), otherwise the
 * plain toy trajectory; plus `guesses` wrong answers without the tool per task.
 *
 * @example
 * ```ts ignore
 * const rows = splitSftRows(tokenizer, toyArithmeticTasks(), { guesses: 1 });
 * ```
 */
export function splitSftRows(
  tokenizer: ChatTokenizer,
  tasks: ArithmeticTask[],
  options: SplitSftOptions = {},
): TrainingRow[] {
  const tools = toyTools();
  const rows: TrainingRow[] = [];
  for (const task of tasks) {
    for (let k = 0; k < (options.guesses ?? 0); k++) {
      rows.push(sftRow(tokenizer, scriptedGuess(task), tools, `${task.id}-guess${k}`));
    }
    const plain = scriptedArithmetic(task);
    if (!splitsOnScript(task)) {
      rows.push(sftRow(tokenizer, plain, tools, task.id));
      continue;
    }
    const [system, user, call, result] = plain;
    rows.push(sftRow(
      tokenizer,
      [system, user, call, result, { role: "user", content: SUMMARY_REQUEST }, {
        role: "assistant",
        content: task.answer,
      }],
      tools,
      `${task.id}-a`,
    ));
    rows.push(sftRow(
      tokenizer,
      [system, user, compactedTurn(task.answer), { role: "assistant", content: task.answer }],
      tools,
      `${task.id}-b`,
    ));
  }
  return rows;
}
