/**
 * The built-in harness as the controller runs it: `builtin-<env>` names resolved through the
 * harness registry, `lib/harness/builtin/main.ts` spawned by the local backend with the
 * attempt's proxy URL and token, rewards computed by the environments' reward functions.
 */
import assert from "node:assert/strict";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";
import type { GatewayClient } from "../lib/gateway/client.ts";
import type { RunningGateway } from "../lib/gateway/server.ts";
import { builtinScriptedPolicy } from "../lib/harness/builtin/scripted.ts";
import { calculatorTool } from "../lib/harness/envs/arithmetic.ts";
import { arithmeticExpert, searchExpert } from "../lib/harness/envs/experts.ts";
import { harnessRegistry } from "../lib/harness/registry.ts";
import { startScriptedUpstream } from "../lib/proxy/scripted_upstream.ts";
import type { ScriptedPolicy } from "../lib/harness/envs/experts.ts";
import { assembleRollout } from "../lib/samples/mod.ts";
import type { AgentStats } from "../lib/harness/builtin/agent.ts";
import type { JsonObject, Rollout, RolloutCreate } from "../lib/schema.ts";
import { breakCounts, qwen3, startProxiedGateway } from "./support/harness_fixture.ts";

async function waitDone(client: GatewayClient, ids: string[], ms: number): Promise<Rollout[]> {
  const end = Date.now() + ms;
  while (Date.now() < end) {
    const all = await Promise.all(ids.map((id) => client.getRollout(id)));
    if (all.every((r) => ["succeeded", "failed", "cancelled"].includes(r.status))) return all;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`rollouts ${ids.join(", ")} did not finish in ${ms} ms`);
}

async function withController(
  policy: ScriptedPolicy,
  creates: RolloutCreate[],
  check: (
    ctx: { gateway: RunningGateway; client: GatewayClient; rollouts: Rollout[] },
  ) => Promise<void>,
) {
  const tokenizer = await qwen3();
  const root = await Deno.makeTempDir({ prefix: "reins-harness-ctl-" });
  const upstream = await startScriptedUpstream({ tokenizer, policy });
  const { gateway, client } = await startProxiedGateway(tokenizer, upstream.url);
  const { harnesses, rewardFunctions } = harnessRegistry();
  const loop = new Reconciler(
    client,
    new LocalBackend({ root, harnesses, rewardFunctions, pollMs: 25 }),
    {
      worker: "harness-ctl",
      concurrency: 2,
      lease_ms: 30_000,
      poll_ms: 25,
      gatewayUrl: gateway.url,
    },
  );
  try {
    await client.createRollouts(creates);
    await loop.start();
    const rollouts = await waitDone(client, creates.map((c) => c.rollout_id!), 60_000);
    await loop.stop("drain");
    await check({ gateway, client, rollouts });
  } finally {
    await loop.stop("kill").catch(() => {});
    await gateway.close();
    await upstream.close();
    await Deno.remove(root, { recursive: true });
  }
}

async function resultEvent(client: GatewayClient, id: string) {
  const events = await client.listEvents(id, { type: "custom" });
  const event = events.find((e) => e.type === "custom" && e.payload.name === "builtin_harness");
  assert.ok(event && event.type === "custom", `${id}: the harness posted its result event`);
  return event.payload.data as JsonObject & { answer: string | null; stats: AgentStats };
}

Deno.test("controller runs builtin-arithmetic: right answer → reward 1, wrong → 0, exact tokens captured", async () => {
  const { envs } = harnessRegistry();
  const [right, wrong, compacted] = envs.arithmetic.loadTasks().slice(0, 3);
  const policy = arithmeticExpert({ wrong: (q) => q === wrong.question });
  const spec = (options: JsonObject = {}) => ({
    timeout_s: 60,
    harness: { name: "builtin-arithmetic", options },
  });
  await withController(policy, [
    { rollout_id: "arith-right", input: envs.arithmetic.taskInput(right), config: spec() },
    { rollout_id: "arith-wrong", input: envs.arithmetic.taskInput(wrong), config: spec() },
    {
      rollout_id: "arith-compact",
      input: envs.arithmetic.taskInput(compacted),
      config: spec({ compaction: { max_chars: 10 }, stream: true }),
    },
  ], async ({ gateway, client, rollouts }) => {
    const tokenizer = await qwen3();
    const byId = new Map(rollouts.map((r) => [r.rollout_id, r]));
    for (const r of rollouts) assert.equal(r.status, "succeeded", JSON.stringify(r.attempts));
    assert.equal(byId.get("arith-right")!.reward, 1);
    assert.equal(byId.get("arith-wrong")!.reward, 0);
    assert.equal(byId.get("arith-compact")!.reward, 1);
    const result = await resultEvent(client, "arith-right");
    assert.equal(result.answer, right.answer);
    assert.equal(result.stats.calls, 2);
    // The gateway holds both calls with the exact ids the policy sampled and the prompt the
    // template renders from the messages the harness sent.
    const events = await gateway.store.listEvents("arith-right", {});
    const calls = events.filter((e) => e.type === "model_request");
    assert.equal(calls.length, 2);
    for (const call of calls) {
      if (call.type !== "model_request") continue;
      const p = call.payload;
      assert.equal(p.response_logprobs.length, p.response_token_ids.length);
      const tools = [{
        type: "function",
        function: {
          name: calculatorTool.name,
          description: calculatorTool.description,
          parameters: calculatorTool.parameters,
        },
      }];
      const expected = tokenizer.encode(
        tokenizer.render(p.messages!, { addGenerationPrompt: true, tools }),
      );
      assert.deepEqual(Array.from(p.prompt_token_ids), Array.from(expected));
    }
    const assembly = assembleRollout(events, { tokenizer });
    assert.equal(assembly.samples.length, 1);
    assert.equal(assembly.samples[0].reward, 1);
    // Compaction configured through the rollout's harness options: the stats the harness
    // reports and the breaks the assembly finds agree.
    const compact = await resultEvent(client, "arith-compact");
    assert.equal(compact.stats.compactions, 1);
    const breaks = breakCounts(
      assembleRollout(await gateway.store.listEvents("arith-compact", {}), { tokenizer }),
    );
    assert.deepEqual(breaks, {
      compaction: compact.stats.compactions,
      template_rewrite: compact.stats.template_rewrites,
    });
  });
});

Deno.test("controller runs builtin-search: one- and two-hop questions answered through the search tool", async () => {
  const { envs } = harnessRegistry();
  const tasks = envs.search.loadTasks().slice(3, 6); // one 1-hop, two 2-hop questions
  await withController(
    searchExpert(),
    tasks.map((task, i) => ({
      rollout_id: `search-${i}`,
      input: envs.search.taskInput(task),
      config: { timeout_s: 60, harness: { name: "builtin-search", options: {} } },
    })),
    async ({ client, rollouts }) => {
      for (const [i, r] of rollouts.entries()) {
        assert.equal(r.status, "succeeded");
        assert.equal(r.reward, 1, `${tasks[i].question} → ${tasks[i].answer}`);
        const result = await resultEvent(client, r.rollout_id);
        // A two-hop question may need a second search (or the first one may already return
        // the city's page among its three documents).
        assert.ok(result.stats.tool_calls >= 1 && result.stats.tool_calls <= tasks[i].hops);
      }
    },
  );
});

Deno.test("controller runs builtin-files: the verifier scores the workspace the agent left", async () => {
  const { envs } = harnessRegistry();
  const [greeting, count] = envs.files.loadTasks();
  const phrase = greeting.instruction.split(": ")[1];
  const write = (path: string, content: string) =>
    builtinScriptedPolicy({
      main: [
        { reasoning: "List first.", tool_calls: [{ name: "list_files", arguments: {} }] },
        {
          reasoning: "Write it.",
          tool_calls: [{ name: "write_file", arguments: { path, content } }],
        },
        { reasoning: "Done.", content: "<answer>done</answer>" },
      ],
    });
  const right = write("greeting.txt", `${phrase}\n`);
  const wrong = write("count.txt", "99\n");
  await withController(
    (input) => (input.promptText.includes("greeting.txt") ? right : wrong)(input),
    [greeting, count].map((task, i) => ({
      rollout_id: `files-${i}`,
      input: envs.files.taskInput(task),
      config: { timeout_s: 60, harness: { name: "builtin-files", options: {} } },
    })),
    async ({ client, rollouts }) => {
      assert.deepEqual(rollouts.map((r) => [r.status, r.reward]), [["succeeded", 1], [
        "succeeded",
        0,
      ]]);
      const result = await resultEvent(client, "files-0");
      assert.equal(result.stats.tool_calls, 2);
      assert.equal(result.stats.tool_errors, 0);
    },
  );
});
