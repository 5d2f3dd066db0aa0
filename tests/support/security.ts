/**
 * Fixture of the security tests: a real gateway on loopback (SQLite in memory) with a reporter
 * key, the proxy mounted over a scripted policy and the UI, plus helpers that send raw requests
 * the way an agent holding a token would, and a snapshot of what the store holds.
 *
 * @module
 */
import assert from "node:assert/strict";
import { GatewayClient } from "../../lib/gateway/client.ts";
import type { RunningGateway } from "../../lib/gateway/server.ts";
import { startStack } from "../../lib/stack/stack.ts";
import { type ScriptedUpstream, startScriptedUpstream } from "../../lib/proxy/scripted_upstream.ts";
import type {
  GatewayLimitsInput,
  ProxyOptionsInput,
  ServerDeadlinesInput,
} from "../../lib/schema.ts";
import { loadQwen3Tokenizer } from "../../lib/tokens/qwen3.ts";
import type { ChatTokenizer } from "../../lib/tokens/types.ts";
import type { Ui, UiOptions } from "../../lib/ui/app.ts";

export const ADMIN_KEY = "security-admin-key";
export const REPORTER_KEY = "security-reporter-key";
export const SECRET = "security-secret";

let qwen: ChatTokenizer | undefined;

/** A running security fixture. */
export interface SecurityFixture {
  gateway: RunningGateway;
  upstream: ScriptedUpstream;
  ui: Ui;
  admin: GatewayClient;
  /** Sends a raw request as `key` (null: no key); the body is JSON-encoded unless a string. */
  send(
    method: string,
    path: string,
    key: string | null,
    body?: unknown,
  ): Promise<{ status: number; body: Record<string, unknown> }>;
  /** Claims one queued rollout for `worker`: its ids and the attempt's token. */
  claimOne(worker?: string): Promise<{ rolloutId: string; attemptId: string; token: string }>;
  /** Everything the store holds that an attack could change (seq, rollouts with rewards). */
  snapshot(): Promise<unknown>;
  close(): Promise<void>;
}

/** Options of {@link startSecurityFixture}. */
export interface SecurityOptions {
  deadlines?: ServerDeadlinesInput;
  /** Gateway limits (batch, page, per-attempt budgets). */
  limits?: GatewayLimitsInput;
  proxy?: ProxyOptionsInput;
  ui?: UiOptions;
  /** Delay between the policy's streamed tokens (ms), to hold calls in flight. */
  chunkDelayMs?: number;
}

/** Runs `fn` on a fresh fixture, then closes it whatever `fn` did. */
export async function withSecurityFixture(
  options: SecurityOptions,
  fn: (fx: SecurityFixture) => Promise<void>,
): Promise<void> {
  const fx = await startSecurityFixture(options);
  try {
    await fn(fx);
  } finally {
    await fx.close();
  }
}

/** Starts the fixture. */
export async function startSecurityFixture(
  options: SecurityOptions = {},
): Promise<SecurityFixture> {
  qwen ??= await loadQwen3Tokenizer();
  const tokenizer = qwen;
  const upstream = await startScriptedUpstream({
    tokenizer,
    policy: () => ({ content: "The answer is 4." }),
    ...(options.chunkDelayMs ? { chunkSize: 1, chunkDelayMs: options.chunkDelayMs } : {}),
  });
  const stack = await startStack({
    adminKey: ADMIN_KEY,
    reporterKey: REPORTER_KEY,
    secret: SECRET,
    leaseSweepMs: 0,
    ...(options.deadlines ? { deadlines: options.deadlines } : {}),
    ...(options.limits ? { limits: options.limits } : {}),
    proxy: {
      tokenizer,
      upstream: { kind: "token_level", endpoints: [upstream.url], max_retries: 0 },
      ...(options.proxy ? { options: options.proxy } : {}),
    },
    ui: { tokenizer, monitors: false, ...options.ui },
  });
  const { gateway } = stack;
  const ui = stack.ui!;
  const admin = new GatewayClient(gateway.url, { apiKey: ADMIN_KEY, retries: 0 });
  let counter = 0;
  return {
    gateway,
    upstream,
    ui,
    admin,
    async send(method, path, key, body) {
      const headers: Record<string, string> = { "content-type": "application/json" };
      if (key) headers.authorization = `Bearer ${key}`;
      const res = await fetch(gateway.url + path, {
        method,
        headers,
        ...(body === undefined
          ? {}
          : { body: typeof body === "string" ? body : JSON.stringify(body) }),
      });
      const text = await res.text();
      let parsed: Record<string, unknown> = {};
      try {
        parsed = text ? JSON.parse(text) : {};
      } catch {
        parsed = { text };
      }
      return { status: res.status, body: parsed };
    },
    async claimOne(worker = "ctl") {
      const rolloutId = `r${++counter}`;
      await admin.createRollouts([{ rollout_id: rolloutId, input: { q: "2+2" } }]);
      const claimed = await admin.claim({ worker, limit: 1 });
      assert.equal(claimed.length, 1);
      return {
        rolloutId: claimed[0].rollout.rollout_id,
        attemptId: claimed[0].attempt.attempt_id,
        token: claimed[0].token,
      };
    },
    async snapshot() {
      const store = gateway.store;
      const seq = await store.lastSeq();
      const rollouts = [];
      let after: string | undefined;
      for (;;) {
        const page = await store.listRollouts({ limit: 500, ...(after ? { after } : {}) });
        rollouts.push(...page.items.map((r) => ({
          id: r.rollout_id,
          status: r.status,
          reward: r.reward,
          version: r.version,
          attempts: r.attempts.map((a) => a.status),
        })));
        if (!page.next_cursor) break;
        after = page.next_cursor;
      }
      return { seq, rollouts };
    },
    async close() {
      await stack.close();
      await upstream.close();
    },
  };
}

/** The `{error: {code, message}}` of an answer. */
export function errorOf(
  body: Record<string, unknown>,
): { code: string; message: string; field?: string } {
  const error = body.error as { code: string; message: string; field?: string } | undefined;
  assert.ok(error, `expected an error body, got ${JSON.stringify(body).slice(0, 300)}`);
  return error;
}

/** A chat call to the proxy as the harness of `rolloutId/attemptId` with `key`. */
export function proxyChat(
  fx: SecurityFixture,
  rolloutId: string,
  attemptId: string,
  key: string | null,
  body: unknown = { model: "policy", messages: [{ role: "user", content: "2+2?" }] },
) {
  return fx.send("POST", `/proxy/${rolloutId}/${attemptId}/v1/chat/completions`, key, body);
}
