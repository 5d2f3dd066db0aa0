/**
 * A scripted token-level upstream for tests: it speaks the reins generate protocol (and
 * SGLang's native `/generate`) and answers each call with the next scripted assistant turn
 * (text, reasoning, tool calls), rendered the way the chat template writes an assistant turn,
 * tokenized, with deterministic finite logprobs. Failures (HTTP errors, hangs) and slow token
 * streams can be injected to test retries, timeouts and disconnects.
 *
 * @module
 */
import { sleep } from "../util/time.ts";
import type { JsonObject } from "../schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";

/** One assistant turn to replay. */
export interface ScriptedTurn {
  content?: string;
  reasoning?: string;
  tool_calls?: { name: string; arguments: JsonObject | string }[];
  /** Exact response text instead of a rendered turn (an end token is appended if missing). */
  raw?: string;
}

/** What the policy function sees. */
export interface ScriptedPolicyInput {
  promptIds: number[];
  promptText: string;
  /** Zero-based index of this call. */
  call: number;
}

/** An injected failure for one call. */
export type ScriptedFailure = { status: number; body?: string } | { hang: true } | null;

/** Options of {@link startScriptedUpstream}. */
export interface ScriptedUpstreamOptions {
  tokenizer: ChatTokenizer;
  /** Turns replayed in order (the last one repeats when they run out). */
  turns?: ScriptedTurn[];
  /** Alternatively, a function choosing each turn. */
  policy?: (input: ScriptedPolicyInput) => ScriptedTurn | Promise<ScriptedTurn>;
  /** Reported `policy_version` (mutable later through the handle). */
  policyVersion?: number;
  /** Tokens per streamed chunk (default 1). */
  chunkSize?: number;
  /** Delay between streamed chunks (default 0). */
  chunkDelayMs?: number;
  /** Injects a failure for call `index` (counted over all calls, failed ones included). */
  fail?: (index: number) => ScriptedFailure;
  /** Port to listen on (default 0: any free port; always on 127.0.0.1). */
  port?: number;
}

/** One call the upstream received. */
export interface ScriptedCall {
  protocol: "reins" | "sglang";
  body: JsonObject;
  promptIds: number[];
  responseIds: number[];
  logprobs: number[];
  status: number;
  stream: boolean;
  /** The caller closed the connection before the answer ended. */
  aborted: boolean;
  done: boolean;
}

/** A running scripted upstream. */
export interface ScriptedUpstream {
  /** Base URL (`POST {url}/generate`). */
  url: string;
  calls: ScriptedCall[];
  policyVersion: number;
  close(): Promise<void>;
}

/**
 * Deterministic, finite log-probability of `id` at response position `position`, in (-2, 0).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { scriptedLogprob } from "./scripted_upstream.ts";
 * assert.equal(scriptedLogprob(42, 0) === scriptedLogprob(42, 0), true);
 * ```
 */
export function scriptedLogprob(id: number, position: number): number {
  const h = (Math.imul(id + 1, 2654435761) ^ Math.imul(position + 1, 40503)) >>> 0;
  return -((h % 1000) + 1) / 500;
}

/**
 * The response text a template-following model writes for `turn`, ending with its end token.
 * `promptText` lets it skip what the prompt already opened (e.g. `<think>\n\n</think>\n\n`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * import { scriptedResponseText } from "./scripted_upstream.ts";
 * const qwen = await loadQwen3Tokenizer();
 * const prompt = qwen.render([{ role: "user", content: "hello" }], { addGenerationPrompt: true });
 * assert.equal(
 *   scriptedResponseText(qwen, { content: "hi" }, prompt),
 *   "<think>\n\n</think>\n\nhi<|im_end|>",
 * );
 * ```
 */
export function scriptedResponseText(
  tokenizer: ChatTokenizer,
  turn: ScriptedTurn,
  promptText: string,
): string {
  const endText = tokenizer.decode([tokenizer.eosTokenIds[0]]);
  let text: string;
  if (turn.raw !== undefined) {
    text = turn.raw;
  } else {
    const user = { role: "user" as const, content: "x" };
    const assistant = {
      role: "assistant" as const,
      content: turn.content ?? "",
      ...(turn.reasoning !== undefined ? { reasoning_content: turn.reasoning } : {}),
      ...(turn.tool_calls?.length
        ? {
          tool_calls: turn.tool_calls.map((tc, i) => ({
            id: `call_${i}`,
            type: "function" as const,
            function: {
              name: tc.name,
              arguments: typeof tc.arguments === "string"
                ? tc.arguments
                : JSON.stringify(tc.arguments),
            },
          })),
        }
        : {}),
    };
    const head = tokenizer.render([user], { addGenerationPrompt: true });
    const full = tokenizer.render([user, assistant]);
    text = full.startsWith(head) ? full.slice(head.length) : (turn.content ?? "");
    const end = text.lastIndexOf(endText);
    if (end >= 0) text = text.slice(0, end);
    // Drop what the actual prompt already wrote (e.g. an empty think block).
    for (let k = Math.min(text.length, 64); k > 0; k--) {
      if (promptText.endsWith(text.slice(0, k)) && !head.endsWith(text.slice(0, k))) {
        text = text.slice(k);
        break;
      }
    }
  }
  return text.endsWith(endText) ? text : text + endText;
}

/**
 * Starts a scripted upstream on a random loopback port.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * import { startScriptedUpstream } from "./scripted_upstream.ts";
 * const qwen = await loadQwen3Tokenizer();
 * const upstream = await startScriptedUpstream({ tokenizer: qwen, turns: [{ content: "4" }] });
 * const prompt = qwen.render([{ role: "user", content: "2+2?" }], { addGenerationPrompt: true });
 * const res = await fetch(`${upstream.url}/generate`, {
 *   method: "POST",
 *   body: JSON.stringify({ prompt_ids: [...qwen.encode(prompt)], max_tokens: 32 }),
 * });
 * const { ids, logprobs } = await res.json();
 * assert.equal(qwen.decode(ids), "<think>\n\n</think>\n\n4<|im_end|>");
 * assert.equal(ids.length === logprobs.length, true);
 * await upstream.close();
 * ```
 */
export function startScriptedUpstream(options: ScriptedUpstreamOptions): Promise<ScriptedUpstream> {
  const { tokenizer } = options;
  const chunkSize = Math.max(1, options.chunkSize ?? 1);
  const delay = options.chunkDelayMs ?? 0;
  const calls: ScriptedCall[] = [];
  const hangs = new Set<() => void>();
  let index = 0;
  let turnIndex = 0;
  const handle: ScriptedUpstream = {
    url: "",
    calls,
    policyVersion: options.policyVersion ?? 0,
    close: async () => {},
  };

  const nextTurn = async (input: ScriptedPolicyInput): Promise<ScriptedTurn> => {
    if (options.policy) return await options.policy(input);
    const turns = options.turns ?? [{ content: "ok" }];
    const turn = turns[Math.min(turnIndex, turns.length - 1)];
    turnIndex++;
    return turn;
  };

  const serve = async (req: Request): Promise<Response> => {
    const url = new URL(req.url);
    if (req.method === "GET" && url.pathname === "/health") {
      return Response.json({ ok: true, policy_version: handle.policyVersion });
    }
    if (req.method !== "POST" || url.pathname !== "/generate") {
      return Response.json({ error: { code: "not_found", message: "no route" } }, { status: 404 });
    }
    const body = await req.json() as JsonObject;
    const sglang = Array.isArray(body.input_ids);
    const promptIds = (sglang ? body.input_ids : body.prompt_ids) as number[];
    const params = (sglang ? body.sampling_params ?? {} : body) as JsonObject;
    const maxTokens = Number(sglang ? params.max_new_tokens : params.max_tokens);
    const stream = body.stream === true;
    const call: ScriptedCall = {
      protocol: sglang ? "sglang" : "reins",
      body,
      promptIds,
      responseIds: [],
      logprobs: [],
      status: 200,
      stream,
      aborted: false,
      done: false,
    };
    calls.push(call);
    const failure = options.fail?.(index++) ?? null;
    if (failure && "hang" in failure) {
      await new Promise<void>((resolve) => {
        const done = () => {
          hangs.delete(done);
          call.aborted = true;
          resolve();
        };
        hangs.add(done);
        req.signal.addEventListener("abort", done, { once: true });
      });
      return new Response(null, { status: 504 });
    }
    if (failure) {
      call.status = failure.status;
      return new Response(
        failure.body ??
          JSON.stringify({ error: { code: "injected", message: "injected failure" } }),
        { status: failure.status, headers: { "content-type": "application/json" } },
      );
    }
    if (!Array.isArray(promptIds) || promptIds.length === 0 || !(maxTokens > 0)) {
      call.status = 400;
      return Response.json({
        error: { code: "invalid", message: "prompt_ids and max_tokens are required" },
      }, {
        status: 400,
      });
    }
    const promptText = tokenizer.decode(promptIds);
    const turn = await nextTurn({ promptIds, promptText, call: calls.length - 1 });
    let ids = Array.from(tokenizer.encode(scriptedResponseText(tokenizer, turn, promptText)));
    let finish: "stop" | "length" = "stop";
    if (ids.length > maxTokens) {
      ids = ids.slice(0, maxTokens);
      finish = "length";
    }
    const logprobs = ids.map((id, i) => scriptedLogprob(id, i));
    call.responseIds = ids;
    call.logprobs = logprobs;
    const version = handle.policyVersion;
    if (!stream) {
      if (delay > 0) {
        // A non-streamed answer takes as long as the streamed one would.
        const total = delay * Math.ceil(ids.length / chunkSize);
        const aborted = await new Promise<boolean>((resolve) => {
          const timer = setTimeout(() => {
            req.signal.removeEventListener("abort", onAbort);
            resolve(false);
          }, total);
          const onAbort = () => {
            clearTimeout(timer);
            resolve(true);
          };
          req.signal.addEventListener("abort", onAbort, { once: true });
        });
        if (aborted) {
          call.aborted = true;
          return new Response(null, { status: 499 });
        }
      }
      call.done = true;
      if (sglang) {
        return Response.json({
          text: tokenizer.decode(ids),
          meta_info: {
            finish_reason: finish === "length"
              ? { type: "length", length: maxTokens }
              : { type: "stop" },
            prompt_tokens: promptIds.length,
            completion_tokens: ids.length,
            output_token_logprobs: ids.map((id, i) => [logprobs[i], id, null]),
          },
        });
      }
      return Response.json({ ids, logprobs, finish_reason: finish, policy_version: version });
    }
    const bytes = new TextEncoder();
    let cancelled = false;
    const body$ = new ReadableStream<Uint8Array>({
      async start(sink) {
        try {
          for (let i = 0; i < ids.length; i += chunkSize) {
            if (delay > 0) await sleep(delay);
            if (cancelled) return;
            const end = Math.min(ids.length, i + chunkSize);
            if (sglang) {
              const meta = {
                finish_reason: end === ids.length
                  ? (finish === "length" ? { type: "length" } : { type: "stop" })
                  : null,
                output_token_logprobs: ids.slice(0, end).map((id, j) => [logprobs[j], id, null]),
              };
              sink.enqueue(
                bytes.encode(
                  `data: ${
                    JSON.stringify({ text: tokenizer.decode(ids.slice(0, end)), meta_info: meta })
                  }\n\n`,
                ),
              );
            } else {
              sink.enqueue(
                bytes.encode(
                  JSON.stringify({ ids: ids.slice(i, end), logprobs: logprobs.slice(i, end) }) +
                    "\n",
                ),
              );
            }
          }
          if (cancelled) return;
          sink.enqueue(bytes.encode(
            sglang
              ? "data: [DONE]\n\n"
              : JSON.stringify({ done: true, finish_reason: finish, policy_version: version }) +
                "\n",
          ));
          call.done = true;
          sink.close();
        } catch {
          // the reader went away
        }
      },
      cancel() {
        cancelled = true;
        call.aborted = true;
      },
    });
    return new Response(body$, {
      headers: { "content-type": sglang ? "text/event-stream" : "application/x-ndjson" },
    });
  };

  return new Promise((resolve) => {
    const server = Deno.serve({
      hostname: "127.0.0.1",
      port: options.port ?? 0,
      onListen: () => {},
    }, serve);
    const addr = server.addr as Deno.NetAddr;
    handle.url = `http://127.0.0.1:${addr.port}`;
    handle.close = async () => {
      for (const done of [...hangs]) done();
      await server.shutdown();
    };
    resolve(handle);
  });
}
