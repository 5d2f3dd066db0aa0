import assert from "node:assert/strict";
import { computeAdvantages, computeLossWeights } from "../lib/algo/mod.ts";
import { flattenBatch, parseTrainingRows, rolloutUnits, sampleToRow } from "../lib/batching/mod.ts";
import { TrainingRowSchema, ValidationError } from "../lib/schema.ts";
import { figure4 } from "./fixtures/algo/samples.ts";

function prepared() {
  const adv = computeAdvantages(figure4(), { normalize_std: false });
  return computeLossWeights(adv.samples, { mode: "rollout_token_mean" }).samples;
}

Deno.test("flattenBatch makes one row per sample, keeping rollout id, group id and every per-token value", () => {
  const samples = prepared();
  const rows = flattenBatch(samples);
  assert.equal(rows.length, samples.length);
  rows.forEach((row, i) => {
    const s = samples[i];
    assert.equal(row.rollout_id, s.rollout_id);
    assert.equal(row.group_id, s.group_id);
    assert.deepEqual(row.tokens, Array.from(s.tokens));
    assert.deepEqual(row.loss_mask, Array.from(s.loss_mask));
    assert.deepEqual(row.advantages, Array.from(s.advantage!));
    assert.deepEqual(row.loss_weights, Array.from(s.loss_weight!));
    assert.deepEqual(row.rollout_logprobs, Array.from(s.rollout_logprobs));
    assert.equal(row.parent, undefined);
    assert.ok(TrainingRowSchema.safeParse(row).success);
  });
});

Deno.test("rows survive a JSON round trip unchanged and validate", () => {
  const rows = flattenBatch(prepared());
  const back = parseTrainingRows(JSON.parse(JSON.stringify(rows)));
  assert.deepEqual(back, rows);
});

Deno.test("tree parents are carried over", () => {
  const [s] = prepared();
  const parent = Int32Array.from(s.tokens, (_, t) => t - 1);
  assert.deepEqual(sampleToRow({ ...s, parent }).parent, Array.from(parent));
});

Deno.test("rolloutUnits groups rows by rollout with total and trained token counts", () => {
  const rows = flattenBatch(prepared());
  const units = rolloutUnits(rows);
  assert.deepEqual(units.map((u) => [u.rollout_id, u.rows]), [["r1", [0, 1, 2]], ["r2", [3]]]);
  assert.equal(
    units[0].tokens,
    rows[0].tokens.length + rows[1].tokens.length + rows[2].tokens.length,
  );
  assert.equal(units[0].trained_tokens, 4 + 5 + 2);
  assert.equal(units[1].trained_tokens, 7);
});

Deno.test("samples without advantages or weights, and malformed JSON rows, are rejected naming the field", () => {
  const [s] = prepared();
  assert.throws(
    () => flattenBatch([s, { ...s, advantage: undefined }]),
    (e: unknown) => e instanceof ValidationError && e.field === "samples[1].advantage",
  );
  assert.throws(
    () => flattenBatch([{ ...s, loss_weight: new Float32Array(2) }]),
    (e: unknown) => e instanceof ValidationError && e.field === "samples[0].loss_weight",
  );
  const row = sampleToRow(s);
  assert.throws(
    () => parseTrainingRows([row, { ...row, loss_weights: [1] }]),
    (e: unknown) => e instanceof ValidationError && e.field === "rows[1].loss_weights",
  );
  assert.throws(
    () => parseTrainingRows([{ ...row, tokens: row.tokens.map((t, i) => (i ? t : -1)) }]),
    (e: unknown) => e instanceof ValidationError && e.field === "rows[0].tokens[0]",
  );
  assert.throws(
    () => parseTrainingRows({ rows: [] }),
    (e: unknown) => e instanceof ValidationError && e.field.startsWith("rows"),
  );
});
