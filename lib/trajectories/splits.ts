/**
 * Samples per rollout on transcripts: read any folder or file of supported logs, replay each run
 * through a chat template under a stated policy output, assemble its calls, and count samples
 * and the reasons of every split. What `deno task splits` prints and the Figure 10 notebook
 * tabulates.
 *
 * @module
 */
import { basename, dirname, resolve } from "node:path";
import {
  type BreakReason,
  BreakReasonSchema,
  type MergeStrategy,
  parseOrThrow,
} from "../schema.ts";
import type { RolloutAssemblyMetrics } from "../samples/schema.ts";
import {
  type PolicyOutput,
  type SplitsOptions,
  SplitsOptionsSchema,
  type SplitsReport,
  type Trajectory,
} from "./schema.ts";
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
  const fileCount = files ?? new Set(trajectories.map((t) => t.file)).size;
  return { report: reportOf(metrics, { ...config, template, files: fileCount }), metrics };
}

function reportOf(
  metrics: readonly RolloutAssemblyMetrics[],
  settings: {
    template: string;
    policy_output: PolicyOutput;
    strategy: MergeStrategy;
    enable_thinking?: boolean | undefined;
    files: number;
  },
): SplitsReport {
  const summary = summarizeAssembly(metrics);
  return {
    template: settings.template,
    policy_output: settings.policy_output,
    strategy: settings.strategy,
    enable_thinking: settings.enable_thinking ?? null,
    files: settings.files,
    rollouts: summary.rollouts,
    calls: summary.calls,
    samples: summary.samples,
    samples_per_rollout: summary.samples_per_rollout_mean,
    single_share: summary.single_sample_share,
    tokens_stored: summary.tokens_total,
    storage_ratio: summary.storage_ratio,
    break_reasons: { ...summary.break_reasons },
  };
}

/** One row of the Figure 10 grid: a named template and what the policy emits. */
export interface SplitsSetting {
  template: (typeof NAMED_TEMPLATES)[number];
  policy_output: PolicyOutput;
  /** Passed to the template; absent: its default. */
  enable_thinking?: boolean;
}

/**
 * The settings `deno task splits --table` measures: both templates × the three policy outputs,
 * and Qwen3's non-thinking mode (`enable_thinking=false`, a policy that emits no block: the
 * template writes an empty one into the prompt).
 */
export const SPLITS_GRID: readonly SplitsSetting[] = [
  { template: "qwen3", policy_output: "logged" },
  { template: "qwen3", policy_output: "thinking" },
  { template: "qwen3", policy_output: "plain" },
  { template: "qwen3", policy_output: "plain", enable_thinking: false },
  { template: "qwen3_keep_reasoning", policy_output: "logged" },
  { template: "qwen3_keep_reasoning", policy_output: "thinking" },
  { template: "qwen3_keep_reasoning", policy_output: "plain" },
];

/**
 * A setting as the table writes it.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { settingLabel } from "./splits.ts";
 * assert.equal(
 *   settingLabel({ template: "qwen3", policy_output: "plain", enable_thinking: false }),
 *   "`qwen3` · `plain` · `enable_thinking=false`",
 * );
 * ```
 */
export function settingLabel(setting: SplitsSetting): string {
  const parts: string[] = [setting.template, setting.policy_output];
  if (setting.enable_thinking !== undefined) {
    parts.push(`enable_thinking=${setting.enable_thinking}`);
  }
  return parts.map((p) => `\`${p}\``).join(" · ");
}

/** A named set of transcripts (a column of the grid). */
export interface TranscriptSet extends LoadedTranscripts {
  name: string;
}

/** One cell of the grid: a setting on a set (or on all sets together, `set` = `all`). */
export interface SplitsGridCell {
  setting: SplitsSetting;
  set: string;
  report: SplitsReport;
  metrics: RolloutAssemblyMetrics[];
}

/**
 * Measures every setting of {@link SPLITS_GRID} on every set, and on all sets together (the
 * last cell of each setting, `set: "all"`).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { trajectoriesRoot } from "./load.ts";
 * import { loadTranscripts, measureSplitsGrid } from "./splits.ts";
 * const mini = await loadTranscripts([`${trajectoriesRoot()}/mini-swe-agent_testdata`]);
 * const cells = await measureSplitsGrid([{ name: "mini", ...mini }]);
 * assert.equal(cells.length, 14); // 7 settings × (1 set + all)
 * ```
 */
export async function measureSplitsGrid(
  sets: readonly TranscriptSet[],
  options: { strategy?: MergeStrategy } = {},
): Promise<SplitsGridCell[]> {
  const strategy = options.strategy ?? "prefix_merge";
  const tokenizers = new Map<string, ChatTokenizer>();
  for (const name of NAMED_TEMPLATES) tokenizers.set(name, await loadChatTemplate(name));
  const cells: SplitsGridCell[] = [];
  for (const setting of SPLITS_GRID) {
    const all: RolloutAssemblyMetrics[] = [];
    for (const set of sets) {
      const { report, metrics } = measureSplits(
        set.trajectories,
        tokenizers.get(setting.template)!,
        {
          ...setting,
          strategy,
          files: set.files,
        },
      );
      cells.push({ setting, set: set.name, report, metrics });
      all.push(...metrics);
    }
    const files = sets.reduce((a, s) => a + s.files, 0);
    const report = reportOf(all, { ...setting, strategy, files });
    cells.push({ setting, set: "all", report, metrics: all });
  }
  return cells;
}

/**
 * The split reasons of a report as the table writes them (`—` when none).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { reasonsText } from "./splits.ts";
 * assert.equal(reasonsText({ token_boundary: 9, branch: 1, template_rewrite: 0 }), "9 token_boundary, 1 branch");
 * ```
 */
export function reasonsText(reasons: Partial<Record<BreakReason, number>>): string {
  const parts = BREAK_REASONS.filter((r) => (reasons[r] ?? 0) > 0).map((r) => `${reasons[r]} ${r}`);
  return parts.length > 0 ? parts.join(", ") : "—";
}

/**
 * The grid as a Markdown table: one row per setting, one column per set (`samples per rollout ·
 * single-sample share`), then all sets together and their splits by reason. What
 * `deno task splits --table` prints and the README shows.
 */
export function formatSplitsTable(cells: readonly SplitsGridCell[]): string {
  const sets = [...new Set(cells.map((c) => c.set))];
  const first = (set: string) => cells.find((c) => c.set === set)!.report;
  const header = [
    "template · policy output",
    ...sets.map((set) => `${set} (${first(set).rollouts})`),
    "splits (all), by reason",
  ];
  const rows = SPLITS_GRID.map((setting) => {
    const mine = cells.filter((c) => c.setting === setting);
    const cell = (r: SplitsReport) =>
      `${r.samples_per_rollout.toFixed(3)} · ${(100 * r.single_share).toFixed(1)} %`;
    const all = mine.find((c) => c.set === "all")!.report;
    return [
      settingLabel(setting),
      ...sets.map((set) => cell(mine.find((c) => c.set === set)!.report)),
      reasonsText(all.break_reasons),
    ];
  });
  const line = (cols: string[]) => `| ${cols.join(" | ")} |`;
  return [
    line(header),
    line(header.map((_, i) => (i === 0 || i === header.length - 1 ? "---" : "---:"))),
    ...rows.map(line),
  ].join("\n");
}

/** Every break reason, in the order reports print them. */
export const BREAK_REASONS: readonly BreakReason[] = BreakReasonSchema.options;

/**
 * The report as `name: value` lines: the settings, then `rollouts`, `calls`, `samples`,
 * `samples_per_rollout` and `single_share` (3 decimals), `tokens_stored` and `storage_ratio`,
 * then one `break_<reason>` line per reason (zeros included, so every report has the same lines).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { formatSplitsReport } from "./splits.ts";
 * const text = formatSplitsReport({
 *   template: "qwen3", policy_output: "logged", strategy: "prefix_merge", enable_thinking: null,
 *   files: 1, rollouts: 2, calls: 4, samples: 3, samples_per_rollout: 1.5, single_share: 0.5,
 *   tokens_stored: 90, storage_ratio: 0.5,
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
    `tokens_stored: ${report.tokens_stored}`,
    `storage_ratio: ${report.storage_ratio.toFixed(3)}`,
    ...BREAK_REASONS.map((r) => `break_${r}: ${report.break_reasons[r] ?? 0}`),
  ];
  return lines.join("\n");
}
