import assert from "node:assert/strict";
import { packMicroBatches, unpackMicroBatch } from "../lib/batching/mod.ts";
import { type TrainingRow, TrainingRowSchema, ValidationError } from "../lib/schema.ts";

function row(id: string, n: number, parent?: number[]): TrainingRow {
  const r: TrainingRow = {
    rollout_id: id,
    group_id: `g-${id}`,
    tokens: Array.from({ length: n }, (_, t) => 100 * n + t),
    loss_mask: Array.from({ length: n }, (_, t) => (t % 3 === 0 ? 0 : 1)),
    advantages: new Array(n).fill(n / 10),
    loss_weights: Array.from({ length: n }, (_, t) => (t % 3 === 0 ? 0 : 1 / (7 * n))),
    rollout_logprobs: Array.from({ length: n }, (_, t) => (t % 3 === 0 ? 0 : -t / n)),
  };
  if (parent) r.parent = parent;
  return r;
}

Deno.test("first-fit-decreasing packs rows under the token budget with segment_starts at each row", () => {
  const rows = [row("a", 6), row("b", 5), row("c", 4), row("d", 3), row("e", 2)];
  const mbs = packMicroBatches(rows, { token_budget: 10 });
  // Longest first: a(6)+c(4) = 10, b(5)+d(3)+e(2) = 10.
  assert.equal(mbs.length, 2);
  assert.deepEqual(mbs.map((m) => m.segments.map((s) => s.rollout_id)), [["a", "c"], [
    "b",
    "d",
    "e",
  ]]);
  assert.deepEqual(mbs.map((m) => m.row.segment_starts), [[0, 6], [0, 5, 8]]);
  assert.deepEqual(mbs.map((m) => m.tokens), [10, 10]);
  for (const mb of mbs) {
    assert.ok(mb.tokens <= 10);
    assert.ok(TrainingRowSchema.safeParse(mb.row).success);
    assert.equal(mb.row.rollout_id, mb.segments[0].rollout_id);
  }
});

Deno.test("sequential packing keeps input order", () => {
  const rows = [row("a", 6), row("b", 5), row("c", 4), row("d", 3)];
  const mbs = packMicroBatches(rows, { token_budget: 10, order: "sequential" });
  assert.deepEqual(mbs.map((m) => m.segments.map((s) => s.source)), [[0], [1, 2], [3]]);
});

Deno.test("a row longer than the budget gets a micro-batch of its own, marked oversized, never cut", () => {
  for (const order of ["first_fit_decreasing", "sequential"] as const) {
    const mbs = packMicroBatches([row("a", 3), row("big", 25), row("b", 4)], {
      token_budget: 8,
      order,
    });
    const big = mbs.find((m) => m.segments.some((s) => s.rollout_id === "big"))!;
    assert.equal(big.oversized, true);
    assert.equal(big.segments.length, 1);
    assert.equal(big.tokens, 25);
    assert.equal(mbs.filter((m) => m.oversized).length, 1);
  }
});

Deno.test("unpacking returns exactly the source rows", () => {
  const rows = [row("a", 7), row("b", 1), row("c", 9), row("d", 4), row("e", 3)];
  const mbs = packMicroBatches(rows, { token_budget: 12 });
  const back = new Map<number, TrainingRow>();
  for (const mb of mbs) {
    unpackMicroBatch(mb).forEach((r, k) => back.set(mb.segments[k].source, r));
  }
  assert.equal(back.size, rows.length);
  rows.forEach((r, i) => assert.deepEqual(back.get(i), r));
});

Deno.test("tree rows keep their parents shifted by the segment offset; linear rows packed with them become chains", () => {
  const tree = row("t", 5, [-1, 0, 1, 1, 3]);
  const mbs = packMicroBatches([row("lin", 3), tree], { token_budget: 8, order: "sequential" });
  assert.equal(mbs.length, 1);
  assert.deepEqual(mbs[0].row.parent, [-1, 0, 1, -1, 3, 4, 4, 6]);
  const [lin, t] = unpackMicroBatch(mbs[0]);
  assert.equal(lin.parent, undefined);
  assert.deepEqual(t.parent, tree.parent);
  const linearOnly = packMicroBatches([row("x", 3), row("y", 3)], { token_budget: 8 });
  assert.equal(linearOnly[0].row.parent, undefined);
});

Deno.test("bad packing input names the field", () => {
  const packed = packMicroBatches([row("a", 3)], { token_budget: 8 })[0].row;
  const cases: [() => unknown, string][] = [
    [() => packMicroBatches([row("a", 3)], { token_budget: 0 }), "options.token_budget"],
    [() => packMicroBatches([row("a", 3), packed], { token_budget: 8 }), "rows[1].segment_starts"],
    [
      () => packMicroBatches([{ ...row("a", 3), loss_weights: [1] }], { token_budget: 8 }),
      "rows[0].loss_weights",
    ],
    [
      () => packMicroBatches([{ ...row("a", 3), parent: [-1] }], { token_budget: 8 }),
      "rows[0].parent",
    ],
    [() => packMicroBatches([row("a", 0)], { token_budget: 8 }), "rows[0].tokens"],
  ];
  for (const [fn, field] of cases) {
    assert.throws(fn, (e: unknown) => e instanceof ValidationError && e.field === field, field);
  }
});
