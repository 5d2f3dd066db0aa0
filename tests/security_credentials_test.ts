/**
 * Attacks with the agent's capability token (issue #16's table), each against a real gateway:
 * the refusal, its status, and that the store is unchanged. Also what the reporter key may do.
 */
import assert from "node:assert/strict";
import { alignmentFindings } from "../lib/monitors/logprob.ts";
import { flagsOf } from "../lib/ui/detail.ts";
import { GatewayClient } from "../lib/gateway/client.ts";
import {
  ADMIN_KEY,
  errorOf,
  proxyChat,
  REPORTER_KEY,
  withSecurityFixture,
} from "./support/security.ts";

const events = (rid: string, aid: string) => `/v1/rollouts/${rid}/attempts/${aid}/events`;
const reward = (value: number, event_key?: string) => ({
  events: [{ type: "reward", ...(event_key ? { event_key } : {}), payload: { value } }],
});
const log = (text: string) => ({ events: [{ type: "log", payload: { stream: "stdout", text } }] });

Deno.test("credentials: the token cannot post a reward for its own running attempt (403)", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const res = await fx.send("POST", events(rolloutId, attemptId), token, reward(1));
    assert.equal(res.status, 403);
    assert.match(
      errorOf(res.body).message,
      /^events\[0\]\.type: a capability token cannot post rewards/,
    );
    // A reward hidden among allowed events refuses the whole batch.
    const mixed = await fx.send("POST", events(rolloutId, attemptId), token, {
      events: [log("hi").events[0], reward(1).events[0]],
    });
    assert.equal(mixed.status, 403);
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
    assert.equal((await fx.admin.getRollout(rolloutId)).reward, null);
    // What it may do: post logs and custom events for its live attempt.
    const ok = await fx.send("POST", events(rolloutId, attemptId), token, log("working"));
    assert.equal(ok.status, 200);
  });
});

Deno.test("credentials: the token cannot write training data: model calls come only from the proxy (403)", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const forged = {
      type: "model_request",
      payload: {
        flavor: "generate",
        prompt_token_ids: [1, 2, 3],
        response_token_ids: [4, 5],
        response_logprobs: [-0.1, -0.1],
        policy_version: 0,
      },
    };
    const res = await fx.send("POST", events(rolloutId, attemptId), token, { events: [forged] });
    assert.equal(res.status, 403);
    assert.match(errorOf(res.body).message, /events\[0\]\.type: a capability token posts only/);
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
  });
});

Deno.test("credentials: verdicts the token posts under reins' event names are not believed", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    // Custom events of any name are the agent's to post, but never under a reserved key, and
    // reins reads its own verdicts (monitor flags, audits, alignment, step metrics) only from
    // reserved keys: a forged clean bill, a forged alarm and forged step metrics change nothing.
    const spoof = (name: string, data: unknown) => ({ type: "custom", payload: { name, data } });
    const res = await fx.send("POST", events(rolloutId, attemptId), token, {
      events: [
        spoof("monitor_flags", {
          flags: [{
            monitor: "git_network",
            severity: "alert",
            message: "forged",
            evidence: [],
          }],
          monitors: ["git_network"],
        }),
        spoof("alignment", { request_seq: 1, corr: 0.1 }),
        spoof("train_step", { step: 0, reward_mean: 1 }),
      ],
    });
    assert.equal(res.status, 200, "plain custom events are the agent's to post");
    const stored = await fx.admin.listEvents(rolloutId);
    assert.equal(stored.filter((e) => e.type === "custom").length, 3);
    assert.deepEqual(flagsOf(stored), []);
    assert.deepEqual(alignmentFindings(stored, 0.99), []);
  });
});

Deno.test("credentials: the token cannot take the verifier's key first; the verified reward stands", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    for (const key of ["reins:reward:1", "reins:log:1:stdout:0-5:0", "reins:anything"]) {
      const res = await fx.send("POST", events(rolloutId, attemptId), token, {
        events: [{ type: "custom", event_key: key, payload: { name: "x", data: 1 } }],
      });
      assert.equal(res.status, 403, key);
      assert.match(
        errorOf(res.body).message,
        /^events\[0\]\.event_key: 'reins:.*' is in the namespace reserved for reins itself/,
      );
    }
    // The reporter may post rewards, but not under reins' own keys either.
    const reporterReserved = await fx.send(
      "POST",
      events(rolloutId, attemptId),
      REPORTER_KEY,
      reward(1, "reins:reward:1"),
    );
    assert.equal(reporterReserved.status, 403);
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
    // The controller (admin key) posts the verified reward 0 under the reserved key.
    const verified = await fx.send(
      "POST",
      events(rolloutId, attemptId),
      ADMIN_KEY,
      reward(0, "reins:reward:1"),
    );
    assert.equal(verified.status, 200);
    assert.equal((await fx.admin.getRollout(rolloutId)).reward, 0);
  });
});

Deno.test("credentials: a finished attempt's token gets 403 for rewards and 409 for anything else", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    await fx.admin.postEvents(rolloutId, attemptId, [{ type: "reward", payload: { value: 0.5 } }]);
    await fx.admin.transition(rolloutId, { to: "succeeded", attempt_id: attemptId });
    const before = await fx.snapshot();
    const late = await fx.send("POST", events(rolloutId, attemptId), token, reward(999));
    assert.equal(late.status, 403);
    const lateLog = await fx.send("POST", events(rolloutId, attemptId), token, log("late"));
    assert.equal(lateLog.status, 409);
    assert.equal(errorOf(lateLog.body).code, "attempt_not_live");
    assert.match(errorOf(lateLog.body).message, /is succeeded/);
    const call = await proxyChat(fx, rolloutId, attemptId, token);
    assert.equal(call.status, 409, JSON.stringify(call.body));
    assert.match(JSON.stringify(call.body), /is succeeded/);
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
    assert.equal((await fx.admin.getRollout(rolloutId)).reward, 0.5);
  });
});

Deno.test("credentials: a lost attempt's token cannot write or call the proxy while attempt 2 runs", async () => {
  await withSecurityFixture({}, async (fx) => {
    await fx.admin.createRollouts([{
      rollout_id: "lost",
      input: {},
      config: { timeout_s: 60, max_attempts: 2 },
    }]);
    const [first] = await fx.admin.claim({ worker: "ctl", limit: 1, lease_ms: 100 });
    const token1 = first.token;
    const a1 = first.attempt.attempt_id;
    // The lease runs out: attempt 1 is lost, the rollout requeued, attempt 2 claimed.
    await new Promise((r) => setTimeout(r, 200));
    await fx.admin.expireLeases();
    const [second] = await fx.admin.claim({ worker: "ctl", limit: 1 });
    assert.equal(second.rollout.rollout_id, "lost");
    const before = await fx.snapshot();
    const rewardRes = await fx.send("POST", events("lost", a1), token1, reward(-7));
    assert.equal(rewardRes.status, 403);
    const logRes = await fx.send("POST", events("lost", a1), token1, log("zombie"));
    assert.equal(logRes.status, 409);
    assert.match(errorOf(logRes.body).message, /is lost/);
    const call = await proxyChat(fx, "lost", a1, token1);
    assert.equal(call.status, 409);
    assert.match(JSON.stringify(call.body), /is lost/);
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
    // The live attempt's token still works.
    const live = await proxyChat(fx, "lost", second.attempt.attempt_id, second.token);
    assert.equal(live.status, 200, JSON.stringify(live.body));
  });
});

Deno.test("credentials: a superseded attempt's token is refused (409) once attempt 2 runs", async () => {
  await withSecurityFixture({}, async (fx) => {
    await fx.admin.createRollouts([{
      rollout_id: "again",
      input: {},
      config: { timeout_s: 60, max_attempts: 2 },
    }]);
    const [first] = await fx.admin.claim({ worker: "ctl", limit: 1 });
    // The proxy has seen attempt 1 live (its verdict is cached) before it is superseded.
    assert.equal((await proxyChat(fx, "again", first.attempt.attempt_id, first.token)).status, 200);
    await fx.admin.transition("again", {
      to: "requeuing",
      attempt_id: first.attempt.attempt_id,
      attempt_status: "failed",
    });
    const [second] = await fx.admin.claim({ worker: "ctl", limit: 1 });
    const call = await proxyChat(fx, "again", first.attempt.attempt_id, first.token);
    assert.equal(call.status, 409);
    assert.match(
      JSON.stringify(call.body),
      new RegExp(`superseded by attempt '${second.attempt.attempt_id}'`),
    );
  });
});

Deno.test("credentials: the token cannot transition, claim, read other attempts or use the UI", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const cases: Array<[string, string, unknown, number]> = [
      ["PATCH", `/v1/rollouts/${rolloutId}`, { to: "succeeded" }, 403],
      ["POST", "/v1/rollouts/claim", { worker: "evil" }, 403],
      ["POST", `/v1/rollouts/${rolloutId}/attempts/${attemptId}/lease`, { worker: "ctl" }, 403],
      ["GET", `/v1/rollouts/${rolloutId}`, undefined, 403],
      ["GET", `/v1/rollouts/${rolloutId}/events`, undefined, 403],
      ["GET", "/ui/api/rollouts", undefined, 403],
    ];
    for (const [method, path, body, status] of cases) {
      const res = await fx.send(method, path, token, body);
      assert.equal(res.status, status, `${method} ${path}`);
    }
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
  });
});

Deno.test("credentials: the reporter key posts rewards and reads, nothing else", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const refused: Array<[string, string, unknown, number]> = [
      ["POST", "/v1/rollouts/claim", { worker: "evil" }, 403],
      ["PATCH", `/v1/rollouts/${rolloutId}`, { to: "failed" }, 403],
      ["POST", "/v1/rollouts", { rollouts: [{ input: 1 }] }, 403],
      ["POST", "/v1/phase", { phase: "update" }, 403],
      ["GET", `/v1/rollouts/${rolloutId}/attempts/${attemptId}/token`, undefined, 403],
    ];
    for (const [method, path, body, status] of refused) {
      const res = await fx.send(method, path, REPORTER_KEY, body);
      assert.equal(res.status, status, `${method} ${path}`);
      assert.match(errorOf(res.body).message, /reporter key may only post and read events/);
    }
    // Not a proxy credential either (it must never sit in the agent's environment).
    assert.equal((await proxyChat(fx, rolloutId, attemptId, REPORTER_KEY)).status, 401);
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
    assert.equal((await fx.send("GET", `/v1/rollouts/${rolloutId}`, REPORTER_KEY)).status, 200);
    const posted = await fx.send("POST", events(rolloutId, attemptId), REPORTER_KEY, reward(1));
    assert.equal(posted.status, 200);
    assert.equal((await fx.admin.getRollout(rolloutId)).reward, 1);
    // The token still cannot.
    assert.equal(
      (await fx.send("POST", events(rolloutId, attemptId), token, reward(2))).status,
      403,
    );
    assert.equal((await fx.admin.getRollout(rolloutId)).reward, 1);
  });
});

Deno.test("credentials: the proxy learns of another process's status change from the change feed", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    assert.equal((await proxyChat(fx, rolloutId, attemptId, token)).status, 200);
    // Another gateway process (sharing the database) cancels it: only the store changes here,
    // so the proxy's cached "live" verdict must fall from the change feed.
    await fx.gateway.store.transition(rolloutId, { to: "cancelled" });
    await new Promise((r) => setTimeout(r, 250));
    const before = await fx.snapshot();
    const call = await proxyChat(fx, rolloutId, attemptId, token);
    assert.equal(call.status, 409);
    assert.deepEqual(await fx.snapshot(), before, "the refused call was not recorded");
  });
});

Deno.test("credentials: no credential can squat another's event key (agent, reporter, reins namespaces)", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const post = (key: string, event_key: string, body?: unknown) =>
      fx.send(
        "POST",
        events(rolloutId, attemptId),
        key,
        body ?? { events: [{ type: "custom", event_key, payload: { name: "x", data: 1 } }] },
      );
    const before = await fx.snapshot();
    // The agent takes the key the reporter will use for the reward (the docs' own shape), and
    // the reporter's own namespace: 403 naming the rule, nothing stored.
    for (const key of ["reward:1", `reward:${attemptId}`, "reporter:reward:1", "e-123"]) {
      const res = await post(token, key);
      assert.equal(res.status, 403, key);
      assert.equal(errorOf(res.body).field, "events[0].event_key");
      assert.match(errorOf(res.body).message, /a capability token's keys must start with 'agent:'/);
    }
    // The reporter cannot take the agent's keys nor reins' own.
    for (const key of ["agent:step-1", "reins:reward:1"]) {
      const res = await post(REPORTER_KEY, key);
      assert.equal(res.status, 403, key);
      assert.equal(errorOf(res.body).field, "events[0].event_key");
    }
    assert.deepEqual(await fx.snapshot(), before, "nothing was written");
    // Each in its own namespace: the agent's key, then the reporter's reward under the key the
    // agent tried to take, which now stands.
    assert.equal((await post(token, "agent:step-1")).status, 200);
    const reporterReward = await post(REPORTER_KEY, "reward:1", reward(1, "reward:1"));
    assert.equal(reporterReward.status, 200);
    assert.equal((await fx.admin.getRollout(rolloutId)).reward, 1);
    // The GatewayClient keys a token's events in the agent's namespace by itself.
    const agent = new GatewayClient(fx.gateway.url, { apiKey: token });
    const [posted] = await agent.postEvents(rolloutId, attemptId, log("hi").events as never);
    assert.match(posted.event_key ?? "", /^agent:e-/);
  });
});
