/**
 * Validates Kubernetes objects against the API's published OpenAPI definitions, as the API
 * server does before it stores them. The backend checks every Job it renders with it (a bad
 * template is a spec error naming the field, before anything is created), and the tests' fake
 * API server admits objects with it. Checks:
 *
 * - types, enums, formats and required fields: the validators `kubernetes-models` (pinned in
 *   deno.json) generates from the Kubernetes OpenAPI schema, one per kind;
 * - unknown fields (the server's `fieldValidation=Strict`, which `kubectl` uses): those
 *   definitions allow any extra key, so every key is also checked against the attribute maps of
 *   `@kubernetes/client-node`'s models, generated from the same OpenAPI document — the client
 *   itself silently drops a key its models do not know, so a misspelt field would otherwise
 *   vanish on the way to the cluster;
 * - what the OpenAPI schema cannot say but the API server's validation does and reins relies on:
 *   object names are DNS subdomains, label values ≤63 characters of `[A-Za-z0-9._-]`, container
 *   names unique and DNS labels, every volume mount naming a volume of the pod.
 *
 * Hand-written: the walk over the attribute maps and the name/label/mount rules; the type
 * checks are `kubernetes-models`'.
 *
 * @module
 */
import * as models from "@kubernetes/client-node";
import { ConfigMap } from "kubernetes-models/v1/ConfigMap";
import { Pod } from "kubernetes-models/v1/Pod";
import { Secret } from "kubernetes-models/v1/Secret";
import { ServiceAccount } from "kubernetes-models/v1/ServiceAccount";
import { Job } from "kubernetes-models/batch/v1/Job";
import { NetworkPolicy } from "kubernetes-models/networking.k8s.io/v1/NetworkPolicy";
import { Role } from "kubernetes-models/rbac.authorization.k8s.io/v1/Role";
import { RoleBinding } from "kubernetes-models/rbac.authorization.k8s.io/v1/RoleBinding";

// deno-lint-ignore no-explicit-any
type Obj = Record<string, any>;

const KINDS: Record<string, { model: new (data: never) => { validate(): void }; type: string }> = {
  "v1/ConfigMap": { model: ConfigMap as never, type: "V1ConfigMap" },
  "v1/Pod": { model: Pod as never, type: "V1Pod" },
  "v1/Secret": { model: Secret as never, type: "V1Secret" },
  "v1/ServiceAccount": { model: ServiceAccount as never, type: "V1ServiceAccount" },
  "batch/v1/Job": { model: Job as never, type: "V1Job" },
  "networking.k8s.io/v1/NetworkPolicy": { model: NetworkPolicy as never, type: "V1NetworkPolicy" },
  "rbac.authorization.k8s.io/v1/Role": { model: Role as never, type: "V1Role" },
  "rbac.authorization.k8s.io/v1/RoleBinding": {
    model: RoleBinding as never,
    type: "V1RoleBinding",
  },
};

/** The kinds this validator knows (`apiVersion/kind`). */
export const KNOWN_KINDS = Object.keys(KINDS);

const PRIMITIVE = new Set(["string", "number", "boolean", "Date", "object", "any", "IntOrString"]);

function unknownFields(value: unknown, type: string, path: string, out: string[]): void {
  if (value === null || value === undefined) return;
  const array = type.match(/^Array<(.+)>$/);
  if (array) {
    if (Array.isArray(value)) {
      value.forEach((v, i) => unknownFields(v, array[1], `${path}[${i}]`, out));
    }
    return;
  }
  const map = type.match(/^\{ \[key: string\]: (.+); \}$/);
  if (map) {
    for (const [k, v] of Object.entries(value as Obj)) {
      unknownFields(v, map[1], `${path}.${k}`, out);
    }
    return;
  }
  if (PRIMITIVE.has(type)) return;
  const model = (models as unknown as Record<string, unknown>)[type] as
    | { getAttributeTypeMap(): Array<{ baseName: string; type: string }> }
    | undefined;
  if (!model?.getAttributeTypeMap || typeof value !== "object") return;
  const attributes = new Map(model.getAttributeTypeMap().map((a) => [a.baseName, a.type]));
  for (const [key, v] of Object.entries(value as Obj)) {
    const attribute = attributes.get(key);
    if (!attribute) out.push(`${path ? `${path}.` : ""}${key}: unknown field`);
    else unknownFields(v, attribute, path ? `${path}.${key}` : key, out);
  }
}

const DNS_SUBDOMAIN = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$/;
const DNS_LABEL = /^[a-z0-9]([-a-z0-9]*[a-z0-9])?$/;
const LABEL_VALUE = /^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$/;

function podSpecErrors(spec: Obj | undefined, path: string, out: string[]): void {
  if (!spec) return;
  const volumes = new Set((spec.volumes ?? []).map((v: Obj) => v.name));
  const names = new Set<string>();
  for (const group of ["initContainers", "containers"]) {
    (spec[group] ?? []).forEach((c: Obj, i: number) => {
      const at = `${path}.${group}[${i}]`;
      if (!DNS_LABEL.test(c.name ?? "")) out.push(`${at}.name: must be a DNS label`);
      if (names.has(c.name)) out.push(`${at}.name: Duplicate value: "${c.name}"`);
      names.add(c.name);
      if (!c.image) out.push(`${at}.image: Required value`);
      (c.volumeMounts ?? []).forEach((m: Obj, j: number) => {
        if (!volumes.has(m.name)) out.push(`${at}.volumeMounts[${j}].name: Not found: "${m.name}"`);
      });
    });
  }
}

/**
 * Every problem the API server would report for `object` (empty when it is valid).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { schemaErrors } from "./k8s_schema.ts";
 * const configMap = { apiVersion: "v1", kind: "ConfigMap", metadata: { name: "a" } };
 * assert.deepEqual(schemaErrors(configMap), []);
 * assert.deepEqual(schemaErrors({ ...configMap, date: { x: "1" } }), ["date: unknown field"]);
 * ```
 */
export function schemaErrors(object: Obj): string[] {
  const key = `${object?.apiVersion}/${object?.kind}`;
  const kind = KINDS[key];
  if (!kind) return [`apiVersion/kind: ${key} is not a kind this validator knows`];
  const out: string[] = [];
  try {
    new kind.model(structuredClone(object) as never).validate();
  } catch (error) {
    out.push(...String((error as Error).message).split("\n").filter(Boolean));
  }
  unknownFields(object, kind.type, "", out);
  const name = object.metadata?.name;
  if (!name) out.push("metadata.name: Required value");
  else if (!DNS_SUBDOMAIN.test(name) || name.length > 253) {
    out.push(`metadata.name: Invalid value: "${name}": must be a DNS subdomain`);
  }
  for (const where of ["metadata", "spec.template.metadata"]) {
    const meta = where === "metadata" ? object.metadata : object.spec?.template?.metadata;
    for (const [k, v] of Object.entries((meta?.labels ?? {}) as Record<string, string>)) {
      if (typeof v !== "string" || v.length > 63 || !LABEL_VALUE.test(v)) {
        out.push(`${where}.labels.${k}: Invalid value: "${v}"`);
      }
    }
  }
  if (object.kind === "Pod") podSpecErrors(object.spec, "spec", out);
  if (object.kind === "Job") podSpecErrors(object.spec?.template?.spec, "spec.template.spec", out);
  return out;
}

/** Throws with every problem of `object`, naming its kind and name. */
export function assertValid(object: Obj): void {
  const errors = schemaErrors(object);
  if (errors.length) {
    throw new Error(`${object?.kind} "${object?.metadata?.name}" is invalid: ${errors.join("; ")}`);
  }
}
