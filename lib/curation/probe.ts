/**
 * The difficulty probe on the real stack: k rollouts per task through the same embedded stack
 * a training run uses (`startEmbedded`: SQLite gateway with the proxy mounted, the local
 * controller running the built-in harness on the coding environment in its sandbox, the
 * environment's verifier as the reward), recorded in the gateway like any run (rollouts
 * `<name>-<task>-r<j>`, group per task, label `curate`). The policy is either the scripted
 * repair heuristic (`repair_policy.ts`) served by a token-level scripted upstream, or a real
 * worker (the local CPU PyTorch worker with a model or checkpoint).
 *
 * @module
 */
import { sleep } from "../util/time.ts";
import { type EmbeddedStack, type StackWorker, startEmbedded } from "../loop/embedded.ts";
import { toyModel } from "../loop/toy.ts";
import { startScriptedUpstream } from "../proxy/scripted_upstream.ts";
import type { CurationConfig, ProbeClass, SweTask, WorkerModelSpec } from "../schema.ts";
import { TERMINAL_ROLLOUT_STATUSES } from "../schema.ts";
import { loadCharTokenizer } from "../tokens/char.ts";
import { loadQwen3Tokenizer } from "../tokens/qwen3.ts";
import type { ChatTokenizer } from "../tokens/types.ts";
import { TrainerClient } from "../trainer/client.ts";
import { repairPolicy } from "./repair_policy.ts";

/** One task's probe outcome. */
export interface ProbeResult {
  instance_id: string;
  rollout_ids: string[];
  /** Rewards of the rollouts that finished (`succeeded`). */
  rewards: number[];
  /** Rollouts that did not finish cleanly (harness error, timeout). */
  errors: number;
  solved: number;
  pass_rate: number;
  class: ProbeClass | null;
}

/** What {@link runProbe} returns. */
export interface ProbeRun {
  results: ProbeResult[];
  rollouts: number;
  /**
   * Rollouts already final in the gateway when the probe started (a rerun with the same name
   * and output directory finds its rollouts again instead of running them twice).
   */
  reused: number;
  /** The gateway database the rollouts are recorded in. */
  gateway_db: string;
  /** The dataset directory the harness and verifier read. */
  data_dir: string;
  policy: string;
  wall_ms: number;
}

/** Options of {@link runProbe}. */
export interface ProbeOptions {
  /** Run directory (the probe writes `<outDir>/data`, `<outDir>/gateway.db`, ...). */
  outDir: string;
  /** The environment's repositories. */
  reposDir: string;
  config: CurationConfig;
  /** Prefix of rollout and group ids. */
  name: string;
  /** Worker policy: the model to load (default: a fresh tiny char-level model). */
  model?: WorkerModelSpec;
  /** Worker policy: start this worker instead of a local CPU one. */
  worker?: () => Promise<StackWorker>;
  log?: (line: string) => void;
}

/**
 * The probe's class of a task from its solved count out of n finished rollouts.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { probeClass } from "./probe.ts";
 * assert.deepEqual([probeClass(4, 4), probeClass(1, 4), probeClass(0, 4)], [
 *   "all_solved",
 *   "mixed",
 *   "all_failed",
 * ]);
 * ```
 */
export function probeClass(solved: number, n: number): ProbeClass {
  if (solved === n) return "all_solved";
  if (solved === 0) return "all_failed";
  return "mixed";
}

/**
 * Writes the probed tasks as a coding dataset (`<dir>/coding/swesmith.jsonl`, an empty
 * `tasks.jsonl`, `repos` linking to the environment) and returns its real path.
 */
export async function writeProbeDataset(
  dir: string,
  tasks: SweTask[],
  reposDir: string,
): Promise<string> {
  await Deno.mkdir(`${dir}/coding`, { recursive: true });
  await Deno.writeTextFile(`${dir}/coding/tasks.jsonl`, "");
  await Deno.writeTextFile(
    `${dir}/coding/swesmith.jsonl`,
    tasks.map((t) => JSON.stringify(t) + "\n").join(""),
  );
  await Deno.remove(`${dir}/coding/repos`).catch(() => undefined);
  await Deno.symlink(await Deno.realPath(reposDir), `${dir}/coding/repos`);
  return await Deno.realPath(dir);
}

async function scriptedWorker(
  tokenizer: ChatTokenizer,
  config: CurationConfig,
): Promise<StackWorker> {
  const upstream = await startScriptedUpstream({
    tokenizer,
    policy: repairPolicy({ seed: config.seed, tries: config.probe.scripted_tries }),
  });
  return {
    url: upstream.url,
    client: new TrainerClient(upstream.url),
    logs: () => "",
    close: () => upstream.close(),
  };
}

/**
 * Runs k rollouts per task and classifies each task (all solved, mixed, all failed).
 *
 * @example
 * ```ts ignore
 * const run = await runProbe(tasks, { outDir: "runs/curate/x/probe", reposDir, config, name: "x" });
 * run.results.filter((r) => r.class === "mixed").length;
 * ```
 */
export async function runProbe(tasks: SweTask[], options: ProbeOptions): Promise<ProbeRun> {
  const t0 = performance.now();
  const { config } = options;
  const k = config.probe.k;
  await Deno.mkdir(options.outDir, { recursive: true });
  const dataDir = await writeProbeDataset(`${options.outDir}/data`, tasks, options.reposDir);
  const scripted = config.probe.policy === "scripted";
  const tokenizer = scripted ? await loadQwen3Tokenizer() : await loadCharTokenizer();
  const stack: EmbeddedStack = await startEmbedded({
    outDir: options.outDir,
    tokenizer,
    concurrency: config.probe.concurrency,
    registry: { dataDir },
    controllerId: `${options.name}-probe`,
    worker: options.worker ?? (scripted ? () => scriptedWorker(tokenizer, config) : undefined),
    logger: () => {},
  });
  try {
    let version = 0;
    if (!scripted) {
      const state = await stack.worker.client.state();
      if (!state.initialized || options.model) {
        const model = options.model ?? toyModel(tokenizer, { max_seq_len: 8192 }, config.seed);
        version = (await stack.worker.client.init({ model })).policy_version;
      } else {
        version = state.policy_version;
      }
    }
    const policyName = scripted ? "scripted-repair" : "probe-policy";
    await stack.client.registerModel({
      name: policyName,
      endpoints: [stack.worker.url],
      version,
      info: { curate: options.name, role: "difficulty probe" },
    });
    await stack.client.setPhase("rollout");
    let reused = 0;
    for await (
      const r of stack.client.iterateRollouts({ labels: { curate: options.name }, limit: 500 })
    ) {
      if (TERMINAL_ROLLOUT_STATUSES.includes(r.status)) reused++;
    }
    const group = (t: SweTask) => `${options.name}-${t.instance_id}`;
    const ids = (t: SweTask) => Array.from({ length: k }, (_, j) => `${group(t)}-r${j}`);
    await stack.client.createRollouts(tasks.flatMap((task) =>
      ids(task).map((rollout_id) => ({
        rollout_id,
        group_id: group(task),
        input: {
          env: "coding",
          id: task.instance_id,
          prompt: task.problem_statement,
          extra: { repo: task.repo },
        },
        mode: "val" as const,
        config: {
          timeout_s: config.probe.timeout_s,
          max_attempts: 1,
          harness: {
            name: "builtin-coding",
            options: {
              max_turns: config.probe.max_turns,
              max_tokens: config.probe.max_tokens,
              env_vars: { REINS_ENV_DATA_DIR: dataDir },
            },
          },
        },
        labels: { curate: options.name, task: task.instance_id, probe: "difficulty" },
      }))
    ));
    await stack.services.startController!();
    const total = tasks.length * k;
    let final = 0;
    while (final < total) {
      await sleep(500);
      let n = 0;
      for await (
        const r of stack.client.iterateRollouts({ labels: { curate: options.name }, limit: 500 })
      ) {
        if (TERMINAL_ROLLOUT_STATUSES.includes(r.status)) n++;
      }
      if (n !== final) options.log?.(`probe: ${n}/${total} rollouts final`);
      final = n;
    }
    const byId = new Map<string, { status: string; reward: number | null }>();
    for await (
      const r of stack.client.iterateRollouts({ labels: { curate: options.name }, limit: 500 })
    ) {
      byId.set(r.rollout_id, { status: r.status, reward: r.reward });
    }
    const results = tasks.map((task): ProbeResult => {
      const rolloutIds = ids(task);
      const finished = rolloutIds.map((id) => byId.get(id)!).filter((r) =>
        r.status === "succeeded"
      );
      const rewards = finished.map((r) => r.reward ?? 0);
      const solved = rewards.filter((r) => r > 0.5).length;
      return {
        instance_id: task.instance_id,
        rollout_ids: rolloutIds,
        rewards,
        errors: k - finished.length,
        solved,
        pass_rate: rewards.length > 0 ? solved / rewards.length : 0,
        class: rewards.length > 0 ? probeClass(solved, rewards.length) : null,
      };
    });
    return {
      results,
      rollouts: total,
      reused,
      gateway_db: `${await Deno.realPath(options.outDir)}/gateway.db`,
      data_dir: dataDir,
      policy: scripted ? "scripted repair heuristic (lib/curation/repair_policy.ts)" : "worker",
      wall_ms: performance.now() - t0,
    };
  } finally {
    await stack.close();
  }
}
