/**
 * Harnesses and environments (SPEC §10).
 *
 * - the **built-in harness** ({@link runAgent}, `lib/harness/builtin/main.ts` as a command): a
 *   tool-using agent loop on the official `openai` SDK with context compaction, sub-agents,
 *   client retries and a final answer, whose switches produce each break reason of SPEC §5;
 * - four **environments** (`arithmetic`, `search`, `files`, `coding`): datasets in
 *   `data/envs/`, tools, reward functions and harness resolvers;
 * - the **harness registry** ({@link harnessRegistry}): every harness name a rollout may use
 *   (`builtin`, `builtin-<env>`, the real-CLI adapters) and the reward functions they name;
 * - the **real-CLI adapters** of `lib/harness/cli/` (OpenCode, Claude Code, Codex, Qwen Code).
 *
 * @example
 * ```ts ignore
 * import { GatewayClient } from "../gateway/mod.ts";
 * import { LocalBackend, Reconciler } from "../controller/mod.ts";
 * import { harnessRegistry } from "./mod.ts";
 * const { harnesses, rewardFunctions, envs } = harnessRegistry();
 * const gateway = new GatewayClient("http://127.0.0.1:8420", { apiKey: "ra_admin-key" });
 * const task = envs.arithmetic.loadTasks()[0];
 * await gateway.createRollouts([{
 *   input: envs.arithmetic.taskInput(task),
 *   config: { harness: { name: "builtin-arithmetic", options: { max_turns: 8 } } },
 * }]);
 * const backend = new LocalBackend({ root: "runs/controller", harnesses, rewardFunctions });
 * const loop = new Reconciler(gateway, backend, {
 *   worker: "ctl-1",
 *   gatewayUrl: "http://127.0.0.1:8420",
 * });
 * await loop.start();
 * ```
 *
 * @module
 */
export {
  type AgentMessage,
  type AgentResult,
  type AgentStats,
  type Completion,
  CONFIRM_REQUEST,
  extractAnswer,
  historyChars,
  reserializeArguments,
  runAgent,
  type RunAgentOptions,
  SUBAGENT_SYSTEM,
  SUMMARY_REQUEST,
  SUMMARY_SYSTEM,
} from "./builtin/agent.ts";
export {
  type BuiltinScript,
  builtinScriptedPolicy,
  nonCanonicalTokenizer,
  type PromptRole,
  promptRole,
} from "./builtin/scripted.ts";
export {
  BUILTIN_MAIN,
  builtinCommand,
  builtinResolver,
  type BuiltinResolverOptions,
  type EnvRunSpec,
} from "./builtin/resolver.ts";
export { type AgentTool, stringArg, ToolArgumentError, type ToolContext } from "./builtin/tool.ts";
export { CalculatorError, evaluateExpression, formatNumber } from "./calculator.ts";
export * from "./envs/mod.ts";
export {
  type HarnessRegistry,
  harnessRegistry,
  type HarnessRegistryOptions,
  lookupHarness,
  lookupReward,
  UnknownHarnessError,
} from "./registry.ts";
export * from "./cli/mod.ts";
export * from "./schema.ts";
export * from "./cli/schema.ts";
