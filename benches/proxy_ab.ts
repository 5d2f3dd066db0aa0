/**
 * The proxy's passthrough overhead, before and after a change, measured side by side in one
 * process: the stacks of two checkouts (say `git worktree add ../before HEAD~1`) serve the same
 * fast upstream and take requests in alternation (ABBA), so both see the same machine load. On a
 * noisy 2-core machine two `bench:proxy` runs one after the other differed by more than the
 * changes being measured; paired in one process they agree to a few hundredths of a ms.
 *
 * Usage: `deno run -A benches/proxy_ab.ts --before ../before [--after .] [--requests 2000] [--file]
 * [--conversation]` (`--conversation`: a real 63 KB history with tools instead of one message,
 * and the engine answering with as many prompt ids as a real one would, ~16k)
 * (a checkout from before `lib/stack/` existed, wave 1's, is started through its own
 * `startGateway` and `proxyMount`).
 *
 * `--processes` serves each checkout from a child process of its own (the client and the fake
 * engine stay in this one), as a harness would call the proxy from another process. In one
 * process, what the gateway does after its answer is written (the in-memory store's group commit,
 * its posted reads, a collection) runs before this client's turn of the event loop and is counted
 * as latency; across processes it is not, and the client's own work is not the gateway's either.
 *
 * Prints `name: value` lines: `ab_direct_p50_ms`, `ab_before_overhead_p50_ms`,
 * `ab_after_overhead_p50_ms` (the proxied p50 less the direct p50), the same at p99, and with
 * `--file` the same again over SQLite files (`ab_file_*`).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { resolve } from "node:path";
import { pathToFileURL } from "node:url";
import { existsSync } from "node:fs";
import { startBenchProxy, startFastVllm } from "./proxy_fixture.ts";
import { readLines } from "../lib/http/lines.ts";

const { values: args } = parseArgs({
  args: Deno.args,
  options: {
    before: { type: "string" },
    after: { type: "string", default: "." },
    requests: { type: "string", default: "2000" },
    file: { type: "boolean", default: false },
    conversation: { type: "boolean", default: false },
    processes: { type: "boolean", default: false },
    // A child of `--processes`: serves this checkout on this engine and prints where.
    serve: { type: "string" },
    "upstream-url": { type: "string" },
    db: { type: "string" },
  },
  strict: true,
});
if (!args.before && !args.serve) {
  console.error("--before: the checkout to compare with is required (e.g. a git worktree)");
  Deno.exit(2);
}
const REQUESTS = Number(args.requests);
if (!Number.isInteger(REQUESTS) || REQUESTS < 10) {
  console.error(`--requests: expected an integer of at least 10, got '${args.requests}'`);
  Deno.exit(2);
}
const roots = { before: resolve(args.before ?? "."), after: resolve(args.after) };
const moduleUrl = (root: string, path: string) => pathToFileURL(`${root}/${path}`).href;

const { loadQwen3Tokenizer } = await import(moduleUrl(roots.after, "lib/tokens/qwen3.ts"));
const tokenizer = await loadQwen3Tokenizer();

/**
 * A checkout's `startStack`; wave 1's checkouts have none, and mount the proxy on
 * `startGateway` themselves (`proxyMount`), which is what this adapter does for them.
 */
async function startStackOf(root: string) {
  if (existsSync(`${root}/lib/stack/stack.ts`)) {
    return (await import(moduleUrl(root, "lib/stack/stack.ts"))).startStack;
  }
  const { startGateway } = await import(moduleUrl(root, "lib/gateway/server.ts"));
  const { proxyMount } = await import(moduleUrl(root, "lib/proxy/app.ts"));
  return async ({ proxy, ...options }: { proxy: unknown }) => ({
    gateway: await startGateway({ ...options, mounts: [proxyMount(proxy)] }),
  });
}

/** A checkout's gateway + proxy on the engine at `upstreamUrl`, with one claimed attempt. */
async function startCheckout(root: string, db: string | undefined, upstreamUrl: string) {
  const startStack = await startStackOf(root);
  const { capabilityToken } = await import(moduleUrl(root, "lib/gateway/auth.ts"));
  const proxy = await startBenchProxy(
    { startStack, capabilityToken },
    { kind: "openai_compatible", endpoints: [upstreamUrl] },
    tokenizer,
    db,
  );
  return {
    url: `${proxy.base}/chat/completions`,
    token: proxy.token,
    close: () => proxy.gateway.close() as Promise<void>,
  };
}

if (args.serve) {
  // The child of `--processes`: one line saying where, then serve until stdin closes.
  const served = await startCheckout(resolve(args.serve), args.db, args["upstream-url"]!);
  console.log(JSON.stringify({ url: served.url, token: served.token }));
  for await (const _ of Deno.stdin.readable) { /* until the parent closes stdin */ }
  await served.close();
  Deno.exit(0);
}

/** {@link startCheckout} in a child process of its own (`--processes`). */
async function startCheckoutProcess(root: string, db: string | undefined, upstreamUrl: string) {
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      new URL(import.meta.url).pathname,
      "--serve",
      root,
      "--upstream-url",
      upstreamUrl,
      ...(db ? ["--db", db] : []),
    ],
    stdin: "piped",
    stdout: "piped",
    stderr: "inherit",
  }).spawn();
  // Its one line says where; the generator is left open (the child prints nothing more).
  const { value: line } = await readLines(child.stdout).next();
  if (typeof line !== "string") throw new Error(`${root}: the serving child exited unready`);
  const { url, token } = JSON.parse(line);
  return {
    url: url as string,
    token: token as string,
    close: async () => {
      await child.stdin.close();
      await child.status;
    },
  };
}

/**
 * One short message, or with `--conversation` a real one: the longest history any call of the
 * project's trajectories (`data/trajectories`) sent, with its tools, where the costs that grow
 * with the body (parse, depth and size checks, digest, the store's row) show.
 */
async function requestBody(): Promise<string> {
  if (!args.conversation) {
    return JSON.stringify({
      model: "m",
      messages: [{ role: "user", content: "hello" }],
      max_tokens: 16,
    });
  }
  const { loadTrajectories, trajectoryCalls } = await import(
    moduleUrl(roots.after, "lib/trajectories/mod.ts")
  );
  let longest = { chars: 0, body: "" };
  for (const trajectory of await loadTrajectories()) {
    for (const call of trajectoryCalls(trajectory)) {
      const body = JSON.stringify({
        model: "m",
        messages: call.prompt,
        tools: trajectory.tools,
        max_tokens: 16,
      });
      if (body.length > longest.chars) longest = { chars: body.length, body };
    }
  }
  return longest.body;
}
const body = await requestBody();
// With a conversation, the engine's answer carries prompt ids as many as a real one would
// return for it (its text's, ~16k), so costs that grow with the prompt's ids show too.
const upstream = await startFastVllm(
  tokenizer,
  args.conversation ? { promptIds: Array.from(tokenizer.encode(body)) } : {},
);

async function timed(url: string, headers: Record<string, string>): Promise<number> {
  const t0 = performance.now();
  const res = await fetch(url, { method: "POST", headers, body });
  await res.arrayBuffer();
  if (!res.ok) throw new Error(`${url}: HTTP ${res.status}`);
  return performance.now() - t0;
}

function quantile(values: number[], q: number): number {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))];
}

console.log(
  `proxy A/B: before ${roots.before}, after ${roots.after}; ${REQUESTS} rounds; ${body.length} ` +
    `B bodies${args.processes ? "; each checkout in its own process" : ""}; load average ${
      Deno.loadavg().map((l) => l.toFixed(2)).join(" ")
    }`,
);
for (const onFile of args.file ? [false, true] : [false]) {
  const dir = onFile ? await Deno.makeTempDir({ prefix: "reins-proxy-ab-" }) : null;
  const start = args.processes ? startCheckoutProcess : startCheckout;
  const before = await start(roots.before, dir ? `${dir}/before.db` : undefined, upstream.url);
  const after = await start(roots.after, dir ? `${dir}/after.db` : undefined, upstream.url);
  const call = (s: typeof before) =>
    timed(s.url, { "content-type": "application/json", authorization: `Bearer ${s.token}` });
  const direct = () => timed(`${upstream.url}/v1/chat/completions`, {});
  const times = { before: [] as number[], after: [] as number[], direct: [] as number[] };
  for (let i = 0; i < REQUESTS + 200; i++) {
    const warm = i < 200;
    // ABBA: the order alternates, so neither side always runs first.
    const [first, second] = i % 2 ? ["before", "after"] as const : ["after", "before"] as const;
    const a = await call(first === "before" ? before : after);
    const b = await call(second === "before" ? before : after);
    const d = await direct();
    if (warm) continue;
    times[first].push(a);
    times[second].push(b);
    times.direct.push(d);
  }
  await before.close();
  await after.close();
  if (dir) await Deno.remove(dir, { recursive: true });
  const prefix = onFile ? "ab_file_" : "ab_";
  for (const q of [0.5, 0.99]) {
    const tag = q === 0.5 ? "p50" : "p99";
    const directQ = quantile(times.direct, q);
    console.log(`${prefix}direct_${tag}_ms: ${directQ.toFixed(3)}`);
    console.log(
      `${prefix}before_overhead_${tag}_ms: ${(quantile(times.before, q) - directQ).toFixed(3)}`,
    );
    console.log(
      `${prefix}after_overhead_${tag}_ms: ${(quantile(times.after, q) - directQ).toFixed(3)}`,
    );
  }
}
await upstream.close();
