/**
 * Core data model of reins: rollouts, attempts, events, models and samples.
 *
 * Every type that crosses a module border is inferred from a zod schema here, so that the
 * gateway, the proxy, the trainer and notebooks agree on one shape. Wire shapes (JSON) carry
 * token ids as plain number arrays; in-memory records carry them as typed arrays
 * (`Uint32Array` ids, `Float32Array` logprobs), which is also how the stores keep them.
 *
 * @module
 */
import { z } from "zod";
import {
  EventKeySchema,
  type JsonObject,
  JsonObjectSchema,
  JsonValueSchema,
  LabelsSchema,
  WorkerSchema,
} from "./json.ts";
import { strictObject } from "./validation.ts";
import { floatArray, intArray } from "../util/arrays.ts";

export * from "./json.ts";
export * from "./training.ts";
export * from "./validation.ts";

/** Longest id (rollout, attempt, group, worker). */
export const MAX_ID_CHARS = 200;
/** The characters of an id: letters, digits and `. _ : @ -` (it sits in URL paths unescaped). */
export const ID_PATTERN = /^[A-Za-z0-9._:@-]+$/;

/**
 * Identifier accepted for rollouts, groups, attempts and models: 1–200 URL-safe characters, and
 * not `.` or `..` (a URL path cannot hold those as a segment: `/v1/rollouts/..` is `/v1`).
 */
export const IdSchema = z.string().min(1).max(MAX_ID_CHARS).regex(
  ID_PATTERN,
  "must use only letters, digits and . _ : @ -",
).refine((id) => id !== "." && id !== "..", "must not be '.' or '..' (no URL can reach it)");

/** Longest name of a custom event or a reward component (they are rendered in the UI). */
export const MAX_EVENT_NAME_CHARS = 200;
/** Longest text of one log event (1 MiB; the controller posts longer output in chunks). */
export const MAX_LOG_TEXT_CHARS = 1024 * 1024;

// ---------------------------------------------------------------------------------------------
// Rollouts and attempts

/** Whether a rollout feeds training or only evaluation. */
export const RolloutModeSchema = z.enum(["train", "val"]);
/** Whether a rollout feeds training or only evaluation. */
export type RolloutMode = z.infer<typeof RolloutModeSchema>;

/**
 * Rollout life cycle: `queuing → running → succeeded | failed | cancelled`, with `requeuing`
 * between a failed attempt and the next one.
 */
export const RolloutStatusSchema = z.enum([
  "queuing",
  "running",
  "requeuing",
  "succeeded",
  "failed",
  "cancelled",
]);
/** Rollout life-cycle state. */
export type RolloutStatus = z.infer<typeof RolloutStatusSchema>;

/**
 * Allowed rollout status transitions (the state machine every store enforces).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { canTransition } from "./core.ts";
 * assert.equal(canTransition("queuing", "running"), true);
 * assert.equal(canTransition("succeeded", "running"), false);
 * ```
 */
export const ROLLOUT_TRANSITIONS: Readonly<Record<RolloutStatus, readonly RolloutStatus[]>> = {
  queuing: ["running", "cancelled"],
  running: ["succeeded", "failed", "requeuing", "cancelled"],
  requeuing: ["running", "failed", "cancelled"],
  succeeded: [],
  failed: [],
  cancelled: [],
};

/** Final rollout states: no transition leaves them (`succeeded`, `failed`, `cancelled`). */
export const TERMINAL_ROLLOUT_STATUSES: readonly RolloutStatus[] = RolloutStatusSchema.options
  .filter((status) => ROLLOUT_TRANSITIONS[status].length === 0);

/** True when the state machine allows `from → to`. */
export function canTransition(from: RolloutStatus, to: RolloutStatus): boolean {
  return ROLLOUT_TRANSITIONS[from].includes(to);
}

/** Attempt life cycle. `lost` = its worker vanished (lease expired) and it was given up. */
export const AttemptStatusSchema = z.enum([
  "running",
  "succeeded",
  "failed",
  "timeout",
  "cancelled",
  "lost",
]);
/** Attempt life-cycle state. */
export type AttemptStatus = z.infer<typeof AttemptStatusSchema>;

/** Which harness a rollout runs, by registry name, with its options. */
export const HarnessSpecSchema = strictObject({
  name: z.string().min(1).max(200),
  options: JsonObjectSchema.default({}),
});
/** Which harness a rollout runs. */
export type HarnessSpec = z.infer<typeof HarnessSpecSchema>;

/** Per-rollout execution settings (unknown keys are refused: a typo is an error, not a no-op). */
export const RolloutConfigSchema = strictObject({
  timeout_s: z.number().positive().max(7 * 24 * 3600).default(600),
  max_attempts: z.number().int().min(1).max(100).default(1),
  harness: HarnessSpecSchema.optional(),
  /** Backend-specific template (e.g. a Kubernetes Job spec fragment). */
  template: JsonObjectSchema.optional(),
});
/** Per-rollout execution settings. */
export type RolloutConfig = z.infer<typeof RolloutConfigSchema>;

/** One execution try of a rollout. */
export const AttemptSchema = z.object({
  attempt_id: IdSchema,
  rollout_id: IdSchema,
  /** 1-based index of this attempt within its rollout. */
  index: z.number().int().min(1),
  status: AttemptStatusSchema,
  started_at: z.number(),
  ended_at: z.number().nullable(),
  exit_code: z.number().int().nullable(),
  error: z.string().nullable(),
  /** Who runs it (controller id, process id, pod name). */
  worker: WorkerSchema.nullable(),
  /** Epoch ms until which the claimant holds the lease. */
  lease_expires_at: z.number().nullable(),
  log_location: z.string().nullable(),
  /** Free-form execution facts (sandbox stages applied, backend details). */
  info: JsonObjectSchema.default({}),
});
/** One execution try of a rollout. */
export type Attempt = z.infer<typeof AttemptSchema>;

/** What a caller sends to create a rollout (unknown keys are refused). */
export const RolloutCreateSchema = strictObject({
  rollout_id: IdSchema.optional(),
  group_id: IdSchema.optional(),
  input: JsonValueSchema,
  mode: RolloutModeSchema.default("train"),
  config: RolloutConfigSchema.default({ timeout_s: 600, max_attempts: 1 }),
  /** Free-form labels (training step, dataset, harness name) for filtering. */
  labels: LabelsSchema.default({}),
});
/** What a caller sends to create a rollout. */
export type RolloutCreate = z.input<typeof RolloutCreateSchema>;

/** A rollout as the gateway stores and serves it. */
export const RolloutSchema = z.object({
  rollout_id: IdSchema,
  group_id: IdSchema,
  input: JsonValueSchema,
  mode: RolloutModeSchema,
  config: RolloutConfigSchema,
  labels: LabelsSchema,
  status: RolloutStatusSchema,
  /** Row version for compare-and-swap; bumps on every change. */
  version: z.number().int().min(1),
  attempts: z.array(AttemptSchema),
  created_at: z.number(),
  updated_at: z.number(),
  /** Smallest and largest policy version seen among its model calls. */
  policy_version_min: z.number().int().nullable(),
  policy_version_max: z.number().int().nullable(),
  /**
   * The current attempt's verified reward: the last `reward` event of the current attempt that
   * an allowed credential (admin or reporter) posted; null until one is. A new attempt starts
   * without one; rewards of earlier or lost attempts stay events and never set it.
   */
  reward: z.number().nullable(),
  /** The attempt whose reward `reward` is (null with `reward`). */
  reward_attempt_id: IdSchema.nullable(),
  /**
   * Which credential posted it; null with `reward`, and on rewards stored before schema 2 (the
   * credential was not recorded then).
   */
  reward_credential: z.enum(["admin", "reporter"]).nullable(),
});
/** A rollout as the gateway stores and serves it. */
export type Rollout = z.infer<typeof RolloutSchema>;

// ---------------------------------------------------------------------------------------------
// Events

/** Kinds of events a rollout's log holds. */
export const EventTypeSchema = z.enum(["model_request", "reward", "custom", "status", "log"]);
/** Kinds of events a rollout's log holds. */
export type EventType = z.infer<typeof EventTypeSchema>;

/** Wire formats the proxy speaks (and `generate` for token-level callers). */
export const FlavorSchema = z.enum([
  "openai_chat",
  "openai_completions",
  "openai_responses",
  "anthropic_messages",
  "generate",
]);
/** Wire formats the proxy speaks. */
export type Flavor = z.infer<typeof FlavorSchema>;

/** How the proxy built the prompt: exactly from the request, or reusing sampled ids. */
export const PromptModeSchema = z.enum(["faithful", "substitute"]);
/** How the proxy built the prompt. */
export type PromptMode = z.infer<typeof PromptModeSchema>;

/** Conversation/segment tag the proxy attaches to each call. */
export const SegmentSchema = z.object({
  /** Stable id of the conversation (main agent, a sub-agent, a side conversation). */
  conversation: z.string(),
  /** Increments when the conversation's history is replaced (compaction). */
  index: z.number().int().min(0),
  /** Why this call opened a new conversation or segment, if it did. */
  opened_by: z.enum(["root", "branch", "compaction"]).nullable(),
});
/** Conversation/segment tag of a call. */
export type Segment = z.infer<typeof SegmentSchema>;

/** One chat message in reins' normalized (OpenAI-chat-like) message form. */
export const ChatMessageSchema = z.object({
  role: z.enum(["system", "user", "assistant", "tool"]),
  content: z.string().nullable().default(""),
  reasoning_content: z.string().optional(),
  tool_calls: z.array(z.object({
    id: z.string().optional(),
    type: z.literal("function").default("function"),
    function: z.object({ name: z.string(), arguments: z.string() }),
  })).optional(),
  tool_call_id: z.string().optional(),
  name: z.string().optional(),
});
/** One chat message in reins' normalized message form. */
export type ChatMessage = z.infer<typeof ChatMessageSchema>;

const tokenIds = z.array(z.number().int().min(0).max(0xffffffff));
const finite = z.number().refine(Number.isFinite, "must be a finite number");

/**
 * How a call was sampled, as the proxy asked its upstream: temperature (0 = greedy) and the
 * truncations (top-p < 1, top-k > 0, min-p > 0). The behaviour logprobs are of this distribution;
 * calls with a truncation or at temperature 0 are not trained on (see lib/samples/sampling.ts).
 */
export const CallSamplingSchema = z.object({
  temperature: z.number().min(0),
  top_p: z.number().gt(0).max(1).default(1),
  top_k: z.number().int().min(0).default(0),
  min_p: z.number().min(0).max(1).default(0),
});
/** How a call was sampled. */
export type CallSampling = z.infer<typeof CallSamplingSchema>;

/**
 * A model call as sent over the wire (JSON): token ids as number arrays.
 * `response_logprobs` must hold one finite value per response token.
 */
export const ModelRequestWireSchema = z.object({
  flavor: FlavorSchema,
  /** The request body as received (or a digest of it when large). */
  request: JsonObjectSchema.default({}),
  /** Normalized messages the prompt was rendered from (chat flavors). */
  messages: z.array(ChatMessageSchema).optional(),
  prompt_token_ids: tokenIds,
  response_token_ids: tokenIds,
  response_logprobs: z.array(finite),
  response_text: z.string().optional(),
  policy_version: z.number().int().min(0),
  finish_reason: z.string().nullable().default(null),
  upstream: z.string().nullable().default(null),
  latency_ms: z.number().min(0).default(0),
  retry_count: z.number().int().min(0).default(0),
  http_status: z.number().int().min(100).max(599).default(200),
  error: z.string().nullable().default(null),
  segment: SegmentSchema.nullable().default(null),
  mode: PromptModeSchema.default("faithful"),
  /** Marks a call whose client went away before the response ended. */
  client_disconnected: z.boolean().default(false),
  /** How the call was sampled (absent on calls recorded before it was: temperature 1). */
  sampling: CallSamplingSchema.optional(),
}).superRefine((value, ctx) => {
  if (value.response_logprobs.length !== value.response_token_ids.length) {
    ctx.addIssue({
      code: "custom",
      path: ["response_logprobs"],
      message: `expected ${value.response_token_ids.length} logprobs (one per response token), ` +
        `got ${value.response_logprobs.length}`,
    });
  }
});
/** A model call as sent over the wire. */
export type ModelRequestWire = z.input<typeof ModelRequestWireSchema>;

/** A model call in memory and in the stores: token ids and logprobs as typed arrays. */
export interface ModelRequest {
  flavor: Flavor;
  request: JsonObject;
  messages?: ChatMessage[];
  prompt_token_ids: Uint32Array;
  response_token_ids: Uint32Array;
  response_logprobs: Float32Array;
  response_text?: string;
  policy_version: number;
  finish_reason: string | null;
  upstream: string | null;
  latency_ms: number;
  retry_count: number;
  http_status: number;
  error: string | null;
  segment: Segment | null;
  mode: PromptMode;
  client_disconnected: boolean;
  sampling?: CallSampling;
}

/** An outcome reward. */
export const RewardPayloadSchema = strictObject({
  value: finite,
  /** Name of the reward component (default "reward"). */
  name: z.string().min(1).max(MAX_EVENT_NAME_CHARS).default("reward"),
  info: JsonObjectSchema.default({}),
});
/** An outcome reward. */
export type RewardPayload = z.infer<typeof RewardPayloadSchema>;

/** A user-defined event. */
export const CustomPayloadSchema = strictObject({
  name: z.string().min(1).max(MAX_EVENT_NAME_CHARS),
  data: JsonValueSchema,
});
/** A user-defined event. */
export type CustomPayload = z.infer<typeof CustomPayloadSchema>;

/** A status change the gateway recorded. */
export const StatusPayloadSchema = z.object({
  from: RolloutStatusSchema.nullable(),
  to: RolloutStatusSchema,
  reason: z.string().max(10_000).nullable().default(null),
});
/** A status change the gateway recorded. */
export type StatusPayload = z.infer<typeof StatusPayloadSchema>;

/** A chunk of harness output. */
export const LogPayloadSchema = strictObject({
  stream: z.enum(["stdout", "stderr", "system"]),
  text: z.string().max(MAX_LOG_TEXT_CHARS),
});
/** A chunk of harness output. */
export type LogPayload = z.infer<typeof LogPayloadSchema>;

/** An event as a client posts it (JSON). */
export const EventInputSchema = z.discriminatedUnion("type", [
  strictObject({
    type: z.literal("model_request"),
    event_key: EventKeySchema.optional(),
    payload: ModelRequestWireSchema,
  }),
  strictObject({
    type: z.literal("reward"),
    event_key: EventKeySchema.optional(),
    payload: RewardPayloadSchema,
  }),
  strictObject({
    type: z.literal("custom"),
    event_key: EventKeySchema.optional(),
    payload: CustomPayloadSchema,
  }),
  strictObject({
    type: z.literal("log"),
    event_key: EventKeySchema.optional(),
    payload: LogPayloadSchema,
  }),
]);
/** An event as a client posts it (JSON). */
export type EventInput = z.input<typeof EventInputSchema>;

/**
 * Who posts events: `admin` (the control plane: controller, proxy, verifier), `reporter` (a
 * reward reporter outside the agent's reach) or `capability` (an attempt's token, which the
 * agent holds). Only admin and reporter rewards count.
 */
export const CredentialSchema = z.enum(["admin", "reporter", "capability"]);
/** Who posts events (see {@link CredentialSchema}). */
export type Credential = z.infer<typeof CredentialSchema>;

/** Fields every stored event has. */
interface EventBase {
  /** Server-assigned, strictly increasing across the whole store. */
  seq: number;
  rollout_id: string;
  attempt_id: string;
  event_key: string | null;
  created_at: number;
}

/** A stored event, discriminated by `type`. */
export type RolloutEvent =
  | (EventBase & { type: "model_request"; payload: ModelRequest })
  | (EventBase & { type: "reward"; payload: RewardPayload })
  | (EventBase & { type: "custom"; payload: CustomPayload })
  | (EventBase & { type: "status"; payload: StatusPayload })
  | (EventBase & { type: "log"; payload: LogPayload });

/** A stored model_request event. */
export type ModelRequestEvent = Extract<RolloutEvent, { type: "model_request" }>;

// ---------------------------------------------------------------------------------------------
// Models

/** The policy served to harnesses: name, endpoints and the version that moves on each step. */
export const ModelSchema = z.object({
  name: IdSchema,
  /** Where the policy is served: http(s) URLs only. */
  endpoints: z.array(z.url({ protocol: /^https?$/, error: "must be an http(s) URL" }).max(2_000))
    .max(64).default([]),
  version: z.number().int().min(0),
  info: JsonObjectSchema.default({}),
  updated_at: z.number().optional(),
});
/** The policy served to harnesses. */
export type Model = z.infer<typeof ModelSchema>;

/**
 * Converts a validated wire model call into its in-memory form (typed arrays).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { modelRequestFromWire, ModelRequestWireSchema, parseOrThrow } from "./core.ts";
 * const wire = parseOrThrow(ModelRequestWireSchema, {
 *   flavor: "generate", prompt_token_ids: [1, 2], response_token_ids: [3],
 *   response_logprobs: [-0.5], policy_version: 0,
 * });
 * assert.deepEqual(modelRequestFromWire(wire).prompt_token_ids, new Uint32Array([1, 2]));
 * ```
 */
export function modelRequestFromWire(wire: z.infer<typeof ModelRequestWireSchema>): ModelRequest {
  return {
    ...wire,
    // The constructors copy an array by index; `from` walks its iterator (~1.6× as long).
    prompt_token_ids: new Uint32Array(wire.prompt_token_ids),
    response_token_ids: new Uint32Array(wire.response_token_ids),
    response_logprobs: new Float32Array(wire.response_logprobs),
  };
}

/** Converts an in-memory model call into its JSON wire form. */
export function modelRequestToWire(request: ModelRequest): z.infer<typeof ModelRequestWireSchema> {
  return {
    ...request,
    prompt_token_ids: intArray(request.prompt_token_ids),
    response_token_ids: intArray(request.response_token_ids),
    response_logprobs: floatArray(request.response_logprobs),
  };
}
