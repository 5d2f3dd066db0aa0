/** PhaseGate: calls run at once in the rollout phase, are held in the update phase, drain. */
import assert from "node:assert/strict";
import { PhaseGate, PhaseHoldTimeout } from "../lib/gateway/phase.ts";

const tick = () => new Promise((r) => setTimeout(r, 10));

Deno.test("phase: rollout phase lets calls through and counts them in flight", async () => {
  const gate = new PhaseGate();
  assert.equal(gate.phase, "rollout");
  const a = await gate.acquire();
  const b = await gate.acquire();
  assert.equal(gate.snapshot().in_flight, 2);
  a();
  a(); // a second release is ignored
  assert.equal(gate.snapshot().in_flight, 1);
  b();
  assert.deepEqual({ ...gate.snapshot(), since: 0 }, {
    phase: "rollout",
    in_flight: 0,
    held: 0,
    since: 0,
  });
});

Deno.test("phase: update holds new calls until rollout resumes; in-flight ones finish", async () => {
  const gate = new PhaseGate();
  const inFlight = await gate.acquire();
  const since = gate.snapshot().since;
  await tick();
  gate.setPhase("update");
  assert.ok(gate.snapshot().since > since);
  let drained = false;
  const drain = gate.waitForDrain().then(() => drained = true);
  const order: string[] = [];
  const held = [gate.acquire(), gate.acquire()].map((p, i) =>
    p.then((release) => (order.push(`c${i}`), release))
  );
  await tick();
  assert.deepEqual(order, [], "held, not refused");
  assert.equal(gate.snapshot().held, 2);
  assert.equal(drained, false);
  inFlight();
  await drain;
  assert.equal(gate.snapshot().in_flight, 0);
  gate.setPhase("rollout");
  const releases = await Promise.all(held);
  assert.deepEqual(order, ["c0", "c1"]);
  assert.deepEqual({ ...gate.snapshot(), since: 0 }, {
    phase: "rollout",
    in_flight: 2,
    held: 0,
    since: 0,
  });
  for (const r of releases) r();
  await gate.waitForDrain();
});

Deno.test("phase: a held call times out with PhaseHoldTimeout or leaves on abort", async () => {
  const gate = new PhaseGate({ phase: "update", maxHoldMs: 20 });
  await assert.rejects(gate.acquire(), PhaseHoldTimeout);
  const started = Date.now();
  await assert.rejects(gate.acquire({ maxHoldMs: 40 }), (e: unknown) => {
    assert.ok(e instanceof PhaseHoldTimeout);
    assert.ok(e.heldMs >= 35 && Date.now() - started >= 35);
    return true;
  });
  const abort = new AbortController();
  const pending = gate.acquire({ signal: abort.signal, maxHoldMs: 60_000 });
  assert.equal(gate.snapshot().held, 1);
  abort.abort(new Error("client went away"));
  await assert.rejects(pending, /client went away/);
  assert.deepEqual({ ...gate.snapshot(), since: 0 }, {
    phase: "update",
    in_flight: 0,
    held: 0,
    since: 0,
  });
  await assert.rejects(gate.acquire({ signal: abort.signal }), /client went away/);
  // Nothing left over: switching back lets no stale waiter in.
  gate.setPhase("rollout");
  assert.equal(gate.snapshot().in_flight, 0);
});
