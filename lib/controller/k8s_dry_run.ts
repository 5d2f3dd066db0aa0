/**
 * `deno task controller --backend k8s --dry-run --config rollout.json`: the manifests the
 * Kubernetes backend would apply for one attempt of a rollout, as multi-document YAML, so a
 * user can check them against their own cluster with
 * `kubectl apply --dry-run=server -n NS -f -` before running anything.
 *
 * The rollout (`--config`, a rollout as posted to the gateway: `input`, `config`) is created and
 * claimed in an in-memory store, so it goes through the same validation and the same
 * rendering as a real attempt. Secrets hold placeholders, never the real keys.
 *
 * @module
 */
import { dump } from "js-yaml";
import { openSqliteStore } from "../gateway/sqlite_store.ts";
import type { JsonObject } from "../schema.ts";
import { parseOrThrow, RolloutCreateSchema } from "../schema.ts";
import { type EgressRule, type NetworkPolicyConfig, sharedObjects } from "./k8s_manifests.ts";
import { renderAttempt, VERIFIER_COMMAND } from "./k8s_pod.ts";

/** What the dry run needs (the backend's options, without a cluster). */
export interface DryRunOptions {
  /** The rollout, as posted to the gateway (`input`, `config`, …). */
  rollout: unknown;
  namespace: string;
  controller: string;
  /** The gateway URL as the pods reach it. */
  gatewayUrl: string;
  template?: JsonObject;
  networkPolicy?: NetworkPolicyConfig | false;
  runnerImage?: string;
  verifierCommand?: string[];
  ttlSecondsAfterFinished?: number;
}

/** Placeholders printed instead of credentials. */
export const DRY_RUN_PLACEHOLDERS = {
  reporterKey: "REPLACE-WITH-THE-REPORTER-KEY",
  token: "rk_dry-run-placeholder",
} as const;

/**
 * The objects of one attempt of the rollout, in the order the backend creates them.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { dryRunObjects } from "./k8s_dry_run.ts";
 * const objects = await dryRunObjects({
 *   rollout: { input: "2+2", config: { template: { spec: { template: { spec: {
 *     containers: [{ name: "agent", image: "me/agent:1" }],
 *   } } } } } },
 *   namespace: "reins",
 *   controller: "ctl-1",
 *   gatewayUrl: "http://reins-gateway.reins.svc:8420",
 * });
 * assert.deepEqual(objects.map((o) => o.kind), ["Secret", "ConfigMap", "Job"]);
 * ```
 */
export async function dryRunObjects(options: DryRunOptions): Promise<JsonObject[]> {
  const create = parseOrThrow(RolloutCreateSchema, options.rollout, "--config");
  const store = openSqliteStore(":memory:");
  try {
    await store.createRollouts([create]);
    const [{ rollout, attempt }] = await store.claimRollouts({
      worker: options.controller,
      limit: 1,
      lease_ms: 60_000,
    });
    const { job, objects } = await renderAttempt({
      rollout,
      attempt,
      token: DRY_RUN_PLACEHOLDERS.token,
      gatewayUrl: options.gatewayUrl,
    }, {
      controller: options.controller,
      template: options.template,
      ttlSecondsAfterFinished: options.ttlSecondsAfterFinished ?? 600,
      runnerImage: options.runnerImage ?? "reins-runner:latest",
      verifierCommand: options.verifierCommand ?? VERIFIER_COMMAND,
      reporterKey: DRY_RUN_PLACEHOLDERS.reporterKey,
      networkPolicy: Boolean(options.networkPolicy),
    });
    const all = [
      ...sharedObjects(
        options.controller,
        options.networkPolicy,
        DRY_RUN_PLACEHOLDERS.reporterKey,
      ),
      ...(objects.configMap ? [objects.configMap] : []),
      ...(objects.secret ? [objects.secret] : []),
      job,
    ];
    return all.map((object) => {
      const { apiVersion, kind, metadata, ...rest } = JSON.parse(JSON.stringify(object));
      // The order kubectl prints: apiVersion, kind, metadata first.
      return { apiVersion, kind, metadata: { ...metadata, namespace: options.namespace }, ...rest };
    });
  } finally {
    await store.close();
  }
}

/** The objects as multi-document YAML (what `--dry-run` prints). */
export async function dryRunYaml(options: DryRunOptions): Promise<string> {
  const objects = await dryRunObjects(options);
  const header = `# reins dry run: one attempt of the rollout in ${options.namespace}; ` +
    `the Secrets hold placeholders.\n# Check: kubectl apply --dry-run=server -f <this file>\n`;
  return header + objects.map((o) => `---\n${dump(o, { lineWidth: -1, noRefs: true })}`).join("");
}

/**
 * The `--dry-run` branch of the controller's command line: reads `--config` (and `--template`)
 * and returns the YAML. `rule` parses a `CIDR[:PORT]` flag (the CLI's own parser).
 */
export async function dryRunMain(
  values: Record<string, string | boolean | string[] | undefined>,
  rule: (text: string, flag: string) => EgressRule,
): Promise<string> {
  const read = async (flag: string): Promise<JsonObject | undefined> => {
    const path = values[flag];
    if (typeof path !== "string") return undefined;
    try {
      return JSON.parse(await Deno.readTextFile(path));
    } catch (error) {
      throw new Error(`--${flag}: ${(error as Error).message}`);
    }
  };
  if (values.backend !== "k8s") throw new Error("--dry-run: only with --backend k8s");
  const rollout = await read("config");
  if (!rollout) throw new Error("--config: required with --dry-run (a rollout as JSON)");
  const cidr = values["gateway-cidr"];
  const ttl = values["ttl-seconds"];
  if (ttl !== undefined && !/^\d+$/.test(String(ttl))) {
    throw new Error(`--ttl-seconds: expected a whole number, got "${ttl}"`);
  }
  return await dryRunYaml({
    rollout,
    namespace: String(values.namespace ?? "default"),
    controller: String(values.worker ?? "reins-controller"),
    gatewayUrl: String(
      values["harness-gateway"] ?? values.gateway ?? "http://reins-gateway.reins.svc:8420",
    ),
    template: await read("template"),
    networkPolicy: typeof cidr === "string"
      ? {
        gateway: rule(cidr, "--gateway-cidr"),
        allow: ((values.allow ?? []) as string[]).map((a) => rule(a, "--allow")),
      }
      : false,
    ...(typeof values["runner-image"] === "string" ? { runnerImage: values["runner-image"] } : {}),
    ...(ttl !== undefined ? { ttlSecondsAfterFinished: Number(ttl) } : {}),
  });
}
