/**
 * Writes the trainer worker's request contract (`lib/trainer/contract.ts`, emitted from the zod
 * schemas) into the Python package, `lib/trainer/worker/reins_worker/contract.schema.json`.
 *
 * Usage: `deno task contract:emit [--check]` (`--check` writes nothing and exits 1 when the
 * committed file is stale).
 *
 * @module
 */
import { cliMain, parseFlags } from "../lib/flags.ts";
import { WORKER_CONTRACT_URL, workerContractText } from "../lib/trainer/contract.ts";

const USAGE = "usage: deno task contract:emit [--check]\n" +
  "  --check  write nothing; exit 1 when the committed contract is stale";

await cliMain("contract:emit", async () => {
  const values = parseFlags(Deno.args, { check: { type: "boolean", default: false } }, USAGE);
  if (!values) return;
  await emit(values.check);
});

async function emit(check: boolean): Promise<void> {
  const text = workerContractText();
  const path = WORKER_CONTRACT_URL.pathname;
  if (check) {
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
}
