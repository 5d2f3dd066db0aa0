/**
 * The built-in harness, run against the scripted upstream through the real gateway + proxy,
 * produces rollouts whose sample assembly shows each break reason of SPEC §5 exactly as often
 * as the configuration makes it happen.
 */
import assert from "node:assert/strict";
import { runAgent } from "../lib/harness/builtin/agent.ts";
import { builtinScriptedPolicy, nonCanonicalTokenizer } from "../lib/harness/builtin/scripted.ts";
import type { AgentTool } from "../lib/harness/builtin/tool.ts";
import { calculatorTool } from "../lib/harness/envs/arithmetic.ts";
import { fileTools } from "../lib/harness/envs/workspace_tools.ts";
import type { ScriptedTurn } from "../lib/proxy/scripted_upstream.ts";
import { parseOrThrow } from "../lib/schema.ts";
import {
  type BuiltinHarnessOptionsInput,
  BuiltinHarnessOptionsSchema,
} from "../lib/harness/schema.ts";
import { breakCounts, qwen3, startHarnessFixture } from "./support/harness_fixture.ts";

const calc = (expression: string, reasoning = `Next I compute ${expression}.`): ScriptedTurn => ({
  reasoning,
  tool_calls: [{ name: "calculator", arguments: { expression } }],
});
const final = (answer: string): ScriptedTurn => ({
  reasoning: "I have the result.",
  content: `<answer>${answer}</answer>`,
});
const SYSTEM = "You solve arithmetic problems with the calculator.";

async function run(
  id: string,
  script: Parameters<typeof builtinScriptedPolicy>[0],
  options: BuiltinHarnessOptionsInput,
  fixture: { policyMarker?: string; tools?: AgentTool[] } = {},
) {
  const tokenizer = await qwen3();
  const fx = await startHarnessFixture({
    scripted: { policy: builtinScriptedPolicy(script) },
    ...(fixture.policyMarker
      ? { policyTokenizer: nonCanonicalTokenizer(tokenizer, fixture.policyMarker) }
      : {}),
  });
  try {
    const { client } = await fx.open(id);
    const result = await runAgent({
      client,
      options: parseOrThrow(BuiltinHarnessOptionsSchema, { env: "arithmetic", ...options }),
      task: "What is ((1 + 2) * 3 - 4) / 5?",
      systemPrompt: SYSTEM,
      tools: fixture.tools ?? [calculatorTool],
    });
    const assembly = await fx.assemble(id);
    return { result, assembly, calls: fx.upstream.calls.length };
  } finally {
    await fx.close();
  }
}

// Distinct summaries: identical post-compaction prompts would look like client retries.
const SUMMARIES = ["S1.", "S2.", "S3."].map((content) => ({ reasoning: "Summarise.", content }));
const FOUR_STEPS = [calc("1 + 2"), calc("3 * 3"), calc("9 - 4"), calc("5 / 5"), final("1")];

Deno.test("builtin harness: a faithful tool loop is ONE sample (control)", async () => {
  const { result, assembly, calls } = await run("control", { main: FOUR_STEPS }, {});
  assert.equal(result.answer, "1");
  assert.equal(result.stats.tool_calls, 4);
  assert.equal(calls, 5);
  assert.equal(assembly.samples.length, 1);
  assert.deepEqual(breakCounts(assembly), {});
  // Every sampled token is trained exactly once.
  const trained = assembly.samples[0].loss_mask.reduce((a, b) => a + b, 0);
  assert.equal(trained, assembly.metrics.tokens_trained);
});

Deno.test("builtin harness: compaction (inline summary) splits once per compaction", async () => {
  const { result, assembly } = await run("compaction", {
    main: FOUR_STEPS,
    summary: SUMMARIES,
  }, { compaction: { max_chars: 100 } });
  assert.equal(result.answer, "1");
  // Each turn adds ~50 characters: the budget of 100 is crossed twice in this run.
  // Each tool turn adds ~56 characters and the summary message ~62, so with a budget of 100
  // the history is compacted before calls 3, 4 and 5 of the main conversation.
  assert.equal(result.stats.compactions, 3);
  // The summary request is a new user turn, so Qwen3's template also strips the reasoning of
  // the turns before it: one template rewrite per compaction, then the compaction itself.
  assert.equal(result.stats.template_rewrites, 3);
  assert.deepEqual(breakCounts(assembly), { compaction: 3, template_rewrite: 3 });
  assert.equal(assembly.samples.length, 1 + 3 + 3);
  const bySegment = assembly.breaks.filter((b) => b.reason === "compaction");
  assert.ok(bySegment.every((b) => b.basis === "segment"), "the proxy tagged the compactions");
});

Deno.test("builtin harness: compaction in a separate summary conversation adds a branch each", async () => {
  const { result, assembly } = await run("compaction-separate", {
    main: FOUR_STEPS,
    summary: SUMMARIES,
  }, { compaction: { max_chars: 100, mode: "separate" } });
  assert.equal(result.stats.compactions, 3);
  assert.equal(result.stats.summary_branches, 3);
  assert.deepEqual(breakCounts(assembly), { compaction: 3, branch: 3 });
});

Deno.test("builtin harness: each sub-agent (delegate tool) is one branch; the main line still merges", async () => {
  const delegate = (task: string): ScriptedTurn => ({
    reasoning: "I will delegate this.",
    tool_calls: [{ name: "delegate", arguments: { task } }],
  });
  const { result, assembly } = await run("subagents", {
    main: [delegate("Compute 1 + 2."), calc("3 * 3"), delegate("Compute 9 - 4."), final("5")],
    subagent: [calc("1 + 2"), final("3"), calc("9 - 4"), final("5")],
  }, { subagents: true });
  assert.equal(result.answer, "5");
  assert.equal(result.stats.delegations, 2);
  assert.deepEqual(breakCounts(assembly), { branch: 2 });
  // One sample for the main conversation, one per sub-agent.
  assert.equal(assembly.samples.length, 3);
  // The main conversation's sample holds all four main responses.
  const main = assembly.samples.find((s) => s.provenance.split_reason === null)!;
  assert.equal(main.provenance.request_seqs.length, 4);
});

Deno.test("builtin harness: tool calls re-serialised with sorted keys are response rewrites", async () => {
  const workdir = await Deno.makeTempDir();
  const write = (path: string, content: string): ScriptedTurn => ({
    reasoning: `I write ${path}.`,
    tool_calls: [{ name: "write_file", arguments: { path, content } }],
  });
  try {
    const { result, assembly } = await run(
      "rewrite",
      {
        // Three turns whose key order ("path", "content") a sorted map changes, and one
        // single-key call that re-serialises to what the template renders anyway.
        main: [
          write("a.txt", "1"),
          calc("1 + 2"),
          write("b.txt", "2"),
          write("c.txt", "3"),
          final("ok"),
        ],
      },
      { rewrite_tool_calls: true },
      { tools: [calculatorTool, ...fileTools({ workdir, input: {} })] },
    );
    assert.equal(result.stats.tool_calls, 4);
    assert.equal(result.stats.rewritten_turns, 3);
    assert.deepEqual(breakCounts(assembly), { response_rewrite: 3 });
    assert.ok(assembly.breaks.every((b) => b.basis === "messages"));
    assert.equal(await Deno.readTextFile(`${workdir}/c.txt`), "3");
  } finally {
    await Deno.remove(workdir, { recursive: true });
  }
});

Deno.test("builtin harness: dropping reasoning from history is a template rewrite per turn", async () => {
  const { result, assembly } = await run("drop", { main: FOUR_STEPS }, { drop_reasoning: true });
  assert.equal(result.stats.dropped_reasoning_turns, 4);
  assert.deepEqual(breakCounts(assembly), { template_rewrite: 4 });
});

Deno.test("builtin harness: a confirmation turn makes Qwen3's template strip earlier reasoning once", async () => {
  const { result, assembly } = await run("confirm", {
    main: FOUR_STEPS,
    confirm: final("1"),
  }, { confirm_answer: true });
  assert.equal(result.answer, "1");
  assert.equal(result.stats.confirmations, 1);
  assert.deepEqual(breakCounts(assembly), { template_rewrite: 1 });
  const rewrite = assembly.breaks[0];
  assert.match(rewrite.expected_text ?? "", /<think>/, "the stripped text is a think block");
});

Deno.test("builtin harness: a non-canonical token split by the policy is a token boundary", async () => {
  // Two of the four tool turns (not adjacent: the second break follows a merged call) sample
  // the marker word with a non-canonical split.
  const main = [
    calc("1 + 2", "Calculating 1 + 2 first."),
    calc("3 * 3"),
    calc("9 - 4", "Calculating 9 - 4 now."),
    calc("5 / 5"),
    final("1"),
  ];
  const { assembly } = await run("boundary", { main }, {}, { policyMarker: "Calculating" });
  assert.deepEqual(breakCounts(assembly), { token_boundary: 2 });
  for (const b of assembly.breaks) {
    // Same text, different ids: one side's evidence text is a prefix of the other's.
    const [x, y] = [b.expected_text ?? "", b.actual_text ?? ""];
    assert.ok(x.startsWith(y) || y.startsWith(x), `${JSON.stringify(x)} vs ${JSON.stringify(y)}`);
    assert.notDeepEqual(b.expected_ids, b.actual_ids);
  }
});

Deno.test("builtin harness: streaming gives the same single sample as JSON answers", async () => {
  const { result, assembly } = await run("stream", { main: FOUR_STEPS }, { stream: true });
  assert.equal(result.answer, "1");
  assert.equal(assembly.samples.length, 1);
  assert.deepEqual(breakCounts(assembly), {});
});
