/**
 * reins — harnessed agentic RL on Deno.
 *
 * This module exports the API of the README's tour: the data model's main schemas, the path
 * from captured calls to training rows, the services, the training loop, harnesses, curation,
 * trajectories and figures (fewer than 150 values, listed in `tests/mod_surface_test.ts`).
 * Everything else is exported by the area's own entry point (deno.json `exports`), with its
 * own documentation, so that an import says which part of reins it uses and loads only that
 * part:
 *
 * | entry point              | what it holds                                                                     |
 * | ------------------------ | --------------------------------------------------------------------------------- |
 * | `@reins/reins/util`      | the bottom layer: mean ± 95% CI, seeded generator, sleep                           |
 * | `@reins/reins/schema`    | the data model: zod schemas and types of the contracts between areas              |
 * | `@reins/reins/tokens`    | tokenizers and chat templates (Hugging Face, bundled Qwen3, char-level)           |
 * | `@reins/reins/samples`   | sample assembly from captured calls: merge strategies, break diagnosis, metrics   |
 * | `@reins/reins/algo`      | RL math: GRPO advantages, loss normalization, policy losses, alignment            |
 * | `@reins/reins/batching`  | rollout-whole batches, data-parallel balancing, micro-batch packing               |
 * | `@reins/reins/trainer`   | the PyTorch worker and its typed client                                           |
 * | `@reins/reins/stack`     | `startStack`: a gateway with the proxy and the Live UI mounted                    |
 * | `@reins/reins/loop`      | the training loop (sync and collocated async), evaluation, `parseLoopConfig`      |
 * | `@reins/reins/http`      | the shared HTTP layer: one error type, credentials, limits, SSE, retry            |
 * | `@reins/reins/gateway`   | the durable rollout/event/model service and its client                            |
 * | `@reins/reins/proxy`     | token-exact capture of every LLM call in four wire formats                        |
 * | `@reins/reins/controller`| the rollout controller: leases, retries, local backend and sandbox                |
 * | `@reins/reins/k8s`       | the controller's Kubernetes backend (kept apart: it loads the Kubernetes client)  |
 * | `@reins/reins/harness`   | the built-in harness, real CLI harnesses (OpenCode, Claude Code, Codex, Qwen Code), environments |
 * | `@reins/reins/curation`  | task curation: the SWE-smith recipe as a pipeline, the task generator             |
 * | `@reins/reins/trajectories` | real agent transcripts: importers and replay                                   |
 * | `@reins/reins/ui`        | the Live UI served by the gateway                                                 |
 * | `@reins/reins/monitors`  | reward-hacking monitors and the LLM auditor                                       |
 * | `@reins/reins/plot`      | figures: Observable Plot on the server, Jupyter display, SVG/PNG export           |
 *
 * Inside this repository the same modules are `./lib/<area>/mod.ts` (and `./lib/schema.ts`);
 * `docs/architecture.md` draws their layers and says where each thing lives.
 *
 * @example Turn one rollout's captured calls into weighted training rows
 * ```ts
 * import assert from "node:assert/strict";
 * import {
 *   assembleRollout,
 *   computeAdvantages,
 *   computeLossWeights,
 *   flattenBatch,
 *   loadQwen3Tokenizer,
 * } from "./mod.ts";
 *
 * // One group as the gateway holds it: each rollout's events (a model call, then its reward).
 * const rolloutOf = (rollout_id: string, reward: number) => {
 *   const head = { rollout_id, attempt_id: "a1", event_key: null, created_at: 0 };
 *   const call = {
 *     flavor: "generate" as const, request: {}, prompt_token_ids: Uint32Array.of(1, 2),
 *     response_token_ids: Uint32Array.of(3, 4), response_logprobs: Float32Array.of(-0.5, -0.5),
 *     policy_version: 0, finish_reason: "stop", upstream: null, latency_ms: 1, retry_count: 0,
 *     http_status: 200, error: null, segment: null, mode: "faithful" as const,
 *     client_disconnected: false,
 *   };
 *   const score = { value: reward, name: "reward", info: {} };
 *   return {
 *     rollout: { rollout_id, group_id: "g1" },
 *     events: [
 *       { ...head, seq: 1, type: "model_request" as const, payload: call },
 *       { ...head, seq: 2, type: "reward" as const, payload: score },
 *     ],
 *   };
 * };
 * const groupRollouts = [rolloutOf("r1", 1), rolloutOf("r2", 0)];
 *
 * const tokenizer = await loadQwen3Tokenizer();
 * const samples = groupRollouts.flatMap(({ rollout, events }) =>
 *   assembleRollout(events, { tokenizer, group_id: rollout.group_id }).samples
 * );
 * const advantaged = computeAdvantages(samples, { level: "rollout" }).samples;
 * const weighted = computeLossWeights(advantaged, { mode: "rollout_token_mean" }).samples;
 * const rows = flattenBatch(weighted); // what the worker's forward_backward takes
 * // Rewards 1 and 0, normalized within the group: ±1/√2.
 * assert.deepEqual(rows.map((row) => Math.round(row.advantages[3] * 100) / 100), [0.71, -0.71]);
 * ```
 *
 * @module
 */
// The data model: types of every contract, the main schemas and their parser.
export type * from "./lib/schema.ts";
export {
  AdvantageLevelSchema,
  BreakReasonSchema,
  CuratedTaskSchema,
  HarnessSpecSchema,
  MergeStrategySchema,
  ModelRequestWireSchema,
  NormalizationModeSchema,
  parseOrThrow,
  RolloutCreateSchema,
  RolloutSchema,
  TERMINAL_ROLLOUT_STATUSES,
  TrainingRowSchema,
  UpstreamConfigSchema,
  ValidationError,
} from "./lib/schema.ts";
export { HttpError } from "./lib/util/error.ts";

// From captured calls to training rows.
export type * from "./lib/tokens/types.ts";
export {
  commonPrefixLength,
  isPrefix,
  loadCharTokenizer,
  loadHfTokenizer,
  loadHfTokenizerFromDir,
  loadQwen3Tokenizer,
  parseOutput,
  tokensEqual,
} from "./lib/tokens/mod.ts";
export {
  assembleRollout,
  assembleRollouts,
  diagnoseBreak,
  rolloutMetrics,
  summarizeAssembly,
} from "./lib/samples/mod.ts";
export type * from "./lib/samples/schema.ts";
export type * from "./lib/algo/schema.ts";
export {
  alignmentFromSamples,
  alignmentMetrics,
  computeAdvantages,
  computeLossWeights,
  gspoRatios,
  k3Kl,
  planLossWeights,
  policyLoss,
  ppoClipLoss,
  rolloutShares,
  summarizeAdvantages,
  tisWeights,
  trainedTokens,
} from "./lib/algo/mod.ts";
export {
  balance,
  flattenBatch,
  packMicroBatches,
  planOptimizerSteps,
  planTrainingBatch,
  rolloutUnits,
} from "./lib/batching/mod.ts";

// The services: gateway, proxy, the stack that mounts them, controller, UI and monitors.
export {
  GatewayClient,
  openPostgresStore,
  openSqliteStore,
  startGateway,
} from "./lib/gateway/mod.ts";
export { proxyMount, startScriptedUpstream } from "./lib/proxy/mod.ts";
export { type RunningStack, type StackOptions, startStack } from "./lib/stack/mod.ts";
export { LocalBackend, prepareSandbox, Reconciler, runRewardHook } from "./lib/controller/mod.ts";
export { createUi } from "./lib/ui/mod.ts";
export { createLlmAuditor, defaultMonitors, runMonitors } from "./lib/monitors/mod.ts";

// Training: the worker and the loop.
export {
  connect,
  describeCpu,
  launch,
  startLocalWorker,
  TrainerClient,
} from "./lib/trainer/mod.ts";
export type { EmbeddedStack, LoopServices } from "./lib/loop/mod.ts";
export type * from "./lib/loop/schema.ts";
export {
  compareEvals,
  evaluatePolicy,
  formatCi,
  LoopConfigError,
  parseLoopConfig,
  readMetrics,
  runLoop,
  runSft,
  startEmbedded,
  toyArithmeticTasks,
  toyHarness,
  toyLoopTasks,
  toyModel,
  toySftRows,
  updatePolicy,
  withTaskSource,
  writeToyDataset,
} from "./lib/loop/mod.ts";

// What runs in a rollout.
export {
  arithmeticEnv,
  builtinResolver,
  CLI_HARNESSES,
  codingEnv,
  DEFAULT_DATA_DIR,
  defaultEnvs,
  filesEnv,
  harnessRegistry,
  lookupHarness,
  runAgent,
  runCli,
  searchEnv,
} from "./lib/harness/mod.ts";

// The tasks it runs on: curation.
export {
  codingDatasetTasks,
  curatedTaskSource,
  duplicatesStage,
  environmentStage,
  generateTasks,
  leakStage,
  maxTestsStage,
  passRateHistogram,
  readCuratedSet,
  readTaskSet,
  ruleStages,
  runCuration,
  runProbe,
  statementStage,
} from "./lib/curation/mod.ts";

// Real agent transcripts.
export type { SplitsGridCell, TranscriptSet } from "./lib/trajectories/mod.ts";
export {
  formatSplitsTable,
  importTrajectoryFile,
  loadTrajectories,
  loadTranscripts,
  measureSplits,
  measureSplitsGrid,
  parseTauBench,
  reasonsText,
  replayTrajectory,
  settingLabel,
  SPLITS_GRID,
  trajectoriesRoot,
  trajectoryStats,
  withPlaceholderReasoning,
} from "./lib/trajectories/mod.ts";

// Figures.
export {
  Figure,
  flushOutput,
  Plot,
  plot,
  saveFigure,
  show,
  stackFigures,
  svgToPng,
  table,
} from "./lib/plot/mod.ts";
