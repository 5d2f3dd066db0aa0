/**
 * Runs the worker's Python unit tests (`lib/trainer/worker/tests/`) and the GPU benchmark's code
 * path with the worker's Python, importing the `reins_worker` package the way users run it.
 */
import assert from "node:assert/strict";
import { resolvePython, workerEnv, workerPackageDir } from "../lib/trainer/mod.ts";

Deno.test("trainer python: worker unit tests pass (model, losses, generation, validation)", async () => {
  const { python } = await resolvePython();
  const dir = workerPackageDir();
  // unittest puts the top-level directory (-t) on sys.path itself: the tests import
  // `reins_worker` as installed code would, with no path tricks of their own.
  const out = await new Deno.Command(python, {
    args: ["-m", "unittest", "discover", "-s", `${dir}/tests`, "-t", dir, "-p", "test_*.py"],
    stdout: "piped",
    stderr: "piped",
    env: { PYTHONDONTWRITEBYTECODE: "1" },
  }).output();
  const report = new TextDecoder().decode(out.stderr);
  assert.ok(out.success, report);
  const ran = Number(/Ran (\d+) tests?/.exec(report)?.[1] ?? 0);
  assert.ok(ran >= 20, `expected the worker's unit tests to run, got: ${report}`);
});

Deno.test("trainer python: the worker modules import each other only as a package", async () => {
  for (const dir of ["reins_worker", "reins_worker/tools"]) {
    for await (const entry of Deno.readDir(`${workerPackageDir()}/${dir}`)) {
      if (!entry.name.endsWith(".py")) continue;
      const text = await Deno.readTextFile(`${workerPackageDir()}/${dir}/${entry.name}`);
      assert.doesNotMatch(text, /sys\.path/, `${entry.name} edits sys.path`);
      const flat =
        /^\s*(from|import) (batch|contract|engine|fields|generation|losses|measure|model|policy_type|reference|sampling|server|validate|hf_model)\b/m
          .exec(text);
      assert.equal(flat, null, `${entry.name} imports a sibling flatly: ${flat?.[0]}`);
    }
  }
});

Deno.test("trainer python: the GPU benchmark's code path runs on the CPU (--tiny)", async () => {
  const { python } = await resolvePython();
  const out = await new Deno.Command(python, {
    args: ["-m", "reins_worker.tools.gpu_bench", "--tiny"],
    stdout: "piped",
    stderr: "piped",
    env: workerEnv({ PYTHONDONTWRITEBYTECODE: "1" }),
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  assert.ok(out.success, text + new TextDecoder().decode(out.stderr));
  const lines = text.trim().split("\n");
  const mfu = /^gpu_mfu: ([0-9.]+)$/.exec(lines.at(-1) ?? "");
  assert.ok(mfu, `last line must be the gpu_mfu figure, got: ${lines.at(-1)}`);
  assert.ok(Number(mfu[1]) > 0 && Number(mfu[1]) < 1);
  assert.match(text, /cpu_tiny_tok_per_s: \d+/);
  assert.match(text, /cpu_tiny_generate_tok_per_s: \d+/);
});
