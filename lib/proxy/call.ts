/**
 * One proxied call between its preparation and its answer: what both responders (JSON and
 * streaming) share. {@link startCall} refuses an oversized prompt (recording it), waits at the
 * phase gate, ties the upstream to the harness's connection, and gives the responder the
 * generation to run and the records to capture for a served or failed call.
 *
 * @module
 */
import type { Context } from "hono";
import { HttpError, isAbortError } from "../util/error.ts";
import { PhaseHoldTimeout } from "../gateway/phase.ts";
import type { PromptMode, ProxyOptions, Segment } from "../schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import type { ChunkOffload } from "../tokens/incremental.ts";
import type { CallRecorder, CallResult } from "./capture.ts";
import type { Codec, DecodeOptions, FinishedCall, NormalizedRequest } from "./codecs/types.ts";
import { generate, type GenerationOutcome, type UpstreamBinding } from "./generation.ts";
import type { OutputParserOptions, OutputPart } from "../tokens/parse_output.ts";
import type { Conversation, SessionTracker } from "./sessions.ts";
import { PoolFailure } from "./upstreams/pool.ts";

/** The phase gate the proxy waits on (the gateway's `PhaseGate` satisfies it). */
export interface ProxyPhaseGate {
  acquire(options?: { signal?: AbortSignal; maxHoldMs?: number }): Promise<() => void>;
}

/** What every part of the proxy shares: settings, the upstream, tokenizer and recorder. */
export interface ProxyContext {
  options: ProxyOptions;
  binding: UpstreamBinding;
  tokenizer: ChatTokenizer;
  /** Where long prompt chunks are tokenized (the tokenizer worker), if anywhere. */
  offload: (ChunkOffload & { warm(): void }) | null;
  sessions: SessionTracker;
  recorder: CallRecorder;
  phase: ProxyPhaseGate | undefined;
  decodeOptions: DecodeOptions;
}

/** A decoded, tokenized call ready to run. */
export interface PreparedCall {
  callId: string;
  rolloutId: string;
  attemptId: string;
  codec: Codec;
  body: unknown;
  request: NormalizedRequest;
  segment: Segment | null;
  conversation: Conversation | null;
  promptIds: Uint32Array | null;
  parser: OutputParserOptions | null;
  mode: PromptMode;
  startedAt: number;
  /**
   * The registry's policy version when the call started (upstreams that do not report one);
   * looked up while the call runs, so it costs no latency.
   */
  registryVersion?: Promise<number | null>;
}

const ID_PREFIX: Record<string, string> = {
  openai_chat: "chatcmpl-",
  openai_completions: "cmpl-",
  openai_responses: "resp_",
  anthropic_messages: "msg_",
};

/** The response id of a call in its flavor's style (`chatcmpl-…`, `msg_…`). */
export function responseId(call: PreparedCall): string {
  return (ID_PREFIX[call.request.flavor] ?? "") + call.callId;
}

/** What a codec needs to write the answer of a finished generation. */
export function finishedCall(
  ctx: ProxyContext,
  call: PreparedCall,
  o: GenerationOutcome,
): FinishedCall {
  return {
    id: responseId(call),
    model: call.request.model || ctx.options.default_model,
    created: Math.floor(Date.now() / 1000),
    output: o.output,
    text: o.text,
    finish_reason: o.finish_reason,
    stop_sequence: o.stop_sequence,
    prompt_tokens: o.promptIds.length,
    completion_tokens: o.ids.length,
  };
}

/** A call cleared to run: its generation and the records of how it ended. */
export interface RunningCall {
  /** Runs the generation; `onParts` sees output parts as they are decided. */
  run(onParts?: (parts: OutputPart[]) => void): Promise<GenerationOutcome>;
  /** The record of a served call. */
  served(outcome: GenerationOutcome): CallResult;
  /** The record of a failed call and the error to answer (499 when the harness left). */
  failed(error: unknown): { record: CallResult; answer: HttpError };
  /** Aborts the upstream (the harness went away). */
  abort(): void;
  /** Releases the phase gate and listeners (once, after the capture). */
  cleanup(): void;
}

function failureOf(error: unknown): HttpError & { retries: number; endpoint: string | null } {
  if (error instanceof PoolFailure) {
    return Object.assign(
      new HttpError(error.status, error.message, { code: error.code }),
      { retries: error.retries, endpoint: error.endpoint },
    );
  }
  return Object.assign(
    new HttpError(500, `proxy: ${(error as Error)?.message ?? String(error)}`),
    { retries: 0, endpoint: null },
  );
}

/** The request with no messages (a refused prompt's record keeps none). */
function withoutMessages(request: NormalizedRequest): NormalizedRequest {
  return { ...request, messages: null };
}

/**
 * Clears a prepared call to run: refuses (and records) a prompt over `max_prompt_tokens`,
 * holds the call at the phase gate (503 when held too long, 499 when the harness leaves while
 * held), then wires the harness's disconnect to the upstream. Throws the {@link HttpError} to
 * answer when the call does not run.
 */
export async function startCall(
  ctx: ProxyContext,
  c: Context,
  call: PreparedCall,
): Promise<RunningCall> {
  const partial = { ids: [] as number[], logprobs: [] as number[], text: "" };
  const max = ctx.options.max_prompt_tokens;
  if (call.promptIds && call.promptIds.length > max) {
    const message = `messages: the prompt is ${call.promptIds.length} tokens, more than ` +
      `max_prompt_tokens (${max})`;
    // A refused prompt is not the conversation's state: the next call starts from what was
    // accepted before (and the oversized messages are not held in memory).
    if (call.conversation) {
      call.conversation.lastMessages = null;
      call.conversation.last = null;
      call.conversation.encoderState = undefined;
    }
    // Recorded as a failed call without its prompt: the ids (up to ~1M for a 1 MiB prompt)
    // and messages are no training data and cost the store seconds of work and megabytes;
    // the error says how long it was, the request digest keeps its hash and size.
    await ctx.recorder.record({
      ...call,
      promptIds: new Uint32Array(0),
      request: withoutMessages(call.request),
    }, {
      outcome: null,
      partial,
      httpStatus: 400,
      error: message,
      retries: 0,
      endpoint: null,
      clientDisconnected: false,
    });
    throw new HttpError(400, message, { field: "messages" });
  }
  const clientSignal = c.req.raw.signal;
  let release: () => void;
  try {
    release = ctx.phase
      ? await ctx.phase.acquire({ signal: clientSignal, maxHoldMs: ctx.options.max_hold_ms })
      : () => {};
  } catch (err) {
    if (err instanceof PhaseHoldTimeout) {
      throw new HttpError(503, `proxy: the policy is being updated (${err.message})`, {
        headers: { "retry-after": "5" },
      });
    }
    // The harness went away while held: nothing ran, nothing to record.
    throw new HttpError(499, "client closed the request");
  }
  // Read after the phase gate: a call held through an update is served by the new version.
  const { binding } = ctx;
  if (binding.kind === "passthrough" || binding.client.kind === "sglang") {
    call.registryVersion = ctx.recorder.policyVersionFor(call.request.model).catch(() => null);
  }
  const controller = new AbortController();
  const abort = () => controller.abort(new DOMException("client disconnected", "AbortError"));
  clientSignal.addEventListener("abort", abort, { once: true });
  let cleaned = false;
  return {
    run: (onParts) => {
      const generation = generate(binding, {
        request: call.request,
        rolloutId: call.rolloutId,
        promptIds: call.promptIds,
        parser: call.parser,
        signal: controller.signal,
        onParts: (parts) => {
          for (const p of parts) if (p.type !== "tool_call") partial.text += p.text;
          onParts?.(parts);
        },
        progress: partial,
      });
      // On a kept connection the upstream has the request by now (`generate` writes it before
      // it first waits): the record's fixed parts are made while the engine samples.
      ctx.recorder.ready(call);
      return generation;
    },
    served: (outcome) => ({
      outcome,
      partial,
      httpStatus: 200,
      error: null,
      retries: outcome.retries,
      endpoint: outcome.endpoint,
      clientDisconnected: false,
    }),
    failed: (error) => {
      const disconnected = controller.signal.aborted;
      const f = failureOf(error);
      const record: CallResult = {
        outcome: null,
        partial,
        httpStatus: disconnected ? 499 : f.status,
        error: disconnected ? "client disconnected" : f.message,
        retries: f.retries,
        endpoint: f.endpoint,
        clientDisconnected: controller.signal.aborted,
      };
      return {
        record,
        answer: disconnected || isAbortError(error) ? new HttpError(499, "client disconnected") : f,
      };
    },
    abort,
    cleanup: () => {
      if (cleaned) return;
      cleaned = true;
      clientSignal.removeEventListener("abort", abort);
      release();
    },
  };
}
