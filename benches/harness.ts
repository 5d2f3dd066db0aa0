/**
 * Harness figures: (1) the scripted experts solve every arithmetic and search task through the
 * built-in harness, the real proxy and the environments' reward functions (a sanity check of
 * the datasets, tools and rewards); (2) what each built-in-harness switch does to samples per
 * rollout; (3) end-to-end rollouts through the controller (spawned `main.ts`), without and
 * with the bubblewrap sandbox.
 *
 * Usage: `deno run -A benches/harness.ts [--rollouts 8]`
 *
 * @module
 */
import { parseArgs } from "node:util";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startStack } from "../lib/stack/stack.ts";
import { runAgent } from "../lib/harness/builtin/agent.ts";
import { builtinScriptedPolicy, nonCanonicalTokenizer } from "../lib/harness/builtin/scripted.ts";
import { fileTools } from "../lib/harness/envs/workspace_tools.ts";
import { arithmeticExpert, searchExpert } from "../lib/harness/envs/experts.ts";
import { harnessRegistry } from "../lib/harness/registry.ts";
import { type ScriptedTurn, startScriptedUpstream } from "../lib/proxy/scripted_upstream.ts";
import { assembleRollout } from "../lib/samples/mod.ts";
import { type JsonObject, parseOrThrow, type RolloutCreate } from "../lib/schema.ts";
import {
  type BuiltinHarnessOptionsInput,
  BuiltinHarnessOptionsSchema,
} from "../lib/harness/schema.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import type { ChatTokenizer } from "../lib/tokens/types.ts";
import { capabilityToken } from "../lib/gateway/auth.ts";
import OpenAI from "openai";

const N = Number(
  parseArgs({
    args: Deno.args,
    options: { rollouts: { type: "string", default: "8" } },
    strict: true,
  }).values.rollouts,
);
const tokenizer = await loadQwen3Tokenizer();
const registry = harnessRegistry();
const { envs } = registry;

async function stack(
  policy: Parameters<typeof startScriptedUpstream>[0]["policy"],
  t: ChatTokenizer,
) {
  const upstream = await startScriptedUpstream({ tokenizer: t, policy });
  const { gateway } = await startStack({
    db: ":memory:",
    leaseSweepMs: 0,
    proxy: { tokenizer, upstream: { kind: "token_level", endpoints: [upstream.url] } },
  });
  let n = 0;
  return {
    gateway,
    async open(input: JsonObject) {
      const id = `r${n++}`;
      await gateway.store.createRollouts([{ rollout_id: id, input }]);
      const [c] = await gateway.store.claimRollouts({ worker: "b", limit: 1, lease_ms: 600_000 });
      const token = capabilityToken(gateway.secret, id, c.attempt.attempt_id);
      const baseURL = `${gateway.url}/proxy/${id}/${c.attempt.attempt_id}/v1`;
      return { id, client: new OpenAI({ baseURL, apiKey: token }) };
    },
    async close() {
      await gateway.close();
      await upstream.close();
    },
  };
}

// 1. Expert accuracy in process (the agent loop + proxy + reward functions).
const accuracy: string[] = [];
for (
  const [name, policy] of [["arithmetic", arithmeticExpert()], ["search", searchExpert()]] as const
) {
  const env = envs[name];
  const s = await stack(policy, tokenizer);
  const tasks = env.loadTasks();
  const dir = await Deno.makeTempDir();
  let solved = 0;
  let calls = 0;
  const t0 = performance.now();
  for (const task of tasks) {
    const input = env.taskInput(task as never);
    const { client } = await s.open(input);
    const result = await runAgent({
      client,
      options: parseOrThrow(BuiltinHarnessOptionsSchema, { env: name }),
      task: input.prompt,
      systemPrompt: env.systemPrompt,
      tools: env.tools({ workdir: dir, input }),
    });
    calls += result.stats.calls;
    await Deno.writeTextFile(`${dir}/answer.txt`, result.answer ?? "");
    const value = await env.reward({
      rollout: { input } as never,
      attempt_id: "a",
      dir,
      exit_code: 0,
      edited: [],
    });
    solved += value;
  }
  const secs = (performance.now() - t0) / 1000;
  accuracy.push(
    `${name}: expert solved ${solved}/${tasks.length} tasks, ${calls} model calls, ` +
      `${(tasks.length / secs).toFixed(1)} rollouts/s in process`,
  );
  await Deno.remove(dir, { recursive: true });
  await s.close();
}

// 2. Samples per rollout under each switch (4 tool turns with reasoning + answer).
const calc = (e: string, reasoning = `Next I compute ${e}.`): ScriptedTurn => ({
  reasoning,
  tool_calls: [{ name: "calculator", arguments: { expression: e } }],
});
const FOUR = [calc("1 + 2"), calc("3 * 3"), calc("9 - 4"), calc("5 / 5"), {
  reasoning: "Done.",
  content: "<answer>1</answer>",
}];
const delegate = (task: string): ScriptedTurn => ({
  reasoning: "I delegate this.",
  tool_calls: [{ name: "delegate", arguments: { task } }],
});
const write = (path: string): ScriptedTurn => ({
  reasoning: `I write ${path}.`,
  tool_calls: [{ name: "write_file", arguments: { path, content: "x" } }],
});
interface Row {
  label: string;
  options: BuiltinHarnessOptionsInput;
  main: ScriptedTurn[];
  subagent?: ScriptedTurn[];
  marker?: string;
  files?: boolean;
}
const rows: Row[] = [
  { label: "faithful (control)", options: {}, main: FOUR },
  { label: "compaction max_chars=100", options: { compaction: { max_chars: 100 } }, main: FOUR },
  {
    label: "compaction separate",
    options: { compaction: { max_chars: 100, mode: "separate" } },
    main: FOUR,
  },
  {
    label: "subagents (2 delegations)",
    options: { subagents: true },
    main: [delegate("Compute 1 + 2."), calc("3 * 3"), delegate("Compute 9 - 4."), FOUR[4]],
    subagent: [calc("1 + 2"), FOUR[4], calc("9 - 4"), FOUR[4]],
  },
  {
    label: "rewrite_tool_calls (3 two-key calls)",
    options: { rewrite_tool_calls: true },
    main: [write("a"), calc("1 + 2"), write("b"), write("c"), FOUR[4]],
    files: true,
  },
  { label: "drop_reasoning", options: { drop_reasoning: true }, main: FOUR },
  { label: "confirm_answer", options: { confirm_answer: true }, main: FOUR },
  {
    label: "non-canonical split sampled twice",
    options: {},
    main: [
      calc("1 + 2", "Calculating 1 + 2."),
      calc("3 * 3"),
      calc("9 - 4", "Calculating 9 - 4."),
      ...FOUR.slice(3),
    ],
    marker: "Calculating",
  },
  {
    label: "no reasoning sampled",
    options: {},
    main: FOUR.map((t) => ({ ...t, reasoning: undefined })),
  },
];
const table: string[] = [
  "| configuration | calls | samples | breaks |",
  "| --- | --- | --- | --- |",
];
for (const row of rows) {
  const summaries = ["S1.", "S2.", "S3."].map((content) => ({ reasoning: "Sum.", content }));
  const policy = builtinScriptedPolicy({
    main: row.main,
    summary: summaries,
    confirm: FOUR[4],
    ...(row.subagent ? { subagent: row.subagent } : {}),
  });
  const s = await stack(
    policy,
    row.marker ? nonCanonicalTokenizer(tokenizer, row.marker) : tokenizer,
  );
  const { id, client } = await s.open({ prompt: "q" });
  const workdir = await Deno.makeTempDir();
  await runAgent({
    client,
    options: parseOrThrow(BuiltinHarnessOptionsSchema, { env: "arithmetic", ...row.options }),
    task: "What is ((1 + 2) * 3 - 4) / 5?",
    systemPrompt: envs.arithmetic.systemPrompt,
    tools: [
      ...envs.arithmetic.tools({ workdir, input: {} }),
      ...(row.files ? fileTools({ workdir, input: {} }) : []),
    ],
  });
  await Deno.remove(workdir, { recursive: true });
  const a = assembleRollout(await s.gateway.store.listEvents(id, {}), { tokenizer });
  const counts: Record<string, number> = {};
  for (const b of a.breaks) counts[b.reason] = (counts[b.reason] ?? 0) + 1;
  table.push(
    `| ${row.label} | ${a.metrics.calls} | ${a.samples.length} | ${
      Object.entries(counts).map(([k, v]) => `${k} ${v}`).join(", ") || "none"
    } |`,
  );
  await s.close();
}

// 3. Through the controller: spawned main.ts per rollout, sandbox off (arithmetic) and on
// (arithmetic with the sandbox forced on).
const e2e: string[] = [];
for (const sandbox of [false, true]) {
  const root = await Deno.makeTempDir();
  const s = await stack(arithmeticExpert(), tokenizer);
  const client = new GatewayClient(s.gateway.url, { apiKey: s.gateway.adminKey });
  const loop = new Reconciler(
    client,
    new LocalBackend({
      root,
      harnesses: registry.harnesses,
      rewardFunctions: registry.rewardFunctions,
      pollMs: 25,
    }),
    { worker: "bench", concurrency: 2, poll_ms: 25, gatewayUrl: s.gateway.url },
  );
  const creates: RolloutCreate[] = envs.arithmetic.loadTasks().slice(0, N).map((task, i) => ({
    rollout_id: `e${i}`,
    input: envs.arithmetic.taskInput(task),
    config: {
      timeout_s: 120,
      harness: { name: "builtin-arithmetic", options: { sandbox: { enabled: sandbox } } },
    },
  }));
  const t0 = performance.now();
  await client.createRollouts(creates);
  await loop.start();
  let rewards: number[] = [];
  for (;;) {
    const all = await Promise.all(creates.map((c) => client.getRollout(c.rollout_id!)));
    if (all.every((r) => r.status === "succeeded" || r.status === "failed")) {
      rewards = all.map((r) => r.reward ?? 0);
      break;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const secs = (performance.now() - t0) / 1000;
  await loop.stop("drain");
  e2e.push(
    `controller, sandbox ${sandbox ? "on " : "off"}: ${N} rollouts in ${secs.toFixed(1)} s ` +
      `(${(secs / N * 2).toFixed(2)} s per rollout per slot, concurrency 2), reward sum ` +
      `${rewards.reduce((a, b) => a + b, 0)}/${N}`,
  );
  await s.close();
  await Deno.remove(root, { recursive: true });
}

console.log(accuracy.join("\n"));
console.log(table.join("\n"));
console.log(e2e.join("\n"));
