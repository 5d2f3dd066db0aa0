/**
 * Per-turn template + tokenize time for a 32k-token Qwen3 history gaining ~500 tokens a turn:
 * full `encode(render(messages))` versus {@link IncrementalChatEncoder}.
 *
 * Run: `deno run -A benches/tokens_incremental.ts` — prints the timings and, last,
 * `incremental_render_speedup_32k: <n>`. The proxy benchmark imports
 * {@link measureIncrementalSpeedup}.
 *
 * @module
 */
import type { ChatMessage } from "../lib/schema.ts";
import { IncrementalChatEncoder } from "../lib/tokens/incremental.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { tokensEqual } from "../lib/tokens/sequence.ts";
import type { ChatTokenizer, RenderOptions } from "../lib/tokens/types.ts";
import { mulberry32 } from "../lib/util/random.ts";
import { median } from "../lib/util/stats.ts";

/** Options of {@link measureIncrementalSpeedup}. */
export interface IncrementalBenchOptions {
  /** History size before the measured turns (tokens). Default 32768. */
  historyTokens?: number;
  /** Tokens each measured turn adds (an assistant turn plus a tool result). Default 500. */
  turnTokens?: number;
  /** Measured turns (the median is reported). Default 15. */
  turns?: number;
  /** Tokenizer (default Qwen3). */
  tokenizer?: ChatTokenizer;
}

/** Medians per turn, in milliseconds. */
export interface IncrementalBenchResult {
  full_ms: number;
  incremental_ms: number;
  speedup: number;
  /** Median template render time alone (part of both paths). */
  render_ms: number;
  history_tokens: number;
}

/** Deterministic agent-like text: identifiers, numbers, code punctuation, paths, CJK, emoji. */
function textMaker(seed: number): (words: number) => string {
  const next = mulberry32(seed);
  const syllables = ["ka", "lo", "mi", "zu", "tre", "ph", "qu", "ion", "ent", "str", "x", "ght"];
  const word = () => {
    let w = "";
    const n = 1 + Math.floor(next() * 4);
    for (let i = 0; i < n; i++) w += syllables[Math.floor(next() * syllables.length)];
    return w;
  };
  return (words) => {
    const out: string[] = [];
    for (let i = 0; i < words; i++) {
      const r = next();
      if (r < 0.08) out.push(String(Math.floor(next() * 1e6)));
      else if (r < 0.12) out.push(`${word()}(${word()}, ${word()})`);
      else if (r < 0.15) out.push(`/src/${word()}/${word()}.ts:${Math.floor(next() * 999)}`);
      else if (r < 0.19) out.push("\n   ");
      else if (r < 0.2) out.push("数据处理 ✅");
      else out.push(word());
    }
    return out.join(" ");
  };
}

/**
 * Measures per-turn template+tokenize time, full versus incremental, on a growing history.
 * Both paths are checked to give identical ids on every turn.
 *
 * @example
 * ```ts
 * import { measureIncrementalSpeedup } from "./tokens_incremental.ts";
 * const { full_ms, incremental_ms, speedup } = await measureIncrementalSpeedup();
 * ```
 */
export async function measureIncrementalSpeedup(
  options: IncrementalBenchOptions = {},
): Promise<IncrementalBenchResult> {
  const tokenizer = options.tokenizer ?? await loadQwen3Tokenizer();
  const historyTokens = options.historyTokens ?? 32768;
  const turnTokens = options.turnTokens ?? 500;
  const turns = options.turns ?? 15;
  const text = textMaker(42);
  const tools = [{
    type: "function",
    function: {
      name: "bash",
      description: "Run a shell command",
      parameters: { type: "object", properties: { cmd: { type: "string" } } },
    },
  }];
  const render: RenderOptions = { tools, addGenerationPrompt: true };
  // Roughly 1.6 tokens per generated word on Qwen3; turns are sized from a probe below.
  const turn = (words: number): ChatMessage[] => [
    {
      role: "assistant",
      content: text(Math.round(words * 0.15)),
      reasoning_content: text(Math.round(words * 0.25)),
      tool_calls: [{
        type: "function",
        function: { name: "bash", arguments: JSON.stringify({ cmd: text(8) }) },
      }],
    },
    { role: "tool", content: text(Math.round(words * 0.6)) },
  ];
  const messages: ChatMessage[] = [
    { role: "system", content: "You are a careful coding agent." },
    { role: "user", content: text(300) },
  ];
  const probe = tokenizer.encode(tokenizer.render(turn(1000), {})).length;
  const wordsPerTurn = Math.max(10, Math.round(1000 * turnTokens / probe));
  let history = tokenizer.encode(tokenizer.render(messages, render)).length;
  while (history < historyTokens) {
    const added = turn(wordsPerTurn * 4);
    messages.push(...added);
    history = tokenizer.encode(tokenizer.render(messages, render)).length;
  }
  const session = new IncrementalChatEncoder(tokenizer);
  session.encodeChat(messages, render);
  const full: number[] = [];
  const incremental: number[] = [];
  const renders: number[] = [];
  for (let i = 0; i < turns + 2; i++) {
    messages.push(...turn(wordsPerTurn));
    const t0 = performance.now();
    const fullIds = tokenizer.encode(tokenizer.render(messages, render));
    const t1 = performance.now();
    const incIds = session.encodeChat(messages, render);
    const t2 = performance.now();
    tokenizer.render(messages, render);
    const t3 = performance.now();
    if (!tokensEqual(fullIds, incIds)) throw new Error(`turn ${i}: incremental ids differ`);
    if (i < 2) continue; // warm-up (JIT, caches)
    full.push(t1 - t0);
    incremental.push(t2 - t1);
    renders.push(t3 - t2);
  }
  const full_ms = median(full);
  const incremental_ms = median(incremental);
  return {
    full_ms,
    incremental_ms,
    speedup: full_ms / incremental_ms,
    render_ms: median(renders),
    history_tokens: history,
  };
}

if (import.meta.main) {
  const result = await measureIncrementalSpeedup();
  console.log(`history_tokens: ${result.history_tokens}`);
  console.log(`full_ms_per_turn: ${result.full_ms.toFixed(2)}`);
  console.log(`incremental_ms_per_turn: ${result.incremental_ms.toFixed(2)}`);
  console.log(`render_ms_per_turn: ${result.render_ms.toFixed(2)}`);
  console.log(`incremental_render_speedup_32k: ${result.speedup.toFixed(1)}`);
}
