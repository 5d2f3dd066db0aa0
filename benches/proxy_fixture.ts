/**
 * What the proxy benches share: a fake vLLM on a worker thread answering instantly, and a
 * gateway + proxy with one claimed attempt to call through. The stack comes in as functions so
 * that `proxy_ab.ts` can start the stacks of two checkouts side by side.
 *
 * @module
 */
import type { UpstreamConfigInput } from "../lib/schema.ts";
import type { ChatTokenizer } from "../lib/tokens/types.ts";

/**
 * A fake vLLM (in a worker) answering instantly with fixed ids (16 response tokens) and
 * `promptIds` as the prompt's (by default the ids of one short user message; a bench sending a
 * long conversation passes ids as many as a real engine would return for it).
 */
export async function startFastVllm(
  tokenizer: ChatTokenizer,
  options: { promptIds?: number[] } = {},
) {
  const promptIds = options.promptIds ??
    Array.from(tokenizer.encode("<|im_start|>user\nhello<|im_end|>\n"));
  const ids = Array.from(tokenizer.encode("The quick brown fox jumps over the lazy dog again."))
    .slice(0, 15);
  ids.push(tokenizer.eosTokenIds[0]);
  const lps = ids.map((_, i) => -0.01 * (i + 1));
  const text = tokenizer.decode(ids.slice(0, -1));
  const whole = JSON.stringify({
    id: "x",
    object: "chat.completion",
    prompt_token_ids: promptIds,
    choices: [{
      index: 0,
      message: { role: "assistant", content: text },
      logprobs: { content: lps.map((logprob, i) => ({ token: String(ids[i]), logprob })) },
      finish_reason: "stop",
      token_ids: ids,
    }],
  });
  const chunks = ids.map((id, i) =>
    `data: ${
      JSON.stringify({
        id: "x",
        object: "chat.completion.chunk",
        ...(i === 0 ? { prompt_token_ids: promptIds } : {}),
        choices: [{
          index: 0,
          delta: i < ids.length - 1 ? { content: tokenizer.decode([id]) } : {},
          logprobs: { content: [{ token: String(id), logprob: lps[i] }] },
          finish_reason: i === ids.length - 1 ? "stop" : null,
          token_ids: [id],
        }],
      })
    }\n\n`
  ).join("") + "data: [DONE]\n\n";
  const worker = new Worker(new URL("./proxy_upstream_worker.ts", import.meta.url), {
    type: "module",
  });
  const port = await new Promise<number>((resolve) => {
    worker.onmessage = (event: MessageEvent<{ port: number }>) => resolve(event.data.port);
    worker.postMessage({ whole, chunks });
  });
  const url = `http://127.0.0.1:${port}`;
  return {
    url,
    close: async () => {
      await (await fetch(url, { method: "DELETE" })).body?.cancel();
      worker.terminate();
    },
  };
}

/** The parts of a checkout a bench proxy is built from (its own `startStack`, `capabilityToken`). */
export interface BenchStackDeps {
  // deno-lint-ignore no-explicit-any
  startStack: (options: any) => Promise<{ gateway: any }>;
  capabilityToken: (secret: string, rolloutId: string, attemptId: string) => string;
}

/** A gateway + proxy on `upstream` with the attempt `bench` claimed; `base` is its `/v1` URL. */
export async function startBenchProxy(
  deps: BenchStackDeps,
  upstream: UpstreamConfigInput,
  tokenizer: ChatTokenizer,
  db?: string,
) {
  const { gateway } = await deps.startStack({
    adminKey: "bench-admin-key",
    secret: "bench-secret",
    leaseSweepMs: 0,
    ...(db ? { db } : {}),
    proxy: { tokenizer, upstream },
  });
  await gateway.store.createRollouts([{ rollout_id: "bench", input: {} }]);
  const [claimed] = await gateway.store.claimRollouts({
    worker: "bench",
    limit: 1,
    lease_ms: 3_600_000,
  });
  const aid = claimed.attempt.attempt_id;
  return {
    gateway,
    base: `${gateway.url}/proxy/bench/${aid}/v1`,
    token: deps.capabilityToken("bench-secret", "bench", aid),
  };
}
