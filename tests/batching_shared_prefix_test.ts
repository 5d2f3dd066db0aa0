/**
 * Shared-prefix packing (`packSharedPrefix`): a prompt shared by several samples is stored once
 * per micro-batch as the trunk of a prefix tree, trained tokens are never shared, the budget
 * counts the shared row, and every sample's tokens can be found (and unpacked) again.
 */
import assert from "node:assert/strict";
import {
  type MicroBatch,
  packMicroBatches,
  type PackOptions,
  packSharedPrefix,
  segmentTokenIndex,
  shareablePrefixLength,
  unpackMicroBatch,
} from "../lib/batching/mod.ts";
import { type TrainingRow, TrainingRowSchema, ValidationError } from "../lib/schema.ts";
import { mulberry32, randInt } from "./fixtures/algo/samples.ts";

/** A sample: `prompt` untrained, then `response` with the given mask (default all trained). */
function sample(
  id: string,
  prompt: number[],
  response: number[],
  mask: (0 | 1)[] = response.map(() => 1),
): TrainingRow {
  const tokens = [...prompt, ...response];
  const loss_mask = [...prompt.map(() => 0 as const), ...mask];
  return {
    rollout_id: id,
    group_id: `g-${id}`,
    tokens,
    loss_mask,
    advantages: tokens.map((_, t) => (id.length + t) / 10),
    loss_weights: loss_mask.map((m, t) => (m ? 1 / (50 + t) : 0)),
    rollout_logprobs: loss_mask.map((m, t) => (m ? -t / 7 : 0)),
  };
}

/** Depth of every node (the worker's position for tree rows). */
function depths(parent: readonly number[]): number[] {
  const out: number[] = [];
  parent.forEach((p, i) => {
    assert.ok(p < i, `parent[${i}] = ${p} must point to an earlier token`);
    out.push(p < 0 ? 0 : out[p] + 1);
  });
  return out;
}

/**
 * Everything a shared-prefix micro-batch promises about its source rows: each sample's tokens
 * are a root-to-node path at depths 0, 1, 2, …; trained tokens sit in the sample's own nodes
 * with its own values and sequence id; every token of the row belongs to some sample.
 */
function checkMicroBatch(mb: MicroBatch, rows: readonly TrainingRow[], what: string) {
  const { row } = mb;
  assert.ok(TrainingRowSchema.safeParse(row).success, `${what}: row fits the schema`);
  assert.equal(row.tokens.length, mb.tokens, `${what}: tokens`);
  const owners = new Array<number>(mb.tokens).fill(0);
  const trainedBy = new Array<number>(mb.tokens).fill(0);
  const parent = row.parent ?? null;
  const depth = parent ? depths(parent) : null;
  mb.segments.forEach((seg, k) => {
    const source = rows[seg.source];
    const shared = seg.shared ?? 0;
    assert.equal(shared + seg.length, source.tokens.length, `${what}: segment ${k} length`);
    assert.ok(seg.length >= 1, `${what}: every sample keeps a node of its own`);
    assert.ok(shared <= shareablePrefixLength(source), `${what}: only untrained prompt shared`);
    const at = segmentTokenIndex(mb, seg);
    for (let t = 0; t < at.length; t++) {
      const i = at[t];
      assert.equal(row.tokens[i], source.tokens[t], `${what}: segment ${k} token ${t}`);
      assert.equal(row.loss_mask[i], source.loss_mask[t], `${what}: segment ${k} mask ${t}`);
      if (t >= shared) {
        owners[i]++;
        assert.equal(i, seg.start + t - shared);
        assert.equal(row.advantages[i], source.advantages[t]);
        assert.equal(row.loss_weights[i], source.loss_weights[t]);
        assert.equal(row.rollout_logprobs[i], source.rollout_logprobs[t]);
      }
      if (source.loss_mask[t]) {
        trainedBy[i]++;
        assert.ok(t >= shared, `${what}: a trained token was shared`);
        if (row.sequence_ids) assert.equal(row.sequence_ids[i], k, `${what}: sequence id`);
      }
      if (parent && depth && !source.parent) {
        // Linear samples are root-to-node paths: position = t, predicted from token t − 1.
        assert.equal(depth[i], t, `${what}: segment ${k} depth of token ${t}`);
        assert.equal(parent[i], t === 0 ? -1 : at[t - 1], `${what}: segment ${k} parent ${t}`);
      }
    }
  });
  assert.ok(owners.every((c) => c === 1), `${what}: every node is owned by one segment`);
  for (let i = 0; i < mb.tokens; i++) {
    if (row.loss_mask[i]) assert.equal(trainedBy[i], 1, `${what}: trained node ${i} shared`);
  }
}

/** Tokens a micro-batch must hold: Σ lengths − what each member shares with earlier ones. */
function expectedTokens(mb: MicroBatch, rows: readonly TrainingRow[]): number {
  let total = 0;
  mb.segments.forEach((seg, k) => {
    const a = rows[seg.source];
    const sa = shareablePrefixLength(a);
    let best = 0;
    for (const earlier of mb.segments.slice(0, k)) {
      const b = rows[earlier.source];
      const limit = Math.min(sa, shareablePrefixLength(b));
      let j = 0;
      while (j < limit && a.tokens[j] === b.tokens[j]) j++;
      best = Math.max(best, j);
    }
    assert.equal(seg.shared ?? 0, best, `member ${k} shares the longest possible prefix`);
    total += a.tokens.length - best;
  });
  return total;
}

const SYSTEM = [90, 91, 92, 93, 94, 95, 96, 97];

Deno.test("a group's shared prompt is stored once; branches hang off its last token", () => {
  const prompt = [...SYSTEM, 3, 4];
  const rows = [
    sample("a", prompt, [10, 11, 12]),
    sample("b", prompt, [10, 13]),
    sample("c", prompt, [14, 15, 16, 17]),
  ];
  const mbs = packSharedPrefix(rows, { token_budget: 64 });
  assert.equal(mbs.length, 1);
  const [mb] = mbs;
  assert.equal(mb.tokens, prompt.length + 3 + 2 + 4);
  assert.deepEqual(mb.segments.map((s) => [s.source, s.start, s.length, s.shared]), [
    [0, 0, 13, 0],
    [1, 13, 2, 10],
    [2, 15, 4, 10],
  ]);
  const last = prompt.length - 1;
  assert.deepEqual(mb.row.parent, [
    ...prompt.map((_, t) => t - 1),
    ...[last, 10, 11], // a's own response
    ...[last, 13], // b branches off the prompt's last token
    ...[last, 15, 16, 17], // and so does c
  ]);
  assert.deepEqual(mb.row.sequence_ids, [...new Array(13).fill(0), 1, 1, 2, 2, 2, 2]);
  assert.equal(mb.row.segment_starts, undefined);
  // Positions (depths) equal each token's index in its own sample.
  assert.deepEqual(depths(mb.row.parent!).slice(13), [10, 11, 10, 11, 12, 13]);
  checkMicroBatch(mb, rows, "group");
  assert.equal(expectedTokens(mb, rows), mb.tokens);
});

Deno.test("trained tokens are never shared, and every sample keeps its last token", () => {
  const prompt = [...SYSTEM, 3];
  // Same tokens, but b trains its first response token and a trains only later ones.
  const a = sample("a", prompt, [5, 6, 7], [0, 1, 1]);
  const b = sample("b", prompt, [5, 6, 7], [1, 1, 1]);
  const [mb] = packSharedPrefix([a, b], { token_budget: 64 });
  assert.deepEqual(mb.segments.map((s) => s.shared), [0, prompt.length]);
  // A trained token inside the "prompt" stops sharing right there.
  const c = sample("c", prompt, [5, 6]);
  c.loss_mask[2] = 1;
  const [mb2] = packSharedPrefix([a, c], { token_budget: 64 });
  assert.deepEqual(mb2.segments.map((s) => s.shared), [0, 2]);
  // Two identical untrained samples: the second still owns its last token.
  const d = sample("d", prompt, [5], [0]);
  const [mb3] = packSharedPrefix([d, { ...d, rollout_id: "e" }], { token_budget: 64 });
  assert.deepEqual(mb3.segments.map((s) => [s.shared, s.length]), [[0, 10], [9, 1]]);
  for (const [m, rows] of [[mb, [a, b]], [mb2, [a, c]], [mb3, [d, d]]] as const) {
    checkMicroBatch(m, rows, "no trained sharing");
  }
});

Deno.test("groups sharing a system prompt form a nested trie", () => {
  const rows = [
    sample("a1", [...SYSTEM, 1, 1], [7, 8]),
    sample("b1", [...SYSTEM, 2, 2], [7]),
    sample("a2", [...SYSTEM, 1, 1], [9]),
    sample("b2", [...SYSTEM, 2, 2], [6, 6]),
  ];
  const [mb] = packSharedPrefix(rows, { token_budget: 64 });
  assert.equal(mb.tokens, SYSTEM.length + 2 + 2 + (2 + 1 + 1 + 2));
  assert.deepEqual(mb.segments.map((s) => s.shared), [0, 8, 10, 10]);
  checkMicroBatch(mb, rows, "nested");
  assert.equal(expectedTokens(mb, rows), mb.tokens);
});

Deno.test("the budget counts the shared row: what plain packing spreads over 3 fits in 1", () => {
  const prompt = [...SYSTEM, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]; // 20 tokens
  const rows = Array.from({ length: 6 }, (_, i) => sample(`r${i}`, prompt, [i, i + 1, i + 2]));
  // Plain: 23 tokens each, 2 per 48-token micro-batch. Shared: 20 + 6 × 3 = 38.
  assert.equal(packMicroBatches(rows, { token_budget: 48 }).length, 3);
  const mbs = packSharedPrefix(rows, { token_budget: 48 });
  assert.equal(mbs.length, 1);
  assert.equal(mbs[0].tokens, 38);
  // A tighter budget splits the group, each micro-batch with its own copy of the prompt.
  for (const order of ["first_fit_decreasing", "sequential"] as const) {
    const tight = packSharedPrefix(rows, { token_budget: 30, order });
    assert.deepEqual(tight.map((m) => m.tokens), [29, 29]);
    assert.ok(tight.every((m) => !m.oversized));
    tight.forEach((m) => checkMicroBatch(m, rows, `tight ${order}`));
  }
  // A sample longer than the budget alone still joins a micro-batch when sharing makes it fit.
  const long = sample("long", prompt, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12]); // 32 tokens
  const joined = packSharedPrefix([rows[0], long], { token_budget: 40, order: "sequential" });
  assert.deepEqual(joined.map((m) => [m.tokens, m.oversized]), [[35, false]]);
  // Alone (nothing to share) it gets a micro-batch of its own, marked oversized.
  const alone = packSharedPrefix([long, sample("x", [1], [2])], { token_budget: 20 });
  assert.deepEqual(alone.map((m) => [m.tokens, m.oversized, m.segments.length]), [
    [32, true, 1],
    [2, false, 1],
  ]);
});

Deno.test("interleaved groups are packed group by group (prefix-tree order)", () => {
  const groups = [0, 1, 2].map((g) => [...SYSTEM, 10 + g, 20 + g, 30 + g, 40 + g]);
  const rows: TrainingRow[] = [];
  for (let r = 0; r < 4; r++) {
    for (let g = 0; g < 3; g++) rows.push(sample(`g${g}r${r}`, groups[g], [r, r + 1, r + 2, g]));
  }
  // One group: 12 + 4 × 4 = 28 tokens; another group's first sample would add 4 + 4 = 8.
  const mbs = packSharedPrefix(rows, { token_budget: 30 });
  assert.deepEqual(mbs.map((m) => m.tokens), [28, 28, 28]);
  assert.deepEqual(
    mbs.map((m) => new Set(m.segments.map((s) => s.group_id.slice(2, 4))).size),
    [1, 1, 1],
  );
  mbs.forEach((m) => checkMicroBatch(m, rows, "interleaved"));
  // Input order (sequential) follows the interleaving and shares only the system prompt.
  const sequential = packSharedPrefix(rows, { token_budget: 30, order: "sequential" });
  assert.ok(sequential.reduce((n, m) => n + m.tokens, 0) > 3 * 28);
});

Deno.test("nothing shared: the micro-batches are exactly packMicroBatches'", () => {
  const rows = [
    sample("a", [1, 2], [3, 4]),
    sample("b", [5, 6, 7], [8]),
    sample("c", [9], [10, 11, 12]),
  ];
  for (const options of [{ token_budget: 8 }, { token_budget: 100, order: "sequential" }]) {
    const shared = packSharedPrefix(rows, options as PackOptions);
    const plain = packMicroBatches(rows, options as PackOptions);
    assert.deepEqual(shared.map((m) => m.row), plain.map((m) => m.row));
    assert.deepEqual(
      shared.map((m) => m.segments.map(({ shared: _, ...s }) => s)),
      plain.map((m) => m.segments),
    );
  }
});

Deno.test("tree samples are packed as they are, next to shared linear ones", () => {
  const prompt = [...SYSTEM, 1];
  const tree = sample("t", prompt, [5, 6, 7]);
  tree.parent = [...prompt.map((_, t) => t - 1), 8, 9, 8];
  const rows = [sample("a", prompt, [2, 3]), tree, sample("b", prompt, [4])];
  const [mb] = packSharedPrefix(rows, { token_budget: 64 });
  assert.deepEqual(mb.segments.map((s) => [s.shared, s.had_parent]), [[0, false], [0, true], [
    9,
    false,
  ]]);
  assert.equal(mb.tokens, 11 + 12 + 1);
  const t = mb.segments[1];
  assert.deepEqual(
    mb.row.parent!.slice(t.start, t.start + t.length),
    tree.parent.map((p) => (p < 0 ? -1 : p + t.start)),
  );
  checkMicroBatch(mb, rows, "tree");
  const back = unpackMicroBatch(mb);
  assert.deepEqual(back[1], tree);
});

Deno.test("bad rows are refused with the field named", () => {
  const good = sample("a", [1], [2]);
  assert.throws(
    () => packSharedPrefix([good, { ...good, loss_mask: [0] }], { token_budget: 8 }),
    (e: unknown) => e instanceof ValidationError && e.field === "rows[1].loss_mask",
  );
  assert.throws(
    () => packSharedPrefix([{ ...good, segment_starts: [0] }], { token_budget: 8 }),
    (e: unknown) => e instanceof ValidationError && e.field === "rows[0].segment_starts",
  );
  assert.throws(
    () => packSharedPrefix([good], { token_budget: 0 }),
    (e: unknown) => e instanceof ValidationError && e.field === "options.token_budget",
  );
});

/** Random RL-like batch: groups with a task prompt under an optional shared system prompt. */
function randomRows(rand: () => number): TrainingRow[] {
  const rows: TrainingRow[] = [];
  const vocab = randInt(rand, 2, 12); // small vocabularies make accidental common prefixes
  const tok = () => randInt(rand, 0, vocab - 1);
  const system = Array.from({ length: randInt(rand, 0, 30) }, tok);
  const groups = randInt(rand, 1, 5);
  for (let g = 0; g < groups; g++) {
    const task = [
      ...(rand() < 0.8 ? system : []),
      ...Array.from({ length: randInt(rand, 0, 10) }, tok),
    ];
    const n = randInt(rand, 1, 6);
    for (let r = 0; r < n; r++) {
      const prompt = task.length > 0 || rand() < 0.5 ? [...task] : [tok()];
      // Multi-turn: trained runs with untrained tool output between them.
      const response: number[] = [];
      const mask: (0 | 1)[] = [];
      for (let turn = randInt(rand, 1, 3); turn > 0; turn--) {
        for (let k = randInt(rand, 1, 5); k > 0; k--) response.push(tok()), mask.push(1);
        for (let k = randInt(rand, 0, 4); k > 0; k--) response.push(tok()), mask.push(0);
      }
      if (rand() < 0.15) mask.fill(0); // a sample with nothing trained
      const row = sample(`g${g}-r${r}`, prompt, response, mask);
      if (prompt.length > 1 && rand() < 0.1) row.loss_mask[randInt(rand, 1, prompt.length - 1)] = 1;
      if (rand() < 0.1) {
        // A tree sample: its response tokens branch off its last prompt token.
        row.parent = row.tokens.map((_, t) => (t === 0 ? -1 : t <= prompt.length ? t - 1 : t - 1));
        if (row.tokens.length > prompt.length + 1) {
          row.parent[row.tokens.length - 1] = prompt.length;
        }
      }
      rows.push(row);
    }
  }
  for (let i = rows.length - 1; i > 0; i--) {
    const j = Math.floor(rand() * (i + 1));
    [rows[i], rows[j]] = [rows[j], rows[i]];
  }
  return rows;
}

Deno.test("property: the tree paths give back every sample, under the budget, sharing all it can", () => {
  let sharedSomewhere = 0;
  for (let seed = 1; seed <= 300; seed++) {
    const rand = mulberry32(7000 + seed);
    const rows = randomRows(rand);
    const budget = randInt(rand, 8, 160);
    const order = rand() < 0.5 ? "first_fit_decreasing" as const : "sequential" as const;
    const mbs = packSharedPrefix(rows, { token_budget: budget, order });
    const what = `seed ${seed} (${order}, budget ${budget})`;
    const found = new Array(rows.length).fill(0);
    let tokens = 0;
    for (const mb of mbs) {
      assert.ok(mb.oversized ? mb.segments.length === 1 : mb.tokens <= budget, what);
      if (mb.oversized) assert.ok(mb.tokens > budget, what);
      checkMicroBatch(mb, rows, what);
      assert.equal(expectedTokens(mb, rows), mb.tokens, what);
      tokens += mb.tokens;
      const sources = mb.segments.map((s) => s.source);
      assert.deepEqual(sources, [...sources].sort((a, b) => a - b), `${what}: input order`);
      unpackMicroBatch(mb).forEach((back, k) => {
        const source = rows[mb.segments[k].source];
        found[mb.segments[k].source]++;
        assert.deepEqual(back.tokens, source.tokens, what);
        assert.deepEqual(back.loss_mask, source.loss_mask, what);
        assert.equal(back.rollout_id, source.rollout_id);
        for (let t = 0; t < source.tokens.length; t++) {
          if (!source.loss_mask[t]) continue;
          assert.equal(back.advantages[t], source.advantages[t], what);
          assert.equal(back.loss_weights[t], source.loss_weights[t], what);
          assert.equal(back.rollout_logprobs[t], source.rollout_logprobs[t], what);
        }
        if (source.parent) assert.deepEqual(back.parent, source.parent, what);
      });
    }
    assert.ok(found.every((c) => c === 1), `${what}: a sample was lost or duplicated`);
    const plain = rows.reduce((n, r) => n + r.tokens.length, 0);
    assert.ok(tokens <= plain, what);
    if (tokens < plain) sharedSomewhere++;
  }
  assert.ok(sharedSomewhere > 150, `sharing happened in ${sharedSomewhere} of 300 batches`);
});
