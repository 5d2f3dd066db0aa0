/**
 * The built-in harness as a command (`lib/harness/builtin/main.ts`) and its client retries.
 */
import assert from "node:assert/strict";
import { runAgent } from "../lib/harness/builtin/agent.ts";
import { builtinCommand } from "../lib/harness/builtin/resolver.ts";
import { builtinScriptedPolicy } from "../lib/harness/builtin/scripted.ts";
import { calculatorTool } from "../lib/harness/envs/arithmetic.ts";
import { arithmeticExpert } from "../lib/harness/envs/experts.ts";
import { parseOrThrow } from "../lib/schema.ts";
import { BuiltinHarnessOptionsSchema } from "../lib/harness/schema.ts";
import { breakCounts, startHarnessFixture } from "./support/harness_fixture.ts";

async function runMain(
  options: unknown,
  env: Record<string, string>,
): Promise<{ code: number; stdout: string; stderr: string }> {
  const [cmd, ...args] = builtinCommand({});
  args[args.length - 1] = JSON.stringify(options);
  const out = await new Deno.Command(cmd, { args, env, stdout: "piped", stderr: "piped" }).output();
  const dec = new TextDecoder();
  return { code: out.code, stdout: dec.decode(out.stdout), stderr: dec.decode(out.stderr) };
}

Deno.test("main.ts: reads the task file, answers through the proxy, writes answer.txt and a result event", async () => {
  const fx = await startHarnessFixture({ scripted: { policy: arithmeticExpert() } });
  const dir = await Deno.makeTempDir({ prefix: "reins-main-" });
  try {
    const input = { env: "arithmetic", id: "arith-0002", prompt: "What is 13 * 5 / 5 * 3?" };
    const { baseURL, token, attemptId } = await fx.open("main-1", input);
    await Deno.writeTextFile(`${dir}/input.json`, JSON.stringify(input));
    const run = await runMain({ env: "arithmetic", max_turns: 4 }, {
      OPENAI_BASE_URL: baseURL,
      OPENAI_API_KEY: token,
      REINS_INPUT_FILE: `${dir}/input.json`,
      REINS_WORKDIR: dir,
      REINS_GATEWAY_URL: fx.gateway.url,
      REINS_ROLLOUT_ID: "main-1",
      REINS_ATTEMPT_ID: attemptId,
      NO_COLOR: "1",
    });
    assert.equal(run.code, 0, run.stderr);
    assert.equal(await Deno.readTextFile(`${dir}/answer.txt`), "39\n");
    const summary = JSON.parse(run.stdout.trim().split("\n").at(-1)!);
    assert.equal(summary.answer, "39");
    assert.equal(summary.stop, "answer");
    assert.equal(summary.stats.tool_calls, 1);
    assert.match(run.stderr, /tool calculator\(.*13 \* 5 \/ 5 \* 3.*\) → 39/);
    const events = await fx.gateway.store.listEvents("main-1", { type: "custom" });
    assert.equal(events.length, 1);
    assert.deepEqual((events[0].payload as { data: unknown }).data, summary);
  } finally {
    await fx.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("main.ts: bad options or input exit with status 2 and name the field", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-main-" });
  try {
    await Deno.writeTextFile(`${dir}/input.json`, JSON.stringify({ prompt: "hi" }));
    const env = { REINS_INPUT_FILE: `${dir}/input.json`, NO_COLOR: "1" };
    const badTurns = await runMain({ max_turns: 0 }, env);
    assert.equal(badTurns.code, 2);
    assert.match(badTurns.stderr, /options\.max_turns/);
    const badEnv = await runMain({ env: "chess" }, env);
    assert.equal(badEnv.code, 2);
    assert.match(badEnv.stderr, /options\.env/);
    await Deno.writeTextFile(`${dir}/input.json`, JSON.stringify({ nothing: 1 }));
    const badInput = await runMain({}, env);
    assert.equal(badInput.code, 2);
    assert.match(badInput.stderr, /input: must be a string or hold a prompt/);
    const noFile = await runMain({}, { NO_COLOR: "1" });
    assert.equal(noFile.code, 2);
    assert.match(noFile.stderr, /REINS_INPUT_FILE: not set/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("client retries: a failed call is retried by the SDK; the failure is captured and dropped", async () => {
  const steps = [
    {
      reasoning: "Compute.",
      tool_calls: [{ name: "calculator", arguments: { expression: "2 * 21" } }],
    },
    { reasoning: "Done.", content: "<answer>42</answer>" },
  ];
  const fx = await startHarnessFixture({
    scripted: {
      policy: builtinScriptedPolicy({ main: steps }),
      // The second call to the upstream fails once; the proxy does not retry (max_retries 0),
      // so the harness's client sees a 5xx and retries the same request.
      fail: (index) => index === 1 ? { status: 503 } : null,
    },
    upstream: { max_retries: 0 },
  });
  try {
    const { client } = await fx.open("retry");
    const result = await runAgent({
      client,
      options: parseOrThrow(BuiltinHarnessOptionsSchema, { env: "arithmetic", max_retries: 2 }),
      task: "What is 2 * 21?",
      systemPrompt: "Use the calculator.",
      tools: [calculatorTool],
    });
    assert.equal(result.answer, "42");
    assert.equal(result.stats.calls, 2, "the harness made two logical calls");
    assert.equal(fx.upstream.calls.length, 3, "the upstream saw the retry");
    const assembly = await fx.assemble("retry");
    assert.equal(assembly.metrics.calls, 3);
    assert.equal(assembly.dropped.length, 1);
    assert.match(assembly.dropped[0].reason, /error|http_status/);
    assert.equal(assembly.samples.length, 1);
    assert.deepEqual(breakCounts(assembly), {});
  } finally {
    await fx.close();
  }
});
