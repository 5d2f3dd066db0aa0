/**
 * Shared setup of the loop tests: the embedded stack (worker, SQLite gateway + proxy, local
 * controller running the built-in harness on the toy arithmetic tasks) with a scripted reward
 * that always splits each group (rollouts r0, r1 get 1, the others 0), so every step has a
 * learning signal whatever the untrained policy says.
 */
import { builtinResolver } from "../lib/harness/builtin/resolver.ts";
import type { GatewayClient } from "../lib/gateway/client.ts";
import type { RewardContext } from "../lib/controller/reward_hooks.ts";
import type { LoopConfigInput } from "../lib/loop/schema.ts";
import { loadCharTokenizer } from "../lib/tokens/char.ts";
import {
  startEmbedded,
  toyArithmeticTasks,
  toyHarness,
  toyLoopTasks,
  toyModel,
  writeToyDataset,
} from "../lib/loop/mod.ts";
import type { RolloutEvent } from "../lib/schema.ts";

/** Reward 1 for the first half of each group, 0 for the rest. */
export function splitReward(ctx: RewardContext): number {
  const j = Number(/-r(\d+)$/.exec(ctx.rollout.rollout_id)?.[1] ?? "0");
  return j < 2 ? 1 : 0;
}

/** Starts the stack in `dir` with the `loop-test` harness registered. */
export async function startTestStack(dir: string, concurrency = 6) {
  const tokenizer = await loadCharTokenizer();
  const tasks = toyArithmeticTasks().slice(0, 40);
  const dataDir = await writeToyDataset(`${dir}/data`, tasks);
  const stack = await startEmbedded({
    outDir: dir,
    tokenizer,
    concurrency,
    threads: 1,
    registry: {
      dataDir,
      extra: { "loop-test": builtinResolver({ env: "arithmetic", rewardFunction: "split" }) },
      extraRewards: { split: splitReward },
    },
  });
  return { stack, tokenizer, tasks, dataDir };
}

/** A CI-sized config: tiny model, short generations, 4 rollouts × 2 groups per step. */
export function testConfig(
  name: string,
  outDir: string,
  dataDir: string,
  tokenizer: Awaited<ReturnType<typeof loadCharTokenizer>>,
  overrides: Partial<LoopConfigInput> = {},
): LoopConfigInput {
  const harness = toyHarness(dataDir, { max_tokens: 12 });
  return {
    name,
    out_dir: outDir,
    tasks: toyLoopTasks(toyArithmeticTasks().slice(0, 40)),
    harness: { name: "loop-test", options: harness.options },
    model: toyModel(tokenizer, { d_model: 32, n_layers: 1, max_seq_len: 512 }),
    group_size: 4,
    groups_per_step: 2,
    steps: 3,
    optimizer: { lr: 1e-3 },
    schedule: { mode: "sync", poll_ms: 50 },
    ...overrides,
  };
}

/** Every rollout of a run (paged). */
export async function runRollouts(gateway: GatewayClient, run: string) {
  const out = [];
  let after: string | undefined;
  while (true) {
    const page = await gateway.listRollouts({
      labels: { run },
      limit: 500,
      ...(after ? { after } : {}),
    });
    out.push(...page.items.filter((r) => r.labels.kind !== "run"));
    if (!page.next_cursor) return out;
    after = page.next_cursor;
  }
}

/**
 * For each attempt that reported its result, the number of LLM calls the harness says it made
 * and the model_request events the gateway holds for that attempt.
 */
export function callAccounting(events: RolloutEvent[]) {
  const out: { attempt_id: string; harness_calls: number; recorded: number; keys: number }[] = [];
  for (const e of events) {
    if (e.type !== "custom" || e.payload.name !== "builtin_harness") continue;
    const data = e.payload.data as { stats?: { calls?: number } };
    const calls = events.filter((c) => c.type === "model_request" && c.attempt_id === e.attempt_id);
    out.push({
      attempt_id: e.attempt_id,
      harness_calls: data.stats?.calls ?? -1,
      recorded: calls.length,
      keys: new Set(calls.map((c) => c.event_key ?? `seq${c.seq}`)).size,
    });
  }
  return out;
}
