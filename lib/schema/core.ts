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
import { HttpError } from "../http/error.ts";

/** Identifier accepted for rollouts, groups, attempts and models: 1–200 URL-safe characters. */
export const IdSchema = z.string().min(1).max(200).regex(
  /^[A-Za-z0-9._:@-]+$/,
  "must use only letters, digits and . _ : @ -",
);

/** Any JSON value (task inputs, custom event data, harness options). */
export type JsonValue =
  | string
  | number
  | boolean
  | null
  | JsonValue[]
  | { [key: string]: JsonValue };

/** Schema of {@link JsonValue}. */
export const JsonValueSchema: z.ZodType<JsonValue> = z.lazy(() =>
  z.union([
    z.string(),
    z.number(),
    z.boolean(),
    z.null(),
    z.array(JsonValueSchema),
    z.record(z.string(), JsonValueSchema),
  ])
);

/** A JSON object. */
export const JsonObjectSchema = z.record(z.string(), JsonValueSchema);
/** A JSON object. */
export type JsonObject = z.infer<typeof JsonObjectSchema>;

/** Nesting past which {@link isPlainJsonObject} leaves the value to the schema. */
const PLAIN_JSON_MAX_DEPTH = 32;

/**
 * A fast pre-check for hot paths: true when `value` is a plain object of JSON values that
 * {@link JsonObjectSchema} accepts as it is (finite numbers; plain objects without symbol keys
 * or an own `__proto__`), so parsing it can be skipped. False means "let the schema decide",
 * not "invalid". Keep it a subset of {@link JsonValueSchema}'s rules.
 *
 * @example
 * ```ts
 * import { isPlainJsonObject } from "./core.ts";
 * isPlainJsonObject({ a: [1, "x", null, { b: true }] }); // true
 * isPlainJsonObject({ a: Infinity }); // false: the schema reports it
 * ```
 */
export function isPlainJsonObject(value: unknown): boolean {
  return typeof value === "object" && value !== null && !Array.isArray(value) &&
    isPlainJsonValue(value, 0);
}

function isPlainJsonValue(value: unknown, depth: number): boolean {
  switch (typeof value) {
    case "string":
    case "boolean":
      return true;
    case "number":
      return Number.isFinite(value);
    case "object": {
      if (value === null) return true;
      if (depth >= PLAIN_JSON_MAX_DEPTH) return false;
      if (Array.isArray(value)) {
        for (let i = 0; i < value.length; i++) {
          if (!isPlainJsonValue(value[i], depth + 1)) return false;
        }
        return true;
      }
      const proto = Object.getPrototypeOf(value);
      if (proto !== Object.prototype && proto !== null) return false;
      if (Object.getOwnPropertySymbols(value).length > 0) return false;
      for (const key in value) {
        if (!Object.hasOwn(value, key) || key === "__proto__") return false;
        if (!isPlainJsonValue((value as Record<string, unknown>)[key], depth + 1)) return false;
      }
      return true;
    }
    default:
      return false;
  }
}

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

/** Final rollout states: no transition leaves them. */
export const TERMINAL_ROLLOUT_STATUSES: readonly RolloutStatus[] = [
  "succeeded",
  "failed",
  "cancelled",
];

/**
 * Allowed rollout status transitions (the state machine every store enforces).
 *
 * @example
 * ```ts
 * import { canTransition } from "./core.ts";
 * canTransition("queuing", "running"); // true
 * canTransition("succeeded", "running"); // false
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
export const HarnessSpecSchema = z.object({
  name: z.string().min(1),
  options: JsonObjectSchema.default({}),
});
/** Which harness a rollout runs. */
export type HarnessSpec = z.infer<typeof HarnessSpecSchema>;

/** Per-rollout execution settings. */
export const RolloutConfigSchema = z.object({
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
  worker: z.string().nullable(),
  /** Epoch ms until which the claimant holds the lease. */
  lease_expires_at: z.number().nullable(),
  log_location: z.string().nullable(),
  /** Free-form execution facts (sandbox stages applied, backend details). */
  info: JsonObjectSchema.default({}),
});
/** One execution try of a rollout. */
export type Attempt = z.infer<typeof AttemptSchema>;

/** What a caller sends to create a rollout. */
export const RolloutCreateSchema = z.object({
  rollout_id: IdSchema.optional(),
  group_id: IdSchema.optional(),
  input: JsonValueSchema,
  mode: RolloutModeSchema.default("train"),
  config: RolloutConfigSchema.default({ timeout_s: 600, max_attempts: 1 }),
  /** Free-form labels (training step, dataset, harness name) for filtering. */
  labels: z.record(z.string(), z.string()).default({}),
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
  labels: z.record(z.string(), z.string()),
  status: RolloutStatusSchema,
  /** Row version for compare-and-swap; bumps on every change. */
  version: z.number().int().min(1),
  attempts: z.array(AttemptSchema),
  created_at: z.number(),
  updated_at: z.number(),
  /** Smallest and largest policy version seen among its model calls. */
  policy_version_min: z.number().int().nullable(),
  policy_version_max: z.number().int().nullable(),
  /** Final reward, when one was reported (the last `reward` event). */
  reward: z.number().nullable(),
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
}

/** An outcome reward. */
export const RewardPayloadSchema = z.object({
  value: finite,
  /** Name of the reward component (default "reward"). */
  name: z.string().default("reward"),
  info: JsonObjectSchema.default({}),
});
/** An outcome reward. */
export type RewardPayload = z.infer<typeof RewardPayloadSchema>;

/** A user-defined event. */
export const CustomPayloadSchema = z.object({ name: z.string().min(1), data: JsonValueSchema });
/** A user-defined event. */
export type CustomPayload = z.infer<typeof CustomPayloadSchema>;

/** A status change the gateway recorded. */
export const StatusPayloadSchema = z.object({
  from: RolloutStatusSchema.nullable(),
  to: RolloutStatusSchema,
  reason: z.string().nullable().default(null),
});
/** A status change the gateway recorded. */
export type StatusPayload = z.infer<typeof StatusPayloadSchema>;

/** A chunk of harness output. */
export const LogPayloadSchema = z.object({
  stream: z.enum(["stdout", "stderr", "system"]),
  text: z.string(),
});
/** A chunk of harness output. */
export type LogPayload = z.infer<typeof LogPayloadSchema>;

/** An event as a client posts it (JSON). */
export const EventInputSchema = z.discriminatedUnion("type", [
  z.object({
    type: z.literal("model_request"),
    event_key: z.string().max(200).optional(),
    payload: ModelRequestWireSchema,
  }),
  z.object({
    type: z.literal("reward"),
    event_key: z.string().max(200).optional(),
    payload: RewardPayloadSchema,
  }),
  z.object({
    type: z.literal("custom"),
    event_key: z.string().max(200).optional(),
    payload: CustomPayloadSchema,
  }),
  z.object({
    type: z.literal("log"),
    event_key: z.string().max(200).optional(),
    payload: LogPayloadSchema,
  }),
]);
/** An event as a client posts it (JSON). */
export type EventInput = z.input<typeof EventInputSchema>;

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
  endpoints: z.array(z.string().url()).default([]),
  version: z.number().int().min(0),
  info: JsonObjectSchema.default({}),
  updated_at: z.number().optional(),
});
/** The policy served to harnesses. */
export type Model = z.infer<typeof ModelSchema>;

// ---------------------------------------------------------------------------------------------
// Samples and training rows

/** The four merge strategies of SPEC §5. */
export const MergeStrategySchema = z.enum([
  "per_call",
  "prefix_merge",
  "buffer_substitute",
  "tree",
]);
/** A merge strategy. */
export type MergeStrategy = z.infer<typeof MergeStrategySchema>;

/**
 * Why a rollout's calls did not stay one sample:
 * - `token_boundary`: the text prefix holds, tokens differ at the response boundary;
 * - `template_rewrite`: the chat template re-rendered earlier turns (reasoning stripped, …);
 * - `response_rewrite`: the harness changed the response text (tool-call re-serialisation, …);
 * - `branch`: a different conversation (sub-agent, side conversation);
 * - `compaction`: earlier history was replaced by a summary;
 * - `unknown`: none of the above could be established (counted, never hidden).
 */
export const BreakReasonSchema = z.enum([
  "token_boundary",
  "template_rewrite",
  "response_rewrite",
  "branch",
  "compaction",
  "unknown",
]);
/** Why a sample split. */
export type BreakReason = z.infer<typeof BreakReasonSchema>;

/** Where a sample came from. */
export interface SampleProvenance {
  /** `seq` of every model_request merged into this sample, in order. */
  request_seqs: number[];
  /** The reason this sample was started instead of extending the previous one (null: first). */
  split_reason: BreakReason | null;
  strategy: MergeStrategy;
  /** True when the sample's context is not what the policy was actually conditioned on. */
  off_policy: boolean;
  /** Start offset (in `tokens`) of each merged call's response. */
  response_starts: number[];
}

/** One training sequence built from a rollout. */
export interface Sample {
  rollout_id: string;
  group_id: string;
  tokens: Uint32Array;
  /** 1 = sampled response token (trained), 0 = context. */
  loss_mask: Uint8Array;
  /** Behaviour-policy logprob per token (0 where `loss_mask` is 0). */
  rollout_logprobs: Float32Array;
  /** Tree samples: parent index per token (-1 for a root). Absent for linear samples. */
  parent?: Int32Array;
  reward: number;
  /** Per-token advantage (filled by lib/algo). */
  advantage?: Float32Array;
  /** Per-token loss weight (filled by lib/algo). */
  loss_weight?: Float32Array;
  /** Policy version(s) that sampled the response tokens (min over merged calls). */
  policy_version: number;
  provenance: SampleProvenance;
}

/** The rollout-level or sample-level GRPO baseline. */
export const AdvantageLevelSchema = z.enum(["sample", "rollout"]);
/** Advantage level. */
export type AdvantageLevel = z.infer<typeof AdvantageLevelSchema>;

/** The five loss normalization modes of SPEC §6. */
export const NormalizationModeSchema = z.enum([
  "token_mean",
  "seq_mean_token_mean",
  "seq_mean_token_sum",
  "seq_sum_const",
  "rollout_token_mean",
]);
/** A loss normalization mode. */
export type NormalizationMode = z.infer<typeof NormalizationModeSchema>;

/** A row of B_train: a sample with everything the worker needs, as plain arrays for JSON. */
export const TrainingRowSchema = z.object({
  rollout_id: z.string(),
  group_id: z.string(),
  tokens: tokenIds.min(1),
  loss_mask: z.array(z.union([z.literal(0), z.literal(1)])),
  advantages: z.array(finite),
  loss_weights: z.array(finite),
  rollout_logprobs: z.array(finite),
  /** Tree attention parents (-1 = root); absent for linear rows. */
  parent: z.array(z.number().int().min(-1)).optional(),
  /** Packed rows: start offsets of each packed sequence (positions reset there). */
  segment_starts: z.array(z.number().int().min(0)).optional(),
  /**
   * Sequence id per token for sequence-level losses (GSPO): trained tokens with the same id form
   * one sequence. Absent: each packed segment (or the whole row) is one sequence. Shared-prefix
   * rows set it so that samples hanging off one shared prompt stay separate sequences.
   */
  sequence_ids: z.array(z.number().int().min(0)).optional(),
}).superRefine((row, ctx) => {
  const n = row.tokens.length;
  for (const key of ["loss_mask", "advantages", "loss_weights", "rollout_logprobs"] as const) {
    if (row[key].length !== n) {
      ctx.addIssue({
        code: "custom",
        path: [key],
        message: `expected ${n} values (one per token), got ${row[key].length}`,
      });
    }
  }
  for (const key of ["parent", "sequence_ids"] as const) {
    const values = row[key];
    if (values && values.length !== n) {
      ctx.addIssue({
        code: "custom",
        path: [key],
        message: `expected ${n} values (one per token), got ${values.length}`,
      });
    }
  }
});
/** A row of B_train. */
export type TrainingRow = z.infer<typeof TrainingRowSchema>;

// ---------------------------------------------------------------------------------------------
// Validation helpers

/** A validation failure whose message names the offending field. */
export class ValidationError extends HttpError {
  /** Dotted path of the first bad field (e.g. `payload.response_logprobs`). */
  declare readonly field: string;
  /** Every issue, each as `path: message`. */
  readonly issues: string[];
  constructor(field: string, issues: string[]) {
    super(400, issues.join("; "), { code: "invalid", field });
    this.name = "ValidationError";
    this.issues = issues;
  }
}

/** Formats a zod issue path as `a.b[2].c`. */
export function formatPath(path: readonly PropertyKey[]): string {
  let out = "";
  for (const part of path) {
    if (typeof part === "number") out += `[${part}]`;
    else out += out ? `.${String(part)}` : String(part);
  }
  return out || "(root)";
}

/**
 * Parses `value` with `schema` or throws a {@link ValidationError} naming the field.
 *
 * @example
 * ```ts
 * import { parseOrThrow, RewardPayloadSchema } from "./core.ts";
 * const reward = parseOrThrow(RewardPayloadSchema, { value: 1 });
 * reward.name; // "reward"
 * ```
 */
export function parseOrThrow<S extends z.ZodType>(
  schema: S,
  value: unknown,
  prefix?: string,
): z.infer<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const issues = result.error.issues.map((issue) => {
    const path = formatPath([...(prefix ? [prefix] : []), ...issue.path]);
    return `${path}: ${issue.message}`;
  });
  const first = result.error.issues[0];
  const field = formatPath([...(prefix ? [prefix] : []), ...(first?.path ?? [])]);
  throw new ValidationError(field, issues);
}

/**
 * Converts a validated wire model call into its in-memory form (typed arrays).
 *
 * @example
 * ```ts
 * import { modelRequestFromWire, ModelRequestWireSchema, parseOrThrow } from "./core.ts";
 * const wire = parseOrThrow(ModelRequestWireSchema, {
 *   flavor: "generate", prompt_token_ids: [1, 2], response_token_ids: [3],
 *   response_logprobs: [-0.5], policy_version: 0,
 * });
 * modelRequestFromWire(wire).prompt_token_ids; // Uint32Array [1, 2]
 * ```
 */
export function modelRequestFromWire(wire: z.infer<typeof ModelRequestWireSchema>): ModelRequest {
  return {
    ...wire,
    prompt_token_ids: Uint32Array.from(wire.prompt_token_ids),
    response_token_ids: Uint32Array.from(wire.response_token_ids),
    response_logprobs: Float32Array.from(wire.response_logprobs),
  };
}

/** Converts an in-memory model call into its JSON wire form. */
export function modelRequestToWire(request: ModelRequest): z.infer<typeof ModelRequestWireSchema> {
  return {
    ...request,
    prompt_token_ids: Array.from(request.prompt_token_ids),
    response_token_ids: Array.from(request.response_token_ids),
    response_logprobs: Array.from(request.response_logprobs),
  };
}
