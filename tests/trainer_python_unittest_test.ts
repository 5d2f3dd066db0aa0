/** Runs the worker's Python unit tests (`lib/trainer/worker/tests/`) with the worker's Python. */
import assert from "node:assert/strict";
import { resolvePython } from "../lib/trainer/mod.ts";

Deno.test("trainer python: worker unit tests pass (model, losses, validation)", async () => {
  const { python } = await resolvePython();
  const dir = new URL("../lib/trainer/worker/tests", import.meta.url).pathname;
  const out = await new Deno.Command(python, {
    args: ["-m", "unittest", "discover", "-s", dir, "-p", "test_*.py"],
    stdout: "piped",
    stderr: "piped",
    env: { PYTHONDONTWRITEBYTECODE: "1" },
  }).output();
  const report = new TextDecoder().decode(out.stderr);
  assert.ok(out.success, report);
  const ran = Number(/Ran (\d+) tests?/.exec(report)?.[1] ?? 0);
  assert.ok(ran >= 10, `expected the worker's unit tests to run, got: ${report}`);
});

Deno.test("trainer python: the GPU benchmark's code path runs on the CPU (--tiny)", async () => {
  const { python } = await resolvePython();
  const script = new URL("../lib/trainer/worker/gpu_bench.py", import.meta.url).pathname;
  const out = await new Deno.Command(python, {
    args: [script, "--tiny"],
    stdout: "piped",
    stderr: "piped",
    env: { PYTHONDONTWRITEBYTECODE: "1" },
  }).output();
  const text = new TextDecoder().decode(out.stdout);
  assert.ok(out.success, text + new TextDecoder().decode(out.stderr));
  const lines = text.trim().split("\n");
  const mfu = /^gpu_mfu: ([0-9.]+)$/.exec(lines.at(-1) ?? "");
  assert.ok(mfu, `last line must be the gpu_mfu figure, got: ${lines.at(-1)}`);
  assert.ok(Number(mfu[1]) > 0 && Number(mfu[1]) < 1);
  assert.match(text, /cpu_tiny_tok_per_s: \d+/);
});
