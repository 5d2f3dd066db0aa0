/** Break diagnosis on synthetic calls: evidence order segment → messages → text → tokens. */
import assert from "node:assert/strict";
import { diagnoseBreak, type DiagnosedCall } from "../lib/samples/mod.ts";
import type { ChatMessage, Segment } from "../lib/schema.ts";
import { callEvent } from "./fixtures/samples/events.ts";

/** A char-level decoder: id → one lowercase letter; id 100 spells "ab" (a merged token). */
const decode = (ids: Uint32Array) =>
  [...ids].map((i) => i === 100 ? "ab" : String.fromCharCode(97 + (i % 26))).join("");

function call(
  seq: number,
  prompt: number[],
  response: number[],
  extra: { messages?: ChatMessage[]; segment?: Segment; response_text?: string } = {},
): DiagnosedCall {
  return { seq, request: callEvent(seq, prompt, response, extra).payload };
}

const msg = (role: ChatMessage["role"], content: string, extra: Partial<ChatMessage> = {}) =>
  ({
    role,
    content,
    ...extra,
  }) as ChatMessage;

Deno.test("the proxy's segment tag decides first", () => {
  const prev = call(1, [1, 2], [3], {
    segment: { conversation: "main", index: 0, opened_by: "root" },
  });
  const compacted = call(2, [1, 9], [4], {
    segment: { conversation: "main", index: 1, opened_by: "compaction" },
  });
  assert.equal(diagnoseBreak(prev, compacted, { decode }).reason, "compaction");
  assert.equal(diagnoseBreak(prev, compacted, { decode }).basis, "segment");
  const other = call(2, [1, 2, 5], [4], {
    segment: { conversation: "title", index: 0, opened_by: null },
  });
  assert.equal(diagnoseBreak(prev, other).reason, "branch");
  const moved = call(2, [1, 2, 5], [4], {
    segment: { conversation: "main", index: 2, opened_by: null },
  });
  assert.equal(diagnoseBreak(prev, moved).reason, "compaction");
});

Deno.test("evidence: first differing token and the decoded text around it", () => {
  const prev = call(1, [0, 1, 2, 3], [4, 5]);
  const cur = call(2, [0, 1, 2, 3, 4, 9, 9], [1]);
  const d = diagnoseBreak(prev, cur, { decode, evidenceTokens: 2 });
  assert.equal(d.first_diff_token, 5);
  assert.deepEqual(d.context_ids, [3, 4]);
  assert.deepEqual(d.expected_ids, [5]);
  assert.deepEqual(d.actual_ids, [9, 9]);
  assert.deepEqual([d.context_text, d.expected_text, d.actual_text], ["de", "f", "jj"]);
  assert.equal(d.reason, "response_rewrite"); // diverges inside the earlier response's text
  assert.equal(d.previous_seq, 1);
  const blind = diagnoseBreak(prev, cur);
  assert.equal(blind.reason, "unknown");
  assert.equal(blind.actual_text, null);
});

Deno.test("text level: token boundary, reasoning removal, shared-nothing branch, unknown history edit", () => {
  // "a","b" sampled as two ids; the next prompt spells "ab" with the merged id 100.
  const prev = call(1, [7, 8], [0, 1, 3]);
  assert.equal(
    diagnoseBreak(prev, call(2, [7, 8, 100, 3, 4], [1]), { decode }).reason,
    "token_boundary",
  );
  assert.equal(diagnoseBreak(prev, call(2, [9, 9], [1]), { decode }).reason, "branch");
  assert.equal(diagnoseBreak(prev, call(2, [7, 9, 0, 1, 3], [1]), { decode }).reason, "unknown");
  // A prompt that is a prefix of the earlier sequence forks from an earlier point.
  const fork = diagnoseBreak(prev, call(2, [7, 8, 0], [5]));
  assert.deepEqual([fork.reason, fork.basis], ["branch", "tokens"]);
  // Reasoning: decode "<think>x</think>" from ids via a decoder that knows two marker ids.
  const marks = (ids: Uint32Array) =>
    [...ids].map((i) => i === 200 ? "<think>" : i === 201 ? "</think>" : decode(Uint32Array.of(i)))
      .join("");
  const thinking = call(1, [7, 8], [200, 23, 201, 0, 1]);
  assert.equal(
    diagnoseBreak(thinking, call(2, [7, 8, 0, 1, 4], [1]), { decode: marks }).reason,
    "template_rewrite",
  );
});

Deno.test("messages: opening messages, shortened history, re-sampling, dropped reasoning", () => {
  const base = [msg("system", "S"), msg("user", "task")];
  const prev = call(1, [1, 2], [3], { messages: base, response_text: "answer" });
  const reply = msg("assistant", "answer");
  const with_ = (messages: ChatMessage[]) => call(2, [1, 5], [6], { messages });

  assert.equal(
    diagnoseBreak(prev, with_([msg("system", "S2"), msg("user", "task")])).reason,
    "branch",
  );
  assert.equal(
    diagnoseBreak(prev, with_([msg("system", "S"), msg("user", "other")])).reason,
    "branch",
  );
  const resample = diagnoseBreak(prev, with_(base));
  assert.equal(resample.reason, "branch");
  assert.match(resample.detail, /re-samples/);
  assert.equal(diagnoseBreak(prev, with_([...base, msg("user", "summary")])).reason, "compaction");
  assert.equal(
    diagnoseBreak(prev, with_([...base, msg("assistant", "answer!")])).reason,
    "response_rewrite",
  );
  // History extends and the reply is verbatim: without a decoder template vs token is open.
  assert.equal(diagnoseBreak(prev, with_([...base, reply, msg("user", "more")])).reason, "unknown");

  const long = [...base, msg("assistant", "a1", { reasoning_content: "think" }), msg("tool", "r")];
  const prev2 = call(1, [1, 2], [3], { messages: long, response_text: "a2" });
  const stripped = [...base, msg("assistant", "a1"), msg("tool", "r"), msg("assistant", "a2")];
  const d = diagnoseBreak(prev2, with_(stripped));
  assert.equal(d.reason, "template_rewrite");
  assert.match(d.detail, /reasoning of earlier assistant message\(s\) 2/);
  const replaced = [...base, msg("user", "summary"), msg("tool", "r"), msg("assistant", "a2")];
  assert.equal(diagnoseBreak(prev2, with_(replaced)).reason, "compaction");
});

Deno.test("no earlier call: unknown, with the prompt's first ids as evidence", () => {
  const d = diagnoseBreak(null, call(1, [1, 2, 3], [4]), { decode });
  assert.equal(d.reason, "unknown");
  assert.equal(d.previous_seq, null);
  assert.equal(d.actual_text, "bcd");
});
