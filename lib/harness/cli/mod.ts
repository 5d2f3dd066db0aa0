/**
 * Adapters for real harness CLIs (docs/architecture.md#harnesses): OpenCode, Claude Code, Codex and
 * Qwen Code run unmodified, installed on demand from npm at pinned versions, configured through
 * their own config files in a fresh HOME, and pointed at the reins proxy.
 *
 * - {@link CLI_HARNESSES}: resolvers for the controller's `LocalBackend` (`harnesses` option);
 * - {@link runCli}: run one CLI on one task from code;
 * - {@link ensureCli}: install a pinned CLI into the cache;
 * - {@link cliScriptedPolicy}: scripted policies for integration tests and smoke checks.
 *
 * @example
 * ```ts
 * import { LocalBackend } from "../../controller/mod.ts";
 * import { CLI_HARNESSES } from "./mod.ts";
 * const backend = new LocalBackend({ root: "runs/controller", harnesses: CLI_HARNESSES });
 * // rollouts: { input: { task: "Fix the failing test" },
 * //   config: { harness: { name: "claude_code", options: { workspace: "repo/" } } } }
 * ```
 *
 * @module
 */
export { CLI_HARNESSES, cliLocalHarness, RUNNER_PATH } from "./resolver.ts";
export { runCli, type RunCliOptions } from "./runner.ts";
export {
  CliUnavailableError,
  defaultCacheDir,
  ensureCli,
  type EnsureCliOptions,
  type InstalledCli,
  installPrefix,
  runtimeProblem,
} from "./install.ts";
export { CLI_ADAPTERS, cliAdapter } from "./registry.ts";
export { rangeText, runSummary, type RunSummaryInput } from "./summary.ts";
export type { CliAdapter, CliContext, CliInvocation } from "./types.ts";
export { claudeCode } from "./claude_code.ts";
export { codex } from "./codex.ts";
export { opencode } from "./opencode.ts";
export { qwenCode } from "./qwen_code.ts";
export {
  BUGFIX,
  cliScriptedPolicy,
  type CliScriptOptions,
  type PromptView,
  type ScriptedFix,
  SIDE_CONVERSATIONS,
  viewPrompt,
} from "./scripted.ts";
