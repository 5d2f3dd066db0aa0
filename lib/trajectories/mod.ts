/**
 * Real agent trajectories in reins' message form: importers for SWE-agent `.traj`, tau-bench,
 * mini-swe-agent and Claude Code JSONL logs, the data loader, and a replay that renders
 * each call through a chat template + tokenizer into the `model_request` events a reins proxy
 * would have recorded (with FAKE, deterministic logprobs).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { loadTrajectories, replayTrajectory, trajectoryStats } from "./mod.ts";
 * import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
 * const [run] = await loadTrajectories({ sources: ["mini-swe-agent"] });
 * assert.equal(trajectoryStats(run).calls, 10);
 * const events = replayTrajectory(run, await loadQwen3Tokenizer());
 * assert.equal(events[0].payload.prompt_token_ids[0], 151644); // <|im_start|>
 * ```
 *
 * @module
 */
export {
  inferTools,
  INLINE_THINK_FIELD,
  readPath,
  ReasoningReader,
  splitInlineThink,
} from "./common.ts";
export { parseSweAgent, SWE_AGENT_REASONING_FIELDS } from "./swe_agent.ts";
export { parseTauBench, TAU_BENCH_REASONING_FIELDS } from "./tau_bench.ts";
export { MINI_SWE_AGENT_REASONING_FIELDS, parseMiniSweAgent } from "./mini_swe_agent.ts";
export { CLAUDE_CODE_REASONING_FIELDS, type JsonlFile, parseClaudeCode } from "./claude_code.ts";
export {
  detectTrajectoryFormat,
  importTrajectoryFile,
  listTrajectoryFiles,
  loadTrajectories,
  trajectoriesRoot,
} from "./load.ts";
export { type ResolvedCall, trajectoryCalls, trajectoryStats } from "./stats.ts";
export {
  chatmlResponseText,
  fakeLogprob,
  replayTrajectory,
  type ReplayTrajectoryOptions,
  type ResponseFormatter,
  withPolicyOutput,
} from "./replay.ts";
export { loadQwen3KeepReasoningTokenizer, qwen3KeepReasoningTemplate } from "./templates.ts";
export { PLACEHOLDER_REASONING, withPlaceholderReasoning } from "./transform.ts";
export {
  BREAK_REASONS,
  formatSplitsReport,
  formatSplitsTable,
  loadChatTemplate,
  type LoadedTranscripts,
  loadTranscripts,
  measureSplits,
  measureSplitsGrid,
  NAMED_TEMPLATES,
  reasonsText,
  settingLabel,
  SPLITS_GRID,
  type SplitsGridCell,
  type SplitsMeasurement,
  type SplitsSetting,
  type TranscriptSet,
} from "./splits.ts";
export * from "./schema.ts";
