/**
 * Bad input: the worker answers 4xx naming the field, and the model and optimizer are left
 * exactly as they were. The TS client refuses what its schemas can see before sending.
 */
import assert from "node:assert/strict";
import { ValidationError } from "../lib/schema.ts";
import { TrainerWorkerError } from "../lib/trainer/mod.ts";
import { row, TINY, withWorker } from "./trainer_helpers.ts";

const GOOD = row([1, 2, 3, 4], {
  loss_mask: [0, 1, 1, 1],
  advantages: [0, 1, -1, 1],
  loss_weights: [0, 0.3, 0.3, 0.3],
  rollout_logprobs: [0, -3, -3, -3],
});
const LOSS = { kind: "ppo" };

/** POSTs raw JSON text (bypassing the client's validation). */
async function post(url: string, path: string, body: string) {
  const response = await fetch(`${url}${path}`, { method: "POST", body });
  return { status: response.status, body: await response.json() };
}

Deno.test("trainer bad input: 4xx naming the field, state untouched", async (t) => {
  await withWorker(async ({ client, url }) => {
    await t.step("nothing loaded yet: 409 not_initialized", async () => {
      const res = await post(
        url,
        "/forward_backward",
        JSON.stringify({ rows: [GOOD], loss: LOSS }),
      );
      assert.equal(res.status, 409);
      assert.equal(res.body.error.code, "not_initialized");
      const gen = await post(url, "/generate", JSON.stringify({ prompt_ids: [1], max_tokens: 1 }));
      assert.equal(gen.status, 409);
    });

    await t.step("a bad init config names its field and loads nothing", async () => {
      const bad = { ...TINY, n_kv_heads: 3 };
      const res = await post(
        url,
        "/init",
        JSON.stringify({ model: { kind: "builtin", config: bad } }),
      );
      assert.equal(res.status, 400);
      assert.equal(res.body.error.field, "model.config.n_kv_heads");
      assert.equal((await client.state()).initialized, false);
      await assert.rejects(
        () => client.init({ model: { kind: "builtin", config: bad } }),
        (e) => e instanceof ValidationError && e.field === "model.config.n_kv_heads",
      );
    });

    await client.init({
      model: { kind: "builtin", config: TINY, seed: 1 },
      optimizer: { lr: 0.01 },
      device: "cpu",
    });
    // Give the optimizer some state, so that "unchanged" covers AdamW moments too.
    await client.forwardBackward({ rows: [GOOD], loss: { kind: "ppo" } });
    await client.optimStep();
    const before = await client.state();
    assert.equal(before.has_grad, false);

    const cases: [string, string, unknown, string][] = [
      ["ragged mask", "/forward_backward", {
        rows: [{ ...GOOD, loss_mask: [0, 1, 1] }],
        loss: LOSS,
      }, "rows[0].loss_mask"],
      ["ragged advantages in the 2nd row", "/forward_backward", {
        rows: [GOOD, { ...GOOD, advantages: [0, 1] }],
        loss: LOSS,
      }, "rows[1].advantages"],
      ["token id out of vocabulary", "/forward_backward", {
        rows: [{ ...GOOD, tokens: [1, 2, 999, 4] }],
        loss: LOSS,
      }, "rows[0].tokens[2]"],
      ["NaN advantage (JSON null)", "/forward_backward", {
        rows: [{ ...GOOD, advantages: [0, 1, NaN, 1] }],
        loss: LOSS,
      }, "rows[0].advantages[2]"],
      ["mask value 2", "/forward_backward", {
        rows: [{ ...GOOD, loss_mask: [0, 1, 2, 1] }],
        loss: LOSS,
      }, "rows[0].loss_mask[2]"],
      ["trained first token", "/forward_backward", {
        rows: [{ ...GOOD, loss_mask: [1, 1, 1, 1] }],
        loss: LOSS,
      }, "rows[0].loss_mask[0]"],
      ["parent pointing forward", "/forward_backward", {
        rows: [{ ...GOOD, parent: [-1, 0, 3, 2] }],
        loss: LOSS,
      }, "rows[0].parent[2]"],
      ["segment starts not increasing", "/forward_backward", {
        rows: [{ ...GOOD, segment_starts: [0, 2, 2] }],
        loss: LOSS,
      }, "rows[0].segment_starts[2]"],
      ["sequence_ids of the wrong length", "/forward_backward", {
        rows: [{ ...GOOD, sequence_ids: [0, 0, 1] }],
        loss: LOSS,
      }, "rows[0].sequence_ids"],
      ["negative sequence id", "/forward_backward", {
        rows: [{ ...GOOD, sequence_ids: [0, 0, -1, 1] }],
        loss: LOSS,
      }, "rows[0].sequence_ids[2]"],
      ["unknown loss kind", "/forward_backward", {
        rows: [GOOD],
        loss: { kind: "dpo" },
      }, "loss.kind"],
      ["no rows", "/forward_backward", { rows: [], loss: LOSS }, "rows"],
      ["return_logprobs not a boolean", "/forward_backward", {
        rows: [GOOD],
        loss: LOSS,
        return_logprobs: "yes",
      }, "return_logprobs"],
      [
        "prompt id out of vocabulary",
        "/generate",
        { prompt_ids: [1, 32], max_tokens: 2 },
        "prompt_ids[1]",
      ],
      ["max_tokens 0", "/generate", { prompt_ids: [1], max_tokens: 0 }, "max_tokens"],
      ["top_p 0", "/generate", { prompt_ids: [1], max_tokens: 1, top_p: 0 }, "top_p"],
      ["empty sequence", "/logprobs", { sequences: [[1, 2], []] }, "sequences[1]"],
      ["missing checkpoint", "/load", { path: "/nonexistent/reins.pt" }, "path"],
      ["unknown device", "/init", {
        model: { kind: "builtin", config: TINY },
        device: "tpu",
      }, "device"],
    ];

    for (const [name, path, body, field] of cases) {
      await t.step(`${name} → 400 naming ${field}`, async () => {
        const res = await post(url, path, JSON.stringify(body));
        assert.equal(res.status, 400, JSON.stringify(res.body));
        assert.equal(res.body.error.field, field);
        assert.ok(res.body.error.message.startsWith(field), res.body.error.message);
      });
    }

    await t.step("a NaN literal in the body is refused naming the field", async () => {
      const text = JSON.stringify({ rows: [GOOD], loss: LOSS }).replace(
        '"advantages":[0,1,-1,1]',
        '"advantages":[0,NaN,-1,1]',
      );
      const res = await post(url, "/forward_backward", text);
      assert.equal(res.status, 400);
      assert.equal(res.body.error.field, "rows[0].advantages[1]");
    });

    await t.step("invalid JSON and unknown routes", async () => {
      assert.equal((await post(url, "/forward_backward", "{rows:")).status, 400);
      assert.equal((await post(url, "/nope", "{}")).status, 404);
    });

    await t.step(
      "the client refuses what its schemas see, and surfaces worker errors",
      async () => {
        await assert.rejects(
          () =>
            client.forwardBackward({
              rows: [{ ...GOOD, loss_mask: [0, 1, 1] }],
              loss: { kind: "ppo" },
            }),
          (e) => e instanceof ValidationError && e.field === "rows[0].loss_mask",
        );
        await assert.rejects(
          () =>
            client.forwardBackward({
              rows: [{ ...GOOD, advantages: [0, NaN, 1, 1] }],
              loss: { kind: "ppo" },
            }),
          (e) => e instanceof ValidationError && e.field === "rows[0].advantages[1]",
        );
        await assert.rejects(
          () =>
            client.forwardBackward({
              rows: [{ ...GOOD, tokens: [1, 2, 40, 4] }],
              loss: { kind: "ppo" },
            }),
          (e) =>
            e instanceof TrainerWorkerError && e.status === 400 && e.field === "rows[0].tokens[2]",
        );
      },
    );

    await t.step("weights, optimizer, gradients and version are unchanged", async () => {
      const after = await client.state();
      assert.equal(after.param_checksum, before.param_checksum);
      assert.equal(after.optimizer_checksum, before.optimizer_checksum);
      assert.equal(after.policy_version, before.policy_version);
      assert.equal(after.optimizer_steps, before.optimizer_steps);
      assert.equal(after.has_grad, false);
      // ...and the worker still trains.
      await client.forwardBackward({ rows: [GOOD], loss: { kind: "ppo" } });
      const step = await client.optimStep();
      assert.equal(step.policy_version, before.policy_version + 1);
      assert.notEqual((await client.state()).param_checksum, before.param_checksum);
    });
  }, { init: false });
});
