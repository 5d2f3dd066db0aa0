/**
 * Attempts the infrastructure ended (lost with their controller, or failed on a call the proxy
 * could not serve) are retried without counting against the rollout's `max_attempts`, and are
 * counted as such; the agent's own failures still count; and an attempt that keeps claiming
 * infrastructure failures runs out of free retries.
 */
import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { startGateway } from "../lib/gateway/server.ts";
import { MAX_FREE_INFRA_RETRIES } from "../lib/gateway/store_rules.ts";
import type {
  AttemptHandle,
  AttemptOutcome,
  AttemptSpec,
  ExecutionBackend,
} from "../lib/controller/backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";
import type { Rollout } from "../lib/schema.ts";
import { waitFor } from "./support/wait.ts";

/** A backend whose attempt n of rollout r ends as `plans[r][n - 1]` says. */
class PlannedBackend implements ExecutionBackend {
  readonly name = "planned";
  readonly ran = new Map<string, number>();
  constructor(readonly plans: Record<string, Partial<AttemptOutcome>[]>) {}
  start(spec: AttemptSpec): Promise<AttemptHandle> {
    const id = spec.rollout.rollout_id;
    const n = (this.ran.get(id) ?? 0) + 1;
    this.ran.set(id, n);
    const plan = this.plans[id][Math.min(n, this.plans[id].length) - 1];
    const outcome: AttemptOutcome = {
      status: "succeeded",
      exit_code: 0,
      error: null,
      reward: null,
      info: {},
      ...plan,
    };
    return Promise.resolve({
      rollout_id: id,
      attempt_id: spec.attempt.attempt_id,
      info: {},
      done: Promise.resolve(outcome),
    });
  }
  adopt(): Promise<null> {
    return Promise.resolve(null);
  }
  kill(): Promise<void> {
    return Promise.resolve();
  }
  known(): Promise<[]> {
    return Promise.resolve([]);
  }
  release(): Promise<void> {
    return Promise.resolve();
  }
  close(): Promise<void> {
    return Promise.resolve();
  }
}

const lost: Partial<AttemptOutcome> = { status: "lost", error: "controller restarted" };
const upstream: Partial<AttemptOutcome> = {
  status: "failed",
  exit_code: 1,
  error: "LLM call failed: 502 upstream unavailable",
};
const agentFault: Partial<AttemptOutcome> = { status: "failed", exit_code: 1, error: "exit 1" };

Deno.test("infrastructure failures are retried for free and counted; the agent's own are not", async () => {
  const gw = await startGateway();
  const client = new GatewayClient(gw.url, { apiKey: gw.adminKey });
  const backend = new PlannedBackend({
    // max_attempts 1: only free retries can save these.
    infra: [lost, upstream, lost, {}],
    agent: [agentFault, {}],
    // Claims infrastructure failure for ever: runs out of free retries, then fails.
    liar: [upstream],
  });
  try {
    await client.createRollouts(["infra", "agent", "liar"].map((rollout_id) => ({
      rollout_id,
      input: {},
      config: { max_attempts: 1, harness: { name: "command", options: { command: ["true"] } } },
    })));
    const loop = new Reconciler(client, backend, {
      worker: "ctl",
      concurrency: 4,
      poll_ms: 10,
      lease_ms: 5_000,
      gatewayUrl: gw.url,
    });
    await loop.start();
    const byId = await waitFor(
      async () => {
        const items = (await client.listRollouts({ limit: 10 })).items;
        const done = items.every((r) => ["succeeded", "failed"].includes(r.status));
        return done && new Map(items.map((r): [string, Rollout] => [r.rollout_id, r]));
      },
      60_000,
      "every rollout to finish",
    );
    await loop.stop();

    const infra = byId.get("infra")!;
    assert.equal(infra.status, "succeeded");
    assert.equal(infra.attempts.length, 4);
    assert.deepEqual(
      infra.attempts.map((a) => a.info.infra_failure === true),
      [true, true, true, false],
    );
    const agent = byId.get("agent")!;
    assert.equal(agent.status, "failed", "the agent's failure used its only attempt");
    assert.equal(agent.attempts.length, 1);
    const liar = byId.get("liar")!;
    assert.equal(liar.status, "failed");
    assert.equal(liar.attempts.length, MAX_FREE_INFRA_RETRIES + 1);
    assert.equal(loop.stats.infra_retried, 3 + MAX_FREE_INFRA_RETRIES);
    assert.equal(loop.stats.retried, 0);
  } finally {
    await gw.close();
  }
});
