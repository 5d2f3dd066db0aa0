import assert from "node:assert/strict";
import type { Attempt, JsonObject, Rollout } from "../lib/schema.ts";
import type { AttemptOutcome, LogChunk } from "../lib/controller/backend.ts";
import { SpecError } from "../lib/controller/backend.ts";
import { jobName, K8sBackend, labelValue } from "../lib/controller/k8s_backend.ts";
import { FakeK8s } from "./support/fake_k8s.ts";
import { runningAttempt, runningRollout } from "./support/records.ts";

const TEMPLATE: JsonObject = {
  metadata: { labels: { team: "rl" } },
  spec: {
    template: {
      spec: {
        containers: [{
          name: "agent",
          image: "ghcr.io/example/agent:1",
          env: [{ name: "MODEL", value: "policy" }],
        }],
      },
    },
  },
};

function rollout(id: string, template: JsonObject | undefined, timeout_s = 30): Rollout {
  return runningRollout({
    rollout_id: id,
    group_id: "g",
    input: { task: id },
    config: { timeout_s, max_attempts: 1, ...(template ? { template } : {}) },
    version: 2,
  });
}

function spec(r: Rollout, logs: LogChunk[] = [], attemptId = `${r.rollout_id}-a1`) {
  const attempt: Attempt = runningAttempt({
    attempt_id: attemptId,
    rollout_id: r.rollout_id,
    worker: "ctl",
  });
  return {
    rollout: r,
    attempt,
    token: "rk_tok",
    gatewayUrl: "http://gateway.reins.svc:8420",
    log: (c: LogChunk) => logs.push(c),
  };
}

function backend(fake: FakeK8s, extra: Partial<ConstructorParameters<typeof K8sBackend>[0]> = {}) {
  return new K8sBackend({
    kubeConfig: fake.kubeConfig(),
    namespace: "default",
    controller: "ctl:1",
    resyncMs: 200,
    networkPolicy: false,
    ...extra,
  });
}

async function until(check: () => boolean, ms = 5000): Promise<void> {
  const end = Date.now() + ms;
  while (!check()) {
    if (Date.now() > end) throw new Error("condition not reached in time");
    await new Promise((r) => setTimeout(r, 20));
  }
}

Deno.test("k8s: a Job is rendered from the template, watched to completion, its logs fetched", async () => {
  const fake = new FakeK8s();
  fake.script = () => ({ exit_code: 0, logs: "hello from the pod\n", delay_ms: 50 });
  const k8s = backend(fake);
  const logs: LogChunk[] = [];
  const handle = await k8s.start(spec(rollout("r:1", TEMPLATE, 90), logs));
  const outcome = await handle.done;
  assert.equal(outcome.status, "succeeded");
  assert.equal(outcome.exit_code, 0);
  assert.equal(logs.map((l) => l.text).join(""), "hello from the pod\n");
  const job = fake.jobs.get(`default/${await jobName("r:1-a1")}`)!;
  assert.equal(job.spec.activeDeadlineSeconds, 90);
  assert.equal(job.spec.backoffLimit, 0);
  assert.equal(job.spec.ttlSecondsAfterFinished, 600);
  assert.equal(job.spec.template.spec.restartPolicy, "Never");
  assert.deepEqual(job.metadata.labels, {
    team: "rl",
    "reins.dev/managed-by": "reins",
    "reins.dev/controller": "ctl-1",
    "reins.dev/rollout-id": "r-1",
    "reins.dev/attempt-id": "r-1-a1",
  });
  assert.equal(job.metadata.annotations["reins.dev/rollout-id"], "r:1");
  const env = Object.fromEntries(
    job.spec.template.spec.containers[0].env.map((e: { name: string; value: string }) => [
      e.name,
      e.value,
    ]),
  );
  assert.equal(env.MODEL, "policy");
  assert.equal(env.OPENAI_BASE_URL, "http://gateway.reins.svc:8420/proxy/r:1/r:1-a1/v1");
  assert.equal(env.ANTHROPIC_BASE_URL, "http://gateway.reins.svc:8420/proxy/r:1/r:1-a1");
  assert.equal(env.OPENAI_API_KEY, "rk_tok");
  assert.equal(env.REINS_INPUT, '{"task":"r:1"}');
  assert.ok(fake.requests.some((r) => r.includes("watch=true")), "the backend watches Jobs");
  await k8s.release("r:1-a1");
  assert.equal(fake.jobs.size, 0, "release deletes the finished Job");
  await k8s.close();
  await fake.close();
});

Deno.test("k8s: a failing Job reports its exit code, a hanging one hits its deadline", async () => {
  const fake = new FakeK8s();
  fake.script = (job) =>
    job.metadata.annotations["reins.dev/rollout-id"] === "hang"
      ? { hang: true }
      : { exit_code: 3, logs: "boom\n" };
  const k8s = backend(fake);
  const [failed, timedOut] = await Promise.all([
    k8s.start(spec(rollout("fail", TEMPLATE))).then((h) => h.done),
    k8s.start(spec(rollout("hang", TEMPLATE, 1))).then((h) => h.done),
  ]);
  assert.equal(failed.status, "failed");
  assert.equal(failed.exit_code, 3);
  assert.match(failed.error ?? "", /BackoffLimitExceeded \(exit code 3\)/);
  assert.equal(timedOut.status, "timeout");
  assert.match(timedOut.error ?? "", /deadline/);
  await k8s.close();
  await fake.close();
});

Deno.test("k8s: a dropped watch and a missed event are repaired by the periodic list", async () => {
  const fake = new FakeK8s();
  fake.script = () => ({ hang: true });
  const k8s = backend(fake, { resyncMs: 150 });
  const handle = await k8s.start(spec(rollout("missed", TEMPLATE)));
  await until(() => fake.watchCount === 1);
  fake.dropWatches();
  await until(() => fake.watchCount === 1); // the backend watches again
  // The Job completes but no watch event is sent: only the list can notice.
  fake.silent = true;
  const job = fake.jobs.get(`default/${await jobName("missed-a1")}`)!;
  job.status = {
    succeeded: 1,
    conditions: [{ type: "Complete", status: "True" }],
  };
  const outcome = await handle.done;
  assert.equal(outcome.status, "succeeded");
  assert.ok(
    fake.requests.filter((r) => r.startsWith("GET /apis/batch/v1/namespaces/default/jobs?"))
      .some((r) => !r.includes("watch=true")),
    "a list request repaired the state",
  );
  await k8s.close();
  await fake.close();
});

Deno.test("k8s: a create conflict adopts the existing Job instead of running twice", async () => {
  const fake = new FakeK8s();
  fake.script = () => ({ exit_code: 0, delay_ms: 300 });
  const first = backend(fake);
  const second = backend(fake);
  const s = spec(rollout("dup", TEMPLATE));
  const a = await first.start(s);
  const b = await second.start(s);
  assert.equal(b.info.adopted, true);
  assert.equal(fake.jobs.size, 1);
  assert.equal(fake.requests.filter((r) => r.startsWith("POST /apis/batch")).length, 2);
  const [oa, ob] = await Promise.all([a.done, b.done]);
  assert.equal(oa.status, "succeeded");
  assert.equal(ob.status, "succeeded");
  await first.close();
  await second.close();
  await fake.close();
});

Deno.test("k8s: kill deletes the Job; known() and adopt() see what a restart needs", async () => {
  const fake = new FakeK8s();
  fake.script = () => ({ hang: true });
  const k8s = backend(fake);
  const running = spec(rollout("long", TEMPLATE));
  const handle = await k8s.start(running);
  assert.deepEqual(await k8s.known(), [{ rollout_id: "long", attempt_id: "long-a1" }]);
  // A restarted controller adopts the Job by its deterministic name.
  const restarted = backend(fake);
  const adopted = await restarted.adopt(running);
  assert.ok(adopted && "done" in adopted);
  assert.equal(await restarted.adopt(spec(rollout("none", TEMPLATE))), null);
  await k8s.kill("long-a1", "cancelled", "rollout cancelled");
  const outcome: AttemptOutcome = await handle.done;
  assert.equal(outcome.status, "cancelled");
  assert.equal(fake.jobs.size, 0);
  assert.equal((await (adopted as { done: Promise<AttemptOutcome> }).done).status, "lost");
  await k8s.close();
  await restarted.close();
  await fake.close();
});

Deno.test("k8s: invalid templates are SpecErrors naming the field", async () => {
  const fake = new FakeK8s();
  const k8s = backend(fake);
  await assert.rejects(
    () => k8s.start(spec(rollout("none", undefined))),
    (e: Error) =>
      e instanceof SpecError && /config\.template: the k8s backend needs/.test(e.message),
  );
  await assert.rejects(
    () => k8s.start(spec(rollout("empty", { spec: { template: { spec: { containers: [] } } } }))),
    (e: Error) =>
      e instanceof SpecError && e.field === "config.template.spec.template.spec.containers",
  );
  await assert.rejects(
    () =>
      k8s.start(
        spec(rollout("noimage", { spec: { template: { spec: { containers: [{ name: "a" }] } } } })),
      ),
    (e: Error) => e instanceof SpecError && /containers\[0\]\.image/.test(e.message),
  );
  assert.equal(fake.jobs.size, 0);
  await k8s.close();
  await fake.close();
});

Deno.test("k8s: creation is rate limited and a NetworkPolicy limits egress", async () => {
  const fake = new FakeK8s();
  fake.script = () => ({ exit_code: 0 });
  const k8s = backend(fake, {
    createPerSecond: 10,
    networkPolicy: {
      gateway: { cidr: "10.0.0.12/32", ports: [8420] },
      allow: [{ cidr: "10.1.0.0/16", ports: [443] }],
    },
  });
  const t0 = Date.now();
  const handles = await Promise.all(
    [1, 2, 3, 4, 5].map((i) => k8s.start(spec(rollout(`rate${i}`, TEMPLATE)))),
  );
  assert.ok(Date.now() - t0 >= 380, `5 creates at 10/s took ${Date.now() - t0} ms`);
  await Promise.all(handles.map((h) => h.done));
  const policy = fake.networkPolicies.get(`default/reins-egress-${labelValue("ctl:1")}`)!;
  assert.deepEqual(policy.spec.policyTypes, ["Ingress", "Egress"]);
  assert.deepEqual(policy.spec.ingress, [], "nothing may connect to an attempt's pod");
  assert.deepEqual(policy.spec.podSelector.matchLabels, {
    "reins.dev/managed-by": "reins",
    "reins.dev/controller": "ctl-1",
  });
  assert.deepEqual(policy.spec.egress[0], {
    to: [{ ipBlock: { cidr: "10.0.0.12/32" } }],
    ports: [{ protocol: "TCP", port: 8420 }],
  });
  assert.deepEqual(policy.spec.egress[1].to, [{ ipBlock: { cidr: "10.1.0.0/16" } }]);
  assert.deepEqual(policy.spec.egress[2].ports.map((p: { port: number }) => p.port), [53, 53]);
  await k8s.close();
  await fake.close();
});
