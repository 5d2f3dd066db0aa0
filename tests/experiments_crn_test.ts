/**
 * Common random numbers on the full stack: two evaluations of the same policy with the same
 * seeds sample the same tokens, rollout by rollout; different seeds sample differently.
 */
import assert from "node:assert/strict";
import { parseOrThrow } from "../lib/schema.ts";
import { LoopConfigSchema } from "../lib/loop/schema.ts";
import { runLoop, silentProgress, toyArithmeticTasks, toyLoopTasks } from "../lib/loop/mod.ts";
import { crnEvaluate, evalSeed } from "../experiments/crn_eval.ts";
import { startTestStack, testConfig } from "./loop_helpers.ts";

Deno.test({
  name: "crn eval: same seeds, same tokens on the same policy; per-rollout seeds differ",
  sanitizeOps: false,
  sanitizeResources: false,
}, async () => {
  const dir = await Deno.makeTempDir({ prefix: "reins_crn_" });
  const { stack, tokenizer, dataDir } = await startTestStack(dir);
  try {
    const config = parseOrThrow(
      LoopConfigSchema,
      testConfig("crn", `${dir}/crn`, dataDir, tokenizer, { steps: 1, group_size: 2 }),
    );
    const tasks = toyLoopTasks(toyArithmeticTasks().slice(0, 1));
    const prompts = [tasks[0], tasks[0], tasks[0]];
    const responses = async (label: string) => {
      const out: string[] = [];
      for (let i = 0; i < prompts.length; i++) {
        const events = await stack.client.listEvents(`crn-crn-${label}-${i}`, {
          type: "model_request",
        });
        out.push(
          events.map((e) =>
            e.type === "model_request" ? Array.from(e.payload.response_token_ids).join(",") : ""
          ).join("|"),
        );
      }
      return out;
    };
    let a: string[] = [];
    let b: string[] = [];
    await runLoop(config, stack.services, {
      progress: silentProgress(),
      beforeSteps: async () => {
        // The untrained policy at temperature 1 samples freely: only the seed ties the draws.
        const first = await crnEvaluate(stack.client, config, "a", prompts, 500);
        const second = await crnEvaluate(stack.client, config, "b", prompts, 500);
        assert.deepEqual(first.seeds, [500, 1500, 2500].map((_, i) => evalSeed(500, i)));
        assert.deepEqual(first.rewards, second.rewards);
        a = await responses("a");
        b = await responses("b");
      },
    });
    assert.ok(a.every((x) => x.length > 0));
    assert.deepEqual(a, b);
    assert.equal(new Set(a).size, a.length, "rollouts with other seeds sample other tokens");
  } finally {
    await stack.close();
    await Deno.remove(dir, { recursive: true }).catch(() => undefined);
  }
});
