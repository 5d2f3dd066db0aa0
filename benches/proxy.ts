/**
 * Proxy figures: latency added by the proxy over calling a fast fake upstream directly
 * (p50/p99, requests/s; non-streaming and streaming; passthrough and token level), and the
 * per-turn template + tokenize cost of a 32k-token history gaining 500 tokens, incremental vs
 * full re-render (from `benches/tokens_incremental.ts`).
 *
 * Everything runs in one process on loopback: client, gateway + proxy (capturing every call
 * into the gateway's SQLite store) and the fake upstream.
 *
 * Usage: `deno task bench:proxy [--requests 400] [--quick]`
 *
 * Ends with the figures contract lines:
 * `passthrough_overhead_p50_ms`, `passthrough_overhead_p99_ms`, `incremental_render_speedup_32k`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { capabilityToken } from "../lib/gateway/auth.ts";
import { startStack } from "../lib/stack/stack.ts";
import { startScriptedUpstream } from "../lib/proxy/scripted_upstream.ts";
import type { UpstreamConfigInput } from "../lib/schema.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import type { ChatTokenizer } from "../lib/tokens/types.ts";
import { measureIncrementalSpeedup } from "./tokens_incremental.ts";
import { startBenchProxy, startFastVllm } from "./proxy_fixture.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: { quick: { type: "boolean", default: false }, requests: { type: "string" } },
  strict: true,
});
const quick = args.quick;
const REQUESTS = args.requests !== undefined ? Number(args.requests) : quick ? 150 : 400;
const CONCURRENCY = 16;

function quantile(sorted: number[], q: number): number {
  const i = Math.min(sorted.length - 1, Math.max(0, Math.ceil(q * sorted.length) - 1));
  return sorted[i];
}

interface Figures {
  p50: number;
  p99: number;
  rps: number;
}

async function throughput(send: () => Promise<void>): Promise<number> {
  const total = REQUESTS * 2;
  let next = 0;
  const t0 = performance.now();
  await Promise.all(Array.from({ length: CONCURRENCY }, async () => {
    while (next < total) {
      next++;
      await send();
    }
  }));
  return total / ((performance.now() - t0) / 1000);
}

/**
 * Latency of the direct and the proxied call, measured alternately (one of each per round) so
 * that both see the same machine load, then throughput of each at concurrency 16.
 */
async function measurePair(
  direct: () => Promise<void>,
  proxied: () => Promise<void>,
): Promise<[Figures, Figures]> {
  for (let i = 0; i < 30; i++) {
    await direct();
    await proxied();
  }
  const a: number[] = [];
  const b: number[] = [];
  for (let i = 0; i < REQUESTS; i++) {
    let t0 = performance.now();
    await direct();
    a.push(performance.now() - t0);
    t0 = performance.now();
    await proxied();
    b.push(performance.now() - t0);
  }
  a.sort((x, y) => x - y);
  b.sort((x, y) => x - y);
  return [
    { p50: quantile(a, 0.5), p99: quantile(a, 0.99), rps: await throughput(direct) },
    { p50: quantile(b, 0.5), p99: quantile(b, 0.99), rps: await throughput(proxied) },
  ];
}

function poster(url: string, body: unknown, key?: string): () => Promise<void> {
  const text = JSON.stringify(body);
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (key) headers.authorization = `Bearer ${key}`;
  return async () => {
    const r = await fetch(url, { method: "POST", headers, body: text });
    if (!r.ok) throw new Error(`${url}: ${r.status} ${await r.text()}`);
    await r.arrayBuffer();
  };
}

function startProxy(upstream: UpstreamConfigInput, tokenizer: ChatTokenizer, db?: string) {
  return startBenchProxy({ startStack, capabilityToken }, upstream, tokenizer, db);
}

function row(name: string, direct: Figures, proxied: Figures): string {
  const f = (n: number) => n.toFixed(3).padStart(8);
  return `${name.padEnd(34)} direct p50 ${f(direct.p50)} p99 ${f(direct.p99)} ${
    direct.rps.toFixed(0).padStart(5)
  } req/s | ` +
    `proxy p50 ${f(proxied.p50)} p99 ${f(proxied.p99)} ${
      proxied.rps.toFixed(0).padStart(5)
    } req/s | ` +
    `added p50 ${f(proxied.p50 - direct.p50)} p99 ${f(proxied.p99 - direct.p99)} ms`;
}

const tokenizer = await loadQwen3Tokenizer();
const messages = [{ role: "user", content: "hello" }];
console.log(
  `machine: ${navigator.hardwareConcurrency} cores, load average ${
    Deno.loadavg().map((l) => l.toFixed(2)).join(" ")
  } (other processes skew these figures)`,
);
console.log(
  `proxy bench: ${REQUESTS} rounds (direct and proxied alternate) per case (+${
    REQUESTS * 2
  } at concurrency ${CONCURRENCY})`,
);

// Passthrough (vLLM-compatible) with an in-memory store, then a file-backed one.
const vllm = await startFastVllm(tokenizer);
const chatBody = { model: "m", messages, max_tokens: 16 };
const passthrough = await startProxy(
  { kind: "openai_compatible", endpoints: [vllm.url] },
  tokenizer,
);
const directChat = poster(`${vllm.url}/v1/chat/completions`, {
  ...chatBody,
  return_token_ids: true,
  logprobs: true,
});
const [directNs, proxyNs] = await measurePair(
  directChat,
  poster(`${passthrough.base}/chat/completions`, chatBody, passthrough.token),
);
console.log(row("passthrough, non-streaming", directNs, proxyNs));
const [directS, proxyS] = await measurePair(
  poster(`${vllm.url}/v1/chat/completions`, {
    ...chatBody,
    stream: true,
    return_token_ids: true,
    logprobs: true,
  }),
  poster(`${passthrough.base}/chat/completions`, { ...chatBody, stream: true }, passthrough.token),
);
console.log(row("passthrough, streaming (16 tokens)", directS, proxyS));
const captured =
  (await passthrough.gateway.store.listEvents("bench", { type: "model_request" })).length;
console.log(`  calls captured in the store: ${captured}`);
await passthrough.gateway.close();

const dir = await Deno.makeTempDir({ prefix: "reins-proxy-bench-" });
try {
  const onDisk = await startProxy(
    { kind: "openai_compatible", endpoints: [vllm.url] },
    tokenizer,
    `${dir}/gateway.db`,
  );
  const [directDisk, diskNs] = await measurePair(
    directChat,
    poster(`${onDisk.base}/chat/completions`, chatBody, onDisk.token),
  );
  console.log(row("passthrough, SQLite file (FULL sync)", directDisk, diskNs));
  await onDisk.gateway.close();
} finally {
  await Deno.remove(dir, { recursive: true });
}
await vllm.close();

// Token level: the proxy renders, tokenizes, detokenizes and parses; the direct call sends ids.
const scripted = await startScriptedUpstream({
  tokenizer,
  turns: [{ content: "The quick brown fox jumps over the lazy dog." }],
});
const tokenProxy = await startProxy({ kind: "token_level", endpoints: [scripted.url] }, tokenizer);
const promptIds = Array.from(
  tokenizer.encode(tokenizer.render(messages as never, { addGenerationPrompt: true })),
);
const generateBody = {
  prompt_ids: promptIds,
  max_tokens: 16,
  temperature: 1,
  top_p: 1,
  stop_ids: [...tokenizer.eosTokenIds],
  seed: null,
};
const [tokDirect, tokProxy] = await measurePair(
  poster(`${scripted.url}/generate`, { ...generateBody, stream: false }),
  poster(`${tokenProxy.base}/chat/completions`, chatBody, tokenProxy.token),
);
console.log(row("token level, non-streaming", tokDirect, tokProxy));
const [tokDirectS, tokProxyS] = await measurePair(
  poster(`${scripted.url}/generate`, { ...generateBody, stream: true }),
  poster(`${tokenProxy.base}/chat/completions`, { ...chatBody, stream: true }, tokenProxy.token),
);
console.log(row("token level, streaming", tokDirectS, tokProxyS));
await tokenProxy.gateway.close();
await scripted.close();

const incremental = await measureIncrementalSpeedup(quick ? { turns: 5 } : {});
console.log(
  `per-turn template+tokenize, ${incremental.history_tokens}-token history + 500 tokens: ` +
    `full ${incremental.full_ms.toFixed(2)} ms, incremental ${
      incremental.incremental_ms.toFixed(2)
    } ms ` +
    `(render alone ${incremental.render_ms.toFixed(2)} ms)`,
);
console.log(`passthrough_overhead_p50_ms: ${(proxyNs.p50 - directNs.p50).toFixed(3)}`);
console.log(`passthrough_overhead_p99_ms: ${(proxyNs.p99 - directNs.p99).toFixed(3)}`);
console.log(`incremental_render_speedup_32k: ${incremental.speedup.toFixed(1)}`);
