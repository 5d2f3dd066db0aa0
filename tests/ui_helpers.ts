/**
 * Fixture of the UI tests: a gateway (in-memory SQLite) with the proxy and the Live UI mounted,
 * a scripted token-level upstream, and a helper that runs a real rollout through the proxy with
 * the official openai SDK (tool call, tool result, answer, new user turn), so that the stored
 * calls split the way a real harness makes them split.
 *
 * @module
 */
import OpenAI from "openai";
import { capabilityToken } from "../lib/gateway/auth.ts";
import type { RunningGateway } from "../lib/gateway/server.ts";
import { type RunningStack, startStack } from "../lib/stack/stack.ts";
import { type ScriptedUpstream, startScriptedUpstream } from "../lib/proxy/scripted_upstream.ts";
import type { ScriptedTurn } from "../lib/proxy/scripted_upstream.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import type { ChatTokenizer } from "../lib/tokens/types.ts";
import type { Ui, UiOptions } from "../lib/ui/app.ts";
import { tokenLevelUpstream } from "./proxy_helpers.ts";
import { ADD_TOOL } from "./support/tools.ts";

export const ADMIN_KEY = "ui-test-admin-key";
export const SECRET = "ui-test-secret";

/** The answer of the scripted policy's second turn: HTML that must never run in the UI. */
export const HOSTILE_ANSWER =
  `2+2 = 4. <script>window.__pwned = 1</script><img src=x onerror="window.__pwned=2">`;

/** A running UI fixture. */
export interface UiFixture {
  tokenizer: ChatTokenizer;
  gateway: RunningGateway;
  upstream: ScriptedUpstream;
  ui: Ui;
  /** `{gateway.url}/ui` */
  base: string;
  close(): Promise<void>;
}

let qwen: ChatTokenizer | undefined;

/** The scripted policy: a tool call, then an answer (with hostile HTML), then a short answer. */
function policy({ promptText }: { promptText: string }): ScriptedTurn {
  const lastUser = promptText.lastIndexOf("<|im_start|>user");
  const tail = promptText.slice(lastUser);
  if (tail.includes("3+3")) return { reasoning: "Easy.", content: "6." };
  if (tail.includes("<tool_response>")) {
    return { reasoning: "The tool said 4.", content: HOSTILE_ANSWER };
  }
  return {
    reasoning: "I should use the tool.",
    tool_calls: [{ name: "add", arguments: { a: 2, b: 2 } }],
  };
}

/** Starts gateway + proxy + UI + scripted upstream on loopback. */
export async function startUiFixture(options: UiOptions = {}): Promise<UiFixture> {
  qwen ??= await loadQwen3Tokenizer();
  const tokenizer = qwen;
  const upstream = await startScriptedUpstream({ tokenizer, policy, policyVersion: 3 });
  let stack: RunningStack;
  try {
    stack = await startStack({
      adminKey: ADMIN_KEY,
      secret: SECRET,
      leaseSweepMs: 0,
      proxy: { tokenizer, upstream: tokenLevelUpstream(upstream.url) },
      ui: { tokenizer, indexPollMs: 100, streamPollMs: 100, ...options },
    });
  } catch (err) {
    await upstream.close();
    throw err;
  }
  const { gateway } = stack;
  const ui = stack.ui!;
  await gateway.store.upsertModel({
    name: "policy",
    endpoints: [upstream.url],
    version: 3,
    info: {},
  });
  return {
    tokenizer,
    gateway,
    upstream,
    ui,
    base: `${gateway.url}/ui`,
    close: async () => {
      await stack.close();
      await upstream.close();
    },
  };
}

/** Options of {@link runRollout}. */
export interface RunOptions {
  labels?: Record<string, string>;
  group?: string;
  mode?: "train" | "val";
  reward?: number;
  /** Final status (default succeeded). */
  status?: "succeeded" | "failed";
}

/**
 * Runs one rollout through the proxy with the openai SDK: three calls (tool call, answer, a
 * new user turn), then a reward and a final status. Returns the rollout id.
 */
export async function runRollout(
  fx: UiFixture,
  id: string,
  options: RunOptions = {},
): Promise<string> {
  const store = fx.gateway.store;
  await store.createRollouts([{
    rollout_id: id,
    input: { question: "What is 2+2?" },
    mode: options.mode ?? "train",
    labels: options.labels ?? {},
    ...(options.group ? { group_id: options.group } : {}),
  }]);
  const claimed = await store.claimRollouts({ worker: "ui-test", limit: 1, lease_ms: 600_000 });
  const mine = claimed.find((c) => c.rollout.rollout_id === id);
  if (!mine) throw new Error(`rollout ${id} was not claimed`);
  const attempt = mine.attempt.attempt_id;
  const client = new OpenAI({
    baseURL: `${fx.gateway.url}/proxy/${id}/${attempt}/v1`,
    apiKey: capabilityToken(SECRET, id, attempt),
    maxRetries: 0,
  });
  const messages: OpenAI.ChatCompletionMessageParam[] = [
    { role: "system", content: "You are a careful calculator." },
    { role: "user", content: "What is 2+2?" },
  ];
  const first = await client.chat.completions.create({
    model: "policy",
    messages,
    tools: [ADD_TOOL],
  });
  const call = first.choices[0].message;
  messages.push(call);
  messages.push({ role: "tool", tool_call_id: call.tool_calls?.[0]?.id ?? "call_0", content: "4" });
  const second = await client.chat.completions.create({
    model: "policy",
    messages,
    tools: [ADD_TOOL],
  });
  messages.push(second.choices[0].message);
  messages.push({ role: "user", content: "Thanks! And 3+3?" });
  await client.chat.completions.create({ model: "policy", messages, tools: [ADD_TOOL] });
  await store.appendEvents(id, attempt, [
    { type: "reward", payload: { value: options.reward ?? 1 } },
    { type: "log", payload: { stream: "stdout", text: `ran ${id}\n` } },
  ]);
  await store.transition(id, { to: options.status ?? "succeeded", attempt_id: attempt });
  return id;
}

/** Creates a rollout and drives it to `status` with an optional reward, without the proxy. */
export async function seedRollout(
  fx: UiFixture,
  id: string,
  spec: {
    status: "succeeded" | "failed" | "queuing";
    reward?: number;
    labels?: Record<string, string>;
    mode?: "train" | "val";
    group_id?: string;
    /** The text of one model call (a tool call the monitors read), at `policyVersion` (1). */
    toolCall?: string;
    policyVersion?: number;
  },
) {
  const store = fx.gateway.store;
  await store.createRollouts([{
    rollout_id: id,
    ...(spec.group_id ? { group_id: spec.group_id } : {}),
    input: { q: id },
    labels: spec.labels ?? {},
    mode: spec.mode ?? "train",
  }]);
  if (spec.status === "queuing") return;
  const [claimed] = (await store.claimRollouts({ worker: "seed", limit: 10, lease_ms: 60_000 }))
    .filter((c) => c.rollout.rollout_id === id);
  const attempt = claimed.attempt.attempt_id;
  if (spec.toolCall) {
    await store.appendEvents(id, attempt, [{
      type: "model_request",
      payload: {
        flavor: "openai_chat",
        prompt_token_ids: [1, 2],
        response_token_ids: [3, 4],
        response_logprobs: [-0.1, -0.2],
        response_text: spec.toolCall,
        policy_version: spec.policyVersion ?? 1,
      },
    }]);
  }
  if (spec.reward !== undefined) {
    await store.appendEvents(id, attempt, [{ type: "reward", payload: { value: spec.reward } }]);
  }
  await store.transition(id, { to: spec.status });
}

/** Markup with the whitespace between tags removed (templates are indented for reading). */
export function compact(markup: string): string {
  return markup.replace(/>\s+</g, "><").replace(/\s*\n\s*/g, " ");
}

/** A fetch with the admin key (or `key`), answering status and {@link compact}ed text. */
export async function get(
  url: string,
  key: string | null = ADMIN_KEY,
): Promise<{ status: number; text: string; headers: Headers }> {
  const res = await fetch(url, { headers: key === null ? {} : { authorization: `Bearer ${key}` } });
  return { status: res.status, text: compact(await res.text()), headers: res.headers };
}
