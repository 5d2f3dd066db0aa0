/**
 * An RL run: validate the config, start or resume (worker weights, optimizer, loop state and
 * metrics all come back from the last checkpoint), optionally warm-start with SFT, then run
 * the configured schedule until `steps` policy updates are done.
 *
 * @module
 */
import type { GatewayClient } from "../gateway/client.ts";
import type { TrainingRow } from "../schema.ts";
import type { LoopConfig, LoopConfigInput, LoopStepMetrics } from "./schema.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import type { TrainerClient } from "../trainer/client.ts";
import { runAsync, runSync } from "./schedules.ts";
import { parseLoopConfig } from "./config.ts";
import { loadState, restoreWorker } from "./checkpoint.ts";
import type { LoopContext, LoopHooks, LoopProgressState } from "./context.ts";
import { MetricsWriter, openRunRecord, readMetrics } from "./metrics.ts";
import { type ProgressSink, terminalProgress } from "./progress.ts";
import { runSft } from "./sft.ts";
import { requireSync, type WeightSync } from "../engine/sync.ts";
import { syncEngine } from "./engine_sync.ts";

/** The services a run composes (embedded ones come from `startEmbedded`). */
export interface LoopServices {
  gateway: GatewayClient;
  worker: TrainerClient;
  /** Endpoint registered for the policy in the gateway's model registry. */
  workerUrl: string;
  /** Decodes ids for break diagnosis. */
  tokenizer?: ChatTokenizer;
  /** Starts the rollout controller; called once the run's bookkeeping rollout exists. */
  startController?: () => Promise<void>;
  /**
   * The engine that samples the policy when it is not the worker itself (llama.cpp, SGLang,
   * vLLM): every update is synced to it before new calls are let through. `sync: null` means
   * the engine cannot take new weights, and the run refuses to start (lib/engine/sync.ts).
   */
  engine?: { kind: string; url: string; sync: WeightSync | null };
}

/** Options of {@link runLoop}. */
export interface RunLoopOptions {
  /** Continue from `<out_dir>/checkpoints/state.json` (a fresh start when there is none). */
  resume?: boolean;
  progress?: ProgressSink;
  /** Rows of the SFT warm start (used when `config.sft.steps > 0` on a fresh run). */
  sftRows?: TrainingRow[];
  hooks?: LoopHooks;
  signal?: AbortSignal;
  /** Runs after the worker is ready and before the first RL step (e.g. a baseline eval). */
  beforeSteps?: (ctx: LoopContext) => Promise<void>;
}

/** What a finished run reports. */
export interface LoopResult {
  config: LoopConfig;
  outDir: string;
  /** Every step's metrics (including steps done before a resume). */
  metrics: LoopStepMetrics[];
  base_version: number;
  policy_version: number;
  /** The step the run resumed at (null: fresh start). */
  resumed_at: number | null;
  wall_ms: number;
  context: LoopContext;
}

/** The output directory of a config. */
export function outDirOf(config: Pick<LoopConfig, "name" | "out_dir">): string {
  return config.out_dir ?? `runs/${config.name}`;
}

/**
 * Runs (or resumes) an RL run to its last step.
 *
 * @example
 * ```ts ignore
 * const services = await startEmbedded({ outDir: "runs/toy", tokenizer });
 * const result = await runLoop(config, services.services, { resume: true });
 * result.metrics.at(-1)?.reward_mean;
 * await services.close();
 * ```
 */
export async function runLoop(
  input: LoopConfigInput,
  services: LoopServices,
  options: RunLoopOptions = {},
): Promise<LoopResult> {
  const started = performance.now();
  const config = parseLoopConfig(input);
  // Before anything is touched: a run on an engine it cannot sync would train a policy that
  // is never served.
  const engine = services.engine ? await requireSync(services.engine, services.engine.sync) : null;
  const outDir = outDirOf(config);
  await Deno.mkdir(outDir, { recursive: true });
  const progress = options.progress ?? terminalProgress();
  const saved = await loadState(outDir);
  if (saved && !options.resume) {
    throw new Error(
      `config.name: ${outDir} already holds a checkpoint of run "${saved.name}"; ` +
        `resume it or pick another name / out_dir`,
    );
  }
  if (saved && saved.name !== config.name) {
    throw new Error(`config.name: ${outDir} holds run "${saved.name}", not "${config.name}"`);
  }
  await Deno.writeTextFile(`${outDir}/config.json`, JSON.stringify(config, null, 2));

  const record = await openRunRecord(services.gateway, config.name);
  const metrics = new MetricsWriter(`${outDir}/metrics.jsonl`, services.gateway, record);
  const client = services.worker;
  let state: LoopProgressState;
  if (saved) {
    const version = await restoreWorker(client, saved, config.optimizer, config.device);
    await metrics.truncate(saved.next_step);
    state = {
      nextStep: saved.next_step,
      version,
      nextGroup: saved.next_group,
      consumed: new Set(saved.consumed_groups),
      baseVersion: saved.base_version,
      rewardBefore: saved.reward_before,
    };
    progress.log(
      `resumed ${config.name} at step ${saved.next_step}/${config.steps} (policy v${version})`,
    );
  } else {
    await metrics.truncate(0);
    const version = await initPolicy(config, client, outDir, progress, options.sftRows);
    state = {
      nextStep: 0,
      version,
      nextGroup: 0,
      consumed: new Set(),
      baseVersion: version,
      rewardBefore: null,
    };
  }
  if (engine) await syncEngine(engine, client, outDir, state.version, progress);
  await services.gateway.registerModel({
    name: config.policy_name,
    endpoints: [services.workerUrl],
    version: state.version,
    info: { run: config.name },
  });
  await services.gateway.setPhase("rollout");
  await services.startController?.();

  const context: LoopContext = {
    config,
    outDir,
    gateway: services.gateway,
    client,
    workerUrl: services.workerUrl,
    ...(services.tokenizer ? { tokenizer: services.tokenizer } : {}),
    ...(engine ? { engine } : {}),
    progress,
    metrics,
    state,
    hooks: options.hooks ?? {},
    ...(options.signal ? { signal: options.signal } : {}),
    startedAt: Date.now(),
  };
  await options.beforeSteps?.(context);
  if (config.schedule.mode === "sync") await runSync(context);
  else await runAsync(context);
  return {
    config,
    outDir,
    metrics: await readMetrics(metrics.path),
    base_version: state.baseVersion,
    policy_version: state.version,
    resumed_at: saved ? saved.next_step : null,
    wall_ms: performance.now() - started,
    context,
  };
}

/** Fresh start: initialise the policy, warm-start it with SFT when asked. */
async function initPolicy(
  config: LoopConfig,
  client: TrainerClient,
  outDir: string,
  progress: ProgressSink,
  sftRows: TrainingRow[] | undefined,
): Promise<number> {
  const sftSteps = sftRows && sftRows.length > 0 ? config.sft.steps : 0;
  if (!config.model) {
    const state = await client.state();
    if (!state.initialized) {
      throw new Error("config.model: the worker is not initialised; give a model to start from");
    }
    if (sftSteps === 0) return state.policy_version;
  }
  if (sftSteps === 0) {
    const state = await client.init({
      model: config.model!,
      optimizer: config.optimizer,
      ...onDevice(config),
    });
    return state.policy_version;
  }
  const sftLr = config.sft.lr ?? config.optimizer.lr;
  if (config.model) {
    await client.init({
      model: config.model,
      optimizer: { ...config.optimizer, lr: sftLr },
      ...onDevice(config),
    });
  }
  const t0 = performance.now();
  progress.log(`SFT warm start: ${sftSteps} steps × ${config.sft.batch_size} trajectories`);
  const loss = await runSft(client, sftRows!, {
    steps: sftSteps,
    batchSize: config.sft.batch_size,
    seed: config.seed,
    onStep: (step, l) =>
      progress.status(`SFT ${step + 1}/${sftSteps} loss ${l.toFixed(3)}`, {
        phase: "SFT",
        done: step + 1,
        total: sftSteps,
      }),
  });
  progress.log(
    `SFT done: loss ${loss.toFixed(3)} in ${((performance.now() - t0) / 1000).toFixed(1)}s`,
  );
  if (sftLr === config.optimizer.lr) return (await client.state()).policy_version;
  // A fresh optimizer with the RL settings, starting from the warm-started weights.
  await Deno.mkdir(`${outDir}/checkpoints`, { recursive: true });
  const path = `${await Deno.realPath(`${outDir}/checkpoints`)}/sft.pt`;
  await client.save(path);
  const state = await client.init({
    model: { kind: "checkpoint", path },
    optimizer: config.optimizer,
    ...onDevice(config),
  });
  return state.policy_version;
}

/** The `init` field that puts the policy on the run's device (none: the worker's choice). */
function onDevice(config: Pick<LoopConfig, "device">): { device?: string } {
  return config.device ? { device: config.device } : {};
}
