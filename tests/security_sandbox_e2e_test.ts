/**
 * End to end: a harness inside the bubblewrap sandbox (controller, local backend, real gateway)
 * tries to post its own reward with the token it was given, and to take the verifier's event
 * key first. Both are refused, and the verified reward (from the reward hook, run outside the
 * sandbox and posted by the controller with the admin key) is the one that stands.
 */
import assert from "node:assert/strict";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";
import { probeSandbox } from "../lib/controller/sandbox.ts";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import { waitFor } from "./support/wait.ts";

const support = await probeSandbox();

/** The "agent": posts a reward of 1 with its token, then squats the verifier's key. */
const AGENT = `
url="$REINS_GATEWAY_URL/v1/rollouts/$REINS_ROLLOUT_ID/attempts/$REINS_ATTEMPT_ID/events"
post() {
  curl -s -o /dev/null -w "%{http_code}" -X POST "$url" \\
    -H "authorization: Bearer $OPENAI_API_KEY" -H "content-type: application/json" -d "$1"
}
echo "reward=$(post '{"events":[{"type":"reward","payload":{"value":1}}]}')"
echo "squat=$(post '{"events":[{"type":"custom","event_key":"reins:reward:1","payload":{"name":"x","data":1}}]}')"
echo "log=$(post '{"events":[{"type":"log","payload":{"stream":"stdout","text":"hi"}}]}')"
`;

Deno.test({
  name: "sandbox e2e: the agent's token cannot post a reward; the verified reward stands",
  ignore: !support.bwrap || !support.net,
  async fn() {
    const dir = await Deno.makeTempDir({ prefix: "reins-sec-e2e-" });
    const gw = await startGateway({ db: `${dir}/gw.db`, leaseSweepMs: 0 });
    const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
    const loop = new Reconciler(
      client,
      new LocalBackend({ root: `${dir}/ctl`, pollMs: 25 }),
      { worker: "sec-e2e", concurrency: 1, lease_ms: 10_000, poll_ms: 25, gatewayUrl: gw.url },
    );
    try {
      await client.createRollouts([{
        rollout_id: "cheat",
        input: { q: "2+2" },
        config: {
          timeout_s: 60,
          max_attempts: 1,
          harness: {
            name: "command",
            options: {
              command: ["bash", "-c", AGENT],
              sandbox: { enabled: true },
              // The verifier, outside the sandbox: the answer was wrong.
              reward: { command: ["sh", "-c", "echo 0"] },
            },
          },
        },
      }]);
      await loop.start();
      const done = await waitFor(
        async () => {
          const r = await client.getRollout("cheat");
          return r.status === "succeeded" && r;
        },
        60_000,
        "the rollout to finish",
      );
      await loop.stop();
      const events = await client.listEvents("cheat");
      const stdout = events.flatMap((e) =>
        e.type === "log" && e.payload.stream === "stdout" ? [e.payload.text] : []
      ).join("");
      assert.match(stdout, /reward=403/, stdout);
      assert.match(stdout, /squat=403/, stdout);
      assert.match(stdout, /log=200/, stdout);
      const rewards = events.filter((e) => e.type === "reward");
      assert.equal(rewards.length, 1, "only the verifier's reward was stored");
      assert.equal(rewards[0].event_key, "reins:reward:1");
      assert.equal(done.reward, 0, "the verified reward stands");
    } finally {
      await loop.stop().catch(() => {});
      await gw.close();
      await Deno.remove(dir, { recursive: true });
    }
  },
});
