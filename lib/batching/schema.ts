/**
 * Schemas of the batching area: optimizer-step plans, data-parallel balancing and micro-batch
 * packing options, and the shapes those plans are reported in.
 *
 * @module
 */
import { z } from "zod";
import type { TrainingRow } from "../schema/core.ts";
import { NormalizationOptionsSchema } from "../algo/schema.ts";

const positiveInt = z.number().int().min(1);

/**
 * How a batch of rollouts is cut into optimizer steps. Exactly one of:
 * - `num_steps`: K steps of balanced token counts (Karmarkar–Karp over whole rollouts);
 * - `step_tokens`: steps of at most this many tokens, filled in input order (a rollout larger
 *   than the budget gets a step of its own and is reported as oversized).
 * Neither: one step.
 */
export const StepPlanOptionsSchema = z.object({
  num_steps: positiveInt.optional(),
  step_tokens: positiveInt.optional(),
}).superRefine((value, ctx) => {
  if (value.num_steps !== undefined && value.step_tokens !== undefined) {
    ctx.addIssue({
      code: "custom",
      path: ["step_tokens"],
      message: "give either num_steps or step_tokens, not both",
    });
  }
});
/** How a batch of rollouts is cut into optimizer steps. */
export type StepPlanOptions = z.input<typeof StepPlanOptionsSchema>;

/** Partitioning heuristic for data-parallel ranks. */
export const BalanceMethodSchema = z.enum(["kk", "lpt"]);
/** Partitioning heuristic: Karmarkar–Karp (largest differencing) or LPT (greedy). */
export type BalanceMethod = z.infer<typeof BalanceMethodSchema>;

/** Micro-batch packing order. */
export const PackOrderSchema = z.enum(["first_fit_decreasing", "sequential"]);
/** Micro-batch packing order. */
export type PackOrder = z.infer<typeof PackOrderSchema>;

/** Micro-batch packing options. */
export const PackOptionsSchema = z.object({
  /** Most tokens in one packed micro-batch row; a longer row gets a micro-batch of its own. */
  token_budget: positiveInt,
  order: PackOrderSchema.default("first_fit_decreasing"),
});
/** Micro-batch packing options. */
export type PackOptions = z.input<typeof PackOptionsSchema>;

/**
 * Options of a full training plan: steps → per-step loss weights → ranks → micro-batches.
 *
 * `workload_a` is the a of the workload a·L + L² (linear layers vs attention); for a decoder
 * with hidden size d it is about 6·d (24·d² linear FLOPs vs 4·d·L attention FLOPs per token and
 * layer). `weight_scope` says which batch §6's denominators are taken over: each optimizer step
 * (`step`, the default: every step's loss is a proper mean) or the whole rollout batch
 * (`batch`: every step gets its share of one loss).
 */
export const TrainingPlanOptionsSchema = z.object({
  normalization: NormalizationOptionsSchema.default({ mode: "rollout_token_mean" }),
  weight_scope: z.enum(["step", "batch"]).default("step"),
  steps: StepPlanOptionsSchema.default({}),
  ranks: positiveInt.default(1),
  balance: BalanceMethodSchema.default("kk"),
  workload_a: z.number().min(0).refine(Number.isFinite, "must be a finite number").default(6144),
  micro_token_budget: positiveInt,
  pack_order: PackOrderSchema.default("first_fit_decreasing"),
});
/** Options of a full training plan (input form). */
export type TrainingPlanOptions = z.input<typeof TrainingPlanOptionsSchema>;

/** Where one packed sequence of a micro-batch came from. */
export interface PackedSegment {
  /** Index of the source row in the list given to the packer. */
  source: number;
  rollout_id: string;
  group_id: string;
  /**
   * Offset of the segment's own tokens in the packed row, and their number. Without sharing
   * these are all of the source row's tokens: token t sits at `start + t`.
   */
  start: number;
  length: number;
  /** Whether the source row carried tree `parent`s (false: a linear chain was written). */
  had_parent: boolean;
  /**
   * Shared-prefix packing (`packSharedPrefix`): how many leading tokens of the source row
   * are stored in nodes the segment shares with earlier ones (absent or 0: none). Those tokens
   * are the ancestors of `row.parent[start]`; token t ≥ `shared` sits at `start + t − shared`.
   * The source row has `shared + length` tokens; `segmentTokenIndex` maps them all.
   */
  shared?: number;
}

/**
 * One micro-batch: a single packed row (its `segment_starts` mark where positions reset; a
 * shared-prefix row is a tree instead, with `parent` and `sequence_ids`) and where each of its
 * segments came from. The packed row's `rollout_id`/`group_id` are those of its first segment;
 * `segments` holds every member's.
 */
export interface MicroBatch {
  row: TrainingRow;
  segments: PackedSegment[];
  tokens: number;
  /** True when a single row exceeds the token budget and was given this micro-batch alone. */
  oversized: boolean;
}
