/**
 * The reins gateway: the durable rollout/event/model service (docs/architecture.md#gateway;
 * the records it keeps: docs/architecture.md#data-model).
 *
 * - {@link startGateway} serves the HTTP API on `Deno.serve` over a SQLite file (default) or a
 *   PostgreSQL database shared by several gateways;
 * - {@link GatewayClient} is the typed client (retries on network errors; every endpoint is
 *   idempotent);
 * - {@link PhaseGate} holds LLM calls during the `update` phase of collocated training;
 * - `capabilityToken` / `verifyCapability` derive and check per-attempt tokens (what each
 *   credential may do: `docs/security.md`);
 * - {@link LiveAttempts} says which attempts may still call the proxy and post events.
 *
 * @example
 * ```ts
 * import { GatewayClient, startGateway } from "./mod.ts";
 * const gw = await startGateway({ db: ":memory:" });
 * const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
 * await client.createRollouts([{ rollout_id: "r1", input: { question: "2+2" } }]);
 * const [{ attempt, token }] = await client.claim({ worker: "me", limit: 1 });
 * // The harness logs with its token; the verifier (admin key) posts the reward.
 * await client.postEvents("r1", attempt.attempt_id, [
 *   { type: "log", payload: { stream: "stdout", text: "thinking" } },
 * ], { token });
 * await client.postEvents("r1", attempt.attempt_id, [{ type: "reward", payload: { value: 1 } }]);
 * await gw.close();
 * ```
 *
 * @module
 */
export {
  ChangeNotifier,
  checkEventsAllowed,
  createGatewayApp,
  type GatewayAppOptions,
} from "./app.ts";
export {
  authorize,
  CAPABILITY_PREFIX,
  capabilityToken,
  classifyKey,
  constantTimeEqual,
  type CredentialKind,
  keyFromHeaders,
  type Principal,
  randomKey,
  verifyAdminKey,
  verifyCapability,
} from "./auth.ts";
export {
  type CallOptions,
  GatewayClient,
  type GatewayClientOptions,
  GatewayError,
} from "./client.ts";
export { type AcquireOptions, PhaseGate, PhaseHoldTimeout } from "./phase.ts";
export { attemptRefusal, LiveAttempts, type LiveAttemptsOptions } from "./live_attempts.ts";
export { openPostgresStore, PostgresStore, type PostgresStoreOptions } from "./postgres_store.ts";
export {
  type Mount,
  type MountContext,
  type RunningGateway,
  startGateway,
  type StartGatewayOptions,
} from "./server.ts";
export { openSqliteStore, SqliteStore, type SqliteStoreOptions } from "./sqlite_store.ts";
export { MIGRATIONS, SCHEMA_VERSION } from "./sql/migrations.ts";
export * from "./store.ts";
export {
  decodeF32,
  decodeU32,
  encodeF32,
  encodeU32,
  planPrompt,
  resolvePrompt,
} from "./token_blob.ts";
export { eventFromWire, eventToWire, type WireEvent } from "./wire.ts";
