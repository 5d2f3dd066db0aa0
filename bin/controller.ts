/**
 * The controller's command line.
 *
 * ```sh
 * deno task controller --gateway http://127.0.0.1:8420 --api-key "$REINS_ADMIN_KEY" \
 *   --backend local --concurrency 8 --worker ctl-1 --root runs/controller
 * deno task controller --gateway http://gateway.reins.svc:8420 --backend k8s \
 *   --namespace reins --template job.json --gateway-cidr 10.0.0.12/32 --allow 10.1.0.0/16:443
 * ```
 *
 * SIGINT/SIGTERM drain (claim nothing more, finish and report what runs); a second signal
 * detaches (running attempts keep running and a restart with the same `--worker` adopts them).
 *
 * @module
 */
import { parseArgs } from "node:util";
import { intFlag } from "../lib/flags.ts";
import { GatewayClient } from "../lib/gateway/client.ts";
import type { JsonObject } from "../lib/schema.ts";
import type { ExecutionBackend } from "../lib/controller/backend.ts";
import type { EgressRule } from "../lib/controller/k8s_backend.ts";
import { LocalBackend } from "../lib/controller/local_backend.ts";
import { Reconciler } from "../lib/controller/reconciler.ts";

const USAGE = `usage: deno task controller [options]
  --gateway URL          gateway base URL (or $REINS_GATEWAY_URL)
  --api-key KEY          admin key (or $REINS_ADMIN_KEY)
  --backend local|k8s    execution backend (default local)
  --concurrency N        attempts at once (default 4)
  --worker ID            stable controller id; a restart with it re-adopts (default: hostname)
  --lease-ms MS          lease length (default 30000)
  --poll-ms MS           claim period when idle (default 500)
  --label KEY=VALUE      only claim rollouts with this label (repeatable: all must match)
  local:  --root DIR     state and workdirs (default runs/controller)
          --keep-workdirs
  k8s:    --namespace NS (default default)  --kubeconfig FILE (default: in-cluster or ~/.kube)
          --template FILE  default Job template (JSON) for rollouts without config.template
          --harness-gateway URL  gateway URL as the pods reach it (default --gateway)
          --gateway-cidr CIDR[:PORT]  enables the egress NetworkPolicy
          --allow CIDR[:PORT]  extra egress (repeatable)
          --create-per-second N (default 5)  --ttl-seconds N (default 600)
          --reporter-key-file FILE  reporter key for verified rollouts (or $REINS_REPORTER_KEY)
          --runner-image IMAGE  image of the verifier and reporter containers
          --dry-run --config FILE  print the manifests of one attempt of the rollout in FILE
                                  (YAML) and exit; needs no cluster, gateway or key
  --quiet                no log lines`;

function rule(text: string, flag: string): EgressRule {
  const m = text.match(/^([0-9a-fA-F:.]+\/\d{1,3})(?::(\d+))?$/);
  if (!m) throw new Error(`${flag}: expected CIDR[:PORT], got "${text}"`);
  return { cidr: m[1], ports: m[2] ? [Number(m[2])] : [] };
}

/**
 * Reads `--label KEY=VALUE` flags into the claim's label filter.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseLabelFlags } from "./controller.ts";
 * assert.deepEqual(parseLabelFlags(["sandbox=gpu", "env=swe"]), { sandbox: "gpu", env: "swe" });
 * ```
 */
export function parseLabelFlags(flags: readonly string[]): Record<string, string> {
  const labels: Record<string, string> = {};
  for (const flag of flags) {
    const at = flag.indexOf("=");
    if (at < 1) throw new Error(`--label: expected KEY=VALUE, got "${flag}"`);
    const key = flag.slice(0, at);
    if (key in labels) throw new Error(`--label: "${key}" is given twice`);
    labels[key] = flag.slice(at + 1);
  }
  return labels;
}

function int(value: string | undefined, flag: string, fallback: number): number {
  return intFlag(flag.replace(/^--/, ""), value, 0) ?? fallback;
}

/**
 * Parses the command line and runs the controller until a signal stops it.
 *
 * @example
 * ```ts ignore
 * import { main } from "./controller.ts";
 * Deno.exit(await main(["--gateway", "http://127.0.0.1:8420", "--backend", "local"]));
 * ```
 */
export async function main(args: string[]): Promise<number> {
  const { values } = parseArgs({
    args,
    options: {
      gateway: { type: "string" },
      "api-key": { type: "string" },
      backend: { type: "string", default: "local" },
      concurrency: { type: "string" },
      worker: { type: "string" },
      "lease-ms": { type: "string" },
      "poll-ms": { type: "string" },
      root: { type: "string", default: "runs/controller" },
      "keep-workdirs": { type: "boolean", default: false },
      namespace: { type: "string", default: "default" },
      kubeconfig: { type: "string" },
      template: { type: "string" },
      "harness-gateway": { type: "string" },
      "gateway-cidr": { type: "string" },
      allow: { type: "string", multiple: true, default: [] },
      label: { type: "string", multiple: true, default: [] },
      "create-per-second": { type: "string" },
      "ttl-seconds": { type: "string" },
      "reporter-key-file": { type: "string" },
      "runner-image": { type: "string" },
      "dry-run": { type: "boolean", default: false },
      config: { type: "string" },
      quiet: { type: "boolean", default: false },
      help: { type: "boolean", default: false },
    },
  });
  if (values.help) {
    console.log(USAGE);
    return 0;
  }
  if (values["dry-run"]) {
    // Loaded only here, as the k8s backend below.
    const { dryRunMain } = await import("../lib/controller/k8s_dry_run.ts");
    console.log(await dryRunMain(values, rule));
    return 0;
  }
  const gatewayUrl = values.gateway ?? Deno.env.get("REINS_GATEWAY_URL");
  if (!gatewayUrl) throw new Error("--gateway: required (or set REINS_GATEWAY_URL)");
  const apiKey = values["api-key"] ?? Deno.env.get("REINS_ADMIN_KEY");
  if (!apiKey) throw new Error("--api-key: required (or set REINS_ADMIN_KEY)");
  const worker = values.worker ?? `${Deno.hostname()}-${values.backend}`;
  const concurrency = int(values.concurrency, "--concurrency", 4);
  const leaseMs = int(values["lease-ms"], "--lease-ms", 30_000);
  const pollMs = int(values["poll-ms"], "--poll-ms", 500);
  if (concurrency < 1) throw new Error("--concurrency: must be at least 1");
  const labels = parseLabelFlags(values.label ?? []);
  const log = values.quiet
    ? () => {}
    : (line: string) => console.error(`[controller ${new Date().toISOString()}] ${line}`);

  let backend: ExecutionBackend;
  if (values.backend === "local") {
    await Deno.mkdir(values.root!, { recursive: true });
    backend = new LocalBackend({
      root: await Deno.realPath(values.root!),
      keepWorkdirs: values["keep-workdirs"],
    });
  } else if (values.backend === "k8s") {
    // Loaded only here: the local backend should not pay for the Kubernetes client.
    const { KubeConfig } = await import("@kubernetes/client-node");
    const { K8sBackend } = await import("../lib/controller/k8s_backend.ts");
    const kubeConfig = new KubeConfig();
    if (values.kubeconfig) kubeConfig.loadFromFile(values.kubeconfig);
    else kubeConfig.loadFromDefault();
    let template: JsonObject | undefined;
    if (values.template) {
      try {
        template = JSON.parse(await Deno.readTextFile(values.template));
      } catch (error) {
        throw new Error(`--template: ${(error as Error).message}`);
      }
    }
    backend = new K8sBackend({
      kubeConfig,
      namespace: values.namespace!,
      controller: worker,
      template,
      createPerSecond: int(values["create-per-second"], "--create-per-second", 5),
      ttlSecondsAfterFinished: int(values["ttl-seconds"], "--ttl-seconds", 600),
      ...(values["runner-image"] ? { runnerImage: values["runner-image"] } : {}),
      reporterKey: Deno.env.get("REINS_REPORTER_KEY") ||
        (values["reporter-key-file"]
          ? (await Deno.readTextFile(values["reporter-key-file"])).trim()
          : undefined),
      networkPolicy: values["gateway-cidr"]
        ? {
          gateway: rule(values["gateway-cidr"], "--gateway-cidr"),
          allow: (values.allow ?? []).map((a) => rule(a, "--allow")),
        }
        : false,
    });
  } else {
    throw new Error(`--backend: expected local or k8s, got "${values.backend}"`);
  }

  const gateway = new GatewayClient(gatewayUrl, { apiKey });
  const reconciler = new Reconciler(gateway, backend, {
    worker,
    concurrency,
    lease_ms: leaseMs,
    poll_ms: pollMs,
    gatewayUrl: values["harness-gateway"] ?? gatewayUrl,
    logger: log,
    ...(Object.keys(labels).length > 0 ? { labels } : {}),
  });
  await reconciler.start();
  log(`ready: worker=${worker} backend=${backend.name} gateway=${gatewayUrl}`);

  let signals = 0;
  const stopped = new Promise<void>((resolve) => {
    const onSignal = () => {
      signals++;
      if (signals === 1) {
        log("draining (signal again to detach)");
        reconciler.stop("drain").then(resolve);
      } else {
        log("detaching: running attempts keep running");
        reconciler.stop("detach").then(resolve);
      }
    };
    Deno.addSignalListener("SIGINT", onSignal);
    Deno.addSignalListener("SIGTERM", onSignal);
  });
  await stopped;
  log(`stopped: ${JSON.stringify(reconciler.stats)}`);
  return 0;
}

if (import.meta.main) {
  try {
    Deno.exit(await main(Deno.args));
  } catch (error) {
    console.error(`controller: ${error instanceof Error ? error.message : String(error)}`);
    console.error(USAGE);
    Deno.exit(2);
  }
}
