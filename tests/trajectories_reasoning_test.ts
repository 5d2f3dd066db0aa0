/**
 * Logged reasoning and the policy-output model of the replay: importers keep every reasoning
 * field they know (and say which they read), and the replay states what the policy emits.
 */
import assert from "node:assert/strict";
import {
  importTrajectoryFile,
  loadQwen3KeepReasoningTokenizer,
  loadTrajectories,
  parseMiniSweAgent,
  parseSweAgent,
  parseTauBench,
  replayTrajectory,
  trajectoriesRoot,
  type Trajectory,
  trajectoryCalls,
  trajectoryStats,
} from "../lib/trajectories/mod.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { assembleRollout } from "../lib/samples/mod.ts";
import { ValidationError } from "../lib/schema.ts";

const FIXTURES = new URL("./fixtures/trajectories/mini-swe-agent/", import.meta.url).pathname;
const ROOT = trajectoriesRoot();

function reasoningOf(t: Trajectory): (string | undefined)[] {
  return trajectoryCalls(t).map((c) => c.response.reasoning_content);
}

Deno.test("mini-swe-agent: reasoning is read from the logged API response", async () => {
  const [t] = await importTrajectoryFile(`${FIXTURES}reasoning_v1.traj.json`);
  assert.equal(t.source, "mini-swe-agent");
  assert.deepEqual(reasoningOf(t), [
    "The task mentions add(); I should find where it is defined.",
    "calc.py is the only module, so add() must live there.",
    "The operator is wrong.",
  ]);
  // The record says where it looked and where it found something.
  assert.deepEqual(t.reasoning.found, {
    "extra.response.choices[0].message.reasoning_content": 1,
    "extra.response.choices[0].message.reasoning": 1,
    "extra.response.choices[0].message.thinking_blocks[].thinking": 1,
  });
  assert.ok(t.reasoning.fields_read.includes("reasoning_content"));
  assert.ok(
    t.reasoning.fields_read.includes("extra.response.output[type=reasoning].summary[].text"),
  );
  assert.equal(trajectoryStats(t).reasoning, 3);
});

Deno.test("mini-swe-agent v2: tool calls, tool results, exit skipped, message-level reasoning", async () => {
  const [t] = await importTrajectoryFile(`${FIXTURES}toolcall_v2.traj.json`);
  const calls = trajectoryCalls(t);
  assert.equal(calls.length, 2);
  assert.deepEqual(calls.map((c) => c.response.tool_calls?.[0].function.name), ["bash", "bash"]);
  assert.deepEqual(reasoningOf(t), ["List first.", "Nothing else to do."]);
  assert.deepEqual(t.reasoning.found, {
    reasoning_content: 1,
    "extra.response.output[type=reasoning].summary[].text": 1,
  });
  const messages = t.conversations[0].segments[0].messages;
  assert.deepEqual(messages.map((m) => m.role), [
    "system",
    "user",
    "assistant",
    "tool",
    "assistant",
    "tool",
  ]);
  assert.equal(messages[3].tool_call_id, "call_1");
});

Deno.test("an inline <think> block at the start of the text is logged reasoning, even empty", () => {
  const t = parseMiniSweAgent([
    { role: "user", content: "q" },
    { role: "assistant", content: "<think>\nplan\n</think>\n\nls" },
    { role: "user", content: "out" },
    { role: "assistant", content: "<think>\n\n</think>\n\ndone" },
  ], "inline.json");
  assert.deepEqual(reasoningOf(t), ["plan", ""]);
  assert.deepEqual(trajectoryCalls(t).map((c) => c.response.content), ["ls", "done"]);
  assert.deepEqual(t.reasoning.found, { "content (leading <think>…</think>)": 2 });
});

Deno.test("SWE-agent thinking_blocks and tau-bench reasoning_content are kept", () => {
  const swe = parseSweAgent({
    history: [
      { role: "user", content: "fix it" },
      {
        role: "assistant",
        content: "ls",
        thought: "ls",
        thinking_blocks: [{ type: "thinking", thinking: "look first", signature: "s" }],
      },
    ],
  }, "x.traj");
  assert.deepEqual(reasoningOf(swe), ["look first"]);
  assert.deepEqual(swe.reasoning, {
    fields_read: ["thinking_blocks[].thinking", "content (leading <think>…</think>)"],
    found: { "thinking_blocks[].thinking": 1 },
  });
  const [tau] = parseTauBench([{
    task_id: 1,
    reward: 1,
    traj: [
      { role: "user", content: "hi" },
      { role: "assistant", content: "hello", reasoning_content: "greet back" },
    ],
  }], "tau.json");
  assert.deepEqual(reasoningOf(tau), ["greet back"]);
  assert.deepEqual(tau.reasoning.found, { reasoning_content: 1 });
});

Deno.test("every shipped record says which reasoning fields were read and what they held", async () => {
  const runs = await loadTrajectories();
  for (const run of runs) {
    assert.ok(run.reasoning.fields_read.length > 0, run.id);
    const found = Object.values(run.reasoning.found).reduce((a, b) => a + b, 0);
    assert.equal(found, trajectoryStats(run).reasoning, run.id);
  }
  const cc = runs.filter((r) => r.source === "claude-code");
  assert.deepEqual(cc.map((r) => r.reasoning.found), [
    { "message.content[type=thinking].thinking": 1 },
    { "message.content[type=thinking].thinking": 4 },
    { "message.content[type=thinking].thinking": 1 },
  ]);
  assert.deepEqual(cc[0].reasoning.fields_read, ["message.content[type=thinking].thinking"]);
});

Deno.test("restoring mini-swe-agent's logged reasoning splits every turn under Qwen3's template", async () => {
  // The observations of text-based mini-swe-agent come back as user messages, so every call is
  // a new query and Qwen3's template drops the earlier turns' reasoning. Without the reasoning
  // (what the importer kept before) the run looked like one sample.
  const qwen3 = await loadQwen3Tokenizer();
  const [t] = await importTrajectoryFile(`${FIXTURES}reasoning_v1.traj.json`);
  const samples = (policy_output: "logged" | "plain") =>
    assembleRollout(replayTrajectory(t, qwen3, { policy_output }), { tokenizer: qwen3 });
  const logged = samples("logged");
  assert.equal(logged.samples.length, 3);
  assert.deepEqual(logged.breaks.map((b) => b.reason), ["template_rewrite", "template_rewrite"]);
  assert.equal(samples("plain").samples.length, 1);
});

Deno.test("policy output: logged, thinking (empty block where none logged), plain", async () => {
  const qwen3 = await loadQwen3Tokenizer();
  const [cc] = await importTrajectoryFile(`${ROOT}/claude-code/short.jsonl`);
  const [mini] = await importTrajectoryFile(`${ROOT}/mini-swe-agent_testdata/local.traj.json`);
  const text = (t: Trajectory, policy_output?: "logged" | "thinking" | "plain") =>
    replayTrajectory(t, qwen3, policy_output ? { policy_output } : {}).map((e) =>
      e.payload.response_text ?? ""
    );
  // Default: logged. Claude Code's thinking block is replayed, the GPT-style log has none.
  assert.deepEqual(text(cc), text(cc, "logged"));
  assert.match(text(cc)[0], /^<think>\n\S/);
  assert.ok(text(mini).every((r) => !r.includes("<think>")));
  // thinking: the logged reasoning where there is some, an empty block elsewhere.
  assert.equal(text(cc, "thinking")[0], text(cc)[0]);
  assert.ok(text(mini, "thinking").every((r) => r.startsWith("<think>\n\n</think>\n\n")));
  // plain: never a block, even where one was logged.
  assert.ok(text(cc, "plain").every((r) => !r.includes("<think>")));
  const events = replayTrajectory(mini, qwen3, { policy_output: "thinking" });
  assert.equal(events[0].payload.request.policy_output, "thinking");
  // The history carries what the policy produced: an empty reasoning on earlier turns.
  assert.equal(
    events[1].payload.messages?.find((m) => m.role === "assistant")?.reasoning_content,
    "",
  );
  assert.throws(
    () => replayTrajectory(mini, qwen3, { policy_output: "sometimes" as "plain" }),
    (e: unknown) => e instanceof ValidationError && e.field === "options.policy_output",
  );
});

Deno.test("a thinking policy splits every call under Qwen3's template, none under the keeping variant", async () => {
  const qwen3 = await loadQwen3Tokenizer();
  const keep = await loadQwen3KeepReasoningTokenizer();
  const [mini] = await importTrajectoryFile(
    `${ROOT}/mini-swe-agent_testdata/github_issue.traj.json`,
  );
  const count = (tok: typeof qwen3, policy_output: "logged" | "thinking" | "plain") =>
    assembleRollout(replayTrajectory(mini, tok, { policy_output }), { tokenizer: tok }).samples
      .length;
  assert.equal(count(qwen3, "logged"), 1);
  assert.equal(count(qwen3, "plain"), 1);
  assert.equal(count(qwen3, "thinking"), 10); // one per call: the empty block is never kept
  assert.equal(count(keep, "thinking"), 1); // the variant writes the empty block back
  // Within a tool loop Qwen3 keeps non-empty reasoning but drops an empty block.
  const loop = parseMiniSweAgent([
    { role: "user", content: "q" },
    { role: "assistant", content: "", tool_calls: [call("a")] },
    { role: "tool", tool_call_id: "a", content: "1" },
    { role: "assistant", content: "", tool_calls: [call("b")] },
    { role: "tool", tool_call_id: "b", content: "2" },
    { role: "assistant", content: "done" },
  ], "loop.json");
  const thinking = assembleRollout(replayTrajectory(loop, qwen3, { policy_output: "thinking" }), {
    tokenizer: qwen3,
  });
  assert.equal(thinking.samples.length, 3);
  const reasoned = parseMiniSweAgent(
    [...loop.conversations[0].segments[0].messages].map((m) =>
      m.role === "assistant" ? { ...m, reasoning_content: "r" } : m
    ),
    "loop_reasoned.json",
  );
  assert.equal(
    assembleRollout(replayTrajectory(reasoned, qwen3), { tokenizer: qwen3 }).samples.length,
    1,
  );
});

function call(id: string) {
  return { id, type: "function", function: { name: "f", arguments: "{}" } };
}
