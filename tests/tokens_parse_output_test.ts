/**
 * Parsing generated text into reasoning, content and Hermes/Qwen tool calls, whole and streamed
 * (split at every position: the streamed parts must add up to the whole parse, and no part may
 * ever show half a tag).
 */
import assert from "node:assert/strict";
import {
  collectOutput,
  OutputParser,
  parseOutput,
  parseToolCallBody,
  rawJsonMember,
} from "../lib/tokens/parse_output.ts";

const ids = () => {
  let n = 0;
  return () => `call_${n++}`;
};

const CASES: Array<
  { text: string; reasoning: string; content: string; calls: [string, string][]; start?: boolean }
> = [
  { text: "Hello world", reasoning: "", content: "Hello world", calls: [] },
  {
    text: "<think>\nplan it\n</think>\n\nThe answer.",
    reasoning: "plan it",
    content: "The answer.",
    calls: [],
  },
  {
    text: "<think>\n\n</think>\n\nOnly content",
    reasoning: "",
    content: "Only content",
    calls: [],
  },
  {
    text:
      '<think>\nuse add\n</think>\n\nLet me add.\n<tool_call>\n{"name": "add", "arguments": {"a": 1, "b": [2, 3]}}\n</tool_call>',
    reasoning: "use add",
    content: "Let me add.",
    calls: [["add", '{"a": 1, "b": [2, 3]}']],
  },
  {
    text:
      '<tool_call>\n{"name": "a", "arguments": {}}\n</tool_call>\n<tool_call>\n{"name": "b", "arguments": {"s": "x</tool_call"}}\n</tool_call>',
    reasoning: "",
    content: "",
    calls: [["a", "{}"], ["b", '{"s": "x</tool_call"}']],
  },
  {
    text: "already thinking\n</think>\n\ndone",
    reasoning: "already thinking",
    content: "done",
    calls: [],
    start: true,
  },
  {
    text: "<tool_call>\nnot json\n</tool_call>",
    reasoning: "",
    content: "<tool_call>\nnot json\n</tool_call>",
    calls: [],
  },
  {
    text: "a < b and <thinking> is not a tag",
    reasoning: "",
    content: "a < b and <thinking> is not a tag",
    calls: [],
  },
  {
    text: 'unterminated <tool_call>\n{"name": "x"',
    reasoning: "",
    content: 'unterminated <tool_call>\n{"name": "x"',
    calls: [],
  },
];

Deno.test("parse: reasoning, content and tool calls of whole outputs", () => {
  for (const c of CASES) {
    const out = parseOutput(c.text, { startInReasoning: c.start, newToolCallId: ids() });
    assert.equal(out.reasoning, c.reasoning, c.text);
    assert.equal(out.content, c.content, c.text);
    assert.deepEqual(out.tool_calls.map((t) => [t.name, t.arguments]), c.calls, c.text);
  }
});

Deno.test("parse: streaming split at every position adds up to the whole parse, never showing half a tag", () => {
  for (const c of CASES) {
    const whole = parseOutput(c.text, { startInReasoning: c.start, newToolCallId: ids() });
    for (let cut = 0; cut <= c.text.length; cut++) {
      for (const step of [1, 3]) {
        const parser = new OutputParser({ startInReasoning: c.start, newToolCallId: ids() });
        const parts = [...parser.push(c.text.slice(0, cut))];
        for (let i = cut; i < c.text.length; i += step) {
          parts.push(...parser.push(c.text.slice(i, i + step)));
        }
        parts.push(...parser.finish());
        const streamed = collectOutput(parts);
        assert.deepEqual(streamed, whole, `${JSON.stringify(c.text)} cut at ${cut} step ${step}`);
        for (const p of parts) {
          if (p.type === "tool_call") continue;
          assert.ok(
            !/<\/?(think|tool_call)$|<\/?(t|th|thi|thin|to|too|tool|tool_|tool_c)$/.test(p.text) ||
              c.content.includes(p.text),
            `half tag in ${JSON.stringify(p.text)}`,
          );
        }
      }
    }
  }
});

Deno.test("parse: tool-call arguments keep the model's exact JSON text", () => {
  const call = parseToolCallBody('{"name": "f", "arguments": {"x":  1, "y": "a\\"b"}}', () => "id");
  assert.equal(call?.arguments, '{"x":  1, "y": "a\\"b"}');
  assert.equal(
    rawJsonMember('{"arguments": [1, {"a": 2}], "name": "n"}', "arguments"),
    '[1, {"a": 2}]',
  );
  assert.equal(parseToolCallBody('{"arguments": {}}'), undefined, "a call needs a name");
  assert.equal(
    parseToolCallBody('{"name": "f", "arguments": "{\\"k\\": 1}"}')?.arguments,
    '{"k": 1}',
  );
});

/** Whether `small` can be had from `big` by deleting characters. */
function isSubsequence(small: string, big: string): boolean {
  let j = 0;
  for (const ch of big) if (j < small.length && ch === small[j]) j++;
  return j === small.length;
}

Deno.test("parse: every part's span is where its text came from (in order, disjoint), however the text is split", () => {
  for (const c of CASES) {
    for (let cut = 0; cut <= c.text.length; cut++) {
      const parser = new OutputParser({ startInReasoning: c.start, newToolCallId: ids() });
      const parts = [...parser.push(c.text.slice(0, cut))];
      for (const ch of c.text.slice(cut)) parts.push(...parser.push(ch));
      parts.push(...parser.finish());
      let end = 0;
      for (const p of parts) {
        const where = `${JSON.stringify(c.text)} cut at ${cut}: ${JSON.stringify(p)}`;
        assert.ok(p.span, `${where}: has a span`);
        const [from, to] = p.span;
        assert.ok(end <= from && from < to && to <= c.text.length, `${where}: in order, disjoint`);
        end = to;
        const raw = c.text.slice(from, to);
        if (p.type === "tool_call") {
          assert.ok(raw.includes("<tool_call>") && raw.includes("</tool_call>"), where);
        } else assert.ok(isSubsequence(p.text, raw), `${where}: the text comes from its span`);
      }
    }
  }
});
