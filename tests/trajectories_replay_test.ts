import assert from "node:assert/strict";
import {
  chatmlResponseText,
  fakeLogprob,
  importTrajectoryFile,
  loadQwen3KeepReasoningTokenizer,
  parseMiniSweAgent,
  PLACEHOLDER_REASONING,
  qwen3KeepReasoningTemplate,
  replayTrajectory,
  trajectoriesRoot,
  trajectoryCalls,
  withPlaceholderReasoning,
} from "../lib/trajectories/mod.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import {
  type ModelRequestEvent,
  modelRequestToWire,
  ModelRequestWireSchema,
  parseOrThrow,
  ValidationError,
} from "../lib/schema.ts";

const ROOT = trajectoriesRoot();
const FIXTURES = new URL("./fixtures/trajectories/", import.meta.url).pathname;
const IM_END = 151645;

function extends_(next: ModelRequestEvent, prev: ModelRequestEvent): boolean {
  const want = [...prev.payload.prompt_token_ids, ...prev.payload.response_token_ids];
  const got = next.payload.prompt_token_ids;
  return got.length > want.length && want.every((id, i) => got[i] === id);
}

Deno.test("replay renders each call's history through the Qwen3 template and tokenizer", async () => {
  const qwen = await loadQwen3Tokenizer();
  const [t] = await importTrajectoryFile(`${ROOT}/mini-swe-agent_testdata/github_issue.traj.json`);
  const events = replayTrajectory(t, qwen, { first_seq: 41, keep_text: true });
  const calls = trajectoryCalls(t);
  assert.equal(events.length, 10);
  assert.deepEqual(events.map((e) => e.seq), Array.from({ length: 10 }, (_, i) => 41 + i));
  events.forEach((event, i) => {
    const p = event.payload;
    const text = qwen.render(calls[i].prompt, { addGenerationPrompt: true });
    assert.equal(p.request.prompt_text, text);
    assert.deepEqual(p.prompt_token_ids, qwen.encode(text), `call ${i}: prompt ids`);
    assert.equal(p.response_token_ids.at(-1), IM_END);
    assert.equal(qwen.decode(p.response_token_ids), p.response_text);
    assert.equal(p.response_text, `${calls[i].response.content}<|im_end|>`);
    assert.equal(p.response_logprobs.length, p.response_token_ids.length);
    assert.equal(p.response_logprobs[3], Math.fround(fakeLogprob(p.response_token_ids[3], 3)));
    assert.equal(p.request.fake_logprobs, true);
    assert.equal(event.rollout_id, t.id);
    // The wire schema accepts every replayed call (one logprob per token, valid ids).
    parseOrThrow(ModelRequestWireSchema, modelRequestToWire(p));
  });
  assert.deepEqual(events[0].payload.segment, {
    conversation: "main",
    index: 0,
    opened_by: "root",
  });
  assert.equal(events[1].payload.segment?.opened_by, null);
  // An append-only text-only history stays a token-level prefix call after call.
  for (let i = 1; i < events.length; i++) {
    assert.ok(extends_(events[i], events[i - 1]), `call ${i}`);
  }
});

Deno.test("incremental encoding gives exactly the ids of whole-prompt encoding", async () => {
  const qwen = await loadQwen3Tokenizer();
  const [t] = await importTrajectoryFile(`${ROOT}/claude-code/subagent.jsonl`);
  const fast = replayTrajectory(t, qwen);
  const slow = replayTrajectory(t, qwen, { incremental: false });
  assert.equal(fast.length, 17);
  fast.forEach((e, i) => {
    assert.deepEqual(e.payload.prompt_token_ids, slow[i].payload.prompt_token_ids, `call ${i}`);
  });
});

Deno.test("responses carry reasoning and tool calls the way the template writes them", async () => {
  const qwen = await loadQwen3Tokenizer();
  const message = {
    role: "assistant" as const,
    content: "Checking.",
    reasoning_content: "\nlook first\n",
    tool_calls: [{
      type: "function" as const,
      function: { name: "ls", arguments: '{"path":"."}' },
    }],
  };
  assert.equal(
    chatmlResponseText(message, qwen),
    '<think>\nlook first\n</think>\n\nChecking.\n<tool_call>\n{"name": "ls", "arguments": ' +
      '{"path": "."}}\n</tool_call>',
  );
  // Without reasoning, nothing is invented.
  assert.equal(chatmlResponseText({ role: "assistant", content: "hi" }, qwen), "hi");
});

Deno.test("sub-agent calls open a branch segment; compaction opens a new segment", async () => {
  const qwen = await loadQwen3Tokenizer();
  const [sub] = await importTrajectoryFile(`${ROOT}/claude-code/subagent.jsonl`);
  const events = replayTrajectory(sub, qwen);
  const opened = events.filter((e) => e.payload.segment?.opened_by !== null).map((e) =>
    e.payload.segment
  );
  assert.deepEqual(opened, [
    { conversation: "main", index: 0, opened_by: "root" },
    { conversation: "agent:afb92ff", index: 0, opened_by: "branch" },
  ]);
  assert.ok(events.every((e) => e.payload.flavor === "anthropic_messages"));

  const [compacted] = await importTrajectoryFile(`${FIXTURES}compaction.jsonl`);
  const ev = replayTrajectory(compacted, qwen);
  assert.deepEqual(ev.map((e) => e.payload.segment?.opened_by), ["root", null, "compaction"]);
  assert.ok(!extends_(ev[2], ev[1]), "the summary replaced the history");
});

Deno.test("Qwen3 drops earlier reasoning at a new user turn; the keep-reasoning variant does not", async () => {
  const qwen = await loadQwen3Tokenizer();
  const keep = await loadQwen3KeepReasoningTokenizer();
  assert.equal(keep.name, "qwen3-keep-reasoning");
  const t = withPlaceholderReasoning(parseMiniSweAgent([
    { role: "user", content: "first" },
    { role: "assistant", content: "a1" },
    { role: "user", content: "second" },
    { role: "assistant", content: "a2" },
  ], "two_turns.json"));
  const official = replayTrajectory(t, qwen);
  assert.match(official[0].payload.response_text ?? "", /^<think>\n\(reasoning not logged\)/);
  assert.ok(!extends_(official[1], official[0]), "Qwen3 rewrote turn 1 (reasoning stripped)");
  const kept = replayTrajectory(t, keep);
  assert.ok(extends_(kept[1], kept[0]), "keeping reasoning keeps the prefix");
  assert.match(PLACEHOLDER_REASONING, /not logged/);
  assert.throws(() => withPlaceholderReasoning(t, " "), /text: must not be empty/);
  assert.throws(() => qwen3KeepReasoningTemplate("{{ messages }}"), /chatTemplate: not the Qwen3/);
});

Deno.test("replay options are validated by name", async () => {
  const qwen = await loadQwen3Tokenizer();
  const t = parseMiniSweAgent(
    [{ role: "user", content: "q" }, { role: "assistant", content: "a" }],
    "x.json",
  );
  assert.throws(
    () => replayTrajectory(t, qwen, { first_seq: 0 }),
    (e: unknown) => e instanceof ValidationError && e.field === "options.first_seq",
  );
  assert.throws(
    () => replayTrajectory(t, qwen, { rollout_id: "has space" }),
    (e: unknown) => e instanceof ValidationError && e.field === "options.rollout_id",
  );
});
