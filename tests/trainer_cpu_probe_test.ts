/**
 * The worker measures its CPU matmul rate at start-up and names its BLAS in `/health`; on the
 * reference BLAS (Debian's libblas3, forced here with LD_LIBRARY_PATH) it warns with the fix, and
 * scripts/ensure_deps.ts detects the same library (it is what `deno task test` installs over).
 */
import assert from "node:assert/strict";
import { describeCpu, startLocalWorker } from "../lib/trainer/mod.ts";
import { torchBlas } from "../scripts/ensure_deps.ts";

const REFERENCE_DIR = "/usr/lib/x86_64-linux-gnu/blas";
const hasReference = (() => {
  try {
    return Deno.statSync(`${REFERENCE_DIR}/libblas.so.3`).isFile;
  } catch {
    return false;
  }
})();

Deno.test("cpu probe: /health reports the matmul rate, the BLAS and the torch threads", async () => {
  await using worker = await startLocalWorker({ threads: 1, warnSlowCpu: false });
  const health = worker.health;
  assert.ok(health.cpu_matmul_gflops! > 0, JSON.stringify(health));
  assert.equal(health.torch_threads, 1);
  assert.equal(typeof health.blas, "string");
  assert.equal(health.cpu_warning === null, health.cpu_matmul_gflops! >= 20);
  assert.match(
    describeCpu(health),
    /^CPU matmul \d+\.\d GFLOP\/s fp32 \(BLAS .+, 1 torch threads\)$/,
  );
  // The same figures on a later /health (measured once, at start-up).
  const again = await worker.client.health();
  assert.equal(again.cpu_matmul_gflops, health.cpu_matmul_gflops);
});

Deno.test({
  name: "cpu probe: on the reference BLAS the worker warns naming the fix; ensure_deps sees it",
  ignore: !hasReference,
  async fn() {
    const env = { LD_LIBRARY_PATH: REFERENCE_DIR };
    await using worker = await startLocalWorker({ threads: 1, env, warnSlowCpu: false });
    assert.equal(worker.health.blas, "reference");
    assert.ok(worker.health.cpu_matmul_gflops! < 20, JSON.stringify(worker.health));
    assert.match(worker.health.cpu_warning ?? "", /apt-get install libopenblas0-pthread/);
    assert.match(worker.logs(), /warning: CPU matmul runs at .* \(BLAS: reference\)/);
    assert.equal(await torchBlas(env), "reference");
    assert.notEqual(await torchBlas(), null);
  },
});
