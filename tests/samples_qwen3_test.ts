/**
 * Merge strategies and break diagnosis on conversations rendered through the REAL Qwen3 chat
 * template and tokenizer, built the way the reins proxy records calls.
 */
import assert from "node:assert/strict";
import { assembleRollout, type AssemblyResult, treePath } from "../lib/samples/mod.ts";
import type { ChatMessage, ModelRequestEvent, RolloutEvent } from "../lib/schema.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import type { ChatTokenizer } from "../lib/tokens/types.ts";
import { callEvent, ProxySim } from "./fixtures/samples/events.ts";

const TOOLS = [{
  type: "function",
  function: {
    name: "calc",
    description: "Evaluate an arithmetic expression",
    parameters: {
      type: "object",
      properties: { expr: { type: "string" } },
      required: ["expr"],
    },
  },
}];

const sys = (content: string): ChatMessage => ({ role: "system", content });
const user = (content: string): ChatMessage => ({ role: "user", content });
const tool = (content: string, id = "call_0"): ChatMessage => ({
  role: "tool",
  content,
  tool_call_id: id,
});
const calcCall = (expr: string) =>
  `<tool_call>\n{"name": "calc", "arguments": {"expr": "${expr}"}}\n</tool_call>`;

function calls(result: { events: RolloutEvent[] }): ModelRequestEvent[] {
  return result.events.filter((e): e is ModelRequestEvent => e.type === "model_request");
}

/** Every recorded action keeps the exact prompt it was sampled on. */
function assertExactPrompts(events: RolloutEvent[], result: AssemblyResult): void {
  const bySeq = new Map(calls({ events }).map((e) => [e.seq, e.payload]));
  for (const placement of result.calls) {
    const call = bySeq.get(placement.seq)!;
    const sample = result.samples[placement.sample_index];
    assert.deepEqual(
      sample.tokens.subarray(0, placement.response_start),
      call.prompt_token_ids,
      `seq ${placement.seq}: sample context differs from the prompt it was sampled on`,
    );
    const end = placement.response_start + placement.response_length;
    assert.deepEqual(
      sample.tokens.subarray(placement.response_start, end),
      call.response_token_ids,
    );
    assert.deepEqual(
      sample.rollout_logprobs.subarray(placement.response_start, end),
      call.response_logprobs,
    );
    assert.ok(sample.loss_mask.subarray(placement.response_start, end).every((m) => m === 1));
  }
}

let qwen: ChatTokenizer;
async function tokenizer(): Promise<ChatTokenizer> {
  qwen ??= await loadQwen3Tokenizer();
  return qwen;
}

Deno.test("prefix_merge keeps a round-tripping multi-turn tool conversation as ONE sample", async () => {
  const sim = new ProxySim(await tokenizer(), TOOLS);
  const messages = [sys("You are a careful calculator."), user("What is 2+2?")];
  messages.push(sim.call(messages, `I will compute it.\n${calcCall("2+2")}`));
  messages.push(tool("4"));
  messages.push(sim.call(messages, "2+2 = 4."));
  messages.push(user("And 3+3?"));
  messages.push(sim.call(messages, calcCall("3+3")));
  messages.push(tool("6"));
  sim.call(messages, "3+3 = 6.");

  const result = assembleRollout(sim.events, { tokenizer: qwen });
  assert.equal(result.samples.length, 1);
  assert.deepEqual(result.breaks, []);
  assert.equal(result.samples[0].provenance.split_reason, null);
  assert.deepEqual(result.samples[0].provenance.request_seqs, [1, 2, 3, 4]);
  assertExactPrompts(sim.events, result);
  const last = calls(sim).at(-1)!.payload;
  assert.equal(
    result.samples[0].tokens.length,
    last.prompt_token_ids.length + last.response_token_ids.length,
  );
  assert.equal(result.metrics.samples, 1);
  assert.ok(result.metrics.tokens_total < result.metrics.tokens_naive);
});

Deno.test("reasoning stripped from earlier turns by the Qwen3 template → template_rewrite", async () => {
  const sim = new ProxySim(await tokenizer(), TOOLS);
  const messages = [sys("You are a careful calculator."), user("What is 2+2?")];
  // Inside one tool loop the template keeps the reasoning: these two calls merge.
  messages.push(
    sim.call(messages, `<think>\nI should use the tool.\n</think>\n\n${calcCall("2+2")}`),
  );
  messages.push(tool("4"));
  messages.push(sim.call(messages, "<think>\nThe tool said 4.\n</think>\n\n2+2 = 4."));
  // A new user turn: the template now drops the earlier turns' <think> blocks.
  messages.push(user("Thanks! And 3+3?"));
  sim.call(messages, "<think>\nEasy.\n</think>\n\n6.");

  const result = assembleRollout(sim.events, { tokenizer: qwen });
  assert.equal(result.samples.length, 2);
  assert.deepEqual(result.samples.map((s) => s.provenance.request_seqs), [[1, 2], [3]]);
  assert.equal(result.breaks.length, 1);
  const [b] = result.breaks;
  assert.equal(b.reason, "template_rewrite");
  assert.equal(b.basis, "messages");
  assert.equal(b.previous_seq, 2);
  assert.match(b.expected_text!, /<think>/);
  assert.doesNotMatch(b.actual_text!, /<think>/);
  assert.equal(result.samples[1].provenance.split_reason, "template_rewrite");
  assertExactPrompts(sim.events, result);

  // Text-only (no messages): the decoded response reappears without its reasoning block.
  const textOnly = assembleRollout(sim.withoutMessages(), { tokenizer: qwen });
  assert.equal(textOnly.breaks[0].reason, "template_rewrite");
  assert.equal(textOnly.breaks[0].basis, "text");
});

Deno.test("non-canonical sampled ids re-tokenized differently → token_boundary; buffer_substitute repairs off-policy", async () => {
  const tok = await tokenizer();
  const sim = new ProxySim(tok, TOOLS);
  const messages = [sys("Greet."), user("Say hello world.")];
  // The policy sampled "Hel" + "lo" + " world": valid ids, but not what encode() produces.
  const sampled = Uint32Array.from([...tok.encode("Hel"), ...tok.encode("lo world")]);
  assert.notDeepEqual(sampled, tok.encode("Hello world"));
  messages.push(sim.call(messages, "Hello world", { sampledIds: sampled }));
  messages.push(user("Again."));
  sim.call(messages, "Hello world");

  const exact = assembleRollout(sim.events, { tokenizer: tok });
  assert.equal(exact.samples.length, 2);
  assert.equal(exact.breaks[0].reason, "token_boundary");
  assert.equal(exact.breaks[0].context_text?.endsWith("assistant\n"), true);
  assert.equal(exact.breaks[0].expected_text?.startsWith("Hel"), true);
  assert.equal(exact.breaks[0].actual_text?.startsWith("Hello"), true);
  const textOnly = assembleRollout(sim.withoutMessages(), { tokenizer: tok });
  assert.equal(textOnly.breaks[0].reason, "token_boundary");

  const sub = assembleRollout(sim.events, { tokenizer: tok, strategy: "buffer_substitute" });
  assert.equal(sub.samples.length, 1);
  assert.equal(sub.samples[0].provenance.off_policy, true);
  assert.equal(sub.metrics.off_policy_samples, 1);
  assert.equal(sub.substitutions.length, 1);
  const [s] = sub.substitutions;
  assert.equal(s.seq, 2);
  assert.equal(s.diagnosis.reason, "token_boundary");
  assert.notDeepEqual(s.substituted_prompt, s.real_prompt);
  assert.equal(tok.decode(s.substituted_prompt), tok.decode(s.real_prompt));
  // The sampled ids stand where the re-tokenized ones were.
  const first = calls(sim)[0].payload;
  assert.deepEqual(
    s.substituted_prompt.subarray(
      first.prompt_token_ids.length,
      first.prompt_token_ids.length + sampled.length,
    ),
    sampled,
  );
  // Breaks stay a property of the rollout, whatever the strategy.
  assert.deepEqual(sub.breaks.map((b) => b.reason), ["token_boundary"]);
});

Deno.test("a completions harness appending text to a stopped response merges a token across the boundary → token_boundary", async () => {
  const tok = await tokenizer();
  // Raw-text harness (completions flavor): the policy stopped on a stop string mid-word, the
  // harness appends the next text directly, and " hel" + "lo" re-tokenizes as " hello".
  const question = "Question: spell the greeting.\nAnswer:";
  const p1 = tok.encode(question);
  const a1 = tok.encode(" hel");
  const p2 = tok.encode(`${question} hello world\nQuestion: again?\nAnswer:`);
  const events = [
    callEvent(1, p1, a1, { flavor: "openai_completions" }),
    callEvent(2, p2, tok.encode(" hi"), { flavor: "openai_completions" }),
  ];
  const result = assembleRollout(events, { tokenizer: tok });
  assert.equal(result.samples.length, 2);
  const [b] = result.breaks;
  assert.deepEqual([b.reason, b.basis], ["token_boundary", "text"]);
  assert.equal(b.first_diff_token, p1.length); // exactly at the response boundary
  assert.deepEqual([b.expected_text, b.actual_text?.startsWith(" hello")], [" hel", true]);
  // No id span of the new prompt spells the sampled " hel": nothing to substitute.
  const sub = assembleRollout(events, { tokenizer: tok, strategy: "buffer_substitute" });
  assert.equal(sub.samples.length, 2);
  assert.equal(sub.substitutions.length, 0);
});

Deno.test("harness re-serialises a tool call's JSON → response_rewrite", async () => {
  const sim = new ProxySim(await tokenizer(), TOOLS);
  const messages = [sys("You are a careful calculator."), user("What is 2+2?")];
  const reply = sim.call(
    messages,
    '<tool_call>\n{"name": "calc", "arguments": {"unit": "none", "expr": "2+2"}}\n</tool_call>',
  );
  // The harness validates the arguments into its own typed record and serialises that back
  // (its field order); the template renders the harness's JSON, not what was sampled.
  const rewritten: ChatMessage = {
    ...reply,
    tool_calls: reply.tool_calls!.map((c) => {
      const args = JSON.parse(c.function.arguments);
      const typed = { expr: args.expr, unit: args.unit };
      return { ...c, function: { ...c.function, arguments: JSON.stringify(typed) } };
    }),
  };
  messages.push(rewritten, tool("4"));
  sim.call(messages, "2+2 = 4.");

  const result = assembleRollout(sim.events, { tokenizer: qwen });
  assert.equal(result.samples.length, 2);
  assert.equal(result.breaks[0].reason, "response_rewrite");
  assert.equal(result.breaks[0].basis, "messages");
  assertExactPrompts(sim.events, result);
  const textOnly = assembleRollout(sim.withoutMessages(), { tokenizer: qwen });
  assert.equal(textOnly.breaks[0].reason, "response_rewrite");
  assert.equal(textOnly.breaks[0].basis, "text");
});

Deno.test("a sub-agent interleaved with the main agent → branch; the main conversation still merges", async () => {
  const sim = new ProxySim(await tokenizer(), TOOLS);
  const main = [sys("You are the lead agent."), user("Add 2+2 then double it.")];
  main.push(sim.call(main, `Delegating.\n${calcCall("2+2")}`));
  const sub = [sys("You are a calculator sub-agent."), user("Compute 2+2.")];
  sub.push(sim.call(sub, calcCall("2+2")));
  sub.push(tool("4"));
  sim.call(sub, "4");
  main.push(tool("4"));
  main.push(sim.call(main, calcCall("4*2")));
  main.push(tool("8"));
  sim.call(main, "The answer is 8.");

  const result = assembleRollout(sim.events, { tokenizer: qwen });
  assert.deepEqual(result.samples.map((s) => s.provenance.request_seqs), [[1, 4, 5], [2, 3]]);
  assert.deepEqual(result.breaks.map((b) => [b.seq, b.reason, b.basis]), [[
    2,
    "branch",
    "messages",
  ]]);
  assert.equal(result.samples[1].provenance.split_reason, "branch");
  assertExactPrompts(sim.events, result);

  // The proxy's segment tag is trusted first.
  const tagged = sim.events.map((e) =>
    e.type === "model_request"
      ? {
        ...e,
        payload: {
          ...e.payload,
          messages: undefined,
          segment: [2, 3].includes(e.seq)
            ? { conversation: "sub", index: 0, opened_by: e.seq === 2 ? "branch" as const : null }
            : { conversation: "main", index: 0, opened_by: e.seq === 1 ? "root" as const : null },
        },
      }
      : e
  );
  const bySegment = assembleRollout(tagged, { tokenizer: qwen });
  assert.deepEqual(bySegment.breaks.map((b) => [b.seq, b.reason, b.basis]), [[
    2,
    "branch",
    "segment",
  ]]);

  // tree: one tree, every call's exact prompt ∥ response is a path, shared prefixes stored once.
  const tree = assembleRollout(sim.events, { tokenizer: qwen, strategy: "tree" });
  assert.equal(tree.samples.length, 1);
  const t = tree.samples[0];
  for (const e of calls(sim)) {
    const p = tree.calls.find((c) => c.seq === e.seq)!;
    const path = treePath(t, p.response_start + p.response_length - 1);
    const expected = new Uint32Array(
      e.payload.prompt_token_ids.length + e.payload.response_token_ids.length,
    );
    expected.set(e.payload.prompt_token_ids);
    expected.set(e.payload.response_token_ids, e.payload.prompt_token_ids.length);
    assert.deepEqual(path, expected, `seq ${e.seq}: not a root-to-node path`);
  }
  assert.ok(t.tokens.length < tree.metrics.tokens_naive);
  // Both conversations open with "<|im_start|>system\n…": shared once, so fewer tokens than
  // the two linear samples together.
  const linearTotal = result.samples.reduce((n, s) => n + s.tokens.length, 0);
  assert.ok(t.tokens.length < linearTotal, `${t.tokens.length} < ${linearTotal}`);
  assert.equal(
    t.loss_mask.reduce((n, m) => n + m, 0),
    calls(sim).reduce((n, e) => n + e.payload.response_token_ids.length, 0),
  );
});

Deno.test("history replaced by a summary (system and task kept) → compaction", async () => {
  const sim = new ProxySim(await tokenizer(), TOOLS);
  const messages = [sys("You are a careful calculator."), user("Sum 1..4 step by step.")];
  messages.push(sim.call(messages, calcCall("1+2")));
  messages.push(tool("3"));
  messages.push(sim.call(messages, calcCall("3+3")));
  messages.push(tool("6"));
  const compacted = [
    messages[0],
    messages[1],
    user("Summary of the work so far: 1+2+3 = 6. Continue."),
  ];
  compacted.push(sim.call(compacted, calcCall("6+4")));
  compacted.push(tool("10"));
  sim.call(compacted, "The sum is 10.");

  const result = assembleRollout(sim.events, { tokenizer: qwen });
  assert.deepEqual(result.samples.map((s) => s.provenance.request_seqs), [[1, 2], [3, 4]]);
  assert.deepEqual(result.breaks.map((b) => [b.seq, b.reason]), [[3, "compaction"]]);
  assert.equal(result.samples[1].provenance.split_reason, "compaction");
  assertExactPrompts(sim.events, result);
  assert.equal(result.metrics.break_reasons.compaction, 1);
  assert.equal(result.metrics.samples, 2);
});
