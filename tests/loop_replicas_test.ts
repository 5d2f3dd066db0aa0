/**
 * The training loop across replicated gateways: two gateway replicas on one PostgreSQL database
 * behind a round-robin TCP balancer, both serving the proxy, the controller claiming and the
 * harnesses calling through the balancer, and a 2-rank data-parallel worker. One replica is
 * SIGKILLed while a step's rollouts are calling the policy through it. The run still finishes
 * every step, and the store shows nothing lost or duplicated: every rollout finished, once;
 * every trained rollout trained in one step; no event recorded twice; every attempt's LLM calls
 * recorded as the harness counted them.
 */
import assert from "node:assert/strict";
import { GatewayClient } from "../lib/gateway/client.ts";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";
import { builtinResolver } from "../lib/harness/builtin/resolver.ts";
import { harnessRegistry } from "../lib/harness/registry.ts";
import {
  ReplicatedGateway,
  runLoop,
  silentProgress,
  toyArithmeticTasks,
  type UpdateResult,
  writeToyDataset,
} from "../lib/loop/mod.ts";
import { TERMINAL_ROLLOUT_STATUSES } from "../lib/schema.ts";
import { loadCharTokenizer } from "../lib/tokens/char.ts";
import { startLocalWorker } from "../lib/trainer/mod.ts";
import { startBalancer } from "./support/balancer.ts";
import { spawnReplica, startReplica } from "./support/gateway_replica.ts";
import { startPostgres } from "./support/postgres.ts";
import { callAccounting, runRollouts, splitReward, testConfig } from "./loop_helpers.ts";

const ADMIN_KEY = "ra_replicated_loop_test_key";

Deno.test({
  name: "loop: two gateway replicas on PostgreSQL, one killed mid-run, nothing lost or duplicated",
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_loop_replicas_" });
  const pg = await startPostgres();
  const cleanup: (() => Promise<unknown> | unknown)[] = [() => pg.stop()];
  try {
    const db = await pg.newDatabase();
    const tokenizer = await loadCharTokenizer();
    const dataDir = await writeToyDataset(`${dir}/data`, toyArithmeticTasks().slice(0, 40));
    const worker = await startLocalWorker({ threads: 1, ranks: 2 });
    cleanup.push(() => worker.close());
    // Replica A in this process; replica B in a child process, so that it can be SIGKILLed.
    const a = await startReplica(db, worker.url, ADMIN_KEY);
    cleanup.push(() => a.close());
    const b = await spawnReplica(db, worker.url, ADMIN_KEY);
    cleanup.push(() => b.kill());
    const lb = startBalancer([Number(new URL(a.url).port), b.port]);
    cleanup.push(() => lb.close());

    const gateway = new ReplicatedGateway(lb.url, [a.url, b.url], { apiKey: ADMIN_KEY });
    const registry = harnessRegistry({
      dataDir,
      extra: { "loop-test": builtinResolver({ env: "arithmetic", rewardFunction: "split" }) },
      extraRewards: { split: splitReward },
    });
    const reconciler = new Reconciler(
      new GatewayClient(lb.url, { apiKey: ADMIN_KEY }),
      new LocalBackend({
        root: `${dir}/controller`,
        harnesses: registry.harnesses,
        rewardFunctions: registry.rewardFunctions,
        inProcess: registry.inProcess,
        pollMs: 50,
      }),
      {
        worker: "replicated-controller",
        concurrency: 6,
        gatewayUrl: lb.url,
        poll_ms: 50,
        // A claim whose answer died with the replica is re-queued once its lease lapses.
        lease_ms: 4_000,
        sweep_ms: 1_000,
      },
    );
    let started = false;
    cleanup.push(() => started && reconciler.stop("kill"));

    // Kill B once step 1's rollouts send it traffic (or after 20 s of that step).
    let armedAt = 0;
    let bytesAtArm = 0;
    let killedAt = 0;
    let killStatus: Deno.CommandStatus | null = null;
    let openAtKill = 0;
    const killer = (async () => {
      while (!killedAt) {
        await new Promise((r) => setTimeout(r, 20));
        if (!armedAt) continue;
        const busy = lb.traffic[1].bytes - bytesAtArm > 4_000;
        if (busy || Date.now() - armedAt > 20_000) {
          killedAt = Date.now();
          openAtKill = lb.traffic[1].open;
          killStatus = await b.kill();
        }
      }
    })();

    const name = "replicas";
    const updates: UpdateResult[] = [];
    const result = await runLoop(
      testConfig(name, `${dir}/${name}`, dataDir, tokenizer, { steps: 3, max_attempts: 3 }),
      {
        gateway,
        worker: worker.client,
        workerUrl: worker.url,
        tokenizer,
        startController: async () => {
          started = true;
          await reconciler.start();
        },
      },
      {
        progress: silentProgress(),
        hooks: {
          afterStep: (metrics, update) => {
            updates.push(update);
            if (metrics.step === 0) {
              bytesAtArm = lb.traffic[1].bytes;
              armedAt = Date.now();
            }
          },
        },
      },
    );
    await killer;

    // B served traffic, died by SIGKILL mid-run, and the balancer routed around it after.
    assert.ok(bytesAtArm > 0, "replica B served nothing before step 1");
    assert.equal(killStatus!.signal, "SIGKILL");
    assert.ok(lb.traffic[1].refused > 0, "nothing was routed around the dead replica");

    // Every step trained, one version each; the worker's two ranks hold the same weights.
    assert.equal(result.metrics.length, 3);
    result.metrics.forEach((m, i) => {
      assert.equal(m.policy_version, result.base_version + i + 1);
      assert.ok(m.trained_tokens > 0, `step ${i} trained nothing`);
    });
    const state = await worker.client.state();
    assert.equal(state.ranks?.length, 2);
    assert.equal(state.ranks![0].param_checksum, state.ranks![1].param_checksum);

    // The store, read through the survivor: every rollout of the run finished, once.
    const store = new GatewayClient(a.url, { apiKey: ADMIN_KEY });
    const rollouts = await runRollouts(store, name);
    assert.equal(rollouts.length, 3 * 2 * 4);
    let calls = 0;
    let interrupted = 0;
    for (const r of rollouts) {
      assert.ok(TERMINAL_ROLLOUT_STATUSES.includes(r.status), `${r.rollout_id}: ${r.status}`);
      assert.equal(r.status, "succeeded", `${r.rollout_id} was lost: ${r.status}`);
      const won = r.attempts.filter((t) => t.status === "succeeded");
      assert.equal(won.length, 1, `${r.rollout_id}: ${won.length} successful attempts`);
      interrupted += r.attempts.length - 1;
      // No event recorded twice: event keys and sequence numbers are unique.
      const events = await store.listEvents(r.rollout_id);
      const keys = events.map((e) => e.event_key).filter((k) => k != null);
      assert.equal(new Set(keys).size, keys.length, `${r.rollout_id}: an event key twice`);
      assert.equal(new Set(events.map((e) => e.seq)).size, events.length);
      // Each successful attempt's LLM calls are recorded exactly as its harness counted them.
      const accounting = callAccounting(events);
      const final = accounting.find((x) => x.attempt_id === won[0].attempt_id);
      assert.ok(final, `${r.rollout_id}: the successful attempt reported no calls`);
      assert.equal(final.recorded, final.harness_calls, `${r.rollout_id}/${final.attempt_id}`);
      calls += final.recorded;
    }
    assert.ok(calls >= rollouts.length, `only ${calls} LLM calls recorded`);

    // Every rollout trained in exactly one step (sync: each step trains its own groups).
    const trained = updates.flatMap((u) => u.trained.map((t) => t.rollout_id));
    assert.equal(new Set(trained).size, trained.length, "a rollout trained twice");
    assert.equal(trained.length, rollouts.length);
    console.log(
      `replicas: B killed ${killedAt - armedAt} ms into step 1 after ` +
        `${lb.traffic[1].bytes - bytesAtArm} bytes, ${openAtKill} connection(s) open to it; ` +
        `${interrupted} extra attempt(s); ` +
        `${calls} LLM calls; traffic ${JSON.stringify(lb.traffic)}`,
    );
  } finally {
    for (const fn of cleanup.reverse()) await Promise.resolve().then(fn).catch(() => {});
    await Deno.remove(dir, { recursive: true }).catch(() => {});
  }
});
