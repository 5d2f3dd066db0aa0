/**
 * The reins training loop (docs/architecture.md#trainer-and-loop): rollouts are declared in the
 * gateway, the controller runs harnesses, the proxy captures every LLM call, samples are assembled,
 * filtered, weighted and batched rollout-whole, the worker trains, and the next calls use the new
 * policy version — synchronously (`sync`) or with collocated asynchronous updates
 * (`collocated_async`).
 *
 * @example
 * ```ts ignore
 * import { loadCharTokenizer } from "../tokens/mod.ts";
 * import {
 *   runLoop, startEmbedded, toyArithmeticTasks, toyHarness, toyLoopTasks, toyModel,
 *   toySftRows, writeToyDataset,
 * } from "./mod.ts";
 * const tokenizer = await loadCharTokenizer();
 * const tasks = toyArithmeticTasks();
 * const dataDir = await writeToyDataset("runs/toy/data", tasks);
 * await using stack = await startEmbedded({
 *   outDir: "runs/toy", tokenizer, registry: { dataDir },
 * });
 * const result = await runLoop({
 *   name: "toy",
 *   tasks: toyLoopTasks(tasks),
 *   harness: toyHarness(dataDir),
 *   model: toyModel(tokenizer),
 *   sft: { steps: 150 },
 *   steps: 10,
 * }, stack.services, { sftRows: toySftRows(tokenizer, tasks) });
 * result.metrics.at(-1)?.reward_mean;
 * ```
 *
 * @module
 */
export {
  type LoopResult,
  type LoopServices,
  outDirOf,
  runLoop,
  type RunLoopOptions,
} from "./run.ts";
export { runAsync, runSync } from "./schedules.ts";
export {
  ALIGNMENT_EVENT,
  createGroup,
  groupId,
  type LoopContext,
  type LoopHooks,
  type LoopProgressState,
  postRolloutEvents,
  rolloutIds,
  TRAINING_NOTE_EVENT,
} from "./context.ts";
export {
  type CallAlignmentRecord,
  type EpochsResult,
  type RolloutData,
  type RolloutNote,
  runEpochs,
  summarizeUpdate,
  type UpdateOptions,
  updatePolicy,
  type UpdateResult,
} from "./train.ts";
export {
  type BatchPlan,
  type ModelCallMeta,
  planBatches,
  type PlannedPart,
  type PlanOptions,
  planSelection,
  planUpdate,
  type SelectionPlan,
  type UpdatePlan,
} from "./update_plan.ts";
export { type Exclusion, type Selection, selectSamples, updatesBehind } from "./select.ts";
export { MetricsWriter, openRunRecord, readMetrics, type RunRecord } from "./metrics.ts";
export {
  formatDuration,
  type ProgressCount,
  type ProgressSink,
  silentProgress,
  stepLine,
  terminalProgress,
  type TerminalProgressOptions,
} from "./progress.ts";
export { mismatchLine, type MismatchStep, mismatchSummary } from "./mismatch_report.ts";
export { loadState, restoreWorker, saveCheckpoint, statePath } from "./checkpoint.ts";
export {
  runSft,
  scriptedArithmetic,
  scriptedGuess,
  type SftOptions,
  sftRow,
  TOY_SYSTEM_PROMPT,
} from "./sft.ts";
export {
  type EmbeddedOptions,
  type EmbeddedStack,
  type StackWorker,
  startEmbedded,
} from "./embedded.ts";
export {
  compareEvals,
  type EvalComparison,
  type EvalOptions,
  type EvalResult,
  evalSeeds,
  evaluatePolicy,
  formatCi,
} from "./eval.ts";
export { LoopConfigError, parseLoopConfig } from "./config.ts";
export {
  toyArithmeticTasks,
  toyHarness,
  toyLoopTasks,
  toyModel,
  type ToyModelSize,
  type ToySftOptions,
  toySftRows,
  toyTools,
  writeToyDataset,
} from "./toy.ts";
export { ReplicatedGateway } from "./replicas.ts";
export { type TaskSource, withTaskSource } from "./task_source.ts";
export * from "./schema.ts";
export {
  harnessSpecOf,
  loopConfigOf,
  parseRunConfig,
  readRunConfig,
  readTaskFile,
  type RunConfig,
  RunConfigError,
  type RunConfigInput,
  RunConfigSchema,
  splitTasks,
  validateRunConfig,
  workerModelOf,
} from "./run_config.ts";
export {
  runLoopSupervised,
  type SupervisedLoopOptions,
  type SupervisedRole,
  Supervisor,
  type SupervisorOptions,
} from "./supervisor.ts";
