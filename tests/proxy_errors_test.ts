/**
 * Bad input gets a clear 4xx in the caller's own error format, naming the field at fault.
 */
import assert from "node:assert/strict";
import { capabilityToken } from "../lib/gateway/auth.ts";
import { ADMIN_KEY, type ProxyFixture, SECRET, startProxyFixture } from "./proxy_helpers.ts";

async function post(
  url: string,
  body: unknown,
  key: string | null,
  style: "openai" | "anthropic" = "openai",
): Promise<{ status: number; body: Record<string, unknown> }> {
  const headers: Record<string, string> = { "content-type": "application/json" };
  if (key) {
    headers[style === "openai" ? "authorization" : "x-api-key"] = style === "openai"
      ? `Bearer ${key}`
      : key;
  }
  const r = await fetch(url, {
    method: "POST",
    headers,
    body: typeof body === "string" ? body : JSON.stringify(body),
  });
  return { status: r.status, body: await r.json() };
}

function openaiError(
  res: { status: number; body: Record<string, unknown> },
  status: number,
  pattern: RegExp,
) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  const error = res.body.error as { message: string; type: string };
  assert.equal(typeof error.type, "string");
  assert.match(error.message, pattern);
}

function anthropicError(
  res: { status: number; body: Record<string, unknown> },
  status: number,
  pattern: RegExp,
) {
  assert.equal(res.status, status, JSON.stringify(res.body));
  assert.equal(res.body.type, "error");
  const error = res.body.error as { message: string; type: string };
  assert.match(error.message, pattern);
}

const USER = [{ role: "user", content: "hi" }];

async function withFixture(fn: (fx: ProxyFixture) => Promise<void>, proxy = {}) {
  const fx = await startProxyFixture({ proxy });
  try {
    await fn(fx);
  } finally {
    await fx.close();
  }
}

Deno.test("bad input: malformed bodies and bad fields name the field, in the OpenAI error format", async () => {
  await withFixture(async (fx) => {
    const chat = `${fx.openaiBase}/chat/completions`;
    openaiError(await post(chat, "{not json", fx.token), 400, /^body: invalid JSON/);
    openaiError(await post(chat, [1, 2], fx.token), 400, /^body: must be a JSON object/);
    openaiError(
      await post(chat, { model: "m" }, fx.token),
      400,
      /^messages: must be a non-empty array/,
    );
    openaiError(
      await post(chat, { messages: [{ role: "wizard", content: "x" }] }, fx.token),
      400,
      /^messages\[0\]\.role: unsupported role/,
    );
    openaiError(
      await post(
        chat,
        { messages: [{ role: "user", content: [{ type: "image_url" }] }] },
        fx.token,
      ),
      400,
      /^messages\[0\]\.content\[0\]\.type: unsupported content part type "image_url"/,
    );
    openaiError(
      await post(chat, { messages: USER, n: 2 }, fx.token),
      400,
      /^n: only n=1 is supported/,
    );
    openaiError(
      await post(chat, { messages: USER, temperature: "hot" }, fx.token),
      400,
      /^temperature: must be a number/,
    );
    openaiError(
      await post(chat, { messages: USER, tools: [{ type: "function", function: {} }] }, fx.token),
      400,
      /^tools\[0\]\.function\.name/,
    );
    openaiError(
      await post(`${fx.openaiBase}/completions`, { prompt: ["a", "b"] }, fx.token),
      400,
      /^prompt: only one prompt per request/,
    );
    openaiError(
      await post(`${fx.openaiBase}/completions`, { prompt: [1, 9_999_999] }, fx.token),
      400,
      /^prompt\[1\]: token id 9999999 is outside the vocabulary/,
    );
    openaiError(
      await post(`${fx.openaiBase}/responses`, { input: [{ type: "mystery" }] }, fx.token),
      400,
      /^input\[0\]\.type: unsupported input item type "mystery"/,
    );
    openaiError(
      await post(
        `${fx.openaiBase}/responses`,
        { input: "x", previous_response_id: "resp_1" },
        fx.token,
      ),
      400,
      /^previous_response_id: not supported/,
    );
    openaiError(
      await post(`${fx.openaiBase}/embeddings`, { input: "x" }, fx.token),
      404,
      /^path: no proxy route/,
    );
    assert.equal((await fx.modelRequests()).length, 0, "refused input is not a model call");
  });
});

Deno.test("bad input: Anthropic requests get Anthropic-shaped errors", async () => {
  await withFixture(async (fx) => {
    const url = `${fx.anthropicBase}/v1/messages`;
    anthropicError(
      await post(url, { messages: USER }, fx.token, "anthropic"),
      400,
      /^max_tokens: is required/,
    );
    anthropicError(
      await post(
        url,
        { max_tokens: 5, messages: [{ role: "robot", content: "x" }] },
        fx.token,
        "anthropic",
      ),
      400,
      /^messages\[0\]\.role: must be "user", "assistant" or "system"/,
    );
    anthropicError(
      await post(
        url,
        {
          max_tokens: 5,
          messages: [{ role: "user", content: [{ type: "image", source: {} }] }],
        },
        fx.token,
        "anthropic",
      ),
      400,
      /^messages\[0\]\.content\[0\]\.type: unsupported block type "image"/,
    );
    anthropicError(
      await post(url, { max_tokens: 5, messages: USER }, "wrong", "anthropic"),
      401,
      /api key/,
    );
  });
});

Deno.test("access: unknown rollout or attempt → 404, another attempt's token or no key → 401, the admin key works", async () => {
  await withFixture(async (fx) => {
    const body = { model: "policy", messages: USER };
    const other = capabilityToken(SECRET, "r1", "someone-else");
    openaiError(
      await post(`${fx.origin}/proxy/r1/${fx.attemptId}/v1/chat/completions`, body, other),
      401,
      /^api key: not valid for this rollout attempt/,
    );
    openaiError(
      await post(`${fx.openaiBase}/chat/completions`, body, null),
      401,
      /^api key: missing/,
    );
    const nobody = capabilityToken(SECRET, "nope", "a1");
    openaiError(
      await post(`${fx.origin}/proxy/nope/a1/v1/chat/completions`, body, nobody),
      404,
      /^rollout_id: no rollout 'nope'/,
    );
    const ghost = capabilityToken(SECRET, "r1", "ghost");
    openaiError(
      await post(`${fx.origin}/proxy/r1/ghost/v1/chat/completions`, body, ghost),
      404,
      /^attempt_id: rollout 'r1' has no attempt 'ghost'/,
    );
    const ok = await post(`${fx.openaiBase}/chat/completions`, body, ADMIN_KEY);
    assert.equal(ok.status, 200);
  });
});

Deno.test("oversized prompts and bodies are refused (413/400); the oversized prompt is recorded as a failed call", async () => {
  await withFixture(async (fx) => {
    const long = [{ role: "user", content: "word ".repeat(200) }];
    const res = await post(`${fx.openaiBase}/chat/completions`, { messages: long }, fx.token);
    openaiError(
      res,
      400,
      /^messages: the prompt is \d+ tokens, more than max_prompt_tokens \(64\)/,
    );
    const big = await post(`${fx.openaiBase}/chat/completions`, {
      messages: [{ role: "user", content: "x".repeat(5000) }],
    }, fx.token);
    openaiError(big, 413, /^body: larger than 4096 bytes/);
    const events = await fx.modelRequests();
    assert.equal(events.length, 1);
    assert.equal(events[0].payload.http_status, 400);
    assert.equal(events[0].payload.response_token_ids.length, 0);
    assert.equal(fx.upstream!.calls.length, 0, "nothing reached the policy");
  }, { max_prompt_tokens: 64, max_body_bytes: 4096 });
});
