/**
 * The gateway's HTTP answers, as schemas both sides use: the app builds them, the
 * `GatewayClient` validates every answer with them (as the trainer client does), so a client
 * never hands a caller an unchecked cast. Also the rules of what each credential may post and
 * the server deadlines.
 *
 * Naming rule for options (see `docs/security.md` and `docs/gateway.md`): what crosses a wire
 * or a config file (zod schemas: request bodies, limits, deadlines) is `snake_case`; options of
 * TypeScript functions and classes that never leave the process are `camelCase`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isReservedEventKey, parseOrThrow, ServerDeadlinesSchema } from "../schema.ts";
 * assert.equal(parseOrThrow(ServerDeadlinesSchema, {}).headers_timeout_ms, 10_000);
 * assert.equal(isReservedEventKey("reins:reward:1"), true);
 * assert.equal(isReservedEventKey("my-span-7"), false);
 * ```
 *
 * @module
 */
import { z } from "zod";
import {
  CustomPayloadSchema,
  type JsonValue,
  LogPayloadSchema,
  ModelRequestWireSchema,
  ModelSchema,
  RewardPayloadSchema,
  RolloutSchema,
  StatusPayloadSchema,
} from "./core.ts";
import { ClaimedSchema, EventAckSchema } from "./gateway.ts";

/**
 * Prefix of the event keys reins itself writes (the controller's verified reward and logs, the
 * monitors' verdicts). Only the admin key may post events with such keys, so an agent cannot
 * take a key first and have the real event deduplicated away.
 */
export const RESERVED_EVENT_KEY_PREFIX = "reins:";

/**
 * Prefix every event key a capability token posts must carry: the agent has its own namespace,
 * so no key it posts can be one the verifier, the reporter or reins will use (`reward:<n>`).
 */
export const AGENT_EVENT_KEY_PREFIX = "agent:";

/** Prefix of the reporter key's own event keys (only the reporter and the admin post them). */
export const REPORTER_EVENT_KEY_PREFIX = "reporter:";

/** True for event keys in the reserved namespace ({@link RESERVED_EVENT_KEY_PREFIX}). */
export function isReservedEventKey(key: string | null | undefined): boolean {
  return typeof key === "string" && key.startsWith(RESERVED_EVENT_KEY_PREFIX);
}

/** A custom event that reins itself posts (see {@link reinsEvent}). */
export interface ReinsEventInput {
  type: "custom";
  event_key: string;
  payload: { name: string; data: JsonValue };
}

/**
 * The custom event named `name` that reins itself posts, under the reserved key
 * `reins:<name>:<id>` (one event per `id`; the read side checks it with {@link isReinsEvent}).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isReinsEvent, reinsEvent } from "./gateway_api.ts";
 * const event = reinsEvent("monitor_flags", "a1", { flags: [] });
 * assert.equal(event.event_key, "reins:monitor_flags:a1");
 * assert.equal(isReinsEvent(event, "monitor_flags"), true);
 * ```
 */
export function reinsEvent(name: string, id: string | number, data: JsonValue): ReinsEventInput {
  return { type: "custom", event_key: reinsEventKey(name, id), payload: { name, data } };
}

/** The reserved key `reins:<name>:<id>` of {@link reinsEvent}. */
export function reinsEventKey(name: string, id: string | number): string {
  return `${RESERVED_EVENT_KEY_PREFIX}${name}:${id}`;
}

/**
 * True for a custom event named `name` that reins itself wrote (its key is reserved). An agent's
 * token may post custom events of any name, never under a reserved key, so whatever reins reads
 * back as its own verdicts (monitor flags, audits, alignment, step metrics) is checked with this.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { isReinsEvent } from "./gateway_api.ts";
 * const flags = { type: "custom" as const, payload: { name: "monitor_flags", data: {} } };
 * assert.equal(isReinsEvent({ ...flags, event_key: "reins:monitor_flags:a1" }, "monitor_flags"), true);
 * assert.equal(isReinsEvent({ ...flags, event_key: "monitor_flags:a1" }, "monitor_flags"), false);
 * ```
 */
export function isReinsEvent<
  E extends { type: string; event_key?: string | null; payload: unknown },
>(
  event: E,
  name: string,
): event is Extract<E, { type: "custom" }> {
  return event.type === "custom" && isReservedEventKey(event.event_key) &&
    (event.payload as { name?: unknown }).name === name;
}

/** Deadlines and concurrency caps every reins server enforces. */
export const ServerDeadlinesSchema = z.strictObject({
  /** A request's headers must arrive within this (the connection is closed after). */
  headers_timeout_ms: z.number().int().positive().default(10_000),
  /** A request's body must arrive within this after its headers (408 after). */
  body_timeout_ms: z.number().int().positive().default(60_000),
  /** A keep-alive connection with no request in flight is closed after this. */
  idle_timeout_ms: z.number().int().positive().default(30_000),
  /** Most requests one capability token may have in flight (429 above). */
  max_concurrent_per_token: z.number().int().positive().default(32),
  /** Most requests the admin or reporter key may have in flight (429 above). */
  max_concurrent_per_key: z.number().int().positive().default(4_096),
  /** Largest request head (request line and headers) in bytes (431 above). */
  max_header_bytes: z.number().int().positive().default(64 * 1024),
  /** Most connections open at once from one client address (503 and closed above). */
  max_connections_per_client: z.number().int().positive().default(256),
  /**
   * Most connections open at once in total (closed at once above); lowered at start to half
   * the process's descriptor limit (`ulimit -n`) less 64, so descriptors never run out.
   */
  max_connections: z.number().int().positive().default(4_096),
});
/** Server deadlines. */
export type ServerDeadlines = z.infer<typeof ServerDeadlinesSchema>;
/** Server deadlines as a caller writes them. */
export type ServerDeadlinesInput = z.input<typeof ServerDeadlinesSchema>;

/** The error body of every reins service. */
export const ErrorBodySchema = z.object({
  error: z.object({
    code: z.string(),
    message: z.string(),
    field: z.string().optional(),
  }),
});

const eventBase = {
  seq: z.number().int(),
  rollout_id: z.string(),
  attempt_id: z.string(),
  event_key: z.string().nullable(),
  created_at: z.number(),
};

/** A stored event as JSON (token fields as number arrays). */
export const WireEventSchema = z.discriminatedUnion("type", [
  z.object({ ...eventBase, type: z.literal("model_request"), payload: ModelRequestWireSchema }),
  z.object({ ...eventBase, type: z.literal("reward"), payload: RewardPayloadSchema }),
  z.object({ ...eventBase, type: z.literal("custom"), payload: CustomPayloadSchema }),
  z.object({ ...eventBase, type: z.literal("status"), payload: StatusPayloadSchema }),
  z.object({ ...eventBase, type: z.literal("log"), payload: LogPayloadSchema }),
]);

/** Answer of `POST /v1/rollouts/claim`. */
export const ClaimResponseSchema = z.object({ claimed: z.array(ClaimedSchema) });

/** Answer of `POST /v1/leases/expire`: the rollouts it changed. */
export const ExpireLeasesResponseSchema = z.object({ rollouts: z.array(RolloutSchema) });

/** Answer of `GET /v1/rollouts`: one page. */
export const RolloutPageSchema = z.object({
  items: z.array(RolloutSchema),
  next_cursor: z.string().nullable(),
});

/** Answer of an events post. */
export const PostEventsResponseSchema = z.object({ events: z.array(WireEventSchema) });

/** Answer of an events post with `Prefer: return=minimal`. */
export const PostEventsMinimalResponseSchema = z.object({ events: z.array(EventAckSchema) });

/** Answer of `GET /v1/rollouts/:id/events`: one page. */
export const EventPageSchema = z.object({
  items: z.array(WireEventSchema),
  next_after_seq: z.number().int().nullable(),
});

/** Answer of `GET /v1/models`. */
export const ModelListSchema = z.object({ models: z.array(ModelSchema) });

/** Answer of `GET /v1/rollouts/:id/attempts/:aid/token`. */
export const AttemptTokenResponseSchema = z.object({ token: z.string().min(1) });
