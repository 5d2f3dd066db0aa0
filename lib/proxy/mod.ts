/**
 * The reins proxy: token-exact capture of every LLM call a harness makes, in the four wire
 * formats harnesses speak (OpenAI Chat Completions, Completions, Responses; Anthropic
 * Messages), served by a token-level upstream (the reins worker, SGLang) or an
 * OpenAI-compatible one (vLLM).
 *
 * @example
 * ```ts
 * import { Hono } from "hono";
 * import { openSqliteStore } from "../gateway/sqlite_store.ts";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * import { createProxyApp, startScriptedUpstream } from "./mod.ts";
 * const tokenizer = await loadQwen3Tokenizer();
 * const store = openSqliteStore(":memory:");
 * const [secret, adminKey] = ["hmac-secret", "admin-key"];
 * const upstream = await startScriptedUpstream({ tokenizer, turns: [{ content: "4" }] });
 * const app = new Hono().route("/proxy", createProxyApp({
 *   store, tokenizer, secret, adminKey,
 *   upstream: { kind: "token_level", endpoints: [upstream.url] },
 * }));
 * // harnesses now call `/proxy/<rollout>/<attempt>/v1/chat/completions` (see createProxyApp)
 * await upstream.close();
 * await store.close();
 * ```
 *
 * @module
 */
export {
  createProxyApp,
  type ProxyDeps,
  proxyMount,
  type ProxyMountOptions,
  type ProxyPhaseGate,
  type ProxyStore,
} from "./app.ts";
export { PartTokens } from "./codecs/logprobs.ts";
export { anthropicMessagesCodec } from "./codecs/anthropic_messages.ts";
export { openaiChatCodec } from "./codecs/openai_chat.ts";
export { openaiCompletionsCodec } from "./codecs/openai_completions.ts";
export { openaiResponsesCodec } from "./codecs/openai_responses.ts";
export type { Codec, NormalizedRequest, Sampling } from "./codecs/types.ts";
export { badRequest } from "./codecs/types.ts";
export { buildModelRequestEvent, digestRequest } from "./capture.ts";
export { generate, type GenerationOutcome, type UpstreamBinding } from "./generation.ts";
export { conversationKey, extendsHistory, SessionTracker } from "./sessions.ts";
export { substitutePrompt } from "./substitute.ts";
export { PoolFailure, UpstreamError, UpstreamPool } from "./upstreams/pool.ts";
export { ReinsGenerateUpstream, SglangUpstream } from "./upstreams/token_level.ts";
export { OpenAICompatibleUpstream } from "./upstreams/openai_compatible.ts";
export {
  type ScriptedCall,
  scriptedLogprob,
  scriptedResponseText,
  type ScriptedTurn,
  type ScriptedUpstream,
  type ScriptedUpstreamOptions,
  startScriptedUpstream,
} from "./scripted_upstream.ts";
