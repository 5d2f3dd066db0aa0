/**
 * The Responses API input items as the proxy reads them: function calls and free-form
 * (custom) tool calls become the assistant turn's tool calls, and a bad argument is refused
 * naming the item's field.
 */
import assert from "node:assert/strict";
import { HttpError } from "../lib/util/error.ts";
import { decodeResponsesInput } from "../lib/proxy/codecs/openai_responses_input.ts";

Deno.test("responses input: function_call and custom_tool_call are the turn's tool calls", () => {
  const messages = decodeResponsesInput([
    { type: "message", role: "user", content: "fix it" },
    { type: "function_call", call_id: "c1", name: "shell", arguments: '{"cmd":"ls"}' },
    { type: "function_call_output", call_id: "c1", output: "calc.py" },
    { type: "custom_tool_call", call_id: "c2", name: "apply_patch", input: "*** Begin Patch" },
  ], "be brief");
  assert.deepEqual(messages.map((m) => m.role), [
    "system",
    "user",
    "assistant",
    "tool",
    "assistant",
  ]);
  assert.deepEqual(messages[2].tool_calls, [
    { id: "c1", type: "function", function: { name: "shell", arguments: '{"cmd":"ls"}' } },
  ]);
  assert.deepEqual(messages[4].tool_calls, [
    { id: "c2", type: "function", function: { name: "apply_patch", arguments: "*** Begin Patch" } },
  ]);
});

Deno.test("responses input: a non-string argument is a 400 naming the item's field", () => {
  const bad = (item: Record<string, unknown>, field: RegExp) =>
    assert.throws(
      () => decodeResponsesInput([item], undefined),
      (err) => err instanceof HttpError && err.status === 400 && field.test(err.message),
    );
  bad(
    { type: "function_call", call_id: "c1", name: "f", arguments: { a: 1 } },
    /^input\[0\]\.arguments: must be a string/,
  );
  bad(
    { type: "custom_tool_call", call_id: "c2", name: "p", input: 7 },
    /^input\[0\]\.input: must be a string/,
  );
});
