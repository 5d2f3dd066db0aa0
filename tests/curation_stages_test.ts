/**
 * The curation pipeline's rule stages, task-set input and output, and selection: each stage
 * drops what it names with its reason and keeps the rest; the funnel never grows; bad input
 * fails with the file, line and field; a curated set loads back through its schema.
 */
import assert from "node:assert/strict";
import {
  codingDatasetTasks,
  readCuratedSet,
  readTaskSet,
  writeTaskSet,
} from "../lib/curation/io.ts";
import { runCuration } from "../lib/curation/pipeline.ts";
import { shares, splitByRepo, stratifiedSample } from "../lib/curation/select.ts";
import {
  alreadySolvedStage,
  brokenStage,
  duplicatesStage,
  environmentStage,
  leakStage,
  maxTestsStage,
  type Stage,
  statementStage,
} from "../lib/curation/stages.ts";
import { DEFAULT_DATA_DIR } from "../lib/harness/envs/common.ts";
import { invertPatch, makePatch } from "../lib/harness/envs/coding_tasks.ts";
import { CurationConfigSchema, type SweTask, ValidationError } from "../lib/schema.ts";

const REPOS = `${DEFAULT_DATA_DIR}/coding/repos`;
const GENERATED = readTaskSet(`${DEFAULT_DATA_DIR}/coding/swesmith.jsonl`);
const config = CurationConfigSchema.parse({});
const ctx = { config, reposDir: REPOS };
const base = GENERATED[0];
const variant = (id: string, patch: Partial<SweTask>): SweTask => ({
  ...base,
  instance_id: id,
  branch: id,
  ...patch,
});

async function dropsOf(stage: Stage, tasks: SweTask[]) {
  const { kept, dropped } = await stage.run(tasks, ctx);
  assert.equal(kept.length + dropped.length, tasks.length);
  return {
    kept: kept.map((t) => t.instance_id),
    dropped: Object.fromEntries(dropped.map((d) => [d.task.instance_id, d.reason])),
    details: dropped.map((d) => d.detail),
  };
}

Deno.test("statement stage: empty and trivial statements go, a real one stays", async () => {
  const r = await dropsOf(statementStage, [
    variant("empty", { problem_statement: "  \n " }),
    variant("null", { problem_statement: "" }),
    variant("short", { problem_statement: "Fix the bug." }),
    base,
  ]);
  assert.deepEqual(r.kept, [base.instance_id]);
  assert.deepEqual(r.dropped, { empty: "empty", null: "empty", short: "trivial" });
});

Deno.test("environment stage: missing repository, moved base, a branch that cannot be made", async () => {
  const path = base.patch.match(/^diff --git a\/(\S+)/)![1];
  const r = await dropsOf(environmentStage(), [
    variant("no-repo", { repo: "not-there", image_name: "swesmith.x86_64.not-there" }),
    variant("moved", { base_commit: "0".repeat(40) }),
    variant("no-branch", { patch: makePatch(path, "no such text\n", "other text\n") }),
    variant("unpinned", { base_commit: null }),
    base,
  ]);
  assert.deepEqual(r.kept, ["unpinned", base.instance_id]);
  assert.deepEqual(r.dropped, {
    "no-repo": "no_environment",
    moved: "base_mismatch",
    "no-branch": "branch_missing",
  });
  assert.match(r.details.join("\n"), /swesmith\.x86_64\.not-there: no repository not-there/);
});

Deno.test("max_tests stage: more than N tests, or no FAIL_TO_PASS, goes", async () => {
  const many = Array.from({ length: 201 }, (_, i) => `tests.t.T.test_${i}`);
  const r = await dropsOf(maxTestsStage, [
    variant("many", { PASS_TO_PASS: many }),
    variant("none", { FAIL_TO_PASS: [] }),
    variant("limit", { PASS_TO_PASS: many.slice(0, 200 - base.FAIL_TO_PASS.length) }),
  ]);
  assert.deepEqual(r.kept, ["limit"]);
  assert.deepEqual(r.dropped, { many: "too_many_tests", none: "no_fail_to_pass" });
});

Deno.test("duplicates stage: the first of a repeated statement stays (case and spacing folded)", async () => {
  const text = base.problem_statement;
  const r = await dropsOf(duplicatesStage, [
    variant("a", {}),
    variant("b", { problem_statement: `  ${text.toUpperCase().replaceAll(" ", "   ")}\n` }),
    variant("c", { problem_statement: `${text} Also more.` }),
  ]);
  assert.deepEqual(r.kept, ["a", "c"]);
  assert.deepEqual(r.dropped, { b: "duplicate" });
  assert.match(r.details[0], /same statement as a/);
});

Deno.test("leak stage: a statement quoting a line the fix adds goes", async () => {
  const fix = invertPatch(base.patch).split("\n").find((l) =>
    l.startsWith("+") && !l.startsWith("+++")
  )!;
  const r = await dropsOf(leakStage, [
    variant("leaky", {
      problem_statement: `${base.problem_statement}\nHint: write\n${fix.slice(1)}`,
    }),
    base,
  ]);
  assert.deepEqual(r.kept, [base.instance_id]);
  assert.deepEqual(r.dropped, { leaky: "leaks_fix" });
});

Deno.test("sandboxed test stages: FAIL_TO_PASS already passing; gold patch failing or not applying", async () => {
  const path = base.patch.match(/^diff --git a\/(\S+)/)![1];
  const text = Deno.readTextFileSync(`${REPOS}/${base.repo}/${path}`);
  const comment = makePatch(path, text, `# a comment\n${text}`);
  const legacy = codingDatasetTasks(DEFAULT_DATA_DIR).find((t) =>
    t.instance_id === "coding-roman"
  )!;
  const solved = await dropsOf(alreadySolvedStage, [
    variant("harmless", { patch: comment }),
    base,
    legacy,
  ]);
  assert.deepEqual(solved.kept, [base.instance_id, "coding-roman"]);
  assert.deepEqual(solved.dropped, { harmless: "fail_to_pass_passes" });
  const broken = await dropsOf(brokenStage, [
    variant("no-fix", { gold_patch: comment }),
    variant("bad-gold", { gold_patch: makePatch(path, "no such text\n", "x\n") }),
    legacy,
    base,
  ]);
  assert.deepEqual(broken.kept, [base.instance_id]);
  assert.deepEqual(broken.dropped, {
    "no-fix": "gold_fails",
    "bad-gold": "gold_does_not_apply",
    "coding-roman": "no_gold_patch",
  });
});

Deno.test("pipeline without the probe: funnel rows chain and never grow; drops add up; output loads back", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-curate-test-" });
  try {
    const input = [
      ...GENERATED.slice(0, 6),
      variant("dup", { problem_statement: GENERATED[1].problem_statement }),
      variant("empty", { problem_statement: "" }),
      variant("gone", { repo: "nope" }),
    ];
    const result = await runCuration(input, {
      name: "t",
      reposDir: REPOS,
      outDir: dir,
      config: { probe: { enabled: false }, split: { validation_fraction: 0.5 } },
    });
    let before = input.length;
    for (const row of result.funnel) {
      assert.equal(row.in, before, row.stage);
      assert.ok(row.out <= row.in, row.stage);
      assert.equal(Object.values(row.dropped).reduce((a, b) => a + b, 0), row.in - row.out);
      before = row.out;
    }
    assert.deepEqual(result.funnel.map((r) => r.stage), [
      "statement",
      "environment",
      "max_tests",
      "duplicates",
      "leak",
      "already_solved",
      "broken",
      "probe",
    ]);
    assert.equal(result.curated.length, 6);
    const drops = (await Deno.readTextFile(`${dir}/drops.jsonl`)).trim().split("\n").map((l) =>
      JSON.parse(l)
    );
    assert.deepEqual(drops.map((d) => [d.instance_id, d.stage, d.reason]).sort(), [
      ["dup", "duplicates", "duplicate"],
      ["empty", "statement", "empty"],
      ["gone", "environment", "no_environment"],
    ]);
    const back = readCuratedSet(`${dir}/curated.jsonl`);
    assert.deepEqual(readCuratedSet(`${dir}/curated.parquet`), back);
    assert.deepEqual(back, result.curated);
    assert.ok(back.every((t) => t.probe_class === null && t.probe_pass_rate === null));
    const report = JSON.parse(await Deno.readTextFile(`${dir}/report.json`));
    assert.match(report.hash, /^[0-9a-f]{64}$/);
    assert.equal(report.splits.train + report.splits.validation, 6);
    assert.match(
      await Deno.readTextFile(`${dir}/report.md`),
      /\| duplicates \| .* \| 7 \| 6 \| duplicate: 1 \|/,
    );
    // Same input and config: same outputs, same hash.
    const again = await runCuration(input, {
      name: "t",
      reposDir: REPOS,
      outDir: `${dir}/again`,
      config: { probe: { enabled: false }, split: { validation_fraction: 0.5 } },
    });
    assert.equal(again.report.hash, report.hash);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("task sets: JSONL and parquet round-trip; bad input names the file, line and field", async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins-curate-io-" });
  try {
    const tasks = GENERATED.slice(0, 4);
    const written = await writeTaskSet(`${dir}/set`, tasks);
    assert.deepEqual(readTaskSet(written.parquet), tasks);
    assert.deepEqual(readTaskSet(written.jsonl), tasks);
    // A stage that keeps nothing still writes a readable (empty) set.
    const empty = await writeTaskSet(`${dir}/empty`, []);
    assert.deepEqual(readTaskSet(empty.parquet), []);
    assert.deepEqual(readCuratedSet(empty.jsonl), []);
    // SWE-bench style: test lists as JSON strings, nulls for optional fields.
    const sweBench = {
      ...tasks[0],
      FAIL_TO_PASS: JSON.stringify(tasks[0].FAIL_TO_PASS),
      branch: null,
    };
    await Deno.writeTextFile(`${dir}/swebench.jsonl`, JSON.stringify(sweBench) + "\n");
    assert.deepEqual(readTaskSet(`${dir}/swebench.jsonl`)[0].FAIL_TO_PASS, tasks[0].FAIL_TO_PASS);
    await Deno.writeTextFile(
      `${dir}/bad.jsonl`,
      JSON.stringify(tasks[0]) + "\n\n" + JSON.stringify({ ...tasks[1], FAIL_TO_PASS: 3 }) + "\n",
    );
    assert.throws(() => readTaskSet(`${dir}/bad.jsonl`), (e: unknown) => {
      assert.ok(e instanceof ValidationError);
      assert.equal(e.field, `${dir}/bad.jsonl:3.FAIL_TO_PASS`);
      return true;
    });
    await Deno.writeTextFile(`${dir}/broken.jsonl`, "{not json\n");
    assert.throws(() => readTaskSet(`${dir}/broken.jsonl`), /broken\.jsonl:1: not JSON/);
    await Deno.writeTextFile(
      `${dir}/ids.jsonl`,
      JSON.stringify({ ...tasks[0], instance_id: "a/b" }) + "\n",
    );
    assert.throws(() => readTaskSet(`${dir}/ids.jsonl`), /ids\.jsonl:1\.instance_id/);
    assert.throws(() => readTaskSet(`${dir}/set.csv`), /expected a \.jsonl or \.parquet file/);
    assert.throws(() => readTaskSet(`${dir}/missing.parquet`), /cannot read task set/);
    await assert.rejects(
      () => runCuration([tasks[0], tasks[0]], { name: "x", reposDir: REPOS, outDir: `${dir}/x` }),
      /instance_id .* appears twice/,
    );
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the coding environment's hand-written tasks map onto SWE-smith records", () => {
  const all = codingDatasetTasks(DEFAULT_DATA_DIR);
  const own = all.filter((t) => t.source === "handwritten");
  assert.deepEqual(own.map((t) => t.instance_id), [
    "coding-textstats",
    "coding-intervals",
    "coding-roman",
  ]);
  for (const t of own) {
    assert.equal(t.patch, "");
    assert.ok(t.FAIL_TO_PASS.every((id) => id.startsWith("tests.test_hidden_")), t.instance_id);
    assert.ok(t.PASS_TO_PASS.length >= 2);
    assert.ok(Object.keys(t.hidden_tests).length >= 1);
  }
  assert.equal(all.length, own.length + GENERATED.length);
});

Deno.test("selection: largest-remainder shares, seeded stratified samples and splits", () => {
  assert.deepEqual(shares([3, 3, 3], 4), [2, 1, 1]);
  assert.deepEqual(shares([0, 5], 3), [0, 3]);
  const tasks = GENERATED;
  const a = stratifiedSample(tasks, 14, 3, "x");
  assert.equal(a.length, 14);
  assert.deepEqual(stratifiedSample(tasks, 14, 3, "x"), a);
  assert.notDeepEqual(stratifiedSample(tasks, 14, 4, "x"), a);
  const perRepo = new Map<string, number>();
  for (const t of a) perRepo.set(t.repo, (perRepo.get(t.repo) ?? 0) + 1);
  assert.deepEqual([...perRepo.values()], [2, 2, 2, 2, 2, 2, 2], "7 repositories, 2 each");
  // Validation gets round(0.2 n) tasks; each repository within one of its proportional share.
  const split = splitByRepo(tasks, 0.2, 0);
  const total = [...split.values()].filter((s) => s === "validation").length;
  assert.equal(total, Math.round(tasks.length * 0.2));
  for (const repo of new Set(tasks.map((t) => t.repo))) {
    const mine = tasks.filter((t) => t.repo === repo);
    const val = mine.filter((t) => split.get(t.instance_id) === "validation").length;
    const exact = (mine.length * total) / tasks.length;
    assert.ok(val === Math.floor(exact) || val === Math.ceil(exact), `${repo}: ${val} vs ${exact}`);
  }
  // Small sets still get their validation share (10 tasks over 7 repositories: 2).
  const small = stratifiedSample(tasks, 10, 0, "small");
  assert.equal(
    [...splitByRepo(small, 0.2, 0).values()].filter((s) => s === "validation").length,
    2,
  );
});

Deno.test("deno task curate: bad flags and configs fail with the flag or field named, before any work", async () => {
  const run = async (...args: string[]) => {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", "scripts/curate.ts", ...args],
      stdout: "piped",
      stderr: "piped",
    }).output();
    return { code: out.code, err: new TextDecoder().decode(out.stderr) };
  };
  const k = await run("--probe-k", "four");
  assert.equal(k.code, 2);
  assert.match(k.err, /--probe-k: expected a whole number, got 'four'/);
  const policy = await run("--policy", "oracle");
  assert.equal(policy.code, 2);
  assert.match(policy.err, /--policy: expected scripted or worker, got 'oracle'/);
  const dir = await Deno.makeTempDir({ prefix: "reins-curate-cli-" });
  try {
    await Deno.writeTextFile(`${dir}/c.json`, JSON.stringify({ probe: { k: 0 } }));
    const bad = await run("--config", `${dir}/c.json`, "--out", `${dir}/out`);
    assert.notEqual(bad.code, 0);
    assert.match(bad.err, /config\.probe\.k/);
    await Deno.writeTextFile(`${dir}/typo.json`, JSON.stringify({ probe_sample: 3 }));
    const typo = await run("--config", `${dir}/typo.json`, "--out", `${dir}/out`);
    assert.notEqual(typo.code, 0);
    assert.match(typo.err, /probe_sample/);
    const missing = await run("--input", `${dir}/none.jsonl`, "--out", `${dir}/out`);
    assert.notEqual(missing.code, 0);
    assert.match(missing.err, /--input: .*none\.jsonl does not exist/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});
