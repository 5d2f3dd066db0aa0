/**
 * Schemas of the real-CLI harness adapters (`lib/harness/cli`): the options a rollout's
 * `config.harness.options` may carry when `config.harness.name` is one of `opencode`,
 * `claude_code`, `codex` or `qwen_code`.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "../../schema/core.ts";
 * import { CliHarnessOptionsSchema } from "./schema.ts";
 * const options = parseOrThrow(CliHarnessOptionsSchema, { model: "reins-policy" });
 * assert.equal(options.task_field, "task");
 * ```
 *
 * @module
 */
import { z } from "zod";
import { RewardHookSchema, SandboxOptionsSchema } from "../../controller/schema.ts";

/** The real harness CLIs reins can drive. */
export const CliNameSchema = z.enum(["opencode", "claude_code", "codex", "qwen_code"]);
/** The real harness CLIs reins can drive. */
export type CliName = z.infer<typeof CliNameSchema>;

/** Options of a CLI harness spec (`config.harness.options`). */
export const CliHarnessOptionsSchema = z.object({
  /** Model name the CLI sends (default: the adapter's, see docs/harness_cli.md). */
  model: z.string().min(1, "must not be empty").optional(),
  /** Field of the rollout's `input` holding the task prompt (a non-empty string). */
  task_field: z.string().min(1).default("task"),
  /** Directory copied into the attempt's workdir (the agent's tree). */
  workspace: z.string().min(1).optional(),
  reward: RewardHookSchema.optional(),
  sandbox: SandboxOptionsSchema.optional(),
  /** Where CLIs are installed (default `$REINS_HOME/harnesses` or `~/.cache/reins/harnesses`). */
  cache_dir: z.string().min(1).optional(),
  /** Install the pinned CLI on first use when it is missing from the cache (needs npm). */
  install: z.boolean().default(true),
  /** Extra arguments appended to the CLI's command line. */
  extra_args: z.array(z.string()).default([]),
  /** Extra environment for the CLI (after the adapter's own; cannot change HOME). */
  env: z.record(
    z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name"),
    z.string(),
  ).default({}),
}).strict();
/** Options of a CLI harness spec, parsed. */
export type CliHarnessOptions = z.infer<typeof CliHarnessOptionsSchema>;
/** Options of a CLI harness spec as a caller writes them. */
export type CliHarnessOptionsInput = z.input<typeof CliHarnessOptionsSchema>;

/** What one CLI run returned (printed as JSON by the runner with `--json`). */
export const CliRunResultSchema = z.object({
  cli: CliNameSchema,
  exit_code: z.number().int(),
  stdout: z.string(),
  stderr: z.string(),
  duration_ms: z.number().min(0),
  /** Directory used as HOME for the CLI (its own config, logs and caches). */
  home: z.string(),
});
/** What one CLI run returned. */
export type CliRunResult = z.infer<typeof CliRunResultSchema>;
