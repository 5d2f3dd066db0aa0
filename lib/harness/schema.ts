/**
 * Schemas of the harness area: the built-in harness's options (each switch produces one of the
 * break reasons of docs/architecture.md#sample-assembly on purpose), the task records of the four
 * environments, and the options a rollout's `config.harness.options` may carry for a
 * built-in-harness environment.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "../schema.ts";
 * import { BuiltinHarnessOptionsSchema } from "./schema.ts";
 * const options = parseOrThrow(BuiltinHarnessOptionsSchema, {
 *   env: "arithmetic",
 *   compaction: { max_chars: 2000 },
 * });
 * assert.equal(options.max_turns, 12);
 * assert.equal(options.compaction?.mode, "inline");
 * ```
 *
 * @module
 */
import { z } from "zod";
import { SandboxOptionsSchema } from "../controller/schema.ts";
import { JsonObjectSchema } from "../schema/core.ts";

/** The environments shipped with reins (`none`: no tools, a plain question). */
export const EnvNameSchema = z.enum(["arithmetic", "search", "files", "coding", "none"]);
/** An environment name. */
export type EnvName = z.infer<typeof EnvNameSchema>;

/** Context compaction: when the history exceeds a budget, summarise it through the model. */
export const CompactionOptionsSchema = z.object({
  /**
   * Budget in characters of everything after the task message (contents, reasoning, tool-call
   * arguments). Checked before each main-conversation call.
   */
  max_chars: z.number().int().positive(),
  /**
   * `inline`: the summary request is appended to the current history (that call still extends
   * the sample; only the call after the compaction breaks). `separate`: the summary is asked in
   * a conversation of its own (one more `branch`).
   */
  mode: z.enum(["inline", "separate"]).default("inline"),
  /** `max_tokens` of the summary call. */
  summary_max_tokens: z.number().int().positive().default(256),
});
/** Context compaction settings. */
export type CompactionOptions = z.infer<typeof CompactionOptionsSchema>;

/** Options of the built-in harness (`lib/harness/builtin/main.ts`). */
export const BuiltinHarnessOptionsSchema = z.object({
  /** Whose tools the agent gets. */
  env: EnvNameSchema.default("none"),
  /** Model name sent to the proxy (default: `$OPENAI_MODEL` or `reins-policy`). */
  model: z.string().min(1).optional(),
  /** Replaces the environment's system prompt. */
  system_prompt: z.string().min(1).optional(),
  /** Model calls of the main conversation (summary and sub-agent calls not counted). */
  max_turns: z.number().int().min(1).max(500).default(12),
  max_tokens: z.number().int().positive().max(131_072).default(512),
  temperature: z.number().min(0).max(2).optional(),
  /**
   * Sampling seed: the rollout's n-th model call (from 0, summaries and sub-agent calls
   * included) sends `seed + n`, so that a rollout rerun on the same policy samples the same
   * tokens (common random numbers across evaluations). Absent: unseeded.
   */
  seed: z.number().int().min(0).max(2 ** 31).optional(),
  /** Use streaming chat completions (SSE) instead of one JSON answer. */
  stream: z.boolean().default(false),
  /** Client retries (the `openai` SDK's, with backoff) on connection errors, 408/409/429/5xx. */
  max_retries: z.number().int().min(0).max(10).default(2),
  /** Per-call client timeout. */
  timeout_ms: z.number().int().positive().default(120_000),
  /** Context compaction (→ `compaction` breaks); null: never. */
  compaction: CompactionOptionsSchema.nullable().default(null),
  /** Offer the `delegate` tool: a sub-agent in a separate conversation (→ `branch` breaks). */
  subagents: z.boolean().default(false),
  /** Model calls a sub-agent may make. */
  subagent_max_turns: z.number().int().min(1).max(100).default(6),
  /**
   * Send tool-call arguments back re-serialised with sorted keys, as harnesses that keep them
   * in a map do (→ a `response_rewrite` break for each turn whose key order changes).
   */
  rewrite_tool_calls: z.boolean().default(false),
  /** Drop `reasoning_content` from earlier assistant turns (→ `template_rewrite` breaks). */
  drop_reasoning: z.boolean().default(false),
  /**
   * After the first final answer, ask once more for the final answer in a new user turn. Qwen3's
   * template then strips the reasoning of every earlier turn (→ one `template_rewrite`).
   */
  confirm_answer: z.boolean().default(false),
  /** Where the final answer is written, relative to the working directory. */
  answer_file: z.string().min(1).default("answer.txt"),
  /** Longest tool output (characters) put into the history. */
  max_tool_output_chars: z.number().int().positive().default(4_000),
});
/** Options of the built-in harness. */
export type BuiltinHarnessOptions = z.infer<typeof BuiltinHarnessOptionsSchema>;
/** Options of the built-in harness as a caller writes them. */
export type BuiltinHarnessOptionsInput = z.input<typeof BuiltinHarnessOptionsSchema>;

/**
 * `config.harness.options` of a built-in-harness environment (`builtin-<env>` in the registry):
 * the harness options (minus `env`, fixed by the name) plus how the controller runs it.
 */
export const BuiltinEnvSpecOptionsSchema = BuiltinHarnessOptionsSchema.omit({ env: true }).extend({
  /** Sandbox stages (default: per environment; the coding env enables them). */
  sandbox: z.object({
    enabled: z.boolean().optional(),
    strict: z.boolean().optional(),
    hide_git: z.boolean().optional(),
    network: SandboxOptionsSchema.shape.network.unwrap().optional(),
    allow: z.array(z.string()).optional(),
    command_log: z.boolean().optional(),
    /** Extra paths to mask; the environment's own (its answers) are always masked. */
    hide: z.array(z.string().min(1)).optional(),
  }).optional(),
  /** Reward hook timeout. */
  reward_timeout_s: z.number().positive().max(3600).default(120),
  /** Extra environment variables for the harness process. */
  env_vars: z.record(z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/), z.string()).default({}),
  /** Coding env: a directory holding the task repositories (default `data/envs/coding/repos`). */
  repos_dir: z.string().min(1).optional(),
  /**
   * `process` (default): a `deno run` per attempt. `in_process`: inside the controller's process
   * (no runtime start per attempt; needs a backend with the built-in runner, as the embedded
   * stack has). Not sandboxed: only environments whose tools run no agent-written code
   * (`arithmetic`, `search`, `none`) accept it.
   */
  runner: z.enum(["process", "in_process"]).default("process"),
});
/** Options of a built-in-harness environment spec. */
export type BuiltinEnvSpecOptions = z.infer<typeof BuiltinEnvSpecOptionsSchema>;

const taskId = z.string().regex(/^[A-Za-z0-9._-]+$/, "must use only letters, digits and . _ -");

/** Toy arithmetic: a multi-step expression whose value is the answer. */
export const ArithmeticTaskSchema = z.object({
  id: taskId,
  question: z.string().min(1),
  expression: z.string().min(1),
  /** The value, formatted as the calculator formats it. */
  answer: z.string().min(1),
  /** Operators in the expression (a difficulty measure). */
  steps: z.number().int().min(1),
});
/** A toy arithmetic task. */
export type ArithmeticTask = z.infer<typeof ArithmeticTaskSchema>;

/** One document of the search corpus. */
export const SearchDocSchema = z.object({
  id: taskId,
  title: z.string().min(1),
  text: z.string().min(1),
});
/** One document of the search corpus. */
export type SearchDoc = z.infer<typeof SearchDocSchema>;

/** A question answered from the corpus (one or two hops). */
export const SearchTaskSchema = z.object({
  id: taskId,
  question: z.string().min(1),
  answer: z.string().min(1),
  /** Other accepted spellings. */
  aliases: z.array(z.string()).default([]),
  /** Ids of the documents that hold the answer (in hop order). */
  support: z.array(taskId).min(1),
  hops: z.number().int().min(1).max(3),
});
/** A search task. */
export type SearchTask = z.infer<typeof SearchTaskSchema>;

/** One verifier check of a file task. */
export const FileCheckSchema = z.discriminatedUnion("kind", [
  z.object({ kind: z.literal("equals"), path: z.string().min(1), content: z.string() }),
  z.object({ kind: z.literal("contains"), path: z.string().min(1), text: z.string().min(1) }),
  z.object({ kind: z.literal("absent"), path: z.string().min(1) }),
  z.object({ kind: z.literal("unchanged"), path: z.string().min(1) }),
]);
/** One verifier check of a file task. */
export type FileCheck = z.infer<typeof FileCheckSchema>;

/** An instruction-following file task: a starting workspace, an instruction, checks. */
export const FileTaskSchema = z.object({
  id: taskId,
  instruction: z.string().min(1),
  /** Starting files (path relative to the workspace → content). */
  files: z.record(z.string().min(1), z.string()),
  checks: z.array(FileCheckSchema).min(1),
});
/** An instruction-following file task. */
export type FileTask = z.infer<typeof FileTaskSchema>;

/** A coding task: a small Python repository with a planted bug and hidden tests. */
export const CodingTaskSchema = z.object({
  id: taskId,
  /** Directory name under the repositories directory. */
  repo: taskId,
  problem: z.string().min(1),
  /** Visible tests the agent may run (restored before verification). */
  test_dir: z.string().min(1).default("tests"),
  /** Hidden test files (name → content), added to the verification tree only. */
  hidden_tests: z.record(z.string().regex(/^test_[a-z0-9_]+\.py$/), z.string()).default({}),
  /**
   * A unified diff that plants the bug into the repository (SWE-smith tasks: the repository
   * is the pristine tree); "" when the repository itself holds the bug.
   */
  patch: z.string().default(""),
  /** Test ids that must pass for reward 1 besides the whole suite passing (SWE-smith's). */
  fail_to_pass: z.array(z.string().min(1)).default([]),
});
/** A coding task. */
export type CodingTask = z.infer<typeof CodingTaskSchema>;
/** A coding task as written in a dataset (defaults left out). */
export type CodingTaskInput = z.input<typeof CodingTaskSchema>;

/** What a built-in-harness rollout's `input` holds (never the answer). */
export const EnvTaskInputSchema = z.object({
  env: EnvNameSchema,
  id: taskId,
  /** The task as the agent reads it. */
  prompt: z.string().min(1),
  /** Env-specific extras the agent may see (e.g. the repository name). */
  extra: JsonObjectSchema.default({}),
});
/** A built-in-harness rollout's input. */
export type EnvTaskInput = z.infer<typeof EnvTaskInputSchema>;
