/**
 * Controller figures: how many rollouts per second the local backend sustains with a trivial
 * harness (`true`), and the controller's overhead per attempt (the time a rollout takes through
 * gateway claim → workdir → process group → exit → report, minus spawning `true` directly).
 *
 * Usage: `deno task bench:controller [--rollouts 300] [--concurrency 8] [--sandbox-rollouts 20]
 * [--reps 3]` (each figure is the median of `reps` runs: the machine may be shared).
 *
 * Ends by printing `local_rollouts_per_s: <n>` and `overhead_ms_per_attempt: <n>`.
 *
 * @module
 */
import { parseArgs } from "node:util";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";
import { probeSandbox } from "../lib/controller/sandbox.ts";
import type { JsonObject } from "../lib/schema.ts";

const { values } = parseArgs({
  args: Deno.args,
  options: {
    rollouts: { type: "string", default: "300" },
    concurrency: { type: "string", default: "8" },
    sequential: { type: "string", default: "60" },
    "sandbox-rollouts": { type: "string", default: "20" },
    reps: { type: "string", default: "3" },
  },
});

/** Runs `n` rollouts of `options` through a fresh gateway + controller; returns wall ms. */
async function throughControllers(
  n: number,
  concurrency: number,
  options: JsonObject,
): Promise<number> {
  const dir = await Deno.makeTempDir({ prefix: "reins-bench-ctl-" });
  const gw = await startGateway({ db: `${dir}/gateway.db` });
  try {
    const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
    const ids = Array.from({ length: n }, (_, i) => `b${i}`);
    for (let i = 0; i < n; i += 500) {
      await client.createRollouts(
        ids.slice(i, i + 500).map((rollout_id) => ({
          rollout_id,
          input: {},
          config: { timeout_s: 60, harness: { name: "command", options } },
        })),
      );
    }
    const loop = new Reconciler(
      client,
      new LocalBackend({ root: `${dir}/ctl`, pollMs: 50 }),
      { worker: "bench", concurrency, lease_ms: 60_000, poll_ms: 20, gatewayUrl: gw.url },
    );
    const t0 = performance.now();
    await loop.start();
    while (loop.stats.succeeded + loop.stats.failed < n) {
      await new Promise((r) => setTimeout(r, 5));
    }
    const wall = performance.now() - t0;
    await loop.stop();
    if (loop.stats.failed > 0) throw new Error(`${loop.stats.failed} bench rollouts failed`);
    return wall;
  } finally {
    await gw.close();
    await Deno.remove(dir, { recursive: true });
  }
}

/** Spawns `true` `n` times, one after the other (the floor the controller adds to). */
async function directSpawns(n: number): Promise<number> {
  const t0 = performance.now();
  for (let i = 0; i < n; i++) {
    await new Deno.Command("true", { stdout: "null", stderr: "null" }).output();
  }
  return performance.now() - t0;
}

const n = Number(values.rollouts);
const concurrency = Number(values.concurrency);
const sequential = Number(values.sequential);
const sandboxed = Number(values["sandbox-rollouts"]);

await throughControllers(10, concurrency, { command: ["true"] }); // warm-up (JIT, sqlite)

const reps = Math.max(1, Number(values.reps));
const median = (xs: number[]) => [...xs].sort((a, b) => a - b)[Math.floor(xs.length / 2)];
const walls: number[] = [];
const seqWalls: number[] = [];
const directs: number[] = [];
for (let rep = 0; rep < reps; rep++) {
  walls.push(await throughControllers(n, concurrency, { command: ["true"] }));
  seqWalls.push(await throughControllers(sequential, 1, { command: ["true"] }));
  directs.push(await directSpawns(sequential));
  console.log(
    `rep ${rep + 1}: ${n} rollouts at concurrency ${concurrency} in ${walls[rep].toFixed(0)} ms; ` +
      `${sequential} sequential in ${seqWalls[rep].toFixed(0)} ms ` +
      `(direct spawns of \`true\`: ${directs[rep].toFixed(0)} ms)`,
  );
}
const wall = median(walls);
const seqWall = median(seqWalls);
const perSecond = n / (wall / 1000);
const overhead = (seqWall - median(directs)) / sequential;

const support = await probeSandbox();
if (sandboxed > 0 && support.bwrap && support.net) {
  const boxWall = await throughControllers(sandboxed, 1, {
    command: ["true"],
    sandbox: { enabled: true, strict: true },
  });
  const perAttempt = boxWall / sandboxed - seqWall / sequential;
  console.log(`sandbox_extra_ms_per_attempt: ${perAttempt.toFixed(1)}`);
} else if (sandboxed > 0) {
  console.log(`sandbox: skipped (${support.reason})`);
}

console.log(`local_rollouts_per_s: ${perSecond.toFixed(1)}`);
console.log(`overhead_ms_per_attempt: ${overhead.toFixed(2)}`);
