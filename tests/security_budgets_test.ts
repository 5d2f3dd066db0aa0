/**
 * Budgets on the work an agent can cause (issue #29), each an attack against a real gateway:
 * the refusal names its limit, the store is unchanged, and the event loop is never held long
 * (a 5 ms ticker in this process, where the gateway runs, measures the longest gap).
 *
 * | attack | answer |
 * | --- | --- |
 * | a 1.5 MB prompt to the proxy, and to Anthropic's count_tokens | 413 `max_prompt_bytes`, before tokenization |
 * | events past `max_events_per_attempt` / `max_event_bytes_per_attempt` | 429 / 413 naming the limit |
 * | a custom event with a 2 MB name | 400 naming `events[0].payload.name` |
 * | a 600 KB `a/a/a/…` path in a patch event and a log, through the monitors | linear time |
 * | a 0.9 MB prompt (under the byte cap, over `max_prompt_tokens`) | tokenized on the tokenizer worker, 400 |
 * | the same path through the built-in monitors on their thread | no lag here |
 * | a check past the monitor time budget | stopped, a `warn` finding naming the budget |
 * | a custom monitor (on the gateway's thread) that never answers / holds the thread | no longer waited for / kept, each with a `warn` finding |
 * | a custom monitor from a module (`loadMonitorModule`) that loops forever | stopped on the checking thread at the budget, a `warn` finding |
 */
import assert from "node:assert/strict";
import { defaultMonitors } from "../lib/monitors/defaults.ts";
import { runMonitors } from "../lib/monitors/runner.ts";
import { loadMonitorModule } from "../lib/monitors/module.ts";
import { offThreadMonitors } from "../lib/monitors/off_thread.ts";
import type { Monitor } from "../lib/monitors/types.ts";
import type { RolloutEvent } from "../lib/schema.ts";
import { runningRollout } from "./support/records.ts";
import { errorOf, withSecurityFixture } from "./support/security.ts";

const events = (rid: string, aid: string) => `/v1/rollouts/${rid}/attempts/${aid}/events`;

/** Runs `fn` and returns the longest gap between 5 ms ticks while it ran (event-loop lag). */
async function maxLagDuring(fn: () => Promise<void>): Promise<number> {
  let last = performance.now();
  let worst = 0;
  const ticker = setInterval(() => {
    const now = performance.now();
    worst = Math.max(worst, now - last - 5);
    last = now;
  }, 5);
  try {
    await fn();
  } finally {
    clearInterval(ticker);
  }
  return Math.max(worst, performance.now() - last - 5);
}

// Generous for a loaded 2-core machine: before the budgets each of these held the loop for
// seconds (the prompt) to minutes (the monitor path).
const LAG_BOUND_MS = 1_000;

Deno.test("budgets: a 1.5 MB prompt is refused by its bytes before any tokenization (chat and count_tokens)", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const huge = "lorem ipsum ".repeat(130_000);
    const base = `/proxy/${rolloutId}/${attemptId}/v1`;
    let chat!: Awaited<ReturnType<typeof fx.send>>;
    let count!: Awaited<ReturnType<typeof fx.send>>;
    const lag = await maxLagDuring(async () => {
      chat = await fx.send("POST", `${base}/chat/completions`, token, {
        model: "policy",
        messages: [{ role: "user", content: huge }],
      });
      count = await fx.send("POST", `${base}/messages/count_tokens`, token, {
        model: "policy",
        messages: [{ role: "user", content: huge }],
      });
    });
    assert.equal(chat.status, 413);
    assert.match(JSON.stringify(chat.body), /more than max_prompt_bytes \(1048576\)/);
    assert.equal(count.status, 413);
    assert.match(JSON.stringify(count.body), /max_prompt_bytes/);
    assert.ok(lag < LAG_BOUND_MS, `event loop held ${lag.toFixed(0)} ms`);
    assert.deepEqual(await fx.snapshot(), before, "nothing was recorded");
    // A prompt within the budget still runs.
    const ok = await fx.send("POST", `${base}/chat/completions`, token, {
      model: "policy",
      messages: [{ role: "user", content: "2+2?" }],
    });
    assert.equal(ok.status, 200);
  });
});

Deno.test("budgets: one attempt's token stores at most max_events_per_attempt events and max_event_bytes_per_attempt bytes", async () => {
  await withSecurityFixture(
    { limits: { max_events_per_attempt: 5, max_event_bytes_per_attempt: 4_000 } },
    async (fx) => {
      const { rolloutId, attemptId, token } = await fx.claimOne();
      const log = (text: string) => ({ type: "log", payload: { stream: "stdout", text } });
      const path = events(rolloutId, attemptId);
      // Bytes first: one 5 KB log is over the 4 000-byte budget.
      let before = await fx.snapshot();
      const big = await fx.send("POST", path, token, { events: [log("x".repeat(5_000))] });
      assert.equal(big.status, 413);
      assert.equal(errorOf(big.body).field, "events");
      assert.match(errorOf(big.body).message, /max_event_bytes_per_attempt is 4000/);
      assert.deepEqual(await fx.snapshot(), before, "nothing was stored");
      // Then the count: five small events fit, the sixth does not.
      const five = await fx.send("POST", path, token, {
        events: Array.from({ length: 5 }, (_, i) => log(`step ${i}`)),
      });
      assert.equal(five.status, 200);
      before = await fx.snapshot();
      const sixth = await fx.send("POST", path, token, { events: [log("one more")] });
      assert.equal(sixth.status, 429);
      assert.match(
        errorOf(sixth.body).message,
        /has stored 5 event\(s\); max_events_per_attempt is 5/,
      );
      assert.deepEqual(await fx.snapshot(), before, "nothing was stored");
      // The budget is the agent's: the verifier (admin key) still posts.
      const admin = await fx.send("POST", path, "security-admin-key", { events: [log("verdict")] });
      assert.equal(admin.status, 200);
    },
  );
});

Deno.test("budgets: a custom event name of 2 MB is refused naming the field; names are capped at 200", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    const before = await fx.snapshot();
    const res = await fx.send("POST", events(rolloutId, attemptId), token, {
      events: [{ type: "custom", payload: { name: "n".repeat(2_000_000), data: 1 } }],
    });
    assert.equal(res.status, 400);
    assert.match(errorOf(res.body).message, /events\[0\]\.payload\.name/);
    assert.ok(JSON.stringify(res.body).length < 10_000, "the answer does not echo the name");
    assert.deepEqual(await fx.snapshot(), before, "nothing was stored");
  });
});

/** A finished rollout with no attempts, for monitors. */
const finishedRollout = runningRollout({
  rollout_id: "r1",
  input: {},
  config: { timeout_s: 600, max_attempts: 1 },
  status: "succeeded",
  reward: 1,
});

Deno.test("budgets: a 600 KB a/a/a/… path through every default monitor runs in linear time", async () => {
  const path = "a/".repeat(300_000);
  const base = { rollout_id: "r1", attempt_id: "a1", event_key: null, created_at: 0 };
  const attack = [
    { ...base, seq: 1, type: "custom", payload: { name: "patch", data: `+++ b/${path}\n${path}` } },
    {
      ...base,
      seq: 2,
      type: "log",
      payload: { stream: "stdout", text: `rm ${path}; curl ${path}` },
    },
  ] as RolloutEvent[];
  let flags: Awaited<ReturnType<typeof runMonitors>> = [];
  const lag = await maxLagDuring(async () => {
    flags = await runMonitors({ rollout: finishedRollout, events: attack }, defaultMonitors());
  });
  assert.ok(lag < LAG_BOUND_MS, `event loop held ${lag.toFixed(0)} ms`);
  assert.ok(flags.every((f) => !/monitor failed/.test(f.message)), JSON.stringify(flags));
});

/** `n` events each carrying `text` in a patch and in a log. */
function attackEvents(text: string, n: number): RolloutEvent[] {
  const base = { rollout_id: "r1", attempt_id: "a1", event_key: null, created_at: 0 };
  return Array.from({ length: n }, (_, i) => [
    { ...base, seq: 2 * i + 1, type: "custom", payload: { name: "patch", data: text } },
    { ...base, seq: 2 * i + 2, type: "log", payload: { stream: "stdout", text } },
  ]).flat() as RolloutEvent[];
}

Deno.test("budgets: a 0.9 MB prompt under the byte cap is tokenized off the event loop, then refused by max_prompt_tokens", async () => {
  await withSecurityFixture({}, async (fx) => {
    const { rolloutId, attemptId, token } = await fx.claimOne();
    // Varied words: ~300k Qwen3 tokens, ~2 s of tokenizing on this machine's thread before.
    const big = Array.from({ length: 75_000 }, (_, i) => `w${(i * 7919) % 100_003}`).join(" ");
    assert.ok(big.length < 1_048_576 && big.length > 500_000);
    const base = `/proxy/${rolloutId}/${attemptId}/v1`;
    // The worker loads its tokenizer at the first long text (a loaded machine's cores are shared).
    const warm = await fx.send("POST", `${base}/messages/count_tokens`, token, {
      model: "policy",
      max_tokens: 1,
      messages: [{ role: "user", content: "warm ".repeat(4_000) }],
    });
    assert.equal(warm.status, 200);
    let chat!: Awaited<ReturnType<typeof fx.send>>;
    let count!: Awaited<ReturnType<typeof fx.send>>;
    const lag = await maxLagDuring(async () => {
      chat = await fx.send("POST", `${base}/chat/completions`, token, {
        model: "policy",
        messages: [{ role: "user", content: big }],
      });
      count = await fx.send("POST", `${base}/messages/count_tokens`, token, {
        model: "policy",
        max_tokens: 1,
        messages: [{ role: "user", content: big }],
      });
    });
    assert.equal(chat.status, 400);
    assert.match(errorOf(chat.body).message, /more than max_prompt_tokens \(131072\)/);
    assert.equal(count.status, 200);
    const counted = (count.body as { input_tokens: number }).input_tokens;
    assert.ok(counted > 131_072, `counted ${counted}`);
    // Parsing, rendering and scanning 0.9 MB stay here; the tokenizing (seconds) does not.
    assert.ok(lag < 500, `event loop held ${lag.toFixed(0)} ms`);
    // The refused call is recorded as failed, without its ~300k prompt ids or its messages.
    const [refused] = await fx.admin.listEvents(rolloutId, { type: "model_request" });
    assert.equal(refused.type === "model_request" && refused.payload.http_status, 400);
    assert.equal(refused.type === "model_request" && refused.payload.prompt_token_ids.length, 0);
    assert.equal(refused.type === "model_request" && refused.payload.messages, undefined);
    // The conversation keeps no state from it.
    const ok = await fx.send("POST", `${base}/chat/completions`, token, {
      model: "policy",
      messages: [{ role: "user", content: "2+2?" }],
    });
    assert.equal(ok.status, 200);
  });
});

Deno.test("budgets: the built-in monitors check a 600 KB a/a/a/… path on their own thread", async () => {
  const path = "a/".repeat(300_000);
  const events = attackEvents(`+++ b/${path}\n${path}; curl ${path}`, 1);
  const off = offThreadMonitors(defaultMonitors());
  try {
    off.warm();
    await runMonitors({ rollout: finishedRollout, events: [] }, off.monitors); // thread up
    let offFlags: Awaited<ReturnType<typeof runMonitors>> = [];
    const lag = await maxLagDuring(async () => {
      offFlags = await runMonitors({ rollout: finishedRollout, events }, off.monitors);
    });
    assert.ok(lag < 500, `event loop held ${lag.toFixed(0)} ms`);
    // The same verdicts as on this thread.
    const here = await runMonitors({ rollout: finishedRollout, events }, defaultMonitors());
    assert.deepEqual(offFlags, here);
  } finally {
    await off.close();
  }
});

Deno.test("budgets: a monitor check past its time budget is stopped and reported naming the budget", async () => {
  // 400 patches of 64 KiB each: ~0.5 s of (linear) path matching for test_edit, over 50 ms.
  const events = attackEvents(`+++ b/${"a/".repeat(32_768)}\n`, 200);
  const off = offThreadMonitors(defaultMonitors(), { baseMs: 50, msPerEvent: 0 });
  try {
    off.warm();
    await runMonitors({ rollout: finishedRollout, events: [] }, off.monitors); // thread up
    const flags = await runMonitors({ rollout: finishedRollout, events }, off.monitors);
    const stopped = flags.filter((f) => /ran past its time budget of 50 ms/.test(f.message));
    assert.ok(
      stopped.some((f) => f.monitor === "test_edit"),
      JSON.stringify(flags.map((f) => f.message)),
    );
    for (const flag of stopped) {
      assert.equal(flag.severity, "warn");
      assert.match(flag.message, /50 ms \+ 0 ms per event × 400 events/);
    }
    // (Not timed: each stopped check restarts the thread, which holds this one ~0.1–0.4 s.)
    // The checking thread starts afresh: a small rollout is checked in full afterwards.
    const clean = await runMonitors({ rollout: finishedRollout, events: [] }, off.monitors);
    assert.ok(clean.every((f) => !/time budget|failed/.test(f.message)), JSON.stringify(clean));
  } finally {
    await off.close();
  }
});

Deno.test("budgets: a custom monitor on the gateway's thread is held to the budget too", async () => {
  const budget = { baseMs: 40, msPerEvent: 0 };
  const never: Monitor = { name: "never_answers", check: () => new Promise(() => {}) };
  const busy: Monitor = {
    name: "busy",
    check: () => {
      const until = performance.now() + 120;
      while (performance.now() < until) { /* holds the thread */ }
      return [{ severity: "info", message: "busy: looked", evidence: [] }];
    },
  };
  const quick: Monitor = { name: "quick", check: () => [] };
  const off = offThreadMonitors([...defaultMonitors(), never, busy, quick], budget);
  try {
    off.warm();
    const started = performance.now();
    const flags = await runMonitors({ rollout: finishedRollout, events: [] }, off.monitors, budget);
    const messages = JSON.stringify(flags.map((f) => `${f.monitor}: ${f.message}`));
    // The pending check is no longer waited for at its budget (the run does not hang) ...
    assert.ok(performance.now() - started < 10_000, messages);
    const dropped = flags.filter((f) => f.monitor === "never_answers");
    assert.equal(dropped.length, 1, messages);
    assert.equal(dropped[0].severity, "warn");
    assert.match(dropped[0].message, /still running at its time budget of 40 ms/);
    // ... the busy one keeps its findings and is reported holding the thread past the budget ...
    const busyFlags = flags.filter((f) => f.monitor === "busy");
    assert.ok(busyFlags.some((f) => f.message === "busy: looked"), messages);
    assert.ok(
      busyFlags.some((f) =>
        f.severity === "warn" && /held the gateway's thread \d+ ms/.test(f.message)
      ),
      messages,
    );
    // ... and a quick one, like the built-ins on their own thread, raises nothing.
    assert.equal(
      flags.filter((f) => f.monitor !== "never_answers" && f.monitor !== "busy").length,
      0,
      messages,
    );
  } finally {
    await off.close();
  }
});

Deno.test("budgets: a custom monitor from a module runs on the checking thread, where an endless check is stopped", async () => {
  const custom = await loadMonitorModule(
    new URL("./fixtures/spinning_monitors.ts", import.meta.url),
  );
  const budget = { baseMs: 200, msPerEvent: 0 };
  const off = offThreadMonitors([...defaultMonitors(), ...custom], budget);
  try {
    off.warm();
    const clean = await runMonitors({ rollout: finishedRollout, events: [] }, off.monitors, budget);
    assert.deepEqual(clean.map((f) => `${f.monitor}: ${f.message}`), [
      "spins: spins: looked, on the checking thread",
    ]);
    // A log saying "spin" sends the check into a synchronous loop: on the gateway's thread it
    // would hold every request for good; here the thread is stopped at the budget.
    let flags: Awaited<ReturnType<typeof runMonitors>> = [];
    const lag = await maxLagDuring(async () => {
      flags = await runMonitors(
        { rollout: finishedRollout, events: attackEvents("spin", 1) },
        off.monitors,
        budget,
      );
    });
    assert.ok(lag < LAG_BOUND_MS, `event loop held ${lag.toFixed(0)} ms`);
    const spins = flags.filter((f) => f.monitor === "spins");
    assert.equal(spins.length, 1, JSON.stringify(flags));
    assert.equal(spins[0].severity, "warn");
    assert.match(spins[0].message, /ran past its time budget of 200 ms .* and was stopped/);
    // A fresh thread (with the module imported again) checks the next rollout in full.
    const after = await runMonitors({ rollout: finishedRollout, events: [] }, off.monitors, budget);
    assert.deepEqual(after.map((f) => f.message), ["spins: looked, on the checking thread"]);
  } finally {
    await off.close();
  }
});

Deno.test("budgets: a monitor module that cannot serve is refused at load, naming the module and field", async () => {
  const url = (source: string) => `data:text/javascript,${encodeURIComponent(source)}`;
  const cases: Array<[string, RegExp]> = [
    ["export const monitors = [];", /expected it to export a function monitors\(\)/],
    ["export function monitors() { return {}; }", /monitors\(\) returned object, not a list/],
    [
      "export function monitors() { return [{ name: 'Bad Name', check() { return []; } }]; }",
      /monitors\(\)\[0\]\.name: expected a snake_case name .* got "Bad Name"/,
    ],
    [
      "export function monitors() { return [{ name: 'x', check: 1 }]; }",
      /monitors\(\)\[0\]\.check: expected a function/,
    ],
    [
      "export function monitors() { return [{ name: 'test_edit', check() { return []; } }]; }",
      /monitors\(\)\[0\]\.name: 'test_edit' is a built-in monitor's name/,
    ],
    [
      "export function monitors() { const m = { name: 'x', check() { return []; } }; return [m, m]; }",
      /monitors\(\)\[1\]\.name: 'x' is used twice/,
    ],
  ];
  for (const [source, expected] of cases) {
    await assert.rejects(loadMonitorModule(url(source)), expected, source);
  }
  await assert.rejects(
    loadMonitorModule("./no/such/monitors.ts"),
    /monitor module file:\/\/.*\/no\/such\/monitors\.ts: could not be imported/,
  );
});
