/**
 * Schemas of the gateway area: request bodies and query strings of the HTTP API, the change
 * feed, the phase snapshot and the gateway's limits.
 *
 * Rollouts, events and models themselves live in `./core.ts`; this module only adds what the
 * gateway's API needs around them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ClaimRequestSchema, parseOrThrow } from "../schema.ts";
 * const claim = parseOrThrow(ClaimRequestSchema, { worker: "ctl-1", limit: 4 });
 * assert.equal(claim.lease_ms, 60000);
 * ```
 *
 * @module
 */
import { z } from "zod";
import {
  AttemptSchema,
  AttemptStatusSchema,
  EventInputSchema,
  EventTypeSchema,
  IdSchema,
  JsonObjectSchema,
  LabelsSchema,
  ModelSchema,
  RolloutCreateSchema,
  RolloutModeSchema,
  RolloutSchema,
  RolloutStatusSchema,
  strictObject,
} from "./core.ts";

/** Limits the gateway enforces; every one is answered with a clear 4xx when exceeded. */
export const GatewayLimitsSchema = strictObject({
  /** Request bodies larger than this are refused with 413. */
  max_body_bytes: z.number().int().positive().default(32 * 1024 * 1024),
  /** Most rollouts per `POST /v1/rollouts` and events per events post (400 above). */
  max_batch: z.number().int().positive().default(1_000),
  /** Largest `limit` of a list call (400 above). */
  max_page: z.number().int().positive().default(1_000),
  /** Most rollouts one claim may take (400 above). */
  max_claim: z.number().int().positive().default(256),
  /** Most events one attempt's capability token may store (429 above). */
  max_events_per_attempt: z.number().int().positive().default(10_000),
  /** Most payload bytes (JSON) one attempt's capability token may store (413 above). */
  max_event_bytes_per_attempt: z.number().int().positive().default(64 * 1024 * 1024),
});
/** Limits the gateway enforces. */
export type GatewayLimits = z.infer<typeof GatewayLimitsSchema>;
/** Limits as a caller writes them (every field optional). */
export type GatewayLimitsInput = z.input<typeof GatewayLimitsSchema>;

/** A request's list of `noun`s: an array (else "expected an array of `noun`s"), not empty. */
function nonEmptyList<T extends z.ZodType>(item: T, noun: string) {
  return z.array(item, { error: `expected an array of ${noun}s` })
    .min(1, `must hold at least one ${noun}`);
}

/** Body of `POST /v1/rollouts`: one rollout or a batch. */
export const CreateRolloutsRequestSchema = strictObject({
  rollouts: nonEmptyList(RolloutCreateSchema, "rollout"),
});
/** Body of `POST /v1/rollouts`. */
export type CreateRolloutsRequest = z.input<typeof CreateRolloutsRequestSchema>;

/** Answer of `POST /v1/rollouts`: `created[i]` is false when `rollouts[i]` already existed. */
export const CreateRolloutsResponseSchema = z.object({
  rollouts: z.array(RolloutSchema),
  created: z.array(z.boolean()),
});
/** Answer of `POST /v1/rollouts`. */
export type CreateRolloutsResponse = z.infer<typeof CreateRolloutsResponseSchema>;

/**
 * A label filter: a rollout matches when its labels hold every given key with exactly the given
 * value (an empty filter matches every rollout). Used by listings and claims; keys and values
 * follow the rules of labels (no control characters).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { LabelFilterSchema, parseOrThrow } from "../schema.ts";
 * assert.deepEqual(parseOrThrow(LabelFilterSchema, { sandbox: "gpu" }), { sandbox: "gpu" });
 * ```
 */
export const LabelFilterSchema = LabelsSchema;
/** A label filter (see {@link LabelFilterSchema}). */
export type LabelFilter = z.infer<typeof LabelFilterSchema>;

/**
 * Order of a rollout listing by creation: `asc` (oldest first, the default) or `desc` (newest
 * first). Cursors page onward in the order of the listing that returned them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { ListOrderSchema, parseOrThrow } from "../schema.ts";
 * assert.equal(parseOrThrow(ListOrderSchema, "desc"), "desc");
 * ```
 */
export const ListOrderSchema = z.enum(["asc", "desc"]);
/** Order of a rollout listing. */
export type ListOrder = z.infer<typeof ListOrderSchema>;

/** Body of `POST /v1/rollouts/claim`. */
export const ClaimRequestSchema = strictObject({
  /** Who claims (controller id); recorded on the attempt and checked on lease renewal. */
  worker: z.string().min(1).max(200),
  limit: z.number().int().min(1).default(1),
  /** Lease length; the controller must renew before it ends or the attempt becomes `lost`. */
  lease_ms: z.number().int().min(100).max(24 * 3600 * 1000).default(60_000),
  /**
   * Idempotency key of this claim: a retried claim with the same worker and key returns the
   * same attempts instead of claiming more rollouts. The client fills one in.
   */
  claim_key: z.string().min(1).max(200).optional(),
  /** Only claim rollouts of this mode. */
  mode: RolloutModeSchema.optional(),
  /**
   * Only claim rollouts whose labels hold every given key/value (as the listing's `labels`);
   * e.g. `{ sandbox: "gpu" }` for a controller that runs only GPU sandboxes. Matching rollouts
   * are still claimed oldest first.
   */
  labels: LabelFilterSchema.optional(),
});
/** Body of `POST /v1/rollouts/claim`. */
export type ClaimRequest = z.input<typeof ClaimRequestSchema>;

/** One claimed rollout with its new attempt and that attempt's capability token. */
export const ClaimedSchema = z.object({
  rollout: RolloutSchema,
  attempt: AttemptSchema,
  /** Capability token of the attempt (`rk_…`), for the harness's API key. */
  token: z.string(),
});
/** One claimed rollout with its new attempt and token. */
export type ClaimedWire = z.infer<typeof ClaimedSchema>;

/** Body of `POST /v1/rollouts/:id/attempts/:aid/lease`. */
export const RenewLeaseRequestSchema = strictObject({
  worker: z.string().min(1).max(200),
  lease_ms: z.number().int().min(100).max(24 * 3600 * 1000).default(60_000),
});
/** Body of the lease renewal. */
export type RenewLeaseRequest = z.input<typeof RenewLeaseRequestSchema>;

/** Body of `PATCH /v1/rollouts/:id`: a guarded status transition. */
export const TransitionRequestSchema = strictObject({
  to: RolloutStatusSchema,
  /** Compare-and-swap: the transition fails with 409 unless the rollout has this version. */
  expected_version: z.number().int().min(1).optional(),
  /** The attempt the caller speaks for; must be the rollout's current attempt. */
  attempt_id: IdSchema.optional(),
  /** Final status of the current attempt (defaults follow the rollout's target status). */
  attempt_status: AttemptStatusSchema.exclude(["running"]).optional(),
  exit_code: z.number().int().nullable().optional(),
  error: z.string().max(100_000).nullable().optional(),
  reason: z.string().max(10_000).nullable().optional(),
  /** Merged into the current attempt's `info`. */
  info: JsonObjectSchema.optional(),
  log_location: z.string().max(4_000).nullable().optional(),
});
/** Body of `PATCH /v1/rollouts/:id`. */
export type TransitionRequest = z.input<typeof TransitionRequestSchema>;

const statusList = z.union([RolloutStatusSchema, z.array(RolloutStatusSchema).min(1)]);

/** Filters and paging of a rollout listing. */
export const ListRolloutsQuerySchema = z.object({
  status: statusList.optional(),
  mode: RolloutModeSchema.optional(),
  group_id: IdSchema.optional(),
  /** Every label given must match exactly. */
  labels: LabelFilterSchema.optional(),
  /** `asc`: oldest first (default); `desc`: newest first. */
  order: ListOrderSchema.default("asc"),
  /** Opaque cursor from a previous page's `next_cursor` (of a listing in the same order). */
  after: z.string().min(1).max(100).optional(),
  limit: z.number().int().min(1).default(100),
});
/** Filters and paging of a rollout listing. */
export type ListRolloutsQuery = z.input<typeof ListRolloutsQuerySchema>;

/** Filters of an event listing (ordered by `seq`). */
export const ListEventsQuerySchema = z.object({
  type: z.union([EventTypeSchema, z.array(EventTypeSchema).min(1)]).optional(),
  attempt_id: z.string().max(200).optional(),
  /** Only events with `seq` greater than this. */
  after_seq: z.number().int().min(0).optional(),
  limit: z.number().int().min(1).default(1_000),
});
/** Filters of an event listing. */
export type ListEventsQuery = z.input<typeof ListEventsQuerySchema>;

/** Body of `POST /v1/rollouts/:id/attempts/:aid/events`. */
export const PostEventsRequestSchema = strictObject({
  events: nonEmptyList(EventInputSchema, "event"),
});
/** Body of an events post. */
export type PostEventsRequest = z.input<typeof PostEventsRequestSchema>;

/**
 * The envelope of an events post as the route checks it: unknown keys refused, at least one
 * event. The events themselves are validated once, by the store's own parser (`parseEvents`),
 * which checks a model call's token arrays without zod: zod over an 8k-token prompt cost
 * ~5 ms per post, more than everything else the post does.
 */
export const PostEventsEnvelopeSchema = strictObject({
  events: z.array(z.unknown(), { error: "expected an array of events" })
    .min(1, "must hold at least one event"),
});

/**
 * What an events post answers per event with `Prefer: return=minimal`: the stored event's
 * identity without its payload (a model call's token arrays are not echoed back).
 */
export const EventAckSchema = z.object({
  seq: z.number().int(),
  rollout_id: z.string(),
  attempt_id: z.string(),
  type: EventTypeSchema,
  event_key: z.string().nullable(),
  created_at: z.number(),
});
/** A stored event's identity (see {@link EventAckSchema}). */
export type EventAck = z.infer<typeof EventAckSchema>;

/** Body of `POST /v1/models`. */
export const RegisterModelRequestSchema = strictObject(
  ModelSchema.omit({ updated_at: true }).shape,
);
/** Body of `POST /v1/models`. */
export type RegisterModelRequest = z.input<typeof RegisterModelRequestSchema>;

/** Gateway phase for collocated training. */
export const PhaseSchema = z.enum(["rollout", "update"]);
/** Gateway phase. */
export type Phase = z.infer<typeof PhaseSchema>;

/** Body of `POST /v1/phase`. */
export const PhaseRequestSchema = strictObject({
  phase: PhaseSchema,
  /** With `update`: answer only once no call is in flight any more. */
  drain: z.boolean().default(false),
  /** Longest wait for the drain (504 when it does not happen in time). */
  drain_timeout_ms: z.number().int().min(1).max(3_600_000).default(600_000),
});
/** Body of `POST /v1/phase`. */
export type PhaseRequest = z.input<typeof PhaseRequestSchema>;

/** What `GET /v1/phase` answers. */
export const PhaseSnapshotSchema = z.object({
  phase: PhaseSchema,
  /** Calls that hold the gate now. */
  in_flight: z.number().int().min(0),
  /** Calls waiting for the rollout phase. */
  held: z.number().int().min(0),
  /** Epoch ms of the last phase change. */
  since: z.number(),
});
/** What `GET /v1/phase` answers. */
export type PhaseSnapshot = z.infer<typeof PhaseSnapshotSchema>;

/**
 * One entry of the change feed (`GET /v1/stream`, `Store.changesSince`): an event was appended
 * (status changes are `status` events), or a model was registered or updated. `seq` is the
 * store-wide counter shared with events.
 */
export const ChangeSchema = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("event"),
    seq: z.number().int(),
    rollout_id: z.string(),
    attempt_id: z.string(),
    type: EventTypeSchema,
    /**
     * The event's key: a reader can tell reins' own (reserved) events from an agent's without
     * reading each one. Absent from gateways that predate it.
     */
    event_key: z.string().nullable().optional(),
    /** For `status` events: the new rollout status. */
    status: RolloutStatusSchema.nullable(),
    created_at: z.number(),
  }),
  z.object({
    kind: z.literal("model"),
    seq: z.number().int(),
    name: z.string(),
    version: z.number().int(),
    created_at: z.number(),
  }),
]);
/** One entry of the change feed. */
export type Change = z.infer<typeof ChangeSchema>;

/** What `GET /v1/health` answers. */
export const HealthSchema = z.object({
  ok: z.boolean(),
  store: z.enum(["sqlite", "postgres"]),
  phase: PhaseSchema,
  /** Last assigned store-wide seq. */
  seq: z.number().int(),
});
/** What `GET /v1/health` answers. */
export type Health = z.infer<typeof HealthSchema>;
