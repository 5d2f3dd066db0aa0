import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import type { Rollout, RolloutCreate } from "../lib/schema.ts";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { K8sBackend } from "../lib/controller/k8s_backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";
import { FakeK8s } from "./support/fake_k8s.ts";
import { waitFor } from "./support/wait.ts";
import { mulberry32 } from "./fixtures/algo/samples.ts";

/** Runs attempt n of a rollout according to `$PLAN` (comma-separated: ok, fail, hang, crash). */
const PLAN_SCRIPT = `
n=$(( $(cat "$STATE/$REINS_ROLLOUT_ID" 2>/dev/null | wc -l) + 1 ))
echo "$REINS_ATTEMPT_ID" >> "$STATE/$REINS_ROLLOUT_ID"
step=$(echo "$PLAN" | cut -d, -f$n)
echo "attempt $n: $step"
case "$step" in
  ok) exit 0 ;;
  fail) echo "failing" >&2; exit 1 ;;
  hang) sleep 60 ;;
  crash) kill -9 $$ ;;
esac
`;

async function allRollouts(client: GatewayClient): Promise<Rollout[]> {
  const out: Rollout[] = [];
  for await (const r of client.iterateRollouts({ limit: 500 })) out.push(r);
  return out;
}

const TERMINAL = new Set(["succeeded", "failed", "cancelled"]);

Deno.test("reconciler: random exits, hangs and crashes end in the right statuses, retries counted", async () => {
  const dir = await Deno.makeTempDir();
  const state = `${dir}/state`;
  await Deno.mkdir(state);
  const gw = await startGateway({ db: `${dir}/gateway.db` });
  const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
  const random = mulberry32(7);
  const steps = ["ok", "fail", "hang", "crash"] as const;
  const plans = new Map<string, string[]>();
  const creates: RolloutCreate[] = [];
  for (let i = 0; i < 24; i++) {
    const plan = [0, 1, 2].map(() => steps[Math.floor(random() * steps.length)]);
    const id = `r${i}`;
    plans.set(id, plan);
    creates.push({
      rollout_id: id,
      input: { i },
      config: {
        timeout_s: 1,
        max_attempts: 1 + (i % 3),
        harness: {
          name: "command",
          options: {
            command: ["sh", "-c", PLAN_SCRIPT],
            env: { PLAN: plan.join(","), STATE: state },
            ...(i % 4 === 0 ? { reward: { command: ["sh", "-c", `echo ${i / 100}`] } } : {}),
          },
        },
      },
    });
  }
  // Bad specs fail their rollout at once (no retry) and do not stop the loop.
  creates.push(
    { rollout_id: "bad-name", input: {}, config: { max_attempts: 3, harness: { name: "nope" } } },
    {
      rollout_id: "bad-command",
      input: {},
      config: { max_attempts: 3, harness: { name: "command", options: { command: "ls" } } },
    },
    { rollout_id: "no-harness", input: {}, config: { max_attempts: 2 } },
  );
  await client.createRollouts(creates);

  const loop = new Reconciler(
    client,
    new LocalBackend({ root: `${dir}/ctl`, pollMs: 25 }),
    { worker: "ctl-test", concurrency: 8, lease_ms: 5000, poll_ms: 25, gatewayUrl: gw.url },
  );
  await loop.start();
  const rollouts = await waitFor(
    async () => {
      const all = await allRollouts(client);
      return all.every((r) => TERMINAL.has(r.status)) && all;
    },
    60_000,
    "every rollout to finish",
  );
  await loop.stop();

  const byId = new Map(rollouts.map((r) => [r.rollout_id, r]));
  const expectedStatus: Record<string, string> = {
    ok: "succeeded",
    fail: "failed",
    crash: "failed",
    hang: "timeout",
  };
  let retries = 0;
  for (const [id, plan] of plans) {
    const r = byId.get(id)!;
    const max = r.config.max_attempts;
    const firstOk = plan.indexOf("ok");
    const attempts = firstOk >= 0 && firstOk < max ? firstOk + 1 : max;
    assert.equal(r.attempts.length, attempts, `${id} (${plan}) max ${max}`);
    assert.equal(r.status, firstOk >= 0 && firstOk < max ? "succeeded" : "failed", id);
    r.attempts.forEach((a, k) => {
      assert.equal(a.status, expectedStatus[plan[k]], `${id} attempt ${k + 1}`);
      assert.equal(a.index, k + 1);
      if (plan[k] === "fail") assert.equal(a.exit_code, 1);
      if (plan[k] === "crash") assert.match(a.error ?? "", /signal 9/);
    });
    retries += attempts - 1;
    // Each attempt ran exactly once.
    const ran = (await Deno.readTextFile(`${state}/${id}`)).trim().split("\n");
    assert.deepEqual(ran, r.attempts.map((a) => a.attempt_id));
    if (Number(id.slice(1)) % 4 === 0 && r.status === "succeeded") {
      assert.equal(r.reward, Number(id.slice(1)) / 100);
    }
  }
  assert.equal(loop.stats.retried, retries);
  for (const id of ["bad-name", "bad-command", "no-harness"]) {
    const r = byId.get(id)!;
    assert.equal(r.status, "failed");
    assert.equal(r.attempts.length, 1, `${id} is not retried`);
    assert.match(r.attempts[0].error ?? "", /^invalid spec: config\.harness/);
  }
  assert.match(byId.get("bad-name")!.attempts[0].error!, /unknown harness "nope"/);
  assert.equal(loop.stats.spec_errors, 3);
  // Output is visible through the gateway as log events.
  const logs = await client.listEvents("r1", { type: "log" });
  const text = logs.map((e) => e.type === "log" ? e.payload.text : "").join("");
  assert.match(text, /attempt 1: /);
  await gw.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("reconciler: a gateway outage delays reports but loses nothing", async () => {
  const dir = await Deno.makeTempDir();
  const db = `${dir}/gateway.db`;
  let gw = await startGateway({ db });
  const port = Number(new URL(gw.url).port);
  const adminKey = gw.adminKey;
  const client = new GatewayClient(gw.url, { apiKey: adminKey, retries: 0, timeoutMs: 2000 });
  await client.createRollouts([1, 2, 3].map((i) => ({
    rollout_id: `o${i}`,
    input: {},
    config: {
      timeout_s: 30,
      harness: { name: "command", options: { command: ["sh", "-c", "sleep 0.8; echo done"] } },
    },
  })));
  const loop = new Reconciler(
    client,
    new LocalBackend({ root: `${dir}/ctl`, pollMs: 25 }),
    { worker: "ctl-outage", concurrency: 4, lease_ms: 10_000, poll_ms: 25, gatewayUrl: gw.url },
  );
  await loop.start();
  await waitFor(() => Promise.resolve(loop.active === 3), 5000, "three attempts running");
  await gw.close(); // the gateway goes away while the attempts finish
  await new Promise((r) => setTimeout(r, 1200));
  gw = await startGateway({ db, port, adminKey });
  const rollouts = await waitFor(
    async () => {
      const all = await allRollouts(client).catch(() => []);
      return all.length === 3 && all.every((r) => r.status === "succeeded") && all;
    },
    15_000,
    "reports after the outage",
  );
  assert.ok(loop.stats.gateway_errors > 0, "the outage was noticed");
  for (const r of rollouts) assert.equal(r.attempts.length, 1);
  await loop.stop();
  await gw.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("reconciler: a cancelled rollout's attempt is killed", async () => {
  const dir = await Deno.makeTempDir();
  const gw = await startGateway({ db: `${dir}/gateway.db` });
  const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
  await client.createRollouts([{
    rollout_id: "c1",
    input: {},
    config: { timeout_s: 60, harness: { name: "command", options: { command: ["sleep", "60"] } } },
  }]);
  const loop = new Reconciler(
    client,
    new LocalBackend({ root: `${dir}/ctl`, pollMs: 25 }),
    { worker: "ctl-cancel", concurrency: 2, lease_ms: 600, poll_ms: 25, gatewayUrl: gw.url },
  );
  await loop.start();
  await waitFor(() => Promise.resolve(loop.active === 1), 5000, "the attempt to start");
  const running = await client.getRollout("c1");
  await client.transition("c1", { to: "cancelled", expected_version: running.version });
  await waitFor(() => Promise.resolve(loop.active === 0), 5000, "the attempt to be killed");
  const r = await client.getRollout("c1");
  assert.equal(r.status, "cancelled");
  assert.equal(r.attempts[0].status, "cancelled");
  await loop.stop();
  await gw.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("reconciler: labelled controllers share a gateway, each running only its rollouts", async () => {
  const dir = await Deno.makeTempDir();
  const gw = await startGateway({ db: `${dir}/gateway.db` });
  const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
  const ok = { timeout_s: 30, harness: { name: "command", options: { command: ["true"] } } };
  await client.createRollouts([
    ...[0, 1, 2].map((i) => ({
      rollout_id: `g${i}`,
      input: {},
      labels: { sandbox: "gpu" },
      config: ok,
    })),
    ...[0, 1, 2].map((i) => ({
      rollout_id: `c${i}`,
      input: {},
      labels: { sandbox: "cpu" },
      config: ok,
    })),
    { rollout_id: "u0", input: {}, config: ok },
  ]);
  const loop = (worker: string, labels?: Record<string, string>) =>
    new Reconciler(
      client,
      new LocalBackend({ root: `${dir}/${worker}`, pollMs: 25 }),
      { worker, concurrency: 2, lease_ms: 5000, poll_ms: 25, gatewayUrl: gw.url, labels },
    );
  const gpu = loop("ctl-gpu", { sandbox: "gpu" });
  await gpu.start();
  await waitFor(
    async () => (await allRollouts(client)).filter((r) => r.status === "succeeded").length === 3,
    10_000,
    "the GPU rollouts to finish",
  );
  // Give it a few more polls: it must not take the others.
  await new Promise((r) => setTimeout(r, 200));
  const afterGpu = await allRollouts(client);
  assert.deepEqual(
    afterGpu.filter((r) => r.status !== "queuing").map((r) => r.rollout_id),
    ["g0", "g1", "g2"],
  );
  assert.equal(gpu.stats.claimed, 3);
  const cpu = loop("ctl-cpu", { sandbox: "cpu" });
  await cpu.start();
  await waitFor(
    async () => (await allRollouts(client)).filter((r) => r.status === "succeeded").length === 6,
    10_000,
    "the CPU rollouts to finish",
  );
  await new Promise((r) => setTimeout(r, 200));
  const all = await allRollouts(client);
  assert.equal(all.find((r) => r.rollout_id === "u0")!.status, "queuing", "unlabelled stays");
  for (const r of all.filter((r) => r.status === "succeeded")) {
    assert.equal(r.attempts.length, 1);
    assert.equal(r.attempts[0].worker, r.labels.sandbox === "gpu" ? "ctl-gpu" : "ctl-cpu");
  }
  await Promise.all([gpu.stop(), cpu.stop()]);
  await gw.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("reconciler + k8s: a failed Job is retried as a new attempt; bad templates fail alone", async () => {
  const dir = await Deno.makeTempDir();
  const gw = await startGateway({ db: `${dir}/gateway.db` });
  const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
  const fake = new FakeK8s();
  fake.script = (job) =>
    job.metadata.annotations["reins.dev/attempt-index"] === "1"
      ? { exit_code: 2, logs: "first try fails\n", delay_ms: 30 }
      : { exit_code: 0, logs: "second try works\n", delay_ms: 30 };
  const template = {
    spec: { template: { spec: { containers: [{ name: "agent", image: "agent:1" }] } } },
  };
  await client.createRollouts([
    { rollout_id: "k1", input: {}, config: { max_attempts: 2, template } },
    {
      rollout_id: "k-bad",
      input: {},
      config: { max_attempts: 2, template: { spec: { template: { spec: { containers: [] } } } } },
    },
  ]);
  const backend = new K8sBackend({
    kubeConfig: fake.kubeConfig(),
    namespace: "default",
    controller: "ctl-k8s",
    resyncMs: 200,
    networkPolicy: false,
  });
  const loop = new Reconciler(client, backend, {
    worker: "ctl-k8s",
    concurrency: 4,
    lease_ms: 5000,
    poll_ms: 25,
    gatewayUrl: gw.url,
  });
  await loop.start();
  const [k1, bad] = await waitFor(
    async () => {
      const all = await allRollouts(client);
      return all.every((r) => TERMINAL.has(r.status)) && all;
    },
    15_000,
    "k8s rollouts to finish",
  );
  await loop.stop();
  assert.equal(k1.status, "succeeded");
  assert.deepEqual(k1.attempts.map((a) => [a.status, a.exit_code]), [["failed", 2], [
    "succeeded",
    0,
  ]]);
  const logs = await client.listEvents("k1", { type: "log" });
  assert.deepEqual(
    logs.map((e) => e.type === "log" ? e.payload.text : ""),
    ["first try fails\n", "second try works\n"],
  );
  assert.equal(bad.status, "failed");
  assert.equal(bad.attempts.length, 1);
  assert.match(bad.attempts[0].error ?? "", /config\.template\.spec\.template\.spec\.containers/);
  assert.equal(fake.jobs.size, 0, "finished Jobs are cleaned up");
  await fake.close();
  await gw.close();
  await Deno.remove(dir, { recursive: true });
});
