/**
 * The built-in harness run in-process by the local backend (`runner: "in_process"`): the same
 * training data as a process (same prompts, sampled token ids and rewards for the same seeded
 * tasks, through the real proxy and worker), and a process's failure semantics (a failed model
 * call is status 1, a hung one ends at the timeout, an abort stops the agent).
 */
import assert from "node:assert/strict";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";
import type { GatewayClient } from "../lib/gateway/client.ts";
import { runBuiltinInProcess } from "../lib/harness/builtin/in_process.ts";
import { arithmeticExpert } from "../lib/harness/envs/experts.ts";
import { harnessRegistry } from "../lib/harness/registry.ts";
import { evaluatePolicy, toyLoopTasks, toyModel } from "../lib/loop/mod.ts";
import { type ScriptedFailure, startScriptedUpstream } from "../lib/proxy/scripted_upstream.ts";
import { type JsonObject, parseOrThrow, type Rollout, type RolloutEvent } from "../lib/schema.ts";
import { LoopConfigSchema } from "../lib/loop/schema.ts";
import { startTestStack, testConfig } from "./loop_helpers.ts";
import { qwen3, startHarnessFixture, startProxiedGateway } from "./support/harness_fixture.ts";
import { waitFor } from "./support/wait.ts";

Deno.test("in-process and process runs of the same seeded tasks record the same calls and rewards", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-inproc-" });
  const { stack, tokenizer, tasks, dataDir } = await startTestStack(dir, 4);
  try {
    const base = testConfig("same", dir, dataDir, tokenizer, {
      model: toyModel(tokenizer, { d_model: 32, n_layers: 1, max_seq_len: 512 }),
    });
    const configOf = (runner: string) =>
      parseOrThrow(LoopConfigSchema, {
        ...base,
        name: runner.replace("_", "-"),
        harness: { ...base.harness, options: { ...(base.harness.options as JsonObject), runner } },
      });
    const [inProc, proc] = [configOf("in_process"), configOf("process")];
    const state = await stack.worker.client.init({ model: inProc.model! });
    await stack.client.registerModel({
      name: inProc.policy_name,
      endpoints: [stack.worker.url],
      version: state.policy_version,
    });
    await stack.client.setPhase("rollout");
    await stack.services.startController!();
    const evalTasks = toyLoopTasks(tasks.slice(0, 4));
    // `loop-test` is the built-in harness under another name: say which option is the seed.
    const a = await evaluatePolicy(stack.client, inProc, "x", evalTasks, { seedOption: "seed" });
    const b = await evaluatePolicy(stack.client, proc, "x", evalTasks, { seedOption: "seed" });
    assert.equal(a.failed + b.failed, 0);
    assert.deepEqual(a.seeds, b.seeds);
    assert.deepEqual(a.rewards, b.rewards, "same rewards");
    const calls = (events: RolloutEvent[]) =>
      events.flatMap((e) =>
        e.type === "model_request"
          ? [{
            prompt: Array.from(e.payload.prompt_token_ids),
            response: Array.from(e.payload.response_token_ids),
            messages: e.payload.messages,
          }]
          : []
      );
    const result = (events: RolloutEvent[]) =>
      events.find((e) => e.type === "custom" && e.payload.name === "builtin_harness");
    for (let i = 0; i < evalTasks.length; i++) {
      const [x, y] = await Promise.all(
        ["in-process", "process"].map((run) => stack.client.listEvents(`${run}-eval-x-${i}`, {})),
      );
      assert.ok(calls(x).length > 0, `rollout ${i} made calls`);
      assert.deepEqual(calls(x), calls(y), `rollout ${i}: same prompts and sampled token ids`);
      const [rx, ry] = [result(x), result(y)];
      assert.ok(rx?.type === "custom" && ry?.type === "custom", "both posted the result event");
      assert.deepEqual(rx.payload, ry.payload);
      const [ax, ay] = await Promise.all(
        ["in-process", "process"].map(async (run) =>
          (await stack.client.getRollout(`${run}-eval-x-${i}`)).attempts[0]
        ),
      );
      assert.equal(ax.info.runner, "in_process");
      assert.equal(ax.info.pid, Deno.pid, "ran in the stack's own process");
      assert.equal(ay.info.runner, undefined);
      assert.notEqual(ay.info.pid, Deno.pid);
    }
  } finally {
    await stack.close();
    await Deno.remove(dir, { recursive: true });
  }
});

async function waitSettled(client: GatewayClient, ids: string[]): Promise<Rollout[]> {
  return await waitFor(
    async () => {
      const all = await Promise.all(ids.map((id) => client.getRollout(id)));
      return all.every((r) => ["succeeded", "failed"].includes(r.status)) && all;
    },
    60_000,
    `rollouts ${ids.join(", ")} to settle`,
  );
}

Deno.test("in-process builtin: a failed model call fails the attempt, a hung one times out", async () => {
  const tokenizer = await qwen3();
  // The first call hangs; every later one (the proxy's retries included) fails.
  const fail = (i: number): ScriptedFailure => i === 0 ? { hang: true } : { status: 500 };
  const upstream = await startScriptedUpstream({ tokenizer, policy: arithmeticExpert(), fail });
  const { gateway, client } = await startProxiedGateway(tokenizer, upstream.url);
  const root = await Deno.makeTempDir({ prefix: "reins-inproc-ctl-" });
  const registry = harnessRegistry();
  const loop = new Reconciler(
    client,
    new LocalBackend({
      root,
      harnesses: registry.harnesses,
      rewardFunctions: registry.rewardFunctions,
      inProcess: registry.inProcess,
      pollMs: 25,
      keepWorkdirs: true,
    }),
    { worker: "inproc", concurrency: 1, lease_ms: 30_000, poll_ms: 25, gatewayUrl: gateway.url },
  );
  try {
    const [task] = registry.envs.arithmetic.loadTasks();
    const options = { runner: "in_process", max_retries: 0 };
    // One at a time, so that the hung call is the first rollout's.
    await client.createRollouts([{
      rollout_id: "hang",
      input: registry.envs.arithmetic.taskInput(task),
      config: { timeout_s: 1.5, harness: { name: "builtin-arithmetic", options } },
    }]);
    await loop.start();
    const [hang] = await waitSettled(client, ["hang"]);
    await client.createRollouts([{
      rollout_id: "err",
      input: registry.envs.arithmetic.taskInput(task),
      config: { timeout_s: 60, harness: { name: "builtin-arithmetic", options } },
    }]);
    const [err] = await waitSettled(client, ["err"]);
    await loop.stop("drain");
    assert.deepEqual(
      [err.status, err.attempts[0].status, err.attempts[0].exit_code],
      ["failed", "failed", 1],
    );
    assert.equal(err.attempts[0].error, "in-process harness ended with status 1");
    const logs = await client.listEvents("err", { type: "log" });
    const stderr = logs.map((e) => e.type === "log" ? e.payload.text : "").join("");
    assert.match(stderr, /builtin harness: model call failed: /);
    assert.deepEqual([hang.status, hang.attempts[0].status], ["failed", "timeout"]);
    assert.equal(hang.attempts[0].error, "timed out after 1.5s");
    // Ended at the deadline: it wrote no answer, no exit status and no result event.
    const work = `${root}/attempts/${hang.attempts[0].attempt_id}`;
    await assert.rejects(() => Deno.stat(`${work}/work/answer.txt`), Deno.errors.NotFound);
    await assert.rejects(() => Deno.stat(`${work}/exit_code`), Deno.errors.NotFound);
    assert.equal((await client.listEvents("hang", { type: "custom" })).length, 0);
  } finally {
    await loop.stop("kill").catch(() => {});
    // The upstream first: it releases the hung call. The proxy does not see the aborted
    // request's connection close when it is a reused keep-alive connection (a process harness
    // killed in its second call is no different), so the call would hold the gateway's
    // shutdown until the upstream timeout.
    await upstream.close();
    await gateway.close();
    await Deno.remove(root, { recursive: true });
  }
});

Deno.test("in-process builtin: an abort stops the agent in the middle of a model call", async () => {
  const fx = await startHarnessFixture({
    scripted: { policy: arithmeticExpert(), fail: () => ({ hang: true }) },
  });
  const dir = await Deno.makeTempDir({ prefix: "reins-inproc-abort-" });
  try {
    const input = { env: "arithmetic", id: "arith-0002", prompt: "What is 13 * 5 / 5 * 3?" };
    const { baseURL, token, attemptId } = await fx.open("abort", input);
    const abort = new AbortController();
    const err: string[] = [];
    const t0 = Date.now();
    setTimeout(() => abort.abort(new DOMException("stop", "AbortError")), 300);
    const code = await runBuiltinInProcess({
      options: { env: "arithmetic", max_retries: 0 },
      input,
      env: {
        OPENAI_BASE_URL: baseURL,
        OPENAI_API_KEY: token,
        REINS_GATEWAY_URL: fx.gateway.url,
        REINS_ROLLOUT_ID: "abort",
        REINS_ATTEMPT_ID: attemptId,
      },
      workdir: dir,
      signal: abort.signal,
      stdout: () => {},
      stderr: (t) => err.push(t),
    });
    assert.equal(code, 1);
    assert.ok(Date.now() - t0 < 10_000, "the hung call was abandoned");
    assert.match(err.join(""), /model call failed: .*abort/i);
    await assert.rejects(() => Deno.stat(`${dir}/answer.txt`), Deno.errors.NotFound);
    assert.equal((await fx.gateway.store.listEvents("abort", { type: "custom" })).length, 0);
  } finally {
    await fx.close();
    await Deno.remove(dir, { recursive: true });
  }
});
