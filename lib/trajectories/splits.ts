/**
 * Samples per rollout on transcripts: read any folder or file of supported logs, replay each run
 * through a chat template under a stated policy output, assemble its calls, and count samples
 * and the reasons of every split. What `deno task splits` prints and the Figure 10 notebook
 * tabulates.
 *
 * @module
 */
import { basename, dirname, resolve } from "node:path";
import { type BreakReason, BreakReasonSchema, parseOrThrow } from "../schema.ts";
import type { RolloutAssemblyMetrics } from "../schema.ts";
import {
  type SplitsOptions,
  SplitsOptionsSchema,
  type SplitsReport,
  type Trajectory,
} from "../schema/trajectories.ts";
import { assembleRollout, summarizeAssembly } from "../samples/mod.ts";
import { loadHfTokenizerFromDir } from "../tokens/hf.ts";
import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { importTrajectoryFile, listTrajectoryFiles } from "./load.ts";
import { replayTrajectory } from "./replay.ts";
import { loadQwen3KeepReasoningTokenizer } from "./templates.ts";

/** The templates known by name; anything else names a tokenizer folder. */
export const NAMED_TEMPLATES = ["qwen3", "qwen3_keep_reasoning"] as const;

/**
 * Loads a chat template + tokenizer: `qwen3` (Qwen3's official template, which drops reasoning
 * from history), `qwen3_keep_reasoning` (see `qwen3KeepReasoningTemplate`), or a folder holding
 * `tokenizer.json` and `tokenizer_config.json` (its `chat_template`, else `chat_template.jinja`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadChatTemplate } from "./splits.ts";
 * assert.equal((await loadChatTemplate("qwen3_keep_reasoning")).name, "qwen3-keep-reasoning");
 * await assert.rejects(loadChatTemplate("no/such/dir"), /--template: "no\/such\/dir" is neither/);
 * ```
 */
export async function loadChatTemplate(spec: string): Promise<ChatTokenizer> {
  if (spec === "qwen3") return await loadQwen3Tokenizer();
  if (spec === "qwen3_keep_reasoning") return await loadQwen3KeepReasoningTokenizer();
  let isDir = false;
  try {
    isDir = (await Deno.stat(spec)).isDirectory;
  } catch (error) {
    if (!(error instanceof Deno.errors.NotFound)) throw error;
  }
  if (!isDir) {
    throw new Error(
      `--template: "${spec}" is neither ${NAMED_TEMPLATES.join(" nor ")} nor a folder ` +
        `with tokenizer.json and a chat template`,
    );
  }
  const tokenizer = await loadHfTokenizerFromDir(spec, { name: basename(resolve(spec)) });
  if (!tokenizer.chatTemplate) {
    throw new Error(
      `--template: ${spec} has no chat template (tokenizer_config.json chat_template or ` +
        `chat_template.jinja)`,
    );
  }
  return tokenizer;
}

/** Transcripts read from paths, and how many files they came from. */
export interface LoadedTranscripts {
  trajectories: Trajectory[];
  files: number;
}

/**
 * Reads every supported transcript under each path (a folder is walked; a file is read whatever
 * its format, which is detected). Ids are taken relative to the folder given (or the file's own
 * folder).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { trajectoriesRoot } from "./load.ts";
 * import { loadTranscripts } from "./splits.ts";
 * const { trajectories, files } = await loadTranscripts([
 *   `${trajectoriesRoot()}/mini-swe-agent_testdata`,
 * ]);
 * assert.deepEqual([trajectories.length, files], [2, 2]);
 * ```
 */
export async function loadTranscripts(paths: readonly string[]): Promise<LoadedTranscripts> {
  if (paths.length === 0) throw new Error("PATH: give at least one file or folder of transcripts");
  const trajectories: Trajectory[] = [];
  let files = 0;
  for (const path of paths) {
    let stat: Deno.FileInfo;
    try {
      stat = await Deno.stat(path);
    } catch (error) {
      if (error instanceof Deno.errors.NotFound) throw new Error(`${path}: no such file or folder`);
      throw error;
    }
    const root = stat.isDirectory ? path.replace(/\/+$/, "") : dirname(path);
    const list = stat.isDirectory ? await listTrajectoryFiles(root) : [path];
    for (const file of list) {
      trajectories.push(...await importTrajectoryFile(file, { root }));
      files++;
    }
  }
  return { trajectories, files };
}

/** A measurement and the per-rollout metrics behind it. */
export interface SplitsMeasurement {
  report: SplitsReport;
  /** One entry per rollout, in input order. */
  metrics: RolloutAssemblyMetrics[];
}

/**
 * Replays each trajectory through `tokenizer` under `options.policy_output`, assembles it with
 * `options.strategy` and summarises samples per rollout, single-sample share and split reasons.
 * `template` names the template in the report.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * import { loadTrajectories } from "./load.ts";
 * import { measureSplits } from "./splits.ts";
 * const runs = await loadTrajectories({ sources: ["mini-swe-agent"] });
 * const { report } = measureSplits(runs, await loadQwen3Tokenizer(), {
 *   template: "qwen3", policy_output: "thinking",
 * });
 * assert.equal(report.samples_per_rollout, 6); // every call splits: 12 calls, 2 rollouts
 * assert.equal(report.break_reasons.template_rewrite, 10);
 * ```
 */
export function measureSplits(
  trajectories: readonly Trajectory[],
  tokenizer: ChatTokenizer,
  options: SplitsOptions & { template: string; files?: number },
): SplitsMeasurement {
  const { template, files, ...plain } = options;
  const config = parseOrThrow(SplitsOptionsSchema, plain, "options");
  const metrics = trajectories.map((t) => {
    const events = replayTrajectory(t, tokenizer, {
      policy_output: config.policy_output,
      ...(config.enable_thinking !== undefined ? { enable_thinking: config.enable_thinking } : {}),
    });
    return assembleRollout(events, {
      strategy: config.strategy,
      tokenizer,
      group_id: t.group_id,
      ...(t.reward !== null ? { reward: t.reward } : {}),
    }).metrics;
  });
  const summary = summarizeAssembly(metrics);
  return {
    report: {
      template,
      policy_output: config.policy_output,
      strategy: config.strategy,
      enable_thinking: config.enable_thinking ?? null,
      files: files ?? new Set(trajectories.map((t) => t.file)).size,
      rollouts: summary.rollouts,
      calls: summary.calls,
      samples: summary.samples,
      samples_per_rollout: summary.samples_per_rollout_mean,
      single_share: summary.single_sample_share,
      break_reasons: { ...summary.break_reasons },
    },
    metrics,
  };
}

/** Every break reason, in the order reports print them. */
export const BREAK_REASONS: readonly BreakReason[] = BreakReasonSchema.options;

/**
 * The report as `name: value` lines: the settings, then `rollouts`, `calls`, `samples`,
 * `samples_per_rollout` and `single_share` (3 decimals), then one `break_<reason>` line per
 * reason (zeros included, so every report has the same lines).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { formatSplitsReport } from "./splits.ts";
 * const text = formatSplitsReport({
 *   template: "qwen3", policy_output: "logged", strategy: "prefix_merge", enable_thinking: null,
 *   files: 1, rollouts: 2, calls: 4, samples: 3, samples_per_rollout: 1.5, single_share: 0.5,
 *   break_reasons: { token_boundary: 1, template_rewrite: 0, response_rewrite: 0, branch: 0,
 *     compaction: 0, unknown: 0 },
 * });
 * assert.match(text, /^samples_per_rollout: 1\.500$/m);
 * assert.match(text, /^break_token_boundary: 1$/m);
 * ```
 */
export function formatSplitsReport(report: SplitsReport): string {
  const lines = [
    `template: ${report.template}`,
    `policy_output: ${report.policy_output}`,
    `strategy: ${report.strategy}`,
    `enable_thinking: ${report.enable_thinking ?? "default"}`,
    `files: ${report.files}`,
    `rollouts: ${report.rollouts}`,
    `calls: ${report.calls}`,
    `samples: ${report.samples}`,
    `samples_per_rollout: ${report.samples_per_rollout.toFixed(3)}`,
    `single_share: ${report.single_share.toFixed(3)}`,
    ...BREAK_REASONS.map((r) => `break_${r}: ${report.break_reasons[r] ?? 0}`),
  ];
  return lines.join("\n");
}
