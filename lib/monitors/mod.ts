/**
 * Trajectory monitors: pluggable checks run on every finished rollout that add flags with
 * evidence (git/network access attempts, edits to test files, repeated calls, truncated
 * responses, empty answers, logprob/alignment anomalies), and an optional LLM auditor that
 * reviews flagged rollouts through any OpenAI-compatible endpoint.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { defaultMonitors, runMonitors } from "./mod.ts";
 * const rollout = {
 *   rollout_id: "r1", group_id: "r1", input: {}, mode: "train" as const,
 *   config: { timeout_s: 600, max_attempts: 1 }, labels: {}, status: "succeeded" as const,
 *   version: 1, attempts: [], created_at: 0, updated_at: 0, policy_version_min: null,
 *   policy_version_max: null, reward: null, reward_attempt_id: null, reward_credential: null,
 * };
 * const events = [{
 *   type: "log" as const, seq: 1, rollout_id: "r1", attempt_id: "a1", event_key: null,
 *   created_at: 0, payload: { stream: "stderr" as const, text: "curl: Could not resolve host" },
 * }];
 * const flags = await runMonitors({ rollout, events }, defaultMonitors());
 * assert.equal(flags[0].monitor, "git_network");
 * ```
 *
 * @module
 */
export type {
  Finding,
  FlagEvidence,
  FlagSeverity,
  Monitor,
  MonitorFlag,
  MonitorInput,
} from "./types.ts";
export {
  type AnswerAction,
  excerpt,
  extractActions,
  type RolloutActions,
  type ToolCallAction,
  toolCallText,
} from "./actions.ts";
export { defaultMonitors } from "./defaults.ts";
export {
  DEFAULT_MONITOR_BUDGET,
  type MonitorBudget,
  type OffThreadMonitors,
  offThreadMonitors,
} from "./off_thread.ts";
export { emptyAnswerMonitor } from "./empty_answer.ts";
export { loadMonitorModule, monitorModuleOf, monitorsWithModules } from "./module.ts";
export { gitNetworkMonitor, type GitNetworkOptions } from "./git_network.ts";
export { logprobMonitor, type LogprobOptions } from "./logprob.ts";
export { mismatchFindings, mismatchMonitor } from "./mismatch.ts";
export { repetitionMonitor, type RepetitionOptions } from "./repetition.ts";
export { testEditMonitor, type TestEditOptions } from "./test_edit.ts";
export { truncationMonitor } from "./truncation.ts";
export {
  type Auditor,
  createLlmAuditor,
  DEFAULT_AUDIT_PROMPT,
  parseVerdict,
  summarizeForAudit,
  worstAtLeast,
} from "./auditor.ts";
export {
  type MonitorRunner,
  type MonitorRunnerOptions,
  runMonitors,
  startMonitorRunner,
} from "./runner.ts";
