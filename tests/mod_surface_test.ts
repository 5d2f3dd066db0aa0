/**
 * The library surface: `mod.ts` exports the README tour's API, a curated list of fewer than 150
 * runtime values (snapshot below: adding or removing one is a decision, made here), and each
 * area is an entry point of its own (deno.json `exports`, e.g. `@reins/reins/samples`) with
 * `@module` documentation and everything that area offers. Every value `mod.ts` exports is the
 * same binding as in its area's entry point.
 */
import assert from "node:assert/strict";
import * as reins from "../mod.ts";

const ROOT = new URL("../", import.meta.url);
const config = JSON.parse(await Deno.readTextFile(new URL("deno.json", ROOT)));
const entries = Object.entries(config.exports as Record<string, string>);

/** The root's runtime values, sorted (types are not counted: they cost nothing at run time). */
const ROOT_VALUES = [
  "AdvantageLevelSchema",
  "BreakReasonSchema",
  "CLI_HARNESSES",
  "CuratedTaskSchema",
  "DEFAULT_DATA_DIR",
  "Figure",
  "GatewayClient",
  "HarnessSpecSchema",
  "HttpError",
  "LocalBackend",
  "LoopConfigError",
  "MergeStrategySchema",
  "ModelRequestWireSchema",
  "NormalizationModeSchema",
  "Plot",
  "Reconciler",
  "RolloutCreateSchema",
  "RolloutSchema",
  "SPLITS_GRID",
  "TERMINAL_ROLLOUT_STATUSES",
  "TrainerClient",
  "TrainingRowSchema",
  "UpstreamConfigSchema",
  "ValidationError",
  "alignmentFromSamples",
  "alignmentMetrics",
  "arithmeticEnv",
  "assembleRollout",
  "assembleRollouts",
  "balance",
  "builtinResolver",
  "codingDatasetTasks",
  "codingEnv",
  "commonPrefixLength",
  "compareEvals",
  "computeAdvantages",
  "computeLossWeights",
  "connect",
  "createLlmAuditor",
  "createUi",
  "curatedTaskSource",
  "defaultEnvs",
  "defaultMonitors",
  "describeCpu",
  "diagnoseBreak",
  "duplicatesStage",
  "environmentStage",
  "evaluatePolicy",
  "filesEnv",
  "flattenBatch",
  "flushOutput",
  "formatCi",
  "formatSplitsTable",
  "generateTasks",
  "gspoRatios",
  "harnessRegistry",
  "importTrajectoryFile",
  "isPrefix",
  "k3Kl",
  "launch",
  "leakStage",
  "loadCharTokenizer",
  "loadHfTokenizer",
  "loadHfTokenizerFromDir",
  "loadQwen3Tokenizer",
  "loadTrajectories",
  "loadTranscripts",
  "lookupHarness",
  "maxTestsStage",
  "measureSplits",
  "measureSplitsGrid",
  "openPostgresStore",
  "openSqliteStore",
  "packMicroBatches",
  "parseLoopConfig",
  "parseOrThrow",
  "parseOutput",
  "parseTauBench",
  "passRateHistogram",
  "planLossWeights",
  "planOptimizerSteps",
  "planTrainingBatch",
  "plot",
  "policyLoss",
  "ppoClipLoss",
  "prepareSandbox",
  "proxyMount",
  "readCuratedSet",
  "readMetrics",
  "readTaskSet",
  "reasonsText",
  "replayTrajectory",
  "rolloutMetrics",
  "rolloutShares",
  "rolloutUnits",
  "ruleStages",
  "runAgent",
  "runCli",
  "runCuration",
  "runLoop",
  "runMonitors",
  "runProbe",
  "runRewardHook",
  "runSft",
  "saveFigure",
  "searchEnv",
  "settingLabel",
  "show",
  "stackFigures",
  "startEmbedded",
  "startGateway",
  "startLocalWorker",
  "startScriptedUpstream",
  "startStack",
  "statementStage",
  "summarizeAdvantages",
  "summarizeAssembly",
  "svgToPng",
  "table",
  "tisWeights",
  "tokensEqual",
  "toyArithmeticTasks",
  "toyHarness",
  "toyLoopTasks",
  "toyModel",
  "toySftRows",
  "trainedTokens",
  "trajectoriesRoot",
  "trajectoryStats",
  "updatePolicy",
  "withPlaceholderReasoning",
  "withTaskSource",
  "writeToyDataset",
];

Deno.test("deno.json names one entry point per area, each documented with @module", async () => {
  assert.equal(config.exports["."], "./mod.ts");
  for (const name of ["./schema", "./samples", "./algo", "./gateway", "./loop", "./ui", "./util"]) {
    assert.ok(name in config.exports, `${name} is an entry point`);
  }
  for (const [name, path] of entries) {
    const text = await Deno.readTextFile(new URL(path, ROOT));
    assert.match(text, /^\/\*\*[\s\S]*?@module[\s\S]*?\*\//, `${name} (${path}) has @module docs`);
  }
});

Deno.test("mod.ts exports exactly the curated list, at most 150 runtime values", () => {
  const names = Object.keys(reins).sort();
  console.log(`mod_runtime_exports: ${names.length}`);
  console.log(`entry_points: ${entries.length - 1}`);
  assert.deepEqual(names, ROOT_VALUES);
  assert.ok(names.length <= 150, `${names.length} root values`);
});

Deno.test("every root value is the same binding as in an area entry point", async () => {
  const areas: Record<string, unknown>[] = [];
  for (const [name, path] of entries) {
    // k8s and engine stay out of mod.ts (a heavy client; node-llama-cpp's native binding).
    if (name === "." || name === "./k8s" || name === "./engine") continue;
    areas.push(await import(new URL(path, ROOT).href));
  }
  for (const [key, value] of Object.entries(reins)) {
    assert.ok(
      areas.some((mod) => key in mod && mod[key] === value),
      `${key}: exported by an area entry point as the same binding`,
    );
  }
});
