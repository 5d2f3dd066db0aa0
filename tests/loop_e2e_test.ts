/**
 * End to end, CI-sized: a few RL steps in `sync` and in `collocated_async` through the real
 * stack (worker, gateway + proxy, controller, built-in harness on the toy arithmetic tasks).
 */
import assert from "node:assert/strict";
import { TERMINAL_ROLLOUT_STATUSES } from "../lib/schema.ts";
import type { LoopStepMetrics } from "../lib/loop/schema.ts";
import { runLoop, silentProgress, type UpdateResult } from "../lib/loop/mod.ts";
import { callAccounting, runRollouts, startTestStack, testConfig } from "./loop_helpers.ts";

Deno.test({
  name: "loop: sync and collocated_async runs train end to end with exact bookkeeping",
  sanitizeOps: false,
  sanitizeResources: false,
}, async (t) => {
  const dir = await Deno.makeTempDir({ prefix: "reins_loop_e2e_" });
  const { stack, tokenizer, dataDir } = await startTestStack(dir);
  try {
    for (const mode of ["sync", "collocated_async"] as const) {
      await t.step(mode, async () => {
        const name = `e2e-${mode.replace("_", "-")}`;
        const updates: { metrics: LoopStepMetrics; update: UpdateResult }[] = [];
        let maxHeld = 0;
        const progress = silentProgress();
        const result = await runLoop(
          testConfig(name, `${dir}/${name}`, dataDir, tokenizer, {
            steps: 3,
            schedule: {
              mode,
              poll_ms: 50,
              max_staleness: 4,
              extra_groups_in_flight: 2,
            },
          }),
          stack.services,
          {
            progress,
            hooks: {
              afterStep: (metrics, update) => {
                updates.push({ metrics, update });
              },
              // Stay in `update` until an LLM call is being held, so that calls do cross phase
              // switches in the async run. A rollout still in flight must either call the model
              // (and be held) or finish, so wait on that event, not on the clock: on a loaded
              // machine the harnesses may take many seconds to reach their next call. The
              // 60 s bound only keeps a broken run from hanging the suite.
              beforeTrain: async () => {
                if (mode !== "collocated_async" || maxHeld > 0) return;
                const until = Date.now() + 60_000;
                while (Date.now() < until) {
                  const phase = await stack.client.getPhase();
                  assert.equal(phase.phase, "update");
                  maxHeld = Math.max(maxHeld, phase.held);
                  if (phase.held > 0) break;
                  const live = (await runRollouts(stack.client, name))
                    .filter((r) => !TERMINAL_ROLLOUT_STATUSES.includes(r.status));
                  if (live.length === 0) break;
                  await new Promise((r) => setTimeout(r, 50));
                }
              },
            },
          },
        );

        // Every step trained and moved the policy by exactly one version.
        assert.equal(result.metrics.length, 3);
        result.metrics.forEach((m, i) => {
          assert.equal(m.step, i);
          assert.equal(m.policy_version, result.base_version + i + 1);
          assert.ok(m.trained_tokens > 0, `step ${i} trained nothing`);
        });
        const models = await stack.client.listModels();
        assert.equal(models.find((m) => m.name === "policy")?.version, result.policy_version);

        // Every rollout of the run is final; none was trained twice; batches keep rollouts
        // whole (every sample a trained rollout assembled went into the same step).
        const rollouts = await runRollouts(stack.client, name);
        if (mode === "sync") assert.equal(rollouts.length, 3 * 2 * 4);
        else {
          // Async keeps `extra_groups_in_flight` groups declared to the end, then cancels them.
          assert.equal(rollouts.length, (3 * 2 + 2) * 4);
          assert.ok(rollouts.filter((r) => r.status !== "cancelled").length >= 3 * 2 * 4);
        }
        for (const r of rollouts) {
          assert.ok(TERMINAL_ROLLOUT_STATUSES.includes(r.status), `${r.rollout_id}: ${r.status}`);
          // Labelled for the UI's step filter: the step in progress when its group was declared.
          assert.equal(r.labels.role, "train");
          const group = Number(r.labels.group);
          if (mode === "sync") assert.equal(r.labels.step, String(Math.floor(group / 2)));
          else assert.ok(Number(r.labels.step) <= Math.floor(group / 2), r.rollout_id);
        }
        const seen = new Set<string>();
        for (const { update } of updates) {
          for (const entry of update.trained) {
            assert.ok(!seen.has(entry.rollout_id), `${entry.rollout_id} trained twice`);
            seen.add(entry.rollout_id);
            assert.equal(entry.samples, entry.assembled, `${entry.rollout_id} split across steps`);
          }
        }
        assert.ok(seen.size >= 3 * 2 * 2, `only ${seen.size} rollouts trained`);

        // Alignment on calls made at the version being trained.
        const aligned = result.metrics.filter((m) => m.alignment_tokens > 0);
        assert.ok(aligned.length > 0, "no step had same-version samples");
        for (const m of aligned) {
          assert.ok(
            m.alignment_corr !== null && m.alignment_corr >= 0.99,
            `step ${m.step}: ${m.alignment_corr}`,
          );
        }
        if (mode === "sync") assert.equal(aligned.length, 3);

        // Per call: every trained call sampled at the version it was trained at has one
        // `alignment` event on its attempt (the same worker samples and trains: ≥ 0.99), and
        // no alignment flag came of them.
        const sameVersion = updates.flatMap(({ update }) => update.call_alignment);
        assert.ok(sameVersion.length > 0, "no per-call alignment was measured");
        let alignmentEvents = 0;
        for (const r of rollouts) {
          const events = await stack.client.listEvents(r.rollout_id, { type: "custom" });
          for (const e of events) {
            if (e.type !== "custom") continue;
            if (e.payload.name === "monitor_flags") {
              const flags = (e.payload.data as { flags: { evidence: { source: string }[] }[] })
                .flags;
              const low = flags.some((f) =>
                f.evidence.some((x) => x.source === "custom:alignment")
              );
              assert.ok(!low, `${r.rollout_id}: a call was flagged as misaligned`);
            }
            if (e.payload.name !== "alignment") continue;
            alignmentEvents++;
            const data = e.payload.data as { corr: number | null; request_seq: number };
            const call = sameVersion.find((c) => c.request_seq === data.request_seq);
            assert.ok(call && call.attempt_id === e.attempt_id, `alignment of ${data.request_seq}`);
            assert.ok(data.corr === null || data.corr >= 0.99, `call ${data.request_seq}`);
          }
        }
        assert.equal(alignmentEvents, sameVersion.length);

        // No LLM call lost or duplicated across phase switches: each finished attempt's harness
        // count equals the calls recorded for it, each once.
        let attempts = 0;
        for (const r of rollouts) {
          const events = await stack.client.listEvents(r.rollout_id);
          for (const a of callAccounting(events)) {
            attempts++;
            assert.equal(a.recorded, a.harness_calls, `${r.rollout_id}/${a.attempt_id}`);
            assert.equal(a.keys, a.recorded, `${r.rollout_id}/${a.attempt_id}: duplicate keys`);
          }
        }
        const succeeded = rollouts.filter((r) => r.status === "succeeded").length;
        assert.ok(attempts >= succeeded, "some rollouts did not report their calls");
        if (mode === "collocated_async") {
          assert.ok(maxHeld > 0, "no LLM call was held by an update phase");
          assert.ok(result.metrics.some((m) => m.staleness_max > 0) || maxHeld > 0);
        }
        const lines = (await Deno.readTextFile(`${dir}/${name}/metrics.jsonl`)).trim().split("\n");
        assert.equal(lines.length, 3);
      });
    }
  } finally {
    await stack.close();
    await Deno.remove(dir, { recursive: true }).catch(() => undefined);
  }
});
