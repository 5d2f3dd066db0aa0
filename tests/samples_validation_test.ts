/** Bad input is rejected with an error that names the event, the field and the problem. */
import assert from "node:assert/strict";
import { assembleRollout } from "../lib/samples/mod.ts";
import { type RolloutEvent, ValidationError } from "../lib/schema.ts";
import { callEvent } from "./fixtures/samples/events.ts";

function rejects(events: unknown, pattern: RegExp, options = {}): ValidationError {
  let caught: unknown;
  try {
    assembleRollout(events as RolloutEvent[], options);
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof ValidationError, `expected a ValidationError, got ${caught}`);
  assert.match(caught.message, pattern);
  return caught;
}

Deno.test("a logprob count different from the response length is rejected", () => {
  const bad = callEvent(1, [1, 2], [3, 4, 5]);
  bad.payload.response_logprobs = Float32Array.of(-1, -1);
  const error = rejects([bad], /expected 3 logprobs \(one per response token\), got 2/);
  assert.equal(error.field, "events[0].payload.response_logprobs");
  assert.match(error.message, /model_request seq 1/);
});

Deno.test("non-finite logprobs are rejected (typed and wire form)", () => {
  const bad = callEvent(1, [1, 2], [3, 4]);
  bad.payload.response_logprobs[1] = NaN;
  const error = rejects([bad], /response_logprobs\[1\]: must be a finite number/);
  assert.equal(error.field, "events[0].payload.response_logprobs[1]");
  const wire = {
    ...callEvent(1, [1], [2]),
    payload: {
      flavor: "generate",
      prompt_token_ids: [1],
      response_token_ids: [2],
      response_logprobs: [Infinity],
      policy_version: 0,
    },
  };
  rejects([wire], /payload\.response_logprobs\[0\]: .*Infinity/);
});

Deno.test("negative, fractional and too-large token ids are rejected", () => {
  const wire = (prompt: number[]) => ({
    ...callEvent(1, [1], [2]),
    payload: {
      flavor: "generate",
      prompt_token_ids: prompt,
      response_token_ids: [2],
      response_logprobs: [-0.1],
      policy_version: 0,
    },
  });
  const negative = rejects([wire([5, -3])], /prompt_token_ids\[1\]/);
  assert.equal(negative.field, "events[0].payload.prompt_token_ids[1]");
  rejects([wire([1.5])], /prompt_token_ids\[0\]/);
  rejects(
    [callEvent(1, [1, 999], [2])],
    /prompt_token_ids\[1\]: token id 999 is out of range \(vocabulary size 100\)/,
    { vocab_size: 100 },
  );
  rejects(
    [callEvent(1, [1], [2, 150])],
    /response_token_ids\[1\]: token id 150 is out of range/,
    { tokenizer: { vocabSize: 100, decode: () => "" } },
  );
});

Deno.test("missing ids, missing payload and wrong array types are rejected", () => {
  const missing = callEvent(1, [1], [2]);
  delete (missing.payload as unknown as Record<string, unknown>).prompt_token_ids;
  const error = rejects([missing], /prompt_token_ids: must be a Uint32Array .*missing/);
  assert.equal(error.field, "events[0].payload.prompt_token_ids");
  const wireMissing = {
    ...callEvent(1, [1], [2]),
    payload: {
      flavor: "generate",
      response_token_ids: [2],
      response_logprobs: [-1],
      policy_version: 0,
    },
  };
  rejects([wireMissing], /events\[0\]\.payload\.prompt_token_ids/);
  rejects(
    [{ ...callEvent(1, [1], [2]), payload: undefined }],
    /events\[0\]\.payload: must be a model_request payload/,
  );
  const floats = callEvent(1, [1], [2]);
  (floats.payload as unknown as Record<string, unknown>).response_token_ids = Float32Array.of(2);
  rejects([floats], /response_token_ids: must be a Uint32Array .*Float32Array/);
});

Deno.test("events must have distinct integer seqs and one rollout; options are checked", () => {
  rejects([callEvent(1, [1], [2]), callEvent(1, [1, 2], [3])], /events\[1\]\.seq: duplicate seq 1/);
  rejects([{ ...callEvent(1, [1], [2]), seq: "7" }], /events\[0\]\.seq: must be an integer/);
  rejects(
    [callEvent(1, [1], [2]), callEvent(2, [1], [2], { rollout_id: "other" })],
    /events\[1\]\.rollout_id: all events must belong to one rollout/,
  );
  rejects([callEvent(1, [1], [2])], /options\.strategy/, { strategy: "greedy" });
  rejects([callEvent(1, [1], [2])], /options\.rollout_id/, { rollout_id: "r2" });
  rejects([], /options\.decode: must be a function/, { decode: "utf8" });
  // Without a decoder buffer_substitute could repair nothing and would quietly be prefix_merge.
  rejects([callEvent(1, [1], [2])], /options\.decode: buffer_substitute compares decoded texts/, {
    strategy: "buffer_substitute",
  });
});

Deno.test("wire-form payloads (number arrays) are accepted and converted", () => {
  const wire = {
    ...callEvent(1, [1], [2]),
    payload: {
      flavor: "generate",
      prompt_token_ids: [1, 2],
      response_token_ids: [3],
      response_logprobs: [-0.25],
      policy_version: 4,
    },
  };
  const result = assembleRollout([wire] as unknown as RolloutEvent[]);
  assert.deepEqual(result.samples[0].tokens, Uint32Array.of(1, 2, 3));
  assert.deepEqual(result.samples[0].rollout_logprobs, Float32Array.of(0, 0, -0.25));
  assert.equal(result.samples[0].policy_version, 4);
});
