/**
 * Resume: a run killed (SIGKILL) in the middle of a step continues from its last checkpoint
 * without repeating finished steps, and its metrics stay consistent.
 */
import assert from "node:assert/strict";
import { readMetrics } from "../lib/loop/mod.ts";
import { runRollouts } from "./loop_helpers.ts";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import { TERMINAL_ROLLOUT_STATUSES } from "../lib/schema.ts";

const CHILD = new URL("./fixtures/loop/run_child.ts", import.meta.url).pathname;

function spawnChild(dir: string, flags: string[]): Deno.ChildProcess {
  return new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", CHILD, dir, ...flags],
    stdout: "piped",
    stderr: "null",
  }).spawn();
}

/** Reads stdout lines until `until` matches one (returns all lines read). */
async function readUntil(
  reader: ReadableStreamDefaultReader<string>,
  until: (line: string) => boolean,
): Promise<string[]> {
  const lines: string[] = [];
  let buffer = "";
  while (true) {
    const { value, done } = await reader.read();
    if (done) return lines;
    buffer += value;
    const parts = buffer.split("\n");
    buffer = parts.pop()!;
    for (const line of parts) {
      lines.push(line);
      if (until(line)) return lines;
    }
  }
}

Deno.test({
  name: "loop: a run killed mid-step resumes from its checkpoint with consistent metrics",
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_loop_resume_" });
  try {
    // First life: killed in the middle of step 2 (the third): its rollouts are in, its update
    // has not trained (the child holds there until killed).
    const first = spawnChild(dir, ["--hold", "2"]);
    const reader = first.stdout.pipeThrough(new TextDecoderStream()).getReader();
    const before = await readUntil(reader, (l) => l === "HOLD 2");
    assert.ok(before.some((l) => l.startsWith("STEP 1 ")), `first run output: ${before}`);
    assert.equal(before.at(-1), "HOLD 2", `first run output: ${before}`);
    first.kill("SIGKILL");
    await first.status;
    await reader.cancel().catch(() => undefined);
    const metricsPath = `${dir}/run/metrics.jsonl`;
    const kept = await readMetrics(metricsPath);
    assert.ok(kept.length >= 2 && kept.length < 4, `${kept.length} steps before the kill`);

    // Second life: resumes, finishes, never repeats a finished step.
    const second = spawnChild(dir, ["--resume"]);
    const out = await new Response(second.stdout).text();
    const status = await second.status;
    assert.equal(status.code, 0, out);
    const resumedLine = out.split("\n").find((l) => l.startsWith("resumed"));
    assert.ok(resumedLine, out);
    const resumedAt = Number(/at step (\d+)/.exec(resumedLine)![1]);
    assert.equal(resumedAt, kept.length);
    const steps = out.split("\n").filter((l) => l.startsWith("STEP ")).map((l) =>
      Number(l.split(" ")[1])
    );
    assert.deepEqual(steps, Array.from({ length: 4 - resumedAt }, (_, i) => resumedAt + i));

    const metrics = await readMetrics(metricsPath);
    assert.deepEqual(metrics.map((m) => m.step), [0, 1, 2, 3]);
    // The steps done before the kill are exactly as they were.
    assert.deepEqual(metrics.slice(0, kept.length), kept);
    // One version per step, continuing across the restart.
    const base = metrics[0].policy_version - 1;
    metrics.forEach((m, i) => assert.equal(m.policy_version, base + i + 1));
    assert.ok(out.includes(`DONE ${resumedAt} ${base + 4}`), out);
    const state = JSON.parse(await Deno.readTextFile(`${dir}/run/checkpoints/state.json`));
    assert.equal(state.next_step, 4);
    assert.equal(state.policy_version, base + 4);

    // Every rollout the two lives declared is final.
    const gw = await startGateway({ db: `${dir}/gateway.db`, port: 0 });
    try {
      const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
      const rollouts = await runRollouts(client, "resume");
      assert.equal(rollouts.length, 4 * 2 * 4);
      for (const r of rollouts) {
        assert.ok(TERMINAL_ROLLOUT_STATUSES.includes(r.status), `${r.rollout_id}: ${r.status}`);
      }
    } finally {
      await gw.close();
    }
  } finally {
    await Deno.remove(dir, { recursive: true }).catch(() => undefined);
  }
});
