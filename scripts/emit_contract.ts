/**
 * Writes the trainer worker's request contract (`lib/trainer/contract.ts`, emitted from the zod
 * schemas) into the Python package, `lib/trainer/worker/reins_worker/contract.schema.json`.
 *
 * Usage: `deno task contract:emit [--check]` (`--check` writes nothing and exits 1 when the
 * committed file is stale).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { WORKER_CONTRACT_URL, workerContractText } from "../lib/trainer/contract.ts";

const { values } = parseArgs({ options: { check: { type: "boolean", default: false } } });
const text = workerContractText();
const path = WORKER_CONTRACT_URL.pathname;
if (values.check) {
  const committed = await Deno.readTextFile(path).catch(() => "");
  if (committed !== text) {
    console.error(`${path} is stale: run \`deno task contract:emit\``);
    Deno.exit(1);
  }
  console.log(`${path} is current`);
} else {
  await Deno.writeTextFile(path, text);
  console.log(`wrote ${path}`);
}
