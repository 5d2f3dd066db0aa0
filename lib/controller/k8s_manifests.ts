/**
 * The controller-wide objects the Kubernetes backend creates, without API calls: the egress
 * NetworkPolicy of its pods, the reporter key's Secret, the `git` shim's ConfigMap and the
 * image probe's Pod. `k8s_backend.ts` applies them; `--dry-run` prints them.
 *
 * @module
 */
import type {
  V1ConfigMap,
  V1NetworkPolicy,
  V1Pod,
  V1PodSpec,
  V1Secret,
} from "@kubernetes/client-node";
import { LABEL, labelValue } from "./k8s_job.ts";

/** The shim that replaces `git` in the agent's container. */
export const GIT_SHIM = '#!/bin/sh\necho "git is disabled in the reins sandbox" >&2\nexit 128\n';

/** An egress destination of the NetworkPolicy. */
export interface EgressRule {
  /** CIDR, e.g. `10.0.0.12/32`. */
  cidr: string;
  /** TCP ports (all when empty). */
  ports?: number[];
}

/** Egress the attempt pods get: the gateway, DNS (default on) and an allow-list. */
export interface NetworkPolicyConfig {
  gateway: EgressRule;
  allow?: EgressRule[];
  dns?: boolean;
}

/**
 * Names of a controller's shared objects (DNS subdomains whatever the worker id).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { sharedNames } from "./k8s_manifests.ts";
 * assert.equal(sharedNames("GPU_ctl:1").reporterSecret, "reins-reporter-gpu-ctl-1");
 * ```
 */
export function sharedNames(controller: string): {
  networkPolicy: string;
  reporterSecret: string;
  shimConfigMap: string;
} {
  // Object names are DNS subdomains: lower case, no `_`, alphanumeric at the end.
  const dns = (prefix: string) =>
    `${prefix}${labelValue(controller)}`.toLowerCase().replace(/[^a-z0-9.-]/g, "-").slice(0, 63)
      .replace(/[^a-z0-9]+$/, "");
  return {
    networkPolicy: dns("reins-egress-"),
    reporterSecret: dns("reins-reporter-"),
    shimConfigMap: dns("reins-shims-"),
  };
}

function managed(controller: string) {
  return { [`${LABEL}/managed-by`]: "reins", [`${LABEL}/controller`]: labelValue(controller) };
}

/**
 * The NetworkPolicy of a controller's pods: no ingress, egress only to the gateway, kube-dns
 * and the allow-list. The pod's containers share it: the agent reaches only the gateway.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { networkPolicy } from "./k8s_manifests.ts";
 * const policy = networkPolicy("ctl-1", { gateway: { cidr: "10.0.0.12/32", ports: [8420] } });
 * assert.deepEqual(policy.spec?.policyTypes, ["Ingress", "Egress"]);
 * assert.deepEqual(policy.spec?.egress?.[0].to, [{ ipBlock: { cidr: "10.0.0.12/32" } }]);
 * ```
 */
export function networkPolicy(controller: string, config: NetworkPolicyConfig): V1NetworkPolicy {
  const rule = (r: EgressRule) => ({
    to: [{ ipBlock: { cidr: r.cidr } }],
    ...(r.ports?.length ? { ports: r.ports.map((port) => ({ protocol: "TCP", port })) } : {}),
  });
  const egress = [rule(config.gateway), ...(config.allow ?? []).map(rule)];
  if (config.dns ?? true) {
    egress.push({
      to: [{
        namespaceSelector: {},
        podSelector: { matchLabels: { "k8s-app": "kube-dns" } },
      }] as never,
      ports: [{ protocol: "UDP", port: 53 }, { protocol: "TCP", port: 53 }],
    });
  }
  return {
    apiVersion: "networking.k8s.io/v1",
    kind: "NetworkPolicy",
    metadata: { name: sharedNames(controller).networkPolicy, labels: managed(controller) },
    spec: {
      podSelector: { matchLabels: managed(controller) },
      // Ingress listed with no rule: nothing may connect to an attempt's pod.
      policyTypes: ["Ingress", "Egress"],
      ingress: [],
      egress,
    },
  };
}

/** The Secret holding the reporter key, mounted only into each pod's `reins-report`. */
export function reporterSecret(controller: string, key: string): V1Secret {
  return {
    apiVersion: "v1",
    kind: "Secret",
    metadata: { name: sharedNames(controller).reporterSecret, labels: managed(controller) },
    type: "Opaque",
    stringData: { key },
  };
}

/** The ConfigMap holding the `git` shim mounted over `git` in the agent's container. */
export function shimConfigMap(controller: string): V1ConfigMap {
  return {
    apiVersion: "v1",
    kind: "ConfigMap",
    metadata: { name: sharedNames(controller).shimConfigMap, labels: managed(controller) },
    data: { git: GIT_SHIM },
  };
}

/**
 * The Pod that checks an image can be pulled before Jobs use it: it runs `true` (whether that
 * exists does not matter: a container that started or failed to start was pulled).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { probePod } from "./k8s_manifests.ts";
 * const pod = await probePod("ctl-1", "ghcr.io/me/agent:1");
 * assert.match(pod.metadata?.name ?? "", /^reins-probe-[0-9a-f]{16}$/);
 * ```
 */
export async function probePod(
  controller: string,
  image: string,
  like: V1PodSpec = { containers: [] },
): Promise<V1Pod> {
  const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(image));
  const hex = [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
  return {
    apiVersion: "v1",
    kind: "Pod",
    metadata: {
      name: `reins-probe-${hex.slice(0, 16)}`,
      labels: { ...managed(controller), [`${LABEL}/probe`]: "image" },
      annotations: { [`${LABEL}/image`]: image },
    },
    spec: {
      // Pulled the way the Job's pods pull: the same pull secrets, account and nodes.
      ...(like.imagePullSecrets ? { imagePullSecrets: like.imagePullSecrets } : {}),
      ...(like.serviceAccountName ? { serviceAccountName: like.serviceAccountName } : {}),
      ...(like.nodeSelector ? { nodeSelector: like.nodeSelector } : {}),
      ...(like.tolerations ? { tolerations: like.tolerations } : {}),
      restartPolicy: "Never",
      automountServiceAccountToken: false,
      enableServiceLinks: false,
      activeDeadlineSeconds: 600,
      containers: [{ name: "probe", image, command: ["true"] }],
    },
  };
}

/**
 * A copy of a per-attempt object owned by its Job: the garbage collector deletes it with the Job
 * (the TTL's deletion, a user's, or the controller's), so a crash leaves no task files behind.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import type { V1ConfigMap } from "@kubernetes/client-node";
 * import { ownedBy } from "./k8s_manifests.ts";
 * const task: V1ConfigMap = { kind: "ConfigMap", metadata: { name: "j-task" } };
 * const owned = ownedBy(task, { metadata: { name: "j", uid: "u-1" } });
 * assert.equal(owned.metadata?.ownerReferences?.[0].uid, "u-1");
 * ```
 */
export function ownedBy<T extends V1ConfigMap | V1Secret>(
  object: T,
  job: { metadata?: { name?: string; uid?: string } },
): T {
  return {
    ...object,
    metadata: {
      ...object.metadata,
      ownerReferences: [{
        apiVersion: "batch/v1",
        kind: "Job",
        name: job.metadata?.name ?? "",
        uid: job.metadata?.uid ?? "",
      }],
    },
  };
}

/** A controller-wide object the backend applies. */
export type SharedObject = V1NetworkPolicy | V1Secret | V1ConfigMap;

/**
 * The controller-wide objects: the NetworkPolicy (when configured), reporter Secret and shim.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { sharedObjects } from "./k8s_manifests.ts";
 * const objects = sharedObjects("ctl-1", false, "rp_reporter-key");
 * assert.deepEqual(objects.map((o) => o.metadata?.name), ["reins-reporter-ctl-1", "reins-shims-ctl-1"]);
 * ```
 */
export function sharedObjects(
  controller: string,
  policy: NetworkPolicyConfig | false | undefined,
  reporterKey: string | undefined,
): SharedObject[] {
  return [
    ...(policy ? [networkPolicy(controller, policy)] : []),
    ...(reporterKey !== undefined
      ? [reporterSecret(controller, reporterKey), shimConfigMap(controller)]
      : []),
  ];
}
