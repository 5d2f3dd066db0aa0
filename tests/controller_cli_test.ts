import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import { parseLabelFlags } from "../bin/controller.ts";
import { FakeK8s } from "./support/fake_k8s.ts";

const CLI = new URL("../bin/controller.ts", import.meta.url).pathname;

Deno.test("cli: --backend k8s runs rollouts on the cluster its --kubeconfig names", async () => {
  const dir = await Deno.makeTempDir();
  const gw = await startGateway({ db: `${dir}/gateway.db` });
  const fake = new FakeK8s();
  fake.script = () => ({ exit_code: 0, logs: "ran in a pod\n" });
  await Deno.writeTextFile(
    `${dir}/kubeconfig`,
    JSON.stringify({
      apiVersion: "v1",
      kind: "Config",
      clusters: [{
        name: "fake",
        cluster: { server: fake.url, "insecure-skip-tls-verify": true },
      }],
      users: [{ name: "fake", user: { token: "t" } }],
      contexts: [{ name: "fake", context: { cluster: "fake", user: "fake", namespace: "ns1" } }],
      "current-context": "fake",
    }),
  );
  await Deno.writeTextFile(
    `${dir}/job.json`,
    JSON.stringify({
      spec: { template: { spec: { containers: [{ name: "agent", image: "agent:1" }] } } },
    }),
  );
  const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
  await client.createRollouts([{ rollout_id: "cli-k8s", input: {} }]);
  const child = new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "-A",
      CLI,
      "--backend",
      "k8s",
      "--gateway",
      gw.url,
      "--api-key",
      gw.adminKey,
      "--kubeconfig",
      `${dir}/kubeconfig`,
      "--namespace",
      "ns1",
      "--template",
      `${dir}/job.json`,
      "--gateway-cidr",
      "10.0.0.1/32:8420",
      "--poll-ms",
      "50",
      "--quiet",
    ],
    stdout: "null",
    stderr: "piped",
  }).spawn();
  const stderr = new Response(child.stderr).text();
  try {
    const end = Date.now() + 20_000;
    let status = "";
    while (Date.now() < end && status !== "succeeded" && status !== "failed") {
      status = (await client.getRollout("cli-k8s")).status;
      await new Promise((r) => setTimeout(r, 50));
    }
    const attempts = (await client.getRollout("cli-k8s")).attempts;
    assert.equal(status, "succeeded", JSON.stringify(attempts));
    assert.ok(fake.requests.some((r) => r.startsWith("POST /apis/batch/v1/namespaces/ns1/jobs")));
    assert.equal(fake.networkPolicies.size, 1);
    const logs = await client.listEvents("cli-k8s", { type: "log" });
    assert.equal(
      logs.map((e) => e.type === "log" ? e.payload.text : "").join(""),
      "ran in a pod\n",
    );
  } finally {
    child.kill("SIGTERM");
    await child.status;
    await stderr;
    await fake.close();
    await gw.close();
    await Deno.remove(dir, { recursive: true });
  }
});

Deno.test("cli: bad flags are refused with a message naming the flag", async () => {
  const cases: Array<[string[], RegExp]> = [
    [["--api-key", "k"], /--gateway: required/],
    [
      ["--gateway", "http://127.0.0.1:9", "--api-key", "k", "--backend", "nope"],
      /--backend: expected local or k8s, got "nope"/,
    ],
    [
      ["--gateway", "http://127.0.0.1:9", "--api-key", "k", "--concurrency", "many"],
      /--concurrency: expected a whole number, got 'many'/,
    ],
    [
      ["--gateway", "http://127.0.0.1:9", "--api-key", "k", "--label", "gpu"],
      /--label: expected KEY=VALUE, got "gpu"/,
    ],
    [
      ["--gateway", "http://127.0.0.1:9", "--api-key", "k", "--label", "a=1", "--label", "a=2"],
      /--label: "a" is given twice/,
    ],
  ];
  for (const [args, expected] of cases) {
    const out = await new Deno.Command(Deno.execPath(), {
      args: ["run", "-A", CLI, ...args],
      env: { REINS_GATEWAY_URL: "", REINS_ADMIN_KEY: "" },
      stdout: "null",
      stderr: "piped",
    }).output();
    assert.equal(out.code, 2);
    assert.match(new TextDecoder().decode(out.stderr), expected);
  }
});

Deno.test("cli: --label flags become the claim's label filter", () => {
  assert.deepEqual(parseLabelFlags([]), {});
  assert.deepEqual(parseLabelFlags(["sandbox=gpu", "env=a=b", "empty="]), {
    sandbox: "gpu",
    env: "a=b",
    empty: "",
  });
  assert.throws(() => parseLabelFlags(["=x"]), /--label: expected KEY=VALUE/);
});
