/**
 * Test fixture of the harness tests: a gateway (in-memory SQLite) with the proxy mounted,
 * served by a scripted upstream, and helpers to open rollouts and assemble their samples.
 *
 * @module
 */
import OpenAI from "openai";
import { capabilityToken } from "../../lib/gateway/auth.ts";
import { GatewayClient } from "../../lib/gateway/client.ts";
import type { RunningGateway } from "../../lib/gateway/server.ts";
import { startStack } from "../../lib/stack/stack.ts";
import {
  type ScriptedUpstream,
  type ScriptedUpstreamOptions,
  startScriptedUpstream,
} from "../../lib/proxy/scripted_upstream.ts";
import { assembleRollout, type AssemblyResult } from "../../lib/samples/mod.ts";
import type { BreakReason, RolloutCreate, UpstreamConfigInput } from "../../lib/schema.ts";
import { loadQwen3Tokenizer } from "../../lib/tokens/qwen3.ts";
import type { ChatTokenizer } from "../../lib/tokens/types.ts";
import { tokenLevelUpstream } from "../proxy_helpers.ts";

let qwen: Promise<ChatTokenizer> | null = null;
/** The Qwen3 tokenizer, loaded once per test process. */
export function qwen3(): Promise<ChatTokenizer> {
  qwen ??= loadQwen3Tokenizer();
  return qwen;
}

/**
 * A gateway (in-memory SQLite, no lease sweep) with the proxy mounted over the token-level
 * upstream at `upstreamUrl`, and an admin client of it (what a controller test drives).
 */
export async function startProxiedGateway(
  tokenizer: ChatTokenizer,
  upstreamUrl: string,
): Promise<{ gateway: RunningGateway; client: GatewayClient }> {
  const { gateway } = await startStack({
    db: ":memory:",
    leaseSweepMs: 0,
    proxy: { tokenizer, upstream: { kind: "token_level", endpoints: [upstreamUrl] } },
  });
  return { gateway, client: new GatewayClient(gateway.url, { apiKey: gateway.adminKey }) };
}

/** A running gateway + proxy + scripted upstream. */
export interface HarnessFixture {
  tokenizer: ChatTokenizer;
  gateway: RunningGateway;
  upstream: ScriptedUpstream;
  /** Creates and claims a rollout; returns an OpenAI client pointed at its proxy. */
  open(id: string, input?: RolloutCreate["input"]): Promise<{
    client: OpenAI;
    attemptId: string;
    baseURL: string;
    token: string;
  }>;
  /** Assembles a rollout's calls (prefix_merge, Qwen3 decoding). */
  assemble(id: string): Promise<AssemblyResult>;
  close(): Promise<void>;
}

/** Options of {@link startHarnessFixture}. */
export interface HarnessFixtureOptions {
  scripted: Omit<ScriptedUpstreamOptions, "tokenizer">;
  /** The tokenizer the scripted "policy" encodes with (default: the proxy's). */
  policyTokenizer?: ChatTokenizer;
  upstream?: Partial<UpstreamConfigInput>;
}

/** Starts the fixture. */
export async function startHarnessFixture(
  options: HarnessFixtureOptions,
): Promise<HarnessFixture> {
  const tokenizer = await qwen3();
  const upstream = await startScriptedUpstream({
    tokenizer: options.policyTokenizer ?? tokenizer,
    ...options.scripted,
  });
  const { gateway } = await startStack({
    db: ":memory:",
    adminKey: "harness-admin-key",
    secret: "harness-secret",
    leaseSweepMs: 0,
    proxy: {
      tokenizer,
      upstream: { ...tokenLevelUpstream(upstream.url), ...options.upstream },
    },
  });
  return {
    tokenizer,
    gateway,
    upstream,
    async open(id, input = { prompt: id }) {
      await gateway.store.createRollouts([{ rollout_id: id, input }]);
      const claimed = await gateway.store.claimRollouts({
        worker: "harness-test",
        limit: 1,
        lease_ms: 600_000,
      });
      const attempt = claimed.find((c) => c.rollout.rollout_id === id)!.attempt;
      const token = capabilityToken("harness-secret", id, attempt.attempt_id);
      const baseURL = `${gateway.url}/proxy/${id}/${attempt.attempt_id}/v1`;
      return {
        client: new OpenAI({ baseURL, apiKey: token, maxRetries: 2, timeout: 30_000 }),
        attemptId: attempt.attempt_id,
        baseURL,
        token,
      };
    },
    async assemble(id) {
      const events = await gateway.store.listEvents(id, {});
      return assembleRollout(events, { tokenizer, strategy: "prefix_merge" });
    },
    async close() {
      await gateway.close();
      await upstream.close();
    },
  };
}

/** Break counts of an assembly, only the non-zero reasons, for `deepEqual`. */
export function breakCounts(result: AssemblyResult): Partial<Record<BreakReason, number>> {
  const out: Partial<Record<BreakReason, number>> = {};
  for (const b of result.breaks) out[b.reason] = (out[b.reason] ?? 0) + 1;
  return out;
}
