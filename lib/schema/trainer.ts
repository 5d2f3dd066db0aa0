/**
 * Schemas of the trainer area: the JSON API of the PyTorch trainer worker (`lib/trainer/worker`).
 *
 * The token-level generate protocol (`POST /generate`) is shared with the proxy and lives in
 * `./proxy.ts` (`GenerateRequestSchema`, `GenerateResponseSchema`, `GenerateStreamLineSchema`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "./core.ts";
 * import { WorkerInitRequestSchema } from "./trainer.ts";
 * const init = parseOrThrow(WorkerInitRequestSchema, {
 *   model: {
 *     kind: "builtin",
 *     config: {
 *       vocab_size: 64, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, d_ff: 64,
 *       max_seq_len: 128,
 *     },
 *     seed: 0,
 *   },
 * });
 * assert.equal(init.optimizer.lr, 1e-5);
 * ```
 *
 * @module
 */
import { z } from "zod";
import { TrainingRowSchema } from "./core.ts";
import { ErrorBodySchema } from "./gateway_api.ts";

const finite = z.number().refine(Number.isFinite, "must be a finite number");
const positiveInt = z.number().int().min(1);
/** Model sizes above this are refused (a typo, not a model this worker could hold). */
const sizeInt = positiveInt.max(10_000_000);

/** Size and shape of the built-in Qwen3-style decoder. */
export const BuiltinModelConfigSchema = z.object({
  vocab_size: sizeInt,
  d_model: sizeInt,
  n_layers: sizeInt,
  n_heads: sizeInt,
  /** Key/value heads (grouped-query attention); must divide `n_heads`. */
  n_kv_heads: sizeInt,
  /** Hidden width of the SwiGLU MLP. */
  d_ff: sizeInt,
  max_seq_len: sizeInt,
  tie_embeddings: z.boolean().default(true),
  rope_theta: z.number().min(1).default(10_000),
  /** RMSNorm on queries and keys per head (Qwen3). */
  qk_norm: z.boolean().default(true),
  norm_eps: z.number().positive().default(1e-6),
  /** Defaults to d_model / n_heads. */
  head_dim: positiveInt.optional(),
}).superRefine((c, ctx) => {
  if (c.n_heads % c.n_kv_heads !== 0) {
    ctx.addIssue({ code: "custom", path: ["n_kv_heads"], message: "must divide n_heads" });
  }
  const headDim = c.head_dim ?? c.d_model / c.n_heads;
  if (!Number.isInteger(headDim) || headDim % 2 !== 0) {
    ctx.addIssue({
      code: "custom",
      path: [c.head_dim === undefined ? "n_heads" : "head_dim"],
      message: "head dimension (d_model / n_heads, or head_dim) must be an even integer",
    });
  }
});
/** Size and shape of the built-in decoder. */
export type BuiltinModelConfig = z.infer<typeof BuiltinModelConfigSchema>;
/** Built-in decoder config as a caller writes it (defaults optional). */
export type BuiltinModelConfigInput = z.input<typeof BuiltinModelConfigSchema>;

/** Which policy `POST /init` loads. */
export const WorkerModelSpecSchema = z.discriminatedUnion("kind", [
  z.object({
    kind: z.literal("builtin"),
    config: BuiltinModelConfigSchema,
    /** Weights are a pure function of (config, seed). */
    seed: z.number().int().default(0),
  }),
  /** A Hugging Face checkpoint directory or hub id (needs `transformers` on the worker). */
  z.object({ kind: z.literal("hf"), path: z.string().min(1) }),
  /** A file written by `POST /save` (weights and policy version; fresh optimizer). */
  z.object({ kind: z.literal("checkpoint"), path: z.string().min(1) }),
]);
/** Which policy `POST /init` loads. */
export type WorkerModelSpec = z.infer<typeof WorkerModelSpecSchema>;

/** AdamW settings. Weight decay applies to matrices only (not norms). */
export const OptimizerConfigSchema = z.object({
  lr: z.number().min(0).default(1e-5),
  betas: z.tuple([z.number().min(0).lt(1), z.number().min(0).lt(1)]).default([0.9, 0.999]),
  weight_decay: z.number().min(0).default(0),
  eps: z.number().positive().default(1e-8),
  /** Max global gradient norm; 0 disables clipping. */
  grad_clip: z.number().min(0).default(1),
  /** Linear learning-rate warmup over the first optimizer steps after `/init` (0 = none).
   * A fresh AdamW moves every weight by about `lr` in its first steps, whatever the gradient's
   * size; on a small warm-started policy that alone can undo the warm start. */
  warmup_steps: z.number().int().min(0).max(10_000_000).default(0),
});
/** AdamW settings. */
export type OptimizerConfig = z.infer<typeof OptimizerConfigSchema>;

/** Body of `POST /init`. */
export const WorkerInitRequestSchema = z.object({
  model: WorkerModelSpecSchema,
  optimizer: OptimizerConfigSchema.default({
    lr: 1e-5,
    betas: [0.9, 0.999],
    weight_decay: 0,
    eps: 1e-8,
    grad_clip: 1,
    warmup_steps: 0,
  }),
  /** Compute dtype (autocast); parameters and optimizer state stay float32. Default: bfloat16
   * on CUDA, float32 on CPU. */
  dtype: z.enum(["float32", "bfloat16", "float16"]).optional(),
  /** `cpu`, `cuda`, `cuda:1`, … Default: cuda when available. */
  device: z.string().min(1).optional(),
  /**
   * The frozen reference policy π_ref of the KL penalty (`loss.kl_coef` > 0): a checkpoint file
   * written by `POST /save` (e.g. the run's first one, when resuming). Absent: the policy as this
   * `/init` loads it, copied by the first `forward_backward` that asks for the penalty (refused
   * once the policy has moved). Nothing is held while no call asks for it.
   */
  reference_path: z.string().min(1).optional(),
});
/** Body of `POST /init` as a caller writes it. */
export type WorkerInitRequest = z.input<typeof WorkerInitRequestSchema>;

/**
 * A band [lo, hi] of importance ratios π_old / μ, 0 ≤ lo ≤ hi, hi > 0: ratios inside it (ends
 * included) are kept, ratios outside are masked. A band with lo > hi is refused, naming the field.
 */
export const RatioBandSchema = z.tuple([z.number().min(0), z.number().positive()]).refine(
  ([lo, hi]) => lo <= hi,
  { message: "the band's low end must not exceed its high end ([lo, hi] with lo <= hi)" },
);
/** A [lo, hi] band of importance ratios. */
export type RatioBand = z.infer<typeof RatioBandSchema>;

/** Policy loss computed by the worker from per-token inputs (docs/architecture.md#algorithms). */
export const LossConfigSchema = z.object({
  /** `ppo` (PPO/GRPO clipped token ratio), `gspo` (sequence ratio), `ce` (SFT). */
  kind: z.enum(["ppo", "gspo", "ce"]),
  clip_low: z.number().min(0).lt(1).default(0.2),
  clip_high: z.number().min(0).default(0.2),
  /** Dual-clip bound c > 1 on negative-advantage tokens. */
  dual_clip: z.number().gt(1).optional(),
  gspo_clip_low: z.number().min(0).lt(1).default(3e-4),
  gspo_clip_high: z.number().min(0).default(4e-4),
  /** Truncated importance sampling: ℓ ·= min(exp(old − behaviour), tis_cap); with
   * `old_logprobs: "recompute"` this is decoupled PPO's behaviour weight π_prox / μ. */
  tis_cap: z.number().positive().optional(),
  /**
   * Masked sequence-level importance sampling (training–inference mismatch): a sequence (the
   * rows' `sequence_ids`) whose geometric-mean ratio g = exp(mean_t (old_t − behaviour_t)) over
   * its trained tokens lies outside [lo, hi] (e.g. [0.99, 1.01]) trains none of its tokens.
   * Acts only where π_old ≠ μ, i.e. with `old_logprobs: "recompute"`.
   */
  seq_is_band: RatioBandSchema.optional(),
  /**
   * IcePop-style token masking: a token whose ratio exp(old − behaviour) lies outside [lo, hi]
   * (e.g. [0.5, 2]) gets weight 0 (its gradient dropped, not bounded). Composes with the
   * sequence mask and with `tis_cap` (applied to the tokens the masks keep).
   */
  token_ratio_band: RatioBandSchema.optional(),
  /**
   * Weight of the KL(π_θ ‖ π_ref) penalty to the frozen reference policy (see `/init`'s
   * `reference_path`), added per trained token as `kl_coef · k` and weighted by the token's loss
   * weight like the surrogate. 0 (default): off, and the worker holds no reference model.
   */
  kl_coef: z.number().min(0).default(0),
  /**
   * Schulman's per-token estimator k of KL(π_θ ‖ π_ref), with x = log π_ref − log π_θ:
   * `k1` = −x, `k2` = x²/2, `k3` = eˣ − x − 1 (unbiased and non-negative; GRPO's).
   */
  kl_estimator: z.enum(["k1", "k2", "k3"]).default("k3"),
  /**
   * Ratio denominator π_old. `rollout`: the rows' behaviour logprobs μ. `recompute`: the
   * proximal policy π_prox, the policy at the start of the update (decoupled PPO) — the
   * request's `proximal_logprobs` when given, else the pass's own logprobs, which are π_prox
   * only in the update's first pass (before any optimizer step).
   */
  old_logprobs: z.enum(["rollout", "recompute"]).default("rollout"),
  /**
   * GSPO: the sequence its length-normalised ratio is taken over. `sample`: a whole training
   * sample (under `prefix_merge`, every model call merged into it). `call`: each model call's
   * response tokens on their own. The rows carry it as `sequence_ids`.
   */
  gspo_sequence: z.enum(["sample", "call"]).default("sample"),
});
/** Policy loss config. */
export type LossConfig = z.infer<typeof LossConfigSchema>;
/** Policy loss config as a caller writes it. */
export type LossConfigInput = z.input<typeof LossConfigSchema>;

/** Body of `POST /forward_backward`. */
export const ForwardBackwardRequestSchema = z.object({
  rows: z.array(TrainingRowSchema).min(1),
  loss: LossConfigSchema,
  /** Also answer the per-token logprobs of this pass (alignment metrics without a 2nd pass;
   * the proximal logprobs of later epochs). */
  return_logprobs: z.boolean().default(false),
  /**
   * π_prox per row, one value per token (`old_logprobs: "recompute"` only): the logprobs the
   * update's first pass returned for the same rows. Later epochs send them so that their ratio
   * is taken against the policy the update started from.
   */
  proximal_logprobs: z.array(z.array(finite)).optional(),
  /**
   * Data-parallel workers: the rank that runs each row (one micro-batch per row), e.g. from
   * `planRankMicroBatches`. Without it a multi-rank worker spreads rows longest-first.
   */
  rank_of_row: z.array(z.number().int().min(0)).optional(),
}).superRefine((body, ctx) => {
  if (body.rank_of_row && body.rank_of_row.length !== body.rows.length) {
    ctx.addIssue({
      code: "custom",
      path: ["rank_of_row"],
      message: `expected one rank per row (${body.rows.length}), got ${body.rank_of_row.length}`,
    });
  }
  const prox = body.proximal_logprobs;
  if (!prox) return;
  if (body.loss.old_logprobs !== "recompute") {
    ctx.addIssue({
      code: "custom",
      path: ["proximal_logprobs"],
      message: 'only meaningful with loss.old_logprobs "recompute"',
    });
  }
  if (prox.length !== body.rows.length) {
    ctx.addIssue({
      code: "custom",
      path: ["proximal_logprobs"],
      message: `expected one array per row (${body.rows.length}), got ${prox.length}`,
    });
    return;
  }
  prox.forEach((values, i) => {
    const n = body.rows[i].tokens.length;
    if (values.length !== n) {
      ctx.addIssue({
        code: "custom",
        path: ["proximal_logprobs", i],
        message: `expected ${n} values (one per token), got ${values.length}`,
      });
    }
  });
});
/** Body of `POST /forward_backward` as a caller writes it. */
export type ForwardBackwardRequest = z.input<typeof ForwardBackwardRequestSchema>;

/** Per-call loss metrics, over trained (loss_mask = 1) tokens. */
export const LossMetricsSchema = z.object({
  tokens: z.number().int().min(0),
  clip_fraction: z.number(),
  entropy: z.number(),
  ratio_mean: z.number(),
  ratio_max: z.number(),
  ratio_min: z.number(),
  /** Mean k3 estimate of KL(new ‖ old) over trained tokens. */
  kl: z.number(),
  /** Mean `kl_estimator` estimate of KL(π_θ ‖ π_ref) over trained tokens (0 when `kl_coef` is
   * 0; absent from older workers). */
  kl_ref_mean: z.number().optional(),
  /** Behaviour correction (`tis_cap`, `seq_is_band`, `token_ratio_band`): trained tokens and
   * sequences the masks gave weight 0, and the normalised effective sample size (Σc)² / (n Σc²)
   * of the correction weights c (1 without a correction; absent from older workers). */
  is_masked_tokens: z.number().min(0).optional(),
  is_masked_sequences: z.number().min(0).optional(),
  is_ess: z.number().min(0).optional(),
});
/** Per-call loss metrics. */
export type LossMetrics = z.infer<typeof LossMetricsSchema>;

/** Answer of `POST /forward_backward`: `loss` = Σ w·ℓ over the trained tokens of the call. */
export const ForwardBackwardResponseSchema = z.object({
  loss: z.number(),
  metrics: LossMetricsSchema,
  policy_version: z.number().int().min(0),
  /** With `return_logprobs`: per row, one logprob per token under the policy before this
   * call's gradient (0 where nothing predicts the token: first token, segment starts, roots). */
  logprobs: z.array(z.array(z.number())).optional(),
  /** Data-parallel workers: tokens each rank ran in this call. */
  rank_tokens: z.array(z.number().int().min(0)).optional(),
});
/** Answer of `POST /forward_backward`. */
export type ForwardBackwardResponse = z.infer<typeof ForwardBackwardResponseSchema>;

/** Answer of `POST /optim_step`: the pre-clip gradient norm and the new policy version. */
export const OptimStepResponseSchema = z.object({
  grad_norm: z.number(),
  policy_version: z.number().int().min(0),
  /**
   * In-flight generations the step waited for before changing the weights (so that no response
   * mixes two versions); absent from older workers.
   */
  waited_generations: z.number().int().min(0).optional(),
});
/** Answer of `POST /optim_step`. */
export type OptimStepResponse = z.infer<typeof OptimStepResponseSchema>;

/** Body of `POST /logprobs`. */
export const LogprobsRequestSchema = z.object({
  sequences: z.array(z.array(z.number().int().min(0)).min(1)).min(1),
  /** Divide logits by this before the softmax (to match a sampling temperature). */
  temperature: z.number().positive().default(1),
});
/** Body of `POST /logprobs` as a caller writes it. */
export type LogprobsRequest = z.input<typeof LogprobsRequestSchema>;

/**
 * Answer of `POST /logprobs`: one value per token of each sequence; index 0 is always 0
 * (nothing predicts the first token). `entropies[i][t]` is the entropy of the distribution
 * that predicted token t.
 */
export const LogprobsResponseSchema = z.object({
  logprobs: z.array(z.array(finite)),
  entropies: z.array(z.array(finite)),
  policy_version: z.number().int().min(0),
});
/** Answer of `POST /logprobs`. */
export type LogprobsResponse = z.infer<typeof LogprobsResponseSchema>;

/** Body of `POST /save` and `POST /load`. */
export const CheckpointRequestSchema = z.object({ path: z.string().min(1) });
/** Body of `POST /save` and `POST /load`. */
export type CheckpointRequest = z.infer<typeof CheckpointRequestSchema>;

/** Answer of `POST /save` and `POST /load`. */
export const CheckpointResponseSchema = z.object({
  path: z.string(),
  policy_version: z.number().int().min(0),
});
/** Answer of `POST /save` and `POST /load`. */
export type CheckpointResponse = z.infer<typeof CheckpointResponseSchema>;

/**
 * Body of `POST /export`: the weights the worker holds now, written as a GGUF (`gguf` + `type`)
 * and/or a Hugging Face directory (`hf` + `dtype`), paths on the worker's side.
 */
export const WorkerExportRequestSchema = z.object({
  gguf: z.string().min(1).optional(),
  type: z.enum(["f32", "f16", "q8_0", "q4_0"]).default("f32"),
  hf: z.string().min(1).optional(),
  dtype: z.enum(["float32", "bfloat16", "float16"]).default("bfloat16"),
  /** Directory with the model's tokenizer.json (required for a GGUF). */
  tokenizer: z.string().min(1).optional(),
});
/** Body of `POST /export` as a caller writes it. */
export type WorkerExportRequest = z.input<typeof WorkerExportRequestSchema>;

/** Answer of `POST /export`: the version exported and what was written. */
export const WorkerExportResponseSchema = z.looseObject({
  policy_version: z.number().int().min(0),
});
/** Answer of `POST /export`. */
export type WorkerExportResponse = z.infer<typeof WorkerExportResponseSchema>;

/** Answer of `GET /state` (and `POST /init`). */
export const WorkerStateSchema = z.object({
  initialized: z.boolean(),
  policy_version: z.number().int().min(0),
  /** `builtin` (also when loaded from a checkpoint) or `hf`. */
  model_kind: z.enum(["builtin", "hf"]).nullable().optional(),
  source: z.string().nullable().optional(),
  config: z.record(z.string(), z.unknown()).optional(),
  device: z.string().optional(),
  dtype: z.string().optional(),
  parameter_count: z.number().int().optional(),
  optimizer_steps: z.number().int().optional(),
  optimizer: z.record(z.string(), z.unknown()).optional(),
  /** True while gradients are accumulated and not yet stepped or zeroed. */
  has_grad: z.boolean().optional(),
  /** Cheap fingerprints: they move whenever weights or optimizer state move. */
  param_checksum: z.number().optional(),
  optimizer_checksum: z.number().optional(),
  torch_version: z.string().optional(),
  /** Data-parallel ranks of the worker (1 for a single process). */
  world_size: z.number().int().min(1).optional(),
  /** Per rank: its process and fingerprints (equal on every rank after each step). */
  ranks: z.array(z.object({
    rank: z.number().int().min(0),
    pid: z.number().int(),
    device: z.string(),
    param_checksum: z.number().optional(),
    optimizer_checksum: z.number().optional(),
    policy_version: z.number().int().min(0).optional(),
  })).optional(),
  /** Set once a rank died or hung: the worker can no longer train. */
  rank_error: z.string().optional(),
  /** Where the KL penalty's reference policy came from: `init` (the policy as `/init` loaded
   * it) or a checkpoint path; null while none is held. */
  reference: z.string().nullable().optional(),
});
/** Answer of `GET /state`. */
export type WorkerState = z.infer<typeof WorkerStateSchema>;

/** Answer of `GET /health`. */
export const WorkerHealthSchema = z.object({
  ok: z.literal(true),
  initialized: z.boolean(),
  policy_version: z.number().int().min(0),
  device: z.string(),
  pid: z.number().int(),
  /** Responses being sampled right now. */
  generating: z.number().int().min(0),
  /** A weight change (optim_step, load, init) waits for them; new requests queue meanwhile. */
  weights_pending: z.boolean(),
  /** fp32 512×512 CPU matmul rate measured at start-up (absent from older workers). */
  cpu_matmul_gflops: z.number().optional(),
  /** The BLAS torch's CPU matmuls use (`reference` is Debian's unoptimised libblas3). */
  blas: z.string().optional(),
  torch_threads: z.number().int().optional(),
  /** Set when the CPU matmul rate is far below what an optimised BLAS does; names the fix. */
  cpu_warning: z.string().nullable().optional(),
  /** Data-parallel ranks (absent from older workers: 1). */
  world_size: z.number().int().min(1).optional(),
});
/** Answer of `GET /health`. */
export type WorkerHealth = z.infer<typeof WorkerHealthSchema>;

/** Error body of every worker route: every reins service's (a 4xx names the offending `field`). */
export const WorkerErrorBodySchema: typeof ErrorBodySchema = ErrorBodySchema;
/** Error body of every worker route. */
export type WorkerErrorBody = z.infer<typeof WorkerErrorBodySchema>;

/** Answer of `POST /debug/gradients` (diagnostics; tiny models only). */
export const WorkerGradientsSchema = z.object({
  gradient: z.array(z.number()),
  norm: z.number(),
});
/** Answer of `POST /debug/gradients`. */
export type WorkerGradients = z.infer<typeof WorkerGradientsSchema>;
