/**
 * The difficulty probe on the real stack (gateway + proxy, local controller and sandbox,
 * built-in harness, the coding verifier): k rollouts per task recorded in the gateway, tasks
 * classed all-solved / mixed / all-failed from the verifier's rewards, the selection and split
 * that follow; the real-worker path; the scripted repair policy; and a curated set as the
 * training loop's task source.
 */
import assert from "node:assert/strict";
import { readCuratedSet, readTaskSet } from "../lib/curation/io.ts";
import { runCuration } from "../lib/curation/pipeline.ts";
import { runProbe } from "../lib/curation/probe.ts";
import { functionLines, lineEdits, repairTargets } from "../lib/curation/repair_policy.ts";
import { curatedTaskSource } from "../lib/curation/task_source.ts";
import { openSqliteStore } from "../lib/gateway/sqlite_store.ts";
import { DEFAULT_DATA_DIR } from "../lib/harness/envs/common.ts";
import { applyPatchToFiles, invertPatch, readTree } from "../lib/harness/envs/coding_tasks.ts";
import {
  runLoop,
  silentProgress,
  startEmbedded,
  toyModel,
  withTaskSource,
} from "../lib/loop/mod.ts";
import type { StackWorker } from "../lib/loop/embedded.ts";
import { type ScriptedPolicyInput, startScriptedUpstream } from "../lib/proxy/scripted_upstream.ts";
import { CurationConfigSchema, type SweTask, TERMINAL_ROLLOUT_STATUSES } from "../lib/schema.ts";
import { loadCharTokenizer } from "../lib/tokens/char.ts";
import { loadQwen3Tokenizer } from "../lib/tokens/qwen3.ts";
import { TrainerClient } from "../lib/trainer/client.ts";

const REPOS = `${DEFAULT_DATA_DIR}/coding/repos`;
const GENERATED = readTaskSet(`${DEFAULT_DATA_DIR}/coding/swesmith.jsonl`);

/**
 * An oracle "policy" for tests: it writes the fixed file (the task's tree with the gold patch)
 * on the visits to a task that `solve(task, visit)` picks, and gives up on the others.
 */
async function oracleWorker(
  tasks: SweTask[],
  solve: (task: SweTask, visit: number) => boolean,
): Promise<StackWorker> {
  const tokenizer = await loadQwen3Tokenizer();
  const visits = new Map<string, number>();
  const policy = ({ promptText }: ScriptedPolicyInput) => {
    const task = tasks.find((t) => promptText.includes(t.problem_statement))!;
    if (promptText.includes("<tool_response>")) return { content: "<answer>done</answer>" };
    const visit = visits.get(task.instance_id) ?? 0;
    visits.set(task.instance_id, visit + 1);
    if (!solve(task, visit)) return { content: "<answer>I give up</answer>" };
    const files = readTree(`${REPOS}/${task.repo}`);
    const path = task.patch.match(/^diff --git a\/(\S+)/)![1];
    const fixed = applyPatchToFiles(applyPatchToFiles(files, task.patch), invertPatch(task.patch));
    return {
      tool_calls: [{ name: "write_file", arguments: { path, content: fixed[path] } }],
    };
  };
  const upstream = await startScriptedUpstream({ tokenizer, policy });
  return {
    url: upstream.url,
    client: new TrainerClient(upstream.url),
    logs: () => "",
    close: () => upstream.close(),
  };
}

Deno.test({
  name:
    "probe: k rollouts per task through the stack, recorded in the gateway; classes and selection follow the verifier",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "reins-probe-" });
    try {
      // Two repositories, so that the split has something to stratify.
      const pick = (repo: string, n: number) =>
        GENERATED.filter((t) => t.repo === repo).slice(0, n);
      const tasks = [...pick("statkit", 3), ...pick("strkit", 2)];
      const [always, never1, mixed1, mixed2, never2] = tasks.map((t) => t.instance_id);
      const plan: Record<string, (visit: number) => boolean> = {
        [always]: () => true,
        [never1]: () => false,
        [never2]: () => false,
        [mixed1]: (v) => v === 0,
        [mixed2]: (v) => v === 1,
      };
      const result = await runCuration(tasks, {
        name: "ptest",
        reposDir: REPOS,
        outDir: dir,
        config: {
          // The oracle writes whole files: room for them in one answer.
          probe: { k: 2, concurrency: 4, all_failed_count: 1, timeout_s: 240, max_tokens: 4096 },
          split: { validation_fraction: 0.5 },
        },
        probe: { worker: () => oracleWorker(tasks, (t, v) => plan[t.instance_id](v)) },
      });
      const probe = result.probe!;
      assert.equal(probe.rollouts, 10);
      const classes = Object.fromEntries(probe.results.map((r) => [r.instance_id, r.class]));
      assert.deepEqual(classes, {
        [always]: "all_solved",
        [never1]: "all_failed",
        [mixed1]: "mixed",
        [mixed2]: "mixed",
        [never2]: "all_failed",
      });
      // Drop all-solved, keep both mixed, and exactly one of the two all-failed.
      const kept = result.curated.map((t) => t.instance_id);
      assert.ok(kept.includes(mixed1) && kept.includes(mixed2) && !kept.includes(always));
      assert.equal(kept.filter((id) => id === never1 || id === never2).length, 1);
      const row = result.funnel.at(-1)!;
      assert.deepEqual(row, {
        stage: "probe",
        description: row.description,
        in: 5,
        out: 3,
        dropped: { all_solved: 1, all_failed_not_sampled: 1 },
      });
      assert.deepEqual(result.report.probe!.histogram, {
        bins: ["0/2", "1/2", "2/2"],
        counts: [2, 2, 1],
      });
      // The curated set loads back through the schema, with the probe's numbers.
      const back = readCuratedSet(`${dir}/curated.parquet`);
      assert.deepEqual(back, readCuratedSet(`${dir}/curated.jsonl`));
      assert.deepEqual(back.find((t) => t.instance_id === mixed1)!.probe_pass_rate, 0.5);
      assert.deepEqual(new Set(back.map((t) => t.split)), new Set(["train", "validation"]));
      // Recorded like any run: 10 val rollouts in the gateway, each with model calls through
      // the proxy and the verifier's reward.
      const store = openSqliteStore(probe.gateway_db);
      try {
        const page = await store.listRollouts({ labels: { curate: "ptest" }, limit: 100 });
        assert.equal(page.items.length, 10);
        for (const r of page.items) {
          assert.ok(TERMINAL_ROLLOUT_STATUSES.includes(r.status));
          assert.equal(r.mode, "val");
          const calls = await store.listEvents(r.rollout_id, { type: "model_request" });
          assert.ok(calls.length >= 1, r.rollout_id);
          const task = r.labels.task;
          if (task === always) assert.equal(r.reward, 1);
          if (task === never1 || task === never2) assert.equal(r.reward, 0);
        }
      } finally {
        await store.close();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test({
  name:
    "probe with a real worker: the local CPU worker's tiny model answers every call, the verifier scores it",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "reins-probe-worker-" });
    try {
      const config = CurationConfigSchema.parse({
        probe: { policy: "worker", k: 1, max_turns: 2, max_tokens: 16, concurrency: 1 },
      });
      const run = await runProbe([GENERATED[0]], {
        outDir: dir,
        reposDir: REPOS,
        config,
        name: "w",
      });
      assert.equal(run.rollouts, 1);
      assert.equal(run.results[0].rewards.length + run.results[0].errors, 1);
      const store = openSqliteStore(run.gateway_db);
      try {
        const calls = await store.listEvents(`w-${GENERATED[0].instance_id}-r0`, {
          type: "model_request",
        });
        assert.ok(calls.length >= 1);
        const call = calls[0];
        assert.ok(call.type === "model_request");
        assert.equal(call.payload.policy_version, 0);
        assert.ok(call.payload.response_token_ids.length >= 1, "the worker generated tokens");
        assert.ok(call.payload.prompt_token_ids.length > 1000, "the coding prompt, char by char");
      } finally {
        await store.close();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});

Deno.test("repair policy: for every operator, literal and condition bug, the inverse edit is among its candidates", () => {
  let checked = 0;
  for (const task of GENERATED) {
    const kind = task.source?.replace("procedural:", "");
    if (kind !== "op_swap" && kind !== "off_by_one" && kind !== "invert_condition") continue;
    const path = task.patch.match(/^diff --git a\/(\S+)/)![1];
    const buggy = applyPatchToFiles(readTree(`${REPOS}/${task.repo}`), task.patch)[path];
    const pristine = Deno.readTextFileSync(`${REPOS}/${task.repo}/${path}`);
    const rows = buggy.split("\n").map((text, i) => [i + 1, text] as [number, string]);
    const fixes = lineEdits(rows).map((e) => {
      const lines = buggy.split("\n");
      lines[e.line - 1] = e.after;
      return lines.join("\n");
    });
    assert.ok(fixes.includes(pristine), task.instance_id);
    checked++;
  }
  assert.ok(checked >= 50, `${checked} tasks`);
  // Where it looks: a library frame first, else the functions the assertion calls, else the
  // test's name.
  assert.deepEqual(
    repairTargets('  File "/w/pkg/m.py", line 3, in helper\nFAIL: test_x (t.T.test_x)'),
    { file: "/w/pkg/m.py", fns: ["helper"] },
  );
  assert.deepEqual(
    repairTargets(
      "FAIL: test_remove_all (t.T.test_remove_all)\n    self.assertEqual(cart.count(), 0)",
    ),
    { file: null, fns: ["count", "remove_all", "remove"] },
  );
  assert.deepEqual(
    functionLines([[1, "def f(x):"], [2, "    return x"], [3, ""], [4, "def g():"]], "f"),
    [[2, "    return x"], [3, ""]],
  );
});

Deno.test({
  name: "loop: a curated set is the run's task source; its coding rollouts run and are scored",
  sanitizeResources: false,
  sanitizeOps: false,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "reins-curated-loop-" });
    try {
      const tasks = GENERATED.filter((t) => t.repo === "datekit").slice(0, 2);
      await runCuration(tasks, {
        name: "src",
        reposDir: REPOS,
        outDir: `${dir}/curate`,
        config: { probe: { enabled: false }, split: { validation_fraction: 0 } },
      });
      const source = await curatedTaskSource({
        path: `${dir}/curate/curated.parquet`,
        reposDir: REPOS,
        dataDir: `${dir}/data`,
      });
      assert.equal(source.all.length, 2);
      await assert.rejects(
        () =>
          curatedTaskSource({
            path: `${dir}/curate/curated.parquet`,
            split: "validation",
            reposDir: REPOS,
            dataDir: `${dir}/d2`,
          }),
        /no validation task/,
      );
      const tokenizer = await loadCharTokenizer();
      const stack = await startEmbedded({
        outDir: `${dir}/run`,
        tokenizer,
        concurrency: 2,
        threads: 1,
        registry: { dataDir: source.dataDir },
      });
      try {
        const config = await withTaskSource({
          name: "curated",
          out_dir: `${dir}/run`,
          harness: source.harness({ max_turns: 1, max_tokens: 8 }),
          model: toyModel(tokenizer, { d_model: 32, n_layers: 1, max_seq_len: 8192 }),
          group_size: 2,
          groups_per_step: 1,
          steps: 1,
          schedule: { mode: "sync", poll_ms: 100 },
          rollout_timeout_s: 240,
        }, source);
        assert.deepEqual(
          config.tasks.map((t) => t.id).sort(),
          tasks.map((t) => t.instance_id).sort(),
        );
        const result = await runLoop(config, stack.services, { progress: silentProgress() });
        assert.equal(result.metrics.length, 1);
        assert.equal(result.metrics[0].rollouts, 2);
        const page = await stack.client.listRollouts({ labels: { run: "curated" }, limit: 10 });
        const train = page.items.filter((r) => r.mode === "train");
        assert.equal(train.length, 2);
        for (const r of train) {
          assert.ok(tasks.some((t) => t.instance_id === (r.input as { id: string }).id));
          // The coding verifier scored it (the untrained tiny model fixes nothing).
          if (r.status === "succeeded") assert.equal(r.reward, 0);
        }
      } finally {
        await stack.close();
      }
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
