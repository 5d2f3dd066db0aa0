/**
 * One generation through the upstream pool: ids in (token level) or the request itself
 * (passthrough), parsed output parts out as they are produced, plus everything the capture
 * needs (ids, logprobs, finish reason, policy version, endpoint, retries).
 *
 * @module
 */
import type { ChatTokenizer } from "../tokens/types.ts";
import type { FinishReason, NormalizedRequest } from "./codecs/types.ts";
import {
  type AssistantOutput,
  collectOutput,
  OutputParser,
  type OutputParserOptions,
  type OutputPart,
} from "../tokens/parse_output.ts";
import type { OpenAICompatibleUpstream } from "./upstreams/openai_compatible.ts";
import type { TryContext, UpstreamPool } from "./upstreams/pool.ts";
import type { TokenUpstream } from "./upstreams/token_level.ts";
import { StreamDecoder } from "../tokens/stream_decoder.ts";
import { PartTokens } from "./codecs/logprobs.ts";

/** The finished generation. */
export interface GenerationOutcome {
  promptIds: Uint32Array;
  ids: number[];
  logprobs: number[];
  finish_reason: FinishReason;
  stop_sequence: string | null;
  /** From the upstream's answer; null when it does not say (registry decides). */
  policy_version: number | null;
  output: AssistantOutput;
  /** Generated text (stop token and anything after a stop string excluded). */
  text: string;
  endpoint: string;
  retries: number;
}

/** What {@link generate} needs. */
export interface GenerateCall {
  request: NormalizedRequest;
  rolloutId: string;
  /** Token level: the rendered, tokenized prompt. */
  promptIds: Uint32Array | null;
  /** Token level: how to parse the text (null = raw text, completions). */
  parser: OutputParserOptions | null;
  signal: AbortSignal;
  /** Receives parts as they are decided (streaming); called with non-empty arrays only. */
  onParts?(parts: OutputPart[]): void;
  /**
   * Filled with the current try's ids and logprobs as they arrive, so that a call that fails
   * or is abandoned midway can still be recorded with what was sampled.
   */
  progress?: { ids: number[]; logprobs: number[] };
}

/** The upstream side a proxy is configured with. */
export type UpstreamBinding =
  | { kind: "token"; pool: UpstreamPool; client: TokenUpstream; tokenizer: ChatTokenizer }
  | {
    kind: "passthrough";
    pool: UpstreamPool;
    client: OpenAICompatibleUpstream;
    model?: string;
    apiKey?: string;
  };

class StopReached extends Error {
  constructor() {
    super("stop sequence reached");
  }
}

/**
 * Holds back text that may still become a stop string and reports the first stop found.
 */
class StopScanner {
  #stops: string[];
  #hold: number;
  #text = "";
  #emitted = 0;
  found: { index: number; stop: string } | null = null;

  constructor(stops: string[]) {
    this.#stops = stops;
    this.#hold = stops.reduce((m, s) => Math.max(m, s.length - 1), 0);
  }

  /** Adds text; returns what may be shown. */
  push(text: string): string {
    this.#text += text;
    if (this.#stops.length === 0) return this.#take(this.#text.length);
    let best: { index: number; stop: string } | null = null;
    const from = Math.max(0, this.#emitted - this.#hold);
    for (const stop of this.#stops) {
      const index = this.#text.indexOf(stop, from);
      if (index >= 0 && (best === null || index < best.index)) best = { index, stop };
    }
    if (best) {
      this.found = best;
      return this.#take(best.index);
    }
    return this.#take(Math.max(this.#emitted, this.#text.length - this.#hold));
  }

  /** End of text: everything held back may be shown. */
  flush(): string {
    return this.found ? "" : this.#take(this.#text.length);
  }

  /** Length of all text pushed so far. */
  get length(): number {
    return this.#text.length;
  }

  #take(end: number): string {
    const out = this.#text.slice(this.#emitted, end);
    this.#emitted = Math.max(this.#emitted, end);
    return out;
  }
}

/**
 * Runs one generation with retries; parts reach `onParts` as soon as they are decided.
 *
 * @example
 * ```ts ignore
 * const outcome = await generate(binding, {
 *   request, rolloutId: "r1", promptIds, parser: {}, signal: AbortSignal.timeout(60_000),
 * });
 * outcome.ids.length === outcome.logprobs.length; // true
 * ```
 */
export async function generate(
  binding: UpstreamBinding,
  call: GenerateCall,
): Promise<GenerationOutcome> {
  if (binding.kind === "passthrough") return await passthrough(binding, call);
  const { tokenizer, client, pool } = binding;
  const stopIds = new Set(tokenizer.eosTokenIds);
  const promptIds = call.promptIds!;
  const result = await pool.run(call.rolloutId, call.signal, async (ctx: TryContext) => {
    // Every try starts from scratch: nothing of a failed try reached the harness.
    const decoder = new StreamDecoder(tokenizer);
    const parser = call.parser ? new OutputParser(call.parser) : null;
    const scanner = new StopScanner(call.request.sampling.stop);
    const ids: number[] = [];
    const logprobs: number[] = [];
    if (call.progress) {
      call.progress.ids = ids;
      call.progress.logprobs = logprobs;
    }
    const tokenEnds: number[] = [];
    const parts: OutputPart[] = [];
    const tokens = new PartTokens(tokenizer);
    let text = "";
    const emit = (fresh: OutputPart[]) => {
      if (fresh.length === 0) return;
      tokens.attach(fresh);
      parts.push(...fresh);
      ctx.commit();
      call.onParts?.(fresh);
    };
    const show = (visible: string) => {
      if (visible === "") return;
      const at = text.length;
      text += visible;
      emit(
        parser
          ? parser.push(visible)
          : [{ type: "content", text: visible, span: [at, text.length] }],
      );
    };
    let finish: FinishReason = "stop";
    let version: number | null = null;
    try {
      const answer = await client.generate({
        promptIds,
        sampling: call.request.sampling,
        stopIds: [...stopIds],
        stream: call.request.stream,
        onTokens(newIds, newLps) {
          for (let i = 0; i < newIds.length; i++) {
            ids.push(newIds[i]);
            logprobs.push(newLps[i]);
            const visible = stopIds.has(newIds[i]) ? "" : scanner.push(decoder.push(newIds[i]));
            tokenEnds.push(scanner.length);
            tokens.add(newIds[i], newLps[i], scanner.length);
            show(visible);
            if (scanner.found) throw new StopReached();
          }
        },
      }, ctx);
      finish = answer.finish_reason;
      version = answer.policy_version;
      if (answer.ids.length !== ids.length) {
        // Non-streaming answers arrive through onTokens as well; this guards protocol bugs.
        throw new Error(`upstream returned ${answer.ids.length} ids but streamed ${ids.length}`);
      }
    } catch (err) {
      if (!(err instanceof StopReached)) throw err;
    }
    let stopSequence: string | null = null;
    if (scanner.found) {
      // Keep the tokens up to the one that completed the stop string: they were sampled.
      const need = scanner.found.index + scanner.found.stop.length;
      let keep = tokenEnds.findIndex((end) => end >= need) + 1;
      if (keep <= 0) keep = ids.length;
      ids.length = keep;
      logprobs.length = keep;
      finish = "stop";
      stopSequence = scanner.found.stop;
    } else {
      show(scanner.push(decoder.flush()));
      show(scanner.flush());
    }
    if (parser) emit(parser.finish());
    return {
      ids,
      logprobs,
      finish_reason: finish,
      stop_sequence: stopSequence,
      policy_version: version,
      output: collectOutput(parts),
      text,
    };
  });
  return { ...result.value, promptIds, endpoint: result.endpoint, retries: result.retries };
}

async function passthrough(
  binding: Extract<UpstreamBinding, { kind: "passthrough" }>,
  call: GenerateCall,
): Promise<GenerationOutcome> {
  const result = await binding.pool.run(call.rolloutId, call.signal, async (ctx) => {
    const progress = call.progress ?? { ids: [], logprobs: [] };
    progress.ids = [];
    progress.logprobs = [];
    return await binding.client.generate({
      request: call.request,
      model: binding.model ?? call.request.model,
      apiKey: binding.apiKey,
      onDelta(ids, lps, parts) {
        progress.ids.push(...ids);
        progress.logprobs.push(...lps);
        if (parts.length === 0) return;
        ctx.commit();
        call.onParts?.(parts);
      },
    }, ctx);
  });
  const r = result.value;
  return {
    // The constructor copies an array by index; `Uint32Array.from` walks its iterator (~1.6×).
    promptIds: new Uint32Array(r.promptIds),
    ids: r.ids,
    logprobs: r.logprobs,
    finish_reason: r.finish_reason,
    stop_sequence: null,
    policy_version: null,
    output: r.output,
    text: r.text,
    endpoint: result.endpoint,
    retries: result.retries,
  };
}
