/**
 * SFT warm start for the toy arithmetic task: cross-entropy on scripted correct trajectories
 * (call the calculator on the whole expression, then state its result), rendered with the
 * policy's chat template exactly as the proxy renders the built-in harness's calls, so the
 * warm-started policy speaks the format RL then sharpens.
 *
 * @module
 */
import { packSharedPrefix } from "../batching/mod.ts";
import type { ChatMessage, TrainingRow } from "../schema.ts";
import type { ArithmeticTask } from "../harness/schema.ts";
import type { ChatTokenizer, ToolDefinition } from "../tokens/types.ts";
import type { TrainerClient } from "../trainer/client.ts";
import { mulberry32 } from "../util/random.ts";

/** System prompt the toy runs give the built-in harness (short: every char is a token). */
export const TOY_SYSTEM_PROMPT = "Use the calculator, then reply with the result.";

/**
 * The scripted correct conversation of one arithmetic task, as the built-in harness would
 * send it (the last message is the answer turn to learn).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { scriptedArithmetic } from "./sft.ts";
 * const msgs = scriptedArithmetic({
 *   id: "a", question: "What is 1 + 2?", expression: "1 + 2", answer: "3", steps: 1,
 * });
 * assert.equal(msgs.at(-1)?.content, "3");
 * ```
 */
export function scriptedArithmetic(
  task: ArithmeticTask,
  systemPrompt: string = TOY_SYSTEM_PROMPT,
): ChatMessage[] {
  return [
    { role: "system", content: systemPrompt },
    { role: "user", content: task.question },
    {
      role: "assistant",
      content: null,
      tool_calls: [{
        id: "call_0",
        type: "function",
        function: {
          name: "calculator",
          arguments: JSON.stringify({ expression: task.expression }),
        },
      }],
    },
    { role: "tool", content: task.answer, tool_call_id: "call_0" },
    { role: "assistant", content: task.answer },
  ];
}

/**
 * A scripted *wrong* trajectory of one arithmetic task: no calculator, a guessed number in a
 * sentence ("I think it is 57."), which the environment scores 0. Mixed into the toy's SFT
 * demonstrations, it leaves the warm-started policy choosing between guessing and calling the
 * tool at its first token: the choice RL then has to learn from reward alone.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { scriptedGuess } from "./sft.ts";
 * const msgs = scriptedGuess({
 *   id: "a", question: "What is 1 + 2?", expression: "1 + 2", answer: "3", steps: 1,
 * });
 * assert.equal(msgs.at(-1)?.content, "I think it is 5.");
 * ```
 */
export function scriptedGuess(
  task: ArithmeticTask,
  systemPrompt: string = TOY_SYSTEM_PROMPT,
): ChatMessage[] {
  let h = 0;
  for (const c of task.id) h = (h * 31 + c.charCodeAt(0)) >>> 0;
  const wrong = Number(task.answer) + 1 + (h % 3);
  return [
    { role: "system", content: systemPrompt },
    { role: "user", content: task.question },
    { role: "assistant", content: `I think it is ${wrong}.` },
  ];
}

/** Index of the first `id` in `ids` at or after `from` (or `ids.length`). */
function indexOfId(ids: Uint32Array, id: number, from: number): number {
  for (let i = from; i < ids.length; i++) if (ids[i] === id) return i;
  return ids.length;
}

/**
 * Renders a conversation into one training row whose trained tokens are exactly what the
 * policy samples in each assistant turn (up to and including the end-of-turn token), with
 * per-token weights set later.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadCharTokenizer } from "../tokens/char.ts";
 * import { scriptedArithmetic, sftRow } from "./sft.ts";
 * import { toyArithmeticTasks, toyTools } from "./toy.ts";
 * const tokenizer = await loadCharTokenizer();
 * const [task] = toyArithmeticTasks();
 * const row = sftRow(tokenizer, scriptedArithmetic(task), toyTools());
 * const trained = row.tokens.filter((_, i) => row.loss_mask[i] === 1);
 * // Both assistant turns, each up to and including its end-of-turn token:
 * assert.equal(
 *   tokenizer.decode(trained),
 *   '<tool_call>{"name": "calculator", "arguments": {"expression": "1 + 1"}}</tool_call>' +
 *     "<|im_end|>2<|im_end|>",
 * );
 * ```
 */
export function sftRow(
  tokenizer: ChatTokenizer,
  messages: ChatMessage[],
  tools: ToolDefinition[],
  id = "sft",
): TrainingRow {
  const full = tokenizer.encode(tokenizer.render(messages, { tools }));
  const endId = tokenizer.encode("<|im_end|>")[0];
  const mask = new Array<0 | 1>(full.length).fill(0);
  messages.forEach((m, i) => {
    if (m.role !== "assistant") return;
    const prompt = tokenizer.encode(
      tokenizer.render(messages.slice(0, i), { tools, addGenerationPrompt: true }),
    );
    const end = indexOfId(full, endId, prompt.length);
    for (let t = prompt.length; t <= Math.min(end, full.length - 1); t++) mask[t] = 1;
  });
  const tokens = Array.from(full);
  return {
    rollout_id: id,
    group_id: id,
    tokens,
    loss_mask: mask,
    advantages: tokens.map(() => 0),
    loss_weights: tokens.map(() => 0),
    rollout_logprobs: tokens.map(() => 0),
  };
}

/** Options of {@link runSft}. */
export interface SftOptions {
  steps: number;
  batchSize: number;
  seed?: number;
  /**
   * Pack each batch with shared prefixes (default 4096 tokens per micro-batch): the rows' common
   * prompt (system prompt, tools, question) is computed once, with the same loss and gradient
   * up to float rounding (see `packSharedPrefix`). 0: one plain row per demonstration.
   */
  microTokenBudget?: number;
  /** Called after each optimizer step. */
  onStep?: (step: number, loss: number) => void;
}

/**
 * Trains `rows` with token-mean cross-entropy for `steps` optimizer steps of `batchSize` rows
 * (sampled with a seeded generator). Returns the mean loss of the last step.
 *
 * @example
 * ```ts ignore
 * await runSft(worker.client, rows, { steps: 100, batchSize: 8 });
 * ```
 */
export async function runSft(
  client: TrainerClient,
  rows: TrainingRow[],
  options: SftOptions,
): Promise<number> {
  const rand = mulberry32(options.seed ?? 0);
  let last = Number.NaN;
  for (let step = 0; step < options.steps; step++) {
    const batch = Array.from(
      { length: options.batchSize },
      () => rows[Math.floor(rand() * rows.length)],
    );
    const trained = batch.reduce(
      (acc, r) => acc + r.loss_mask.reduce<number>((a, m) => a + m, 0),
      0,
    );
    const weighted = batch.map((r) => ({
      ...r,
      loss_weights: r.loss_mask.map((m) => (m ? 1 / trained : 0)),
    }));
    const budget = options.microTokenBudget ?? 4096;
    let loss = 0;
    if (budget > 0) {
      for (const mb of packSharedPrefix(weighted, { token_budget: budget })) {
        loss += (await client.forwardBackward({ rows: [mb.row], loss: { kind: "ce" } })).loss;
      }
    } else {
      loss = (await client.forwardBackward({ rows: weighted, loss: { kind: "ce" } })).loss;
    }
    await client.optimStep();
    last = loss;
    options.onStep?.(step, last);
  }
  return last;
}
