import assert from "node:assert/strict";
import {
  detectTrajectoryFormat,
  importTrajectoryFile,
  inferTools,
  loadTrajectories,
  parseClaudeCode,
  parseSweAgent,
  parseTauBench,
  trajectoriesRoot,
  type Trajectory,
  trajectoryCalls,
  type TrajectoryStats,
  trajectoryStats,
} from "../lib/trajectories/mod.ts";
import { IdSchema, ValidationError } from "../lib/schema.ts";

const ROOT = trajectoriesRoot();
const FIXTURES = new URL("./fixtures/trajectories/", import.meta.url).pathname;

async function one(rel: string): Promise<Trajectory> {
  const [t] = await importTrajectoryFile(`${ROOT}/${rel}`, { root: ROOT });
  return t;
}

type Counts = Pick<
  TrajectoryStats,
  "messages" | "calls" | "tool_calls" | "tool_results" | "reasoning"
>;
function counts(t: Trajectory): Counts {
  const { messages, calls, tool_calls, tool_results, reasoning } = trajectoryStats(t);
  return { messages, calls, tool_calls, tool_results, reasoning };
}

Deno.test("the shared data root resolves next to the repo and loads every file", async () => {
  assert.ok((await Deno.stat(`${ROOT}/README.md`)).isFile, `${ROOT} holds the shared data`);
  const all = await loadTrajectories();
  const bySource = Map.groupBy(all, (t) => t.source);
  assert.equal(bySource.get("swe-agent")?.length, 22);
  assert.equal(bySource.get("tau-bench")?.length, 200);
  assert.equal(bySource.get("mini-swe-agent")?.length, 2);
  assert.equal(bySource.get("claude-code")?.length, 3);
  assert.equal(new Set(all.map((t) => t.id)).size, all.length, "rollout ids are unique");
  for (const t of all) {
    assert.ok(IdSchema.safeParse(t.id).success, `id ${t.id} is a valid rollout id`);
    assert.ok(IdSchema.safeParse(t.group_id).success, `group ${t.group_id} is valid`);
    for (const call of trajectoryCalls(t)) assert.equal(call.response.role, "assistant");
  }
});

Deno.test("SWE-agent .traj: every history message, OpenAI tool calls and tool results", async () => {
  const expected: Record<string, Counts> = {
    "swe-agent/trajectories/demonstrations/function_calling_simple.traj": {
      messages: 12,
      calls: 5,
      tool_calls: 5,
      tool_results: 5,
      reasoning: 0,
    },
    "swe-agent/trajectories/demonstrations/ctf/web/i_got_id_demo.traj": {
      messages: 43,
      calls: 21,
      tool_calls: 0,
      tool_results: 0,
      reasoning: 0,
    },
    "swe-agent/tests/test_data/trajectories/gpt4__swe-bench-dev-easy_first_only__default__t-0.00__p-0.95__c-3.00__install-1/pydicom__pydicom-1458.traj":
      { messages: 26, calls: 12, tool_calls: 0, tool_results: 0, reasoning: 0 },
  };
  for (const [rel, want] of Object.entries(expected)) {
    assert.deepEqual(counts(await one(rel)), want, rel);
  }

  const all = await loadTrajectories({ sources: ["swe-agent"] });
  const total = all.map(counts).reduce((a, b) => ({
    messages: a.messages + b.messages,
    calls: a.calls + b.calls,
    tool_calls: a.tool_calls + b.tool_calls,
    tool_results: a.tool_results + b.tool_results,
    reasoning: a.reasoning + b.reasoning,
  }));
  assert.deepEqual(total, {
    messages: 489,
    calls: 230,
    tool_calls: 44,
    tool_results: 44,
    reasoning: 0,
  });
  // The eight marshmallow-1867 runs are one task: one GRPO group.
  const groups = Map.groupBy(all, (t) => t.group_id);
  assert.equal(groups.get("swe-agent:marshmallow-code__marshmallow-1867")?.length, 8);

  const fc = await one("swe-agent/trajectories/demonstrations/function_calling_simple.traj");
  const msgs = fc.conversations[0].segments[0].messages;
  const call = msgs.find((m) => m.tool_calls)!.tool_calls![0];
  assert.equal(msgs.find((m) => m.role === "tool")!.tool_call_id, call.id);
  assert.deepEqual(fc.tools?.map((t) => (t.function as { name: string }).name), [
    "bash",
    "edit",
    "find_file",
    "open",
    "submit",
  ]);
});

Deno.test("tau-bench: 200 runs of 50 tasks, rewards kept, tool calls and results", async () => {
  const runs = await importTrajectoryFile(`${ROOT}/tau-bench/gpt-4o-airline.json`, { root: ROOT });
  assert.equal(runs.length, 200);
  assert.equal(new Set(runs.map((t) => t.group_id)).size, 50);
  assert.equal(runs.filter((t) => t.reward === 1).length, 84);
  assert.equal(runs.reduce((n, t) => n + trajectoryStats(t).messages, 0), 5308);
  assert.equal(runs.reduce((n, t) => n + trajectoryStats(t).calls, 0), 2454);
  assert.equal(runs.reduce((n, t) => n + trajectoryStats(t).tool_calls, 0), 1164);
  assert.equal(runs.reduce((n, t) => n + trajectoryStats(t).tool_results, 0), 1164);
  const t17 = runs[17];
  assert.equal(t17.id, "tau-bench:gpt-4o-airline:task17:trial0");
  assert.deepEqual(counts(t17), {
    messages: 38,
    calls: 18,
    tool_calls: 11,
    tool_results: 11,
    reasoning: 0,
  });
});

Deno.test("mini-swe-agent: plain message lists, actions inside the text", async () => {
  assert.deepEqual(counts(await one("mini-swe-agent_testdata/github_issue.traj.json")), {
    messages: 22,
    calls: 10,
    tool_calls: 0,
    tool_results: 0,
    reasoning: 0,
  });
  assert.deepEqual(counts(await one("mini-swe-agent_testdata/local.traj.json")), {
    messages: 6,
    calls: 2,
    tool_calls: 0,
    tool_results: 0,
    reasoning: 0,
  });
});

Deno.test("Claude Code: lines merged by message.id, thinking, tool_use/tool_result", async () => {
  assert.deepEqual(counts(await one("claude-code/short.jsonl")), {
    messages: 5,
    calls: 1,
    tool_calls: 2,
    tool_results: 2,
    reasoning: 1,
  });
  assert.deepEqual(counts(await one("claude-code/tool_heavy.jsonl")), {
    messages: 17,
    calls: 4,
    tool_calls: 6,
    tool_results: 6,
    reasoning: 1,
  });
  const short = await one("claude-code/short.jsonl");
  const [call] = trajectoryCalls(short);
  // Four lines (a blank text block, thinking, text, two tool_use) are one response.
  assert.equal(
    call.response.content,
    "Let me check the project structure and try running the server to see the error.",
  );
  assert.match(call.response.reasoning_content ?? "", /^The user is having trouble starting/);
  assert.deepEqual(call.response.tool_calls?.map((c) => c.function.name), ["Bash", "Glob"]);
  assert.deepEqual(JSON.parse(call.response.tool_calls![1].function.arguments), {
    pattern: "mix.exs",
    path: "/home/marco/projects/spotter",
  });
});

Deno.test("Claude Code: a sub-agent embedded in progress records is its own conversation", async () => {
  const t = await one("claude-code/subagent.jsonl");
  assert.deepEqual(counts(t), {
    messages: 47,
    calls: 17,
    tool_calls: 25,
    tool_results: 25,
    reasoning: 4,
  });
  assert.deepEqual(t.conversations.map((c) => [c.id, c.kind, c.parent, c.segments[0].opened_by]), [
    ["main", "main", null, "root"],
    ["agent:afb92ff", "subagent", "main", "branch"],
  ]);
  const byConversation = Map.groupBy(t.calls, (c) => c.conversation);
  assert.equal(byConversation.get("main")?.length, 12);
  assert.equal(byConversation.get("agent:afb92ff")?.length, 5);
  // Proxy order: the sub-agent's five calls run while the main agent waits on its Task call.
  assert.equal(
    t.calls.map((c) => c.conversation === "main" ? "m" : "s").join(""),
    "mmmmmmsssssmmmmmm",
  );
  const sub = trajectoryCalls(t).filter((c) => c.conversation.id !== "main");
  assert.match(sub[0].prompt[0].content ?? "", /^Draft bead content/);
  // Lines of msg_01FqB3… were split by a tool result; merged, both calls precede both results.
  const main = t.conversations[0].segments[0].messages;
  const merged = main.findIndex((m) => m.tool_calls?.some((c) => c.function.name === "Glob"));
  assert.deepEqual(main[merged].tool_calls?.map((c) => c.function.name), ["Glob", "WebSearch"]);
  assert.deepEqual(main.slice(merged + 1, merged + 3).map((m) => m.role), ["tool", "tool"]);
});

Deno.test("Claude Code: compaction starts a segment whose history is the summary", async () => {
  const [t] = await importTrajectoryFile(`${FIXTURES}compaction.jsonl`);
  const conversation = t.conversations[0];
  assert.deepEqual(conversation.segments.map((s) => [s.index, s.opened_by, s.messages.length]), [
    [0, "root", 4],
    [1, "compaction", 2],
  ]);
  const calls = trajectoryCalls(t);
  assert.equal(calls.length, 3);
  assert.deepEqual(calls[2].prompt.map((m) => m.role), ["user"]);
  assert.match(calls[2].prompt[0].content ?? "", /continued from a previous conversation/);
  assert.equal(trajectoryStats(t).segments, 2);
});

Deno.test("Claude Code: sub-agent files next to the session join as a branch", async () => {
  const [t] = await importTrajectoryFile(`${FIXTURES}claude_session/sess-1.jsonl`, {
    root: FIXTURES,
  });
  assert.equal(t.file, "claude_session/sess-1.jsonl");
  assert.deepEqual(t.conversations.map((c) => c.id), ["main", "agent:x1"]);
  assert.deepEqual(t.calls.map((c) => c.conversation), ["main", "agent:x1", "agent:x1", "main"]);
  // The same records embedded twice (progress + file) are counted once.
  const text = await Deno.readTextFile(`${FIXTURES}claude_session/sess-1/subagents/agent-x1.jsonl`);
  const twice = parseClaudeCode({ file: "a.jsonl", text }, [{ file: "b.jsonl", text }]);
  assert.equal(trajectoryStats(twice).messages, 4);
});

Deno.test("bad input fails with an error naming the file and field", async () => {
  assert.throws(
    () => parseSweAgent({ history: [{ role: "user", content: "x" }, { role: "robot" }] }, "a.traj"),
    (e: unknown) => e instanceof ValidationError && e.field === "a.traj.history[1].role",
  );
  assert.throws(
    () => parseTauBench([{ task_id: 1, traj: [] }], "t.json"),
    (e: unknown) => e instanceof ValidationError && e.field === "t.json[0].reward",
  );
  assert.throws(
    () => parseClaudeCode({ file: "s.jsonl", text: '{"type":"user"}\n{oops' }),
    /s\.jsonl:1.*message/,
  );
  assert.throws(
    () => parseClaudeCode({ file: "s.jsonl", text: "\n{oops" }),
    /s\.jsonl:2: not valid JSON/,
  );
  assert.throws(
    () => detectTrajectoryFormat("x.json", { foo: 1 }),
    /x\.json: unknown trajectory format/,
  );
  const dir = await Deno.makeTempDir();
  try {
    await assert.rejects(() => loadTrajectories({ root: `${dir}/missing` }), /REINS_TRAJECTORIES/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("REINS_TRAJECTORIES overrides the data root", async () => {
  const dir = await Deno.makeTempDir();
  const before = Deno.env.get("REINS_TRAJECTORIES");
  try {
    await Deno.writeTextFile(
      `${dir}/run.json`,
      JSON.stringify([{ role: "user", content: "q" }, { role: "assistant", content: "a" }]),
    );
    Deno.env.set("REINS_TRAJECTORIES", dir);
    assert.equal(trajectoriesRoot(), dir);
    const runs = await loadTrajectories();
    assert.deepEqual(runs.map((t) => [t.source, t.file]), [["mini-swe-agent", "run.json"]]);
  } finally {
    if (before === undefined) Deno.env.delete("REINS_TRAJECTORIES");
    else Deno.env.set("REINS_TRAJECTORIES", before);
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("inferred tools list each tool once with the argument names seen", () => {
  const tools = inferTools([
    {
      role: "assistant",
      content: "",
      tool_calls: [
        { type: "function", function: { name: "b", arguments: '{"x":1}' } },
        { type: "function", function: { name: "a", arguments: '{"y":"s","z":[1]}' } },
        { type: "function", function: { name: "b", arguments: '{"w":true}' } },
      ],
    },
  ]);
  assert.deepEqual(tools?.map((t) => t.function), [
    {
      name: "a",
      description: "",
      parameters: {
        type: "object",
        properties: { y: { type: "string" }, z: { type: "array" } },
        required: [],
      },
    },
    {
      name: "b",
      description: "",
      parameters: {
        type: "object",
        properties: { w: { type: "boolean" }, x: { type: "integer" } },
        required: [],
      },
    },
  ]);
  assert.equal(inferTools([{ role: "user", content: "hi" }]), null);
});
