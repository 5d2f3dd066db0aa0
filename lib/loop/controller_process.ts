/**
 * The rollout controller of a supervised run as its own process (what `startEmbedded` runs in
 * the loop's process): a local backend with the harness registry's harnesses (processes, or in
 * this process for `runner: "in_process"` specs) and a reconciler with a stable id, so a
 * restarted controller re-adopts its attempts or reports them lost (an infrastructure
 * failure: retried without counting against `max_attempts`).
 *
 * ```sh
 * REINS_ADMIN_KEY=… deno run -A lib/loop/controller_process.ts --gateway http://127.0.0.1:8420 \
 *   --root runs/x/controller --data-dir runs/x/data --id run-x-controller
 * ```
 *
 * @module
 */
import { parseArgs } from "node:util";
import { GatewayClient } from "../gateway/client.ts";
import { LocalBackend } from "../controller/local_backend.ts";
import { Reconciler } from "../controller/reconciler.ts";
import { harnessRegistry } from "../harness/registry.ts";

const USAGE = `usage: deno run -A lib/loop/controller_process.ts --gateway URL --root DIR --id ID
  [--data-dir DIR] [--concurrency N]   (admin key from $REINS_ADMIN_KEY)`;

/**
 * Runs the controller until SIGTERM/SIGINT (drains), returning its stats.
 *
 * @example
 * ```ts ignore
 * await runControllerProcess(["--gateway", url, "--root", "runs/x/controller", "--id", "x"]);
 * ```
 */
export async function runControllerProcess(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    strict: true,
    options: {
      gateway: { type: "string" },
      root: { type: "string" },
      id: { type: "string" },
      "data-dir": { type: "string" },
      concurrency: { type: "string", default: "8" },
      help: { type: "boolean", short: "h", default: false },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  const apiKey = Deno.env.get("REINS_ADMIN_KEY");
  if (!values.gateway || !values.root || !values.id || !apiKey) {
    throw new Error("--gateway, --root, --id and $REINS_ADMIN_KEY are required");
  }
  const concurrency = Number(values.concurrency);
  if (!Number.isInteger(concurrency) || concurrency < 1) {
    throw new Error(`--concurrency: expected a whole number >= 1, got '${values.concurrency}'`);
  }
  await Deno.mkdir(values.root, { recursive: true });
  const registry = harnessRegistry(values["data-dir"] ? { dataDir: values["data-dir"] } : {});
  const gateway = new GatewayClient(values.gateway, { apiKey });
  const reconciler = new Reconciler(
    gateway,
    new LocalBackend({
      root: await Deno.realPath(values.root),
      harnesses: registry.harnesses,
      rewardFunctions: registry.rewardFunctions,
      inProcess: registry.inProcess,
      pollMs: 50,
    }),
    {
      worker: values.id,
      concurrency,
      gatewayUrl: values.gateway,
      poll_ms: 50,
      lease_ms: 60_000,
      sweep_ms: 5_000,
      logger: (line) => console.error(`[controller] ${line}`),
    },
  );
  await reconciler.start();
  console.log(`controller ${values.id} ready`);
  await new Promise<void>((resolve) => {
    const stop = () => reconciler.stop("drain").then(resolve);
    Deno.addSignalListener("SIGTERM", stop);
    Deno.addSignalListener("SIGINT", stop);
  });
  console.log(`controller stopped: ${JSON.stringify(reconciler.stats)}`);
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await runControllerProcess(Deno.args));
  } catch (error) {
    console.error(`controller: ${(error as Error).message}\n${USAGE}`);
    Deno.exit(2);
  }
}
