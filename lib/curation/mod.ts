/**
 * Task curation (docs/architecture.md#curation): Agent Lightning's SWE-smith recipe as a pipeline,
 * and a SWE-smith-style generator for the coding environment.
 *
 * - Task sets: SWE-smith records (`SweTaskSchema`) read from JSONL or parquet, the coding
 *   environment's own tasks mapped onto them (`codingDatasetTasks`).
 * - Rule stages: empty or trivial statements, missing environment or branch, too many tests,
 *   duplicate statements, statements that leak the fix, and two sandboxed test runs (FAIL_TO_PASS
 *   already passing; tests failing with the gold patch).
 * - The difficulty probe: k rollouts per task on the embedded stack (gateway + proxy, local
 *   controller and sandbox, built-in harness, the coding verifier), recorded in the gateway.
 * - Selection and split, the report, and a curated set as the loop's task source.
 *
 * @example Read a task set and run the rule stages that need no test run
 * ```ts
 * import assert from "node:assert/strict";
 * import { DEFAULT_DATA_DIR } from "../harness/envs/common.ts";
 * import { codingDatasetTasks, runCuration } from "./mod.ts";
 * import { duplicatesStage, leakStage, statementStage } from "./stages.ts";
 * const tasks = codingDatasetTasks(DEFAULT_DATA_DIR);
 * const outDir = await Deno.makeTempDir();
 * const result = await runCuration(tasks, {
 *   name: "doc",
 *   reposDir: `${DEFAULT_DATA_DIR}/coding/repos`,
 *   outDir,
 *   stages: [statementStage, duplicatesStage, leakStage],
 *   config: { probe: { enabled: false } },
 * });
 * // Each stage keeps what the one before it kept, or fewer.
 * result.funnel.forEach((row, i) => assert.ok(row.out <= (i ? result.funnel[i - 1].out : tasks.length)));
 * await Deno.remove(outDir, { recursive: true });
 * ```
 *
 * @module
 */
export {
  codingDatasetTasks,
  codingTaskToSwe,
  readCuratedSet,
  readTaskSet,
  writeTaskSet,
} from "./io.ts";
export {
  alreadySolvedStage,
  brokenStage,
  type Drop,
  duplicatesStage,
  environmentStage,
  fixLines,
  leakStage,
  maxTestsStage,
  ruleStages,
  type Stage,
  type StageContext,
  type StageResult,
  statementStage,
} from "./stages.ts";
export {
  probeClass,
  type ProbeOptions,
  type ProbeResult,
  type ProbeRun,
  runProbe,
  writeProbeDataset,
} from "./probe.ts";
export { type CurationOptions, type CurationResult, runCuration } from "./pipeline.ts";
export {
  type CurationReport,
  funnelMarkdown,
  type PassRateHistogram,
  passRateHistogram,
  type RepoCounts,
} from "./report.ts";
export { byRepo, shares, splitByRepo, stratifiedSample } from "./select.ts";
export {
  functionLines,
  type LineEdit,
  lineEdits,
  repairPolicy,
  type RepairPolicyOptions,
  repairTargets,
} from "./repair_policy.ts";
export {
  type GenerateOptions,
  generateTasks,
  type GenerationReport,
  GENERATOR_REPOS,
  type MutationCandidate,
  mutationCandidates,
  problemStatement,
  type RejectReason,
  validateTask,
} from "./generate.ts";
export {
  type CuratedSourceOptions,
  type CuratedTaskSource,
  curatedTaskSource,
} from "./task_source.ts";
