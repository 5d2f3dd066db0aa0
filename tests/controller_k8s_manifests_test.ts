/**
 * The Kubernetes backend's manifests against the API's own schema, the strict fake API server's
 * refusals, the image probe, the pod's container order, and `--dry-run`.
 */
import assert from "node:assert/strict";
import { loadAll } from "js-yaml";
import type { Attempt, JsonObject, Rollout } from "../lib/schema.ts";
import type { LogChunk } from "../lib/controller/backend.ts";
import { K8sBackend } from "../lib/controller/k8s_backend.ts";
import { probePod } from "../lib/controller/k8s_manifests.ts";
import { FakeK8s, type K8sObject, selectorMatcher } from "./support/fake_k8s.ts";
import { schemaErrors } from "../lib/controller/k8s_schema.ts";
import { runningAttempt, runningRollout } from "./support/records.ts";

const TEMPLATE: JsonObject = {
  spec: {
    template: {
      spec: { containers: [{ name: "agent", image: "example.com/agent:1", command: ["true"] }] },
    },
  },
};
const HARNESS = {
  name: "k8s",
  options: {
    workspace: "/task",
    reward: { command: ["sh", "tests/run.sh"], restore: ["tests"] },
    files: { "tests/hidden.sh": "exit 0\n" },
    answers: { expected: "3" },
    hide: ["/data/answers"],
  },
};

function spec(id: string, options: { harness?: boolean; template?: JsonObject } = {}) {
  const rollout: Rollout = runningRollout({
    rollout_id: id,
    group_id: "g",
    input: { task: id },
    config: {
      timeout_s: 30,
      max_attempts: 1,
      template: options.template ?? TEMPLATE,
      ...(options.harness ? { harness: HARNESS } : {}),
    },
    version: 2,
  });
  const attempt: Attempt = runningAttempt({
    attempt_id: `${id}-a1`,
    rollout_id: id,
    worker: "ctl",
  });
  const logs: LogChunk[] = [];
  return {
    rollout,
    attempt,
    token: "rk_tok",
    gatewayUrl: "http://gateway.reins.svc:8420",
    log: (c: LogChunk) => logs.push(c),
    logs,
  };
}

function backend(fake: FakeK8s, extra: Partial<ConstructorParameters<typeof K8sBackend>[0]> = {}) {
  return new K8sBackend({
    kubeConfig: fake.kubeConfig(),
    namespace: "reins",
    controller: "ctl:1",
    resyncMs: 200,
    networkPolicy: { gateway: { cidr: "10.0.0.12/32", ports: [8420] } },
    reporterKey: "rp_reporter-key-123",
    imageCheck: { pollMs: 10 },
    ...extra,
  });
}

Deno.test("k8s manifests: every object the backend creates validates against the API schema", async () => {
  const fake = new FakeK8s();
  const k8s = backend(fake);
  const plain = await k8s.render(spec("plain"));
  const verified = await k8s.render(spec("verified", { harness: true }));
  const objects: K8sObject[] = [
    plain.job,
    verified.job,
    verified.objects.configMap!,
    verified.objects.secret!,
    ...k8s.sharedObjects(),
    await probePod("ctl:1", "example.com/agent:1", {
      containers: [],
      imagePullSecrets: [{ name: "regcred" }],
      serviceAccountName: "reins-agent",
    }),
  ].map((o) => JSON.parse(JSON.stringify(o)));
  // The probe pulls as the Job's pods would: same pull secrets and account.
  assert.deepEqual(objects[7].spec.imagePullSecrets, [{ name: "regcred" }]);
  assert.equal(objects[7].spec.serviceAccountName, "reins-agent");
  assert.deepEqual(objects.map((o) => o.kind), [
    "Job",
    "Job",
    "ConfigMap",
    "Secret",
    "NetworkPolicy",
    "Secret",
    "ConfigMap",
    "Pod",
  ]);
  for (const object of objects) {
    assert.deepEqual(schemaErrors(object), [], `${object.kind} ${object.metadata.name}`);
  }
  // The pod mounts exactly the objects rendered with it, and each secret only where it must.
  const pod = objects[1].spec.template.spec;
  const volume = (name: string) => pod.volumes.find((v: K8sObject) => v.name === name);
  assert.equal(volume("reins-task").configMap.name, objects[2].metadata.name);
  assert.equal(volume("reins-answers").secret.secretName, objects[3].metadata.name);
  assert.equal(volume("reins-reporter").secret.secretName, objects[5].metadata.name);
  const mounting = (name: string) =>
    [...pod.initContainers, ...pod.containers].filter((c: K8sObject) =>
      c.volumeMounts?.some((m: K8sObject) => m.name === name)
    ).map((c: K8sObject) => c.name);
  assert.deepEqual(mounting("reins-reporter"), ["reins-report"]);
  assert.deepEqual(mounting("reins-answers"), ["reins-verify"]);
  assert.deepEqual(mounting("reins-task"), ["reins-verify"]);
  assert.deepEqual(mounting("reins-pristine"), ["reins-prepare", "reins-verify"]);
  const agent = pod.initContainers.find((c: K8sObject) => c.name === "agent");
  assert.ok(agent.env.some((e: K8sObject) => e.name === "OPENAI_API_KEY"));
  for (const c of [...pod.initContainers, ...pod.containers].filter((c) => c !== agent)) {
    assert.ok(!c.env?.some((e: K8sObject) => e.value === "rk_tok"), `${c.name} has the token`);
  }
  assert.equal(pod.automountServiceAccountToken, false);
  assert.deepEqual(verified.stages?.skipped, {});
  await k8s.close();
  await fake.close();
});

Deno.test("k8s manifests: the schema check catches what the API server refuses", () => {
  const job = (container: K8sObject, extra: K8sObject = {}) => ({
    apiVersion: "batch/v1",
    kind: "Job",
    metadata: { name: "reins-x", labels: { "reins.dev/rollout-id": "r-1" } },
    spec: { template: { spec: { restartPolicy: "Never", containers: [container], ...extra } } },
  });
  assert.deepEqual(schemaErrors(job({ name: "a", image: "i" })), []);
  assert.deepEqual(schemaErrors(job({ name: "a", image: "i", imagePullPolicy: "Sometimes" })), [
    "data/spec/template/spec/containers/0/imagePullPolicy must be equal to one of the allowed values",
  ]);
  assert.deepEqual(schemaErrors(job({ name: "a", image: "i", comand: ["x"] })), [
    "spec.template.spec.containers[0].comand: unknown field",
  ]);
  assert.deepEqual(schemaErrors(job({ image: "i" })), [
    "data/spec/template/spec/containers/0 must have required property name",
    "spec.template.spec.containers[0].name: must be a DNS label",
  ]);
  assert.deepEqual(
    schemaErrors(job({ name: "a", image: "i", volumeMounts: [{ name: "v", mountPath: "/v" }] })),
    ['spec.template.spec.containers[0].volumeMounts[0].name: Not found: "v"'],
  );
  const badLabel = job({ name: "a", image: "i" });
  badLabel.metadata.labels["reins.dev/rollout-id"] = "r:1";
  assert.deepEqual(schemaErrors(badLabel), [
    'metadata.labels.reins.dev/rollout-id: Invalid value: "r:1"',
  ]);
});

Deno.test("k8s fake: immutable Job templates, RBAC verbs, selectors and Secrets as the real server", async () => {
  const fake = new FakeK8s();
  const k8s = backend(fake, { networkPolicy: false, imageCheck: false });
  fake.script = () => ({ hang: true });
  await k8s.start({ ...spec("im"), log: () => {} });
  const [key] = fake.jobs.keys();
  const name = key.split("/")[1];
  const patch = (body: K8sObject) =>
    fetch(`${fake.url}/apis/batch/v1/namespaces/reins/jobs/${name}`, {
      method: "PATCH",
      headers: { "content-type": "application/merge-patch+json" },
      body: JSON.stringify(body),
    });
  const template = { spec: { template: { spec: { containers: [{ name: "x", image: "y" }] } } } };
  let res = await patch(template);
  assert.equal(res.status, 403, "the controller's Role has no patch on jobs");
  assert.match((await res.json()).message, /cannot patch resource "jobs" in API group "batch"/);
  fake.role = null; // an administrator: now the immutability is what refuses
  res = await patch(template);
  assert.equal(res.status, 422);
  assert.match((await res.json()).message, /spec\.template: Invalid value: .*field is immutable/);
  res = await patch({ metadata: { labels: { extra: "ok" } } });
  assert.equal(res.status, 200, "labels may change");
  res = await fetch(`${fake.url}/apis/batch/v1/namespaces/reins/jobs?labelSelector=a%20in%20(b`);
  assert.equal(res.status, 400);
  await res.body?.cancel();
  const match = selectorMatcher("reins.dev/managed-by=reins,team in (rl, ml),!gpu,tier notin (x)");
  assert.equal(match({ "reins.dev/managed-by": "reins", team: "ml" }), true);
  assert.equal(match({ "reins.dev/managed-by": "reins", team: "ml", gpu: "1" }), false);
  assert.equal(match({ "reins.dev/managed-by": "reins", team: "web" }), false);
  assert.equal(match({ "reins.dev/managed-by": "reins", team: "rl", tier: "x" }), false);
  // The reporter key is stored as the API stores Secrets: base64 data, no stringData.
  const secret = [...fake.secrets.values()].find((s) =>
    s.metadata.name.startsWith("reins-reporter")
  );
  assert.equal(atob(secret!.data.key), "rp_reporter-key-123");
  assert.equal(secret!.stringData, undefined);
  // Everything the backend itself asked was granted by deploy/k8s/rbac.yaml.
  const own = fake.accessLog.filter((a) =>
    a.verb !== "patch" && !(a.verb === "list" && !a.allowed)
  );
  assert.deepEqual(own.filter((a) => !a.allowed), []);
  await k8s.close();
  await fake.close();
});

Deno.test("k8s probe: an image that cannot be pulled fails the start; a good one is probed once", async () => {
  const fake = new FakeK8s();
  fake.unpullable.add("example.com/missing:1");
  const k8s = backend(fake, { networkPolicy: false });
  const missing = {
    spec: {
      template: { spec: { containers: [{ name: "agent", image: "example.com/missing:1" }] } },
    },
  };
  await assert.rejects(
    () => k8s.start(spec("gone", { template: missing })),
    /image example\.com\/missing:1 cannot be pulled: ErrImagePull/,
  );
  assert.equal(fake.jobs.size, 0, "no Job was created for an image that cannot come");
  const handles = await Promise.all(["p1", "p2", "p3"].map((id) => k8s.start(spec(id))));
  await Promise.all(handles.map((h) => h.done));
  const probes = fake.requests.filter((r) => r.startsWith("POST /api/v1/namespaces/reins/pods"));
  assert.equal(probes.length, 2, "one probe for the missing image, one for the good one");
  assert.equal(
    [...fake.pods.values()].filter((p) => p.metadata.labels["reins.dev/probe"]).length,
    0,
  );
  await k8s.close();
  await fake.close();
});

Deno.test("k8s pod: init containers run in order; a failing agent never reaches the verifier", async () => {
  const fake = new FakeK8s();
  const k8s = backend(fake, { networkPolicy: false, imageCheck: false });
  fake.script = (job) =>
    job.metadata.annotations["reins.dev/rollout-id"] === "bad"
      ? { exit_code: 3, logs: "agent gave up\n" }
      : { exit_code: 0, logs: "agent done\n", delay_ms: 20 };
  const bad = spec("bad", { harness: true });
  const good = spec("good", { harness: true });
  const [failed, passed] = await Promise.all([
    k8s.start(bad).then((h) => h.done),
    k8s.start(good).then((h) => h.done),
  ]);
  assert.equal(failed.status, "failed");
  assert.equal(failed.exit_code, 3);
  assert.match(failed.error ?? "", /BackoffLimitExceeded \(exit code 3\)/);
  assert.equal(failed.info.verification, undefined);
  const podOf = (id: string) =>
    [...fake.pods.values()].find((p) => p.metadata.labels["reins.dev/rollout-id"] === id)!;
  const statuses = (id: string) =>
    Object.fromEntries(
      [...podOf(id).status.initContainerStatuses, ...podOf(id).status.containerStatuses].map((
        s: K8sObject,
      ) => [s.name, s.state]),
    );
  assert.deepEqual(statuses("bad")["reins-verify"], { waiting: { reason: "PodInitializing" } });
  assert.deepEqual(statuses("bad")["reins-report"], { waiting: { reason: "PodInitializing" } });
  assert.equal(passed.status, "succeeded");
  const s = statuses("good");
  for (
    const [before, after] of [["reins-prepare", "agent"], ["agent", "reins-verify"], [
      "reins-verify",
      "reins-report",
    ]]
  ) {
    assert.ok(
      s[before].terminated.finishedAt <= s[after].terminated.startedAt,
      `${before} < ${after}`,
    );
  }
  assert.equal(good.logs.map((l) => l.text).join(""), "agent done\n");
  // The task files and answers are owned by their Job: deleting it (as the TTL controller does,
  // not through the backend) takes them along.
  const goodJob = [...fake.jobs.values()].find((j) =>
    j.metadata.annotations["reins.dev/rollout-id"] === "good"
  )!;
  const owned = [...fake.configMaps.values(), ...fake.secrets.values()].filter((o) =>
    o.metadata.ownerReferences?.[0]?.uid === goodJob.metadata.uid
  );
  assert.deepEqual(owned.map((o) => o.kind).sort(), ["ConfigMap", "Secret"]);
  fake.role = null;
  const res = await fetch(
    `${fake.url}/apis/batch/v1/namespaces/reins/jobs/${goodJob.metadata.name}`,
    { method: "DELETE" },
  );
  await res.body?.cancel();
  assert.ok(
    [...fake.configMaps.keys(), ...fake.secrets.keys()].every((k) =>
      !k.includes(goodJob.metadata.name)
    ),
  );
  await k8s.close();
  await fake.close();
});

async function controller(args: string[], env: Record<string, string> = {}) {
  const out = await new Deno.Command(Deno.execPath(), {
    args: ["run", "-A", new URL("../bin/controller.ts", import.meta.url).pathname, ...args],
    env,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decode = (b: Uint8Array) => new TextDecoder().decode(b);
  return { code: out.code, stdout: decode(out.stdout), stderr: decode(out.stderr) };
}

Deno.test("k8s dry run: prints valid manifests that the strict API server accepts", async () => {
  const dir = await Deno.makeTempDir();
  const config = `${dir}/rollout.json`;
  await Deno.writeTextFile(
    config,
    JSON.stringify({
      rollout_id: "task-1",
      input: { question: "1+2" },
      config: { timeout_s: 900, template: TEMPLATE, harness: HARNESS },
    }),
  );
  const run = await controller([
    "--backend",
    "k8s",
    "--dry-run",
    "--config",
    config,
    "--namespace",
    "reins",
    "--worker",
    "ctl-1",
    "--gateway-cidr",
    "10.96.0.10/32:8420",
  ], { REINS_REPORTER_KEY: "rp_the-real-key-must-not-print" });
  assert.equal(run.code, 0, run.stderr);
  assert.doesNotMatch(run.stdout, /rp_the-real-key-must-not-print/);
  const docs = loadAll(run.stdout) as K8sObject[];
  assert.deepEqual(docs.map((d) => d.kind), [
    "NetworkPolicy",
    "Secret",
    "ConfigMap",
    "ConfigMap",
    "Secret",
    "Job",
  ]);
  for (const doc of docs) {
    assert.equal(doc.metadata.namespace, "reins");
    assert.deepEqual(schemaErrors(doc), [], `${doc.kind} ${doc.metadata.name}`);
  }
  const job = docs.at(-1)!;
  assert.equal(job.spec.activeDeadlineSeconds, 900);
  assert.equal(job.metadata.annotations["reins.dev/rollout-id"], "task-1");
  // `kubectl apply --dry-run=server`, here: the fake admits each one (as an administrator).
  const fake = new FakeK8s();
  fake.role = null;
  fake.script = () => ({ hang: true });
  const plural: Record<string, string> = {
    NetworkPolicy: "apis/networking.k8s.io/v1/namespaces/reins/networkpolicies",
    Secret: "api/v1/namespaces/reins/secrets",
    ConfigMap: "api/v1/namespaces/reins/configmaps",
    Job: "apis/batch/v1/namespaces/reins/jobs",
  };
  for (const doc of docs) {
    const res = await fetch(`${fake.url}/${plural[doc.kind]}`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify(doc),
    });
    assert.equal(res.status, 201, `${doc.kind}: ${await res.text()}`);
  }
  await fake.close();
  await Deno.remove(dir, { recursive: true });
});

Deno.test("k8s dry run: bad input is refused naming the flag or field", async () => {
  const dir = await Deno.makeTempDir();
  const noConfig = await controller(["--backend", "k8s", "--dry-run"]);
  assert.equal(noConfig.code, 2);
  assert.match(noConfig.stderr, /--config: required with --dry-run/);
  await Deno.writeTextFile(
    `${dir}/bad.json`,
    JSON.stringify({
      input: 1,
      config: { template: TEMPLATE, harness: { name: "k8s", options: { reward: {} } } },
    }),
  );
  const bad = await controller(["--backend", "k8s", "--dry-run", "--config", `${dir}/bad.json`]);
  assert.equal(bad.code, 2);
  assert.match(bad.stderr, /config\.harness\.options\.reward/);
  const local = await controller(["--dry-run", "--config", `${dir}/bad.json`]);
  assert.match(local.stderr, /--dry-run: only with --backend k8s/);
  await Deno.remove(dir, { recursive: true });
});

Deno.test("k8s manifests: a template the API would refuse is a spec error before anything is created", async () => {
  const fake = new FakeK8s();
  const k8s = backend(fake, { networkPolicy: false, imageCheck: false });
  const typo = {
    spec: { template: { spec: { containers: [{ name: "agent", image: "a:1", comand: ["x"] }] } } },
  };
  // The Kubernetes client would silently drop `comand` and run the image's default command.
  await assert.rejects(
    () => k8s.start(spec("typo", { template: typo })),
    (e: Error & { field?: string }) =>
      e.field === "config.template" &&
      /spec\.template\.spec\.containers\[0\]\.comand: unknown field/.test(e.message),
  );
  const badPolicy = {
    spec: {
      template: {
        spec: { containers: [{ name: "agent", image: "a:1", imagePullPolicy: "Sometimes" }] },
      },
    },
  };
  await assert.rejects(
    () => k8s.start(spec("policy", { template: badPolicy })),
    /imagePullPolicy must be equal to one of the allowed values/,
  );
  assert.equal(fake.requests.length, 0, "nothing reached the API server");
  await k8s.close();
  await fake.close();
});
