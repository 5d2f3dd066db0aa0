/**
 * `deno task train --config FILE`: the config file is validated strictly (unknown keys exit 2
 * naming their path), `--dry-run` prints the plan and starts nothing, the demo preset is the
 * demo's config, and the train / held-out split is disjoint and seeded.
 */
import assert from "node:assert/strict";
import { parseRunConfig, RunConfigError, splitTasks } from "../lib/loop/run_config.ts";
import { loadCharTokenizer } from "../lib/tokens/mod.ts";
import { toyModel } from "../lib/loop/mod.ts";
import { resolveRun } from "../scripts/train_run.ts";

const root = new URL("..", import.meta.url).pathname;

async function train(args: string[]): Promise<{ code: number; out: string; err: string }> {
  const r = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", "scripts/train.ts", ...args],
    cwd: root,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const dec = new TextDecoder();
  return { code: r.code, out: dec.decode(r.stdout), err: dec.decode(r.stderr) };
}

Deno.test("--dry-run prints the resolved config and the plan, and starts nothing", async () => {
  const r = await train(["--config", "configs/demo.yaml", "--dry-run", "--no-png"]);
  assert.equal(r.code, 0, r.err);
  assert.match(r.out, /resolved config \(configs\/demo\.yaml\)/);
  assert.match(r.out, /RL: 16 steps × 3 groups × 8 rollouts, collocated_async/);
  assert.match(r.out, /tasks: 4 train \(.*\), 8 held out/);
  assert.match(r.out, /--dry-run: nothing started/);
  const split = await train(["--config", "configs/split.yaml", "--dry-run"]);
  assert.equal(split.code, 0, split.err);
});

Deno.test("a config with an unknown or misspelt key exits 2 naming it", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const text = (await Deno.readTextFile(`${root}/configs/demo.yaml`))
      .replace("tis_cap: 2", "tis_cap: 2\n  kl_coef: 0.1")
      .replace("steps: 16", "stpes: 16");
    await Deno.writeTextFile(`${dir}/bad.yaml`, text);
    const r = await train(["--config", `${dir}/bad.yaml`, "--dry-run"]);
    assert.equal(r.code, 2);
    assert.match(r.err, /algorithm\.kl_coef: unknown key/);
    assert.match(r.err, /stpes: unknown key/);
    assert.match(r.err, /steps: Invalid input/);
    assert.doesNotMatch(r.out, /plan:/);
    // JSON is accepted too, and checked the same way.
    await Deno.writeTextFile(`${dir}/bad.json`, JSON.stringify({ name: "x", modle: {} }));
    const j = await train(["--config", `${dir}/bad.json`]);
    assert.equal(j.code, 2);
    assert.match(j.err, /modle: unknown key/);
    // A flag the command does not know, and --help.
    assert.equal((await train(["--confg", "x"])).code, 2);
    const help = await train(["--help"]);
    assert.equal(help.code, 0);
    assert.match(help.out, /--dry-run/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("engine llama_cpp: accepted (in process, synced each step); with engine.url refused", async () => {
  const dir = await Deno.makeTempDir();
  try {
    const text = (await Deno.readTextFile(`${root}/configs/demo.yaml`))
      .replace("kind: torch_worker", "kind: llama_cpp");
    await Deno.writeTextFile(`${dir}/llama.yaml`, text);
    const ok = await train(["--config", `${dir}/llama.yaml`, "--dry-run"]);
    assert.equal(ok.code, 0, ok.err);
    assert.match(ok.out, /engine llama_cpp/);
    await Deno.writeTextFile(
      `${dir}/remote.yaml`,
      text.replace("kind: llama_cpp,", "kind: llama_cpp, url: 'http://127.0.0.1:9',"),
    );
    const r = await train(["--config", `${dir}/remote.yaml`, "--dry-run"]);
    assert.equal(r.code, 2);
    assert.match(r.err, /engine\.url: llama_cpp runs in this process/);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("the demo preset is the demo's config: same tasks, model, SFT and RL settings", async () => {
  const path = `${root}/configs/demo.yaml`;
  const r = await resolveRun(parseRunConfig(await Deno.readTextFile(path), path), path);
  const tokenizer = await loadCharTokenizer();
  const fnv = (s: string) => {
    let h = 2166136261;
    for (let i = 0; i < s.length; i++) h = Math.imul(h ^ s.charCodeAt(i), 16777619) >>> 0;
    return h;
  };
  // What scripts/demo.ts configured before it became a preset (its four questions: the
  // first four arithmetic tasks by FNV-1a of their ids).
  const before = r.loop.tasks.map((t) => t.id);
  const all = (await import("../lib/loop/mod.ts")).toyArithmeticTasks();
  assert.deepEqual(
    before,
    [...all].sort((a, b) => fnv(a.id) - fnv(b.id)).slice(0, 4).map((t) => t.id),
  );
  assert.deepEqual(
    r.loop.model,
    toyModel(tokenizer, { d_model: 64, n_layers: 2, max_seq_len: 512 }),
  );
  assert.deepEqual(r.loop.sft, { steps: 300, batch_size: 8, lr: 3e-3 });
  assert.equal(r.sftRows.length, 8); // one correct and one guessing demonstration per question
  assert.deepEqual(
    [r.loop.optimizer.lr, r.loop.optimizer.grad_clip, r.loop.optimizer.warmup_steps],
    [3e-4, 1, 12],
  );
  assert.equal(r.loop.ppo_epochs, 4);
  assert.deepEqual([r.loop.loss.kind, r.loop.loss.clip_low, r.loop.loss.clip_high], [
    "ppo",
    0.2,
    0.28,
  ]);
  assert.deepEqual(
    [r.loop.micro_token_budget, r.loop.group_size, r.loop.groups_per_step, r.loop.steps],
    [1024, 8, 3, 16],
  );
  assert.deepEqual(
    [
      r.loop.schedule.mode,
      r.loop.schedule.max_staleness,
      r.loop.schedule.stale_policy,
      r.loop.schedule.poll_ms,
      r.loop.schedule.tis_cap,
      r.loop.schedule.extra_groups_in_flight,
    ],
    ["collocated_async", 2, "tis", 100, 2, 0],
  );
  assert.equal(r.loop.checkpoint_every, 2);
  assert.equal(r.loop.seed, 0);
  assert.equal(r.loop.harness.name, "builtin-arithmetic");
  // The held-out questions are never trained on.
  assert.equal(r.heldout.some((h) => before.includes(h.id)), false);
});

Deno.test("the split is disjoint, seeded and independent of the file's order", () => {
  const tasks = Array.from({ length: 50 }, (_, i) => ({ id: `task-${i}` }));
  for (const seed of [0, 1, 7]) {
    const a = splitTasks(tasks, { heldout: 0.2, seed }, 12);
    const b = splitTasks([...tasks].reverse(), { heldout: 0.2, seed }, 12);
    assert.deepEqual(a, b);
    assert.equal(a.heldout.length, 10);
    assert.equal(a.train.length, 12);
    const ids = new Set(a.train.map((t) => t.id));
    assert.equal(a.heldout.some((t) => ids.has(t.id)), false);
  }
  assert.notDeepEqual(
    splitTasks(tasks, { heldout: 5, seed: 0 }).heldout,
    splitTasks(tasks, { heldout: 5, seed: 1 }).heldout,
  );
  assert.throws(
    () => splitTasks(tasks, { heldout: 45, seed: 0 }, 10),
    (e: unknown) => e instanceof RunConfigError && /split\.heldout/.test(e.message),
  );
});

Deno.test("algorithm.kl maps onto the worker's kl_coef and kl_estimator", () => {
  const base = [
    "name: r",
    "model: {kind: builtin}",
    "harness: {builtin: arithmetic}",
    "environment: {tasks: toy-arithmetic}",
    "split: {heldout: 4}",
    "steps: 2",
  ].join("\n");
  const run = parseRunConfig(`${base}\nalgorithm: {kl: {coef: 0.02}}`, "r.yaml");
  assert.deepEqual(run.algorithm.kl, { coef: 0.02, estimator: "k3" });
  assert.throws(
    () => parseRunConfig(`${base}\nalgorithm: {kl: {coef: 0.02, estimator: k4}}`, "r.yaml"),
    /algorithm\.kl\.estimator/,
  );
  assert.throws(
    () =>
      parseRunConfig(
        base.replace("{builtin: arithmetic}", "{builtin: arithmetic, cli: codex}"),
        "r.yaml",
      ),
    /exactly one of builtin, cli, command, name/,
  );
});

Deno.test("the README's config is a valid config with the plan it describes", async () => {
  const readme = await Deno.readTextFile(`${root}/README.md`);
  const block = readme.match(/## Train your own run[\s\S]*?```yaml\n([\s\S]*?)```/)?.[1];
  assert.ok(block, "the README shows a config");
  const run = parseRunConfig(block, "README.md");
  assert.equal(run.supervise, true);
  const r = await resolveRun(run, `${root}/README.md`);
  assert.deepEqual([r.train.length, r.heldout.length, r.loop.steps], [4, 8, 20]);
  assert.equal(r.loop.loss.kl_coef, 0.01);
});

Deno.test({
  name: "engine.device reaches the worker: cuda on a machine without one is refused naming device",
  // The stack's gateway, worker and harness processes are closed by the run itself.
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const dir = await Deno.makeTempDir({ prefix: "reins-device-run-" });
    try {
      const config = (device: string) =>
        `name: tiny-device
out_dir: ${dir}/run-${device}
model: { kind: builtin, d_model: 16, n_layers: 1, n_heads: 2, n_kv_heads: 1, max_seq_len: 512 }
engine: { threads: 1, device: ${device} }
harness: { builtin: arithmetic, options: { max_tokens: 8 } }
environment: { tasks: toy-arithmetic, train: 2 }
split: { heldout: 2 }
sft: { steps: 0, guesses: 0 }
async: { mode: sync }
batch: { group_size: 2, groups_per_step: 1, concurrency: 2 }
steps: 1
eval: { rollouts: 2 }
checkpoints: { every: 0 }
`;
      await Deno.writeTextFile(`${dir}/cuda.yaml`, config("cuda"));
      const cuda = await train(["--config", `${dir}/cuda.yaml`, "--no-png"]);
      assert.notEqual(cuda.code, 0, cuda.out);
      assert.match(cuda.out + cuda.err, /device.*CUDA is not available on this worker/);
      // The loop config carries it to every init (fresh start, SFT checkpoint, resume).
      const { loopConfigOf } = await import("../lib/loop/run_config.ts");
      const run = parseRunConfig(config("cpu"), "cpu.yaml");
      const loop = loopConfigOf(run, { tasks: [], harness: { name: "builtin" } as never });
      assert.equal(loop.device, "cpu");
    } finally {
      await Deno.remove(dir, { recursive: true });
    }
  },
});
