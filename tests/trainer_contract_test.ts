/**
 * One source for the worker's request contract: the JSON Schema committed inside the Python
 * package is exactly what the zod schemas emit, so the worker's defaults, enums and limits
 * cannot drift from the client's (issue 28, item 3).
 */
import assert from "node:assert/strict";
import { WORKER_CONTRACT_URL, workerContractText } from "../lib/trainer/contract.ts";

Deno.test("trainer contract: the committed contract.schema.json is what the zod schemas emit", async () => {
  const committed = await Deno.readTextFile(WORKER_CONTRACT_URL);
  assert.equal(
    committed,
    workerContractText(),
    "lib/trainer/worker/reins_worker/contract.schema.json is stale: run `deno task contract:emit`",
  );
});

Deno.test("trainer contract: it carries the defaults, enums and limits the worker reads", () => {
  const { requests } = JSON.parse(workerContractText());
  const loss = requests.forward_backward.properties.loss.properties;
  assert.deepEqual(loss.kind.enum, ["ppo", "gspo", "ce"]);
  assert.equal(loss.clip_low.default, 0.2);
  assert.equal(loss.clip_low.exclusiveMaximum, 1);
  assert.equal(loss.kl_coef.minimum, 0);
  assert.equal(requests.generate.properties.top_p.exclusiveMinimum, 0);
  const optimizer = requests.init.properties.optimizer.properties;
  assert.equal(optimizer.eps.exclusiveMinimum, 0);
  assert.equal(requests.init.properties.reference_path.minLength, 1);
});
