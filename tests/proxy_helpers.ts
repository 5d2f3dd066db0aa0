/**
 * Test fixture of the proxy tests: an in-memory SQLite store with one claimed rollout, a
 * scripted upstream, and the proxy app mounted at `/proxy` on a random loopback port.
 *
 * @module
 */
import OpenAI from "openai";
import { capabilityToken } from "../lib/gateway/auth.ts";
import type { PhaseGate } from "../lib/gateway/phase.ts";
import type { RunningGateway } from "../lib/gateway/server.ts";
import type { Store } from "../lib/gateway/store.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import type { ChatTokenizer } from "../lib/tokens/types.ts";
import { startStack } from "../lib/stack/stack.ts";
import {
  type ScriptedUpstream,
  type ScriptedUpstreamOptions,
  startScriptedUpstream,
} from "../lib/proxy/scripted_upstream.ts";
import assert from "node:assert/strict";
import type {
  ChatMessage,
  JsonObject,
  ModelRequestEvent,
  ProxyOptionsInput,
  UpstreamConfigInput,
} from "../lib/schema.ts";
import { ADD_TOOL } from "./support/tools.ts";

export const SECRET = "test-secret";
export const ADMIN_KEY = "test-admin";

/** A running proxy fixture. */
export interface ProxyFixture {
  tokenizer: ChatTokenizer;
  gateway: RunningGateway;
  store: Store;
  phase: PhaseGate;
  upstream: ScriptedUpstream | null;
  origin: string;
  rolloutId: string;
  attemptId: string;
  token: string;
  /** `{origin}/proxy/{rollout}/{attempt}/v1` */
  openaiBase: string;
  /** `{origin}/proxy/{rollout}/{attempt}` */
  anthropicBase: string;
  modelRequests(): Promise<ModelRequestEvent[]>;
  close(): Promise<void>;
}

/** Options of {@link startProxyFixture}. */
export interface FixtureOptions {
  tokenizer?: ChatTokenizer;
  scripted?: Omit<ScriptedUpstreamOptions, "tokenizer">;
  /** Overrides the upstream (default: the scripted one, token level). */
  upstream?: (scriptedUrl: string | null) => UpstreamConfigInput;
  proxy?: ProxyOptionsInput;
  noScripted?: boolean;
}

/** A (scripted) upstream at `url` spoken to at token level, with short backoffs. */
export function tokenLevelUpstream(url: string) {
  return { kind: "token_level" as const, endpoints: [url], backoff_base_ms: 5, backoff_max_ms: 20 };
}

/** Starts a gateway (in-memory SQLite, one claimed rollout) with the proxy mounted, and a scripted upstream. */
export async function startProxyFixture(options: FixtureOptions = {}): Promise<ProxyFixture> {
  const tokenizer = options.tokenizer ?? await loadQwen3Tokenizer();
  const upstream = options.noScripted
    ? null
    : await startScriptedUpstream({ tokenizer, ...options.scripted });
  const upstreamConfig = options.upstream?.(upstream?.url ?? null) ??
    tokenLevelUpstream(upstream!.url);
  const { gateway } = await startStack({
    adminKey: ADMIN_KEY,
    secret: SECRET,
    leaseSweepMs: 0,
    proxy: {
      tokenizer,
      upstream: upstreamConfig,
      ...(options.proxy ? { options: options.proxy } : {}),
    },
  });
  const store = gateway.store;
  await store.createRollouts([{ rollout_id: "r1", input: { task: "t" } }]);
  const [claimed] = await store.claimRollouts({ worker: "test", limit: 1, lease_ms: 600_000 });
  const attemptId = claimed.attempt.attempt_id;
  await store.upsertModel({ name: "policy", endpoints: [], version: 7, info: {} });
  const origin = gateway.url;
  return {
    tokenizer,
    gateway,
    store,
    phase: gateway.phase,
    upstream,
    origin,
    rolloutId: "r1",
    attemptId,
    token: capabilityToken(SECRET, "r1", attemptId),
    openaiBase: `${origin}/proxy/r1/${attemptId}/v1`,
    anthropicBase: `${origin}/proxy/r1/${attemptId}`,
    modelRequests: async () =>
      (await store.listEvents("r1", { type: "model_request" })) as ModelRequestEvent[],
    close: async () => {
      // Held calls would keep the server from shutting down.
      gateway.phase.setPhase("rollout");
      await gateway.close();
      await upstream?.close();
    },
  };
}

/**
 * An OpenAI SDK client on the fixture's attempt, with the SDK's own retries off (the tests
 * count upstream calls); `timeout` as the SDK's when not given.
 */
export function openaiClient(
  fx: Pick<ProxyFixture, "openaiBase" | "token">,
  options: { timeout?: number } = {},
): OpenAI {
  return new OpenAI({ baseURL: fx.openaiBase, apiKey: fx.token, maxRetries: 0, ...options });
}

/** The tools the tests offer. */
export { ADD_TOOL };

/**
 * Asserts one captured call: prompt ids equal the template rendering of `messages` (what the
 * harness sent, normalized by hand in the test), one finite logprob per response token, and
 * response ids/logprobs equal to what the upstream sampled.
 */
export function assertCaptured(
  fx: ProxyFixture,
  event: ModelRequestEvent,
  expected: { messages?: ChatMessage[]; promptIds?: ArrayLike<number>; tools?: JsonObject[] },
  sampled?: { responseIds: number[]; logprobs: number[] },
): void {
  const p = event.payload;
  const want = expected.promptIds ?? fx.tokenizer.encode(
    fx.tokenizer.render(expected.messages!, {
      addGenerationPrompt: true,
      ...(expected.tools ? { tools: expected.tools } : {}),
    }),
  );
  assert.deepEqual(Array.from(p.prompt_token_ids), Array.from(want), "prompt ids");
  assert.ok(p.response_token_ids.length > 0, "response ids recorded");
  assert.equal(p.response_logprobs.length, p.response_token_ids.length, "one logprob per token");
  assert.ok(p.response_logprobs.every(Number.isFinite), "finite logprobs");
  if (sampled) {
    assert.deepEqual(Array.from(p.response_token_ids), sampled.responseIds, "response ids");
    assert.deepEqual(
      Array.from(p.response_logprobs),
      sampled.logprobs.map(Math.fround),
      "response logprobs",
    );
  }
}
