/**
 * A rollout through the Kubernetes backend to a verified reward, against the strict fake API
 * server with containers that really run (`exec` mode): the agent's pod leaves its tree, the
 * verifier container computes the reward on it with the tests restored and hidden answers, the
 * reporter container posts it with the reporter key — while every reward the agent's own token
 * tries is refused.
 */
import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import { K8sBackend } from "../lib/controller/k8s_backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";
import type { JsonObject } from "../lib/schema.ts";
import { FakeK8s } from "./support/fake_k8s.ts";
import { waitFor } from "./support/wait.ts";

const REPO = new URL("..", import.meta.url).pathname.replace(/\/$/, "");
const REPORTER_KEY = "rp_test-reporter-key-0123456789";

/** The agent: reports what it can see, tries to cheat, then answers (right or wrong). */
function agentScript(answer: string | "symlink"): string {
  return [
    'echo "cwd=$(pwd)"',
    '[ -e .git ] && echo "agent sees .git" || echo "agent sees no .git"',
    'git log >/dev/null 2>&1; echo "git exit $?"',
    '[ -r /reins/reporter/key ] && echo "agent reads the reporter key" || echo "no reporter key"',
    '[ -e /reins/answers ] && echo "agent sees answers" || echo "no answers"',
    // Its own token, posting a reward: the gateway refuses.
    "code=$(curl -s -o /dev/null -w '%{http_code}' -X POST " +
    '-H "Authorization: Bearer $OPENAI_API_KEY" -H "content-type: application/json" ' +
    '-d \'{"events":[{"type":"reward","payload":{"value":1}}]}\' ' +
    '"$REINS_GATEWAY_URL/v1/rollouts/$REINS_ROLLOUT_ID/attempts/$REINS_ATTEMPT_ID/events")',
    'echo "agent reward post: $code"',
    // Weakening the visible test does not help: the verifier restores it.
    "printf 'exit 0\\n' > tests/visible.sh",
    answer === "symlink"
      // The answers are mounted in the verifier's container: a link to them would resolve there.
      ? "ln -s /reins/answers/expected answer.txt"
      : `printf '${answer}' > answer.txt`,
  ].join("; ");
}

async function taskWorkspace(root: string): Promise<string> {
  const ws = `${root}/task`;
  await Deno.mkdir(`${ws}/tests`, { recursive: true });
  await Deno.writeTextFile(`${ws}/tests/visible.sh`, '[ "$(cat answer.txt)" -gt 0 ]\n');
  await Deno.writeTextFile(`${ws}/README`, "write 1+2 into answer.txt\n");
  const git = (...args: string[]) =>
    new Deno.Command("git", { args, cwd: ws, stdout: "null", stderr: "null" }).output();
  await git("init", "-q");
  await git("-c", "user.email=t@t", "-c", "user.name=t", "add", ".");
  await git("-c", "user.email=t@t", "-c", "user.name=t", "commit", "-qm", "task");
  return ws;
}

function rollout(id: string, workspace: string, answer: string | "symlink") {
  const template: JsonObject = {
    spec: {
      template: {
        spec: {
          containers: [{
            name: "agent",
            image: "example.com/agent:1",
            command: ["sh", "-c", agentScript(answer)],
          }],
        },
      },
    },
  };
  return {
    rollout_id: id,
    input: { question: "1+2" },
    config: {
      timeout_s: 120,
      max_attempts: 1,
      template,
      harness: {
        name: "k8s",
        options: {
          workspace,
          reward: {
            command: [
              "sh",
              "-c",
              "sh tests/visible.sh && sh tests/hidden.sh && echo 1 || echo 0",
            ],
            restore: ["tests"],
          },
          files: {
            "tests/hidden.sh": '[ "$(cat answer.txt)" = "$(cat "$REINS_ANSWERS_DIR/expected")" ]\n',
          },
          answers: { expected: "3" },
          strict: true,
        },
      },
    },
  };
}

Deno.test({
  name: "k8s verified: the reporter records the verifier's reward; the agent's token is refused",
  sanitizeResources: false,
  sanitizeOps: false,
  fn: async () => {
    const root = await Deno.makeTempDir({ dir: "/tmp", prefix: "k8s-verify-" });
    const workspace = await taskWorkspace(root);
    const gw = await startGateway({ db: ":memory:", reporterKey: REPORTER_KEY });
    const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
    const fake = new FakeK8s();
    fake.mode = "exec";
    fake.imagePaths.push(workspace);
    await client.createRollouts([
      rollout("right", workspace, "3"),
      rollout("wrong", workspace, "4"),
      rollout("cheat", workspace, "symlink"),
    ]);
    const backend = new K8sBackend({
      kubeConfig: fake.kubeConfig(),
      namespace: "reins",
      controller: "ctl-k8s",
      resyncMs: 200,
      networkPolicy: { gateway: { cidr: "127.0.0.1/32", ports: [Number(new URL(gw.url).port)] } },
      reporterKey: REPORTER_KEY,
      runnerImage: "example.com/reins-runner:1",
      verifierCommand: ["deno", "run", "-A", `${REPO}/lib/controller/k8s_verifier.ts`],
      imageCheck: { pollMs: 20 },
    });
    const loop = new Reconciler(client, backend, {
      worker: "ctl-k8s",
      concurrency: 3,
      lease_ms: 30_000,
      poll_ms: 25,
      gatewayUrl: gw.url,
    });
    await loop.start();
    try {
      const done = await waitFor(
        async () => {
          const all = await Promise.all(
            ["right", "wrong", "cheat"].map((id) => client.getRollout(id)),
          );
          return all.every((r) => r.status === "succeeded" || r.status === "failed") && all;
        },
        90_000,
        "verified rollouts to finish",
      );
      const [right, wrong, cheat] = done;
      const allLogs = async (id: string) =>
        (await client.listEvents(id, { type: "log" })).map((e) =>
          e.type === "log" ? e.payload.text : ""
        ).join("");
      assert.equal(right.status, "succeeded", await allLogs("right"));
      assert.equal(right.reward, 1);
      assert.equal(right.reward_credential, "reporter");
      assert.equal(wrong.status, "succeeded");
      assert.equal(wrong.reward, 0, "a wrong answer gets 0 from the hidden test");
      assert.equal(wrong.reward_credential, "reporter");
      assert.equal(cheat.reward, 0, "a link to the mounted answers is removed before the tests");
      const cheated = cheat.attempts[0].info.verification as JsonObject;
      assert.deepEqual(cheated.flags, ["edited_tests", "escaping_symlink"]);

      const attempt = right.attempts[0];
      const verification = attempt.info.verification as JsonObject;
      assert.equal(verification.reward, 1);
      assert.equal(verification.credential, "reporter");
      assert.deepEqual(verification.edited, ["tests"], "the weakened test was seen and restored");
      const stages = attempt.info.sandbox_stages as { applied: string[] };
      assert.ok(stages.applied.includes("before:network_proxy_only"));
      assert.ok(stages.applied.includes("after:report_with_reporter_key"));

      const logs = await client.listEvents("right", { type: "log" });
      const text = (stream: string) =>
        logs.filter((e) => e.type === "log" && e.payload.stream === stream)
          .map((e) => e.type === "log" ? e.payload.text : "").join("");
      const agentLog = text("stdout");
      assert.match(agentLog, /agent sees no \.git/);
      assert.match(agentLog, /git exit 128/);
      assert.match(agentLog, /no reporter key/);
      assert.match(agentLog, /no answers/);
      assert.match(agentLog, /agent reward post: 403/, "the agent's token cannot post a reward");
      assert.match(text("system"), /--- reins-verify ---\nverified: reward 1, edited \[tests\]/);
      assert.match(text("system"), /--- reins-report ---\nreported: /);

      // The only reward events are the reporter's, one per attempt.
      const rewards = await client.listEvents("right", { type: "reward" });
      assert.equal(rewards.length, 1);

      // The agent's token, used directly, is refused too.
      await assert.rejects(
        new GatewayClient(gw.url).postEvents("right", attempt.attempt_id, [
          { type: "reward", payload: { value: 1 } },
        ], { token: "rk_forged" }),
        (e: Error & { status?: number }) => e.status === 401 || e.status === 403,
      );
      // Every request the controller made was one its Role grants.
      assert.deepEqual(fake.accessLog.filter((a) => !a.allowed), []);
      assert.ok(fake.accessLog.some((a) => a.resource === "secrets" && a.verb === "create"));
      assert.ok(!fake.accessLog.some((a) => a.resource === "secrets" && a.verb === "get"));
    } finally {
      await loop.stop();
      await backend.close();
      await fake.close();
      await gw.close();
      await Deno.remove(root, { recursive: true });
    }
  },
});
