/**
 * A run reports its sampler–trainer mismatch: one line per RL step and a summary at the end
 * (worst Pearson(p), mean |Δp|, max |Δlogprob|, k3 KL, ESS, steps beyond a threshold), judged by
 * the field's thresholds. End to end, a tiny run of `deno task train` sampled by llama.cpp prints
 * both, and an f32 llama.cpp engine agrees with the torch trainer well inside every threshold.
 */
import assert from "node:assert/strict";
import { mismatchLine, type MismatchStep, mismatchSummary } from "../lib/loop/mismatch_report.ts";

const root = new URL("..", import.meta.url).pathname;

function step(i: number, over: Partial<MismatchStep> = {}): MismatchStep {
  return {
    step: i,
    alignment_tokens: 100,
    alignment_corr: 0.99999,
    alignment_mean_abs_dp: 1e-6,
    alignment_max_abs_dlogprob: 1e-4,
    alignment_k1_kl: 1e-8,
    alignment_k3_kl: 1e-10,
    alignment_ess: 0.99999,
    timings_ms: {},
    ...over,
  };
}

/** `name: value` lines of a report, as numbers where they parse. */
function figures(lines: string[]): Map<string, string> {
  return new Map(
    lines.map((l) => /^([a-z0-9_]+): (\S+)$/.exec(l)).filter((m) => m !== null)
      .map((m) => [m![1], m![2]]),
  );
}

Deno.test("the summary takes the worst step of each figure and weights mean |Δp| by tokens", () => {
  const lines = mismatchSummary([
    step(0, { alignment_corr: 0.9999, alignment_mean_abs_dp: 1e-6, alignment_tokens: 300 }),
    step(1, { alignment_mean_abs_dp: 5e-6, alignment_max_abs_dlogprob: 0.02 }),
    step(2, { alignment_k3_kl: 3e-9, alignment_ess: 0.998, timings_ms: { sync: 120 } }),
    step(3, { alignment_tokens: 0, alignment_corr: null, timings_ms: { sync: 480 } }),
  ], "llama_cpp");
  const f = figures(lines);
  assert.equal(f.get("sampler"), "llama_cpp");
  assert.equal(f.get("mismatch_steps_measured"), "3");
  assert.equal(Number(f.get("mismatch_pearson_min")), 0.9999);
  assert.equal(f.get("mismatch_mean_abs_dp_max"), "5.00e-6");
  // (300·1e-6 + 100·5e-6 + 100·1e-6) / 500
  assert.equal(f.get("mismatch_mean_abs_dp_mean"), "1.80e-6");
  assert.equal(f.get("mismatch_max_abs_dlogprob_max"), "2.00e-2");
  assert.equal(f.get("mismatch_k3_kl_max"), "3.00e-9");
  assert.equal(Number(f.get("mismatch_ess_min")), 0.998);
  assert.equal(f.get("mismatch_steps_beyond"), "0");
  // The sync range counts every step that synced, measured or not.
  assert.deepEqual([f.get("sync_ms_min"), f.get("sync_ms_max")], ["120", "480"]);
  assert.match(lines[1], /^mismatch over 3 of 4 step\(s\), 500 tokens .* healthy at every step$/);
});

Deno.test("a step beyond a threshold is counted and named in its line", () => {
  const bad = step(4, { alignment_corr: 0.95, alignment_mean_abs_dp: 0.02 });
  assert.match(
    mismatchLine(bad),
    /^step 5 mismatch \(100 tokens\).* — BEYOND: Pearson\(p\) 0\.9500/,
  );
  assert.match(mismatchLine(bad), /mean \|Δp\| 0\.0200 > 0\.005/);
  const lines = mismatchSummary([step(0), bad], "llama_cpp");
  assert.equal(figures(lines).get("mismatch_steps_beyond"), "1");
  assert.match(lines[1], /1 step\(s\) BEYOND a threshold$/);
});

Deno.test("no same-version tokens: the summary says so instead of printing figures", () => {
  const lines = mismatchSummary([step(0, { alignment_tokens: 0, alignment_corr: null })], "x");
  assert.deepEqual(lines, ["sampler: x", "mismatch: no same-version tokens in any of 1 step(s)"]);
  assert.equal(
    mismatchLine(step(2, { alignment_tokens: 0 })),
    "step 3 mismatch: no same-version tokens",
  );
  // An undefined correlation (a constant side) breaks nothing and does not become the minimum.
  const f = figures(mismatchSummary([step(0), step(1, { alignment_corr: null })], "x"));
  assert.equal(Number(f.get("mismatch_pearson_min")), 0.99999);
});

Deno.test({
  name: "deno task train on llama.cpp prints each step's mismatch and the run's summary",
  // The stack's gateway, worker, engine and harness processes are closed by the run itself.
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "reins-mismatch-run-" });
    try {
      // Tiny and fast: a 1-layer model, 2 synchronous steps of one group of 2 rollouts; every
      // group trains (no filters), so every step measures its same-version tokens.
      await Deno.writeTextFile(
        `${dir}/tiny.yaml`,
        `name: tiny-mismatch
out_dir: ${dir}/run
model: { kind: builtin, d_model: 16, n_layers: 1, n_heads: 2, n_kv_heads: 1, max_seq_len: 512 }
engine: { kind: llama_cpp, threads: 1 }
harness: { builtin: arithmetic, options: { max_tokens: 24 } }
environment: { tasks: toy-arithmetic, train: 2 }
split: { heldout: 2 }
sft: { steps: 2, guesses: 0 }
algorithm:
  filters: { drop_errors: false, drop_zero_variance: false }
async: { mode: sync }
batch: { group_size: 2, groups_per_step: 1, concurrency: 2 }
steps: 2
eval: { rollouts: 2 }
checkpoints: { every: 0 }
`,
      );
      const r = await new Deno.Command(Deno.execPath(), {
        args: ["run", "-A", "scripts/train.ts", "--config", `${dir}/tiny.yaml`, "--no-png"],
        cwd: root,
        stdout: "piped",
        stderr: "piped",
      }).output();
      const out = new TextDecoder().decode(r.stdout);
      const err = new TextDecoder().decode(r.stderr);
      assert.equal(r.code, 0, `${out}\n${err}`);
      const lines = out.split("\n").map((l) => l.trim());
      for (const n of [1, 2]) {
        const line = lines.find((l) => l.startsWith(`step ${n} mismatch (`));
        assert.ok(line, `no mismatch line for step ${n}:\n${out}`);
        assert.match(
          line,
          /Pearson\(p\) [0-9.]+ mean\|Δp\| \S+ max\|Δlogprob\| \S+ k1 \S+ k3 \S+ ESS/,
        );
        // llama.cpp syncs every new version before the step's rollouts.
        assert.match(line, /; sync \d+ ms$/);
      }
      const f = figures(lines);
      assert.equal(f.get("sampler"), "llama_cpp");
      assert.equal(f.get("mismatch_steps_measured"), "2");
      // An f32 export scored by llama.cpp against the fp32 trainer: rounding, nothing more.
      assert.ok(Number(f.get("mismatch_pearson_min")) > 0.999, out);
      assert.ok(Number(f.get("mismatch_mean_abs_dp_max")) < 1e-3, out);
      assert.ok(Number(f.get("mismatch_max_abs_dlogprob_max")) < 1e-2, out);
      assert.ok(Number(f.get("mismatch_k3_kl_max")) < 1e-5, out);
      assert.ok(Number(f.get("mismatch_ess_min")) > 0.999, out);
      assert.equal(f.get("mismatch_steps_beyond"), "0");
      assert.ok(f.has("sync_ms_max"), out);
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
