/**
 * The TS side of the trainer: finding Python, clear errors when it or torch is missing,
 * launching/connecting, checkpoints round-tripping through save/load/init.
 */
import assert from "node:assert/strict";
import {
  connect,
  launch,
  MissingPythonError,
  resolvePython,
  startLocalWorker,
  TrainerWorkerError,
  workerEnv,
  workerPackageDir,
} from "../lib/trainer/mod.ts";
import { row, TINY, withWorker } from "./trainer_helpers.ts";

/** A real Python without site-packages: it runs, but `import torch` fails. */
async function pythonWithoutTorch(dir: string): Promise<string> {
  const path = `${dir}/python-no-torch`;
  await Deno.writeTextFile(path, '#!/bin/sh\nexec /usr/bin/python3 -S "$@"\n');
  await Deno.chmod(path, 0o755);
  return path;
}

Deno.test("trainer client: missing python or torch fails with the install command", async () => {
  await assert.rejects(
    () => startLocalWorker({ python: "/nonexistent/python3" }),
    (e) =>
      e instanceof MissingPythonError && e.message.includes("/nonexistent/python3") &&
      e.message.includes("apt-get install -y python3-torch") &&
      e.message.includes("pip install torch"),
  );
  const dir = await Deno.makeTempDir();
  try {
    const python = await pythonWithoutTorch(dir);
    await assert.rejects(
      () => startLocalWorker({ python }),
      (e) =>
        e instanceof MissingPythonError && /has no PyTorch/.test(e.message) &&
        e.message.includes("apt-get install -y python3-torch"),
    );
    // REINS_PYTHON is honoured (checked in a child process: env is process-wide).
    const module = new URL("../lib/trainer/local_worker.ts", import.meta.url).href;
    const code = `import { resolvePython } from "${module}";
      try { await resolvePython(); console.log("resolved"); } catch (e) { console.log(e.message); }`;
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["eval", code],
      env: { REINS_PYTHON: python },
      stdout: "piped",
      stderr: "piped",
    }).output();
    const text = new TextDecoder().decode(out.stdout);
    assert.ok(text.includes(python) && text.includes("has no PyTorch"), text);
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("trainer client: default python has torch", async () => {
  const info = await resolvePython();
  assert.match(info.torch, /^\d+\.\d+/);
});

Deno.test("trainer client: save/load round-trips weights, optimizer and version", async () => {
  const dir = await Deno.makeTempDir();
  const good = row([1, 2, 3, 4, 5], {
    loss_mask: [0, 1, 1, 1, 1],
    advantages: [0, 1, -1, 1, 1],
    loss_weights: [0, 0.25, 0.25, 0.25, 0.25],
    rollout_logprobs: [0, -3, -3, -3, -3],
  });
  try {
    await withWorker(async ({ client }) => {
      const step = async () => {
        await client.forwardBackward({ rows: [good], loss: { kind: "ppo" } });
        return await client.optimStep();
      };
      await step();
      const saved = await client.save(`${dir}/ckpt/step1.pt`);
      assert.equal(saved.policy_version, 1);
      const atSave = await client.state();
      const lpAtSave = (await client.logprobs([good.tokens])).logprobs[0];
      await step();
      const nextAfterSave = await client.state();
      assert.notEqual(nextAfterSave.param_checksum, atSave.param_checksum);

      const loaded = await client.load(`${dir}/ckpt/step1.pt`);
      assert.equal(loaded.policy_version, 1);
      const restored = await client.state();
      assert.equal(restored.param_checksum, atSave.param_checksum);
      assert.equal(restored.optimizer_checksum, atSave.optimizer_checksum);
      assert.deepEqual((await client.logprobs([good.tokens])).logprobs[0], lpAtSave);
      // The same step from the same state lands on the same weights (optimizer restored too).
      await step();
      assert.equal((await client.state()).param_checksum, nextAfterSave.param_checksum);

      // init from the checkpoint: same weights and version, fresh optimizer.
      await client.init({ model: { kind: "checkpoint", path: `${dir}/ckpt/step1.pt` } });
      const fromInit = await client.state();
      assert.equal(fromInit.param_checksum, atSave.param_checksum);
      assert.equal(fromInit.policy_version, 1);
      assert.equal(fromInit.optimizer_steps, 0);
      assert.equal(fromInit.model_kind, "builtin");
      // ...and what it saves loads again the same way.
      await client.save(`${dir}/ckpt/again.pt`);
      await client.init({ model: { kind: "checkpoint", path: `${dir}/ckpt/again.pt` } });
      assert.equal((await client.state()).param_checksum, atSave.param_checksum);

      await assert.rejects(
        () => client.init({ model: { kind: "checkpoint", path: `${dir}/missing.pt` } }),
        (e) => e instanceof TrainerWorkerError && e.field === "model.path",
      );
      await Deno.writeTextFile(`${dir}/junk.pt`, "not a checkpoint");
      await assert.rejects(
        () => client.load(`${dir}/junk.pt`),
        (e) => e instanceof TrainerWorkerError && e.status === 400 && e.field === "path",
      );
    });
  } finally {
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("trainer client: the built-in model is a pure function of config and seed", async () => {
  await withWorker(async ({ client }) => {
    const fingerprints: number[] = [];
    for (const seed of [5, 5, 6]) {
      const state = await client.init({
        model: { kind: "builtin", config: { ...TINY, tie_embeddings: true }, seed },
        device: "cpu",
      });
      fingerprints.push(state.param_checksum!);
    }
    assert.equal(fingerprints[0], fingerprints[1]);
    assert.notEqual(fingerprints[0], fingerprints[2]);
  }, { init: false });
});

Deno.test("trainer client: launch() starts a worker from a command or connects to a URL", async () => {
  const python = (await resolvePython()).python;
  const worker = await launch({
    command: [python, "-u", "-m", "reins_worker", "--port", "0"],
    env: workerEnv(),
    healthTimeoutMs: 60_000,
  });
  try {
    assert.equal((await worker.client.health()).ok, true);
    const connected = await launch({ url: worker.url, healthTimeoutMs: 5_000 });
    assert.equal((await connected.client.state()).initialized, false);
    await connected.close();
    const client = await connect(worker.url);
    assert.equal((await client.health()).policy_version, 0);
  } finally {
    await worker.close();
  }
  await assert.rejects(
    () => connect(worker.url),
    (e) => e instanceof TrainerWorkerError && e.code === "unreachable",
  );
  // A compound shell command: close() must stop the worker, not only the shell.
  const shellWorker = await launch({
    command:
      `echo launching && cd "${workerPackageDir()}" && "${python}" -u -m reins_worker --port 0; echo after`,
    healthTimeoutMs: 60_000,
  });
  assert.equal((await shellWorker.client.health()).ok, true);
  await shellWorker.close();
  await assert.rejects(
    () => connect(shellWorker.url),
    (e) => e instanceof TrainerWorkerError && e.code === "unreachable",
  );
  await assert.rejects(
    () => launch({ command: "echo starting; exit 3", healthTimeoutMs: 5_000 }),
    (e) => e instanceof Error && /exited with code 3/.test(e.message) && /starting/.test(e.message),
  );
});
