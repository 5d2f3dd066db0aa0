/**
 * RBAC of the fake API server: maps a request to the (API group, resource, verb) the real
 * authorizer checks and grants it only when a rule of the Role in `deploy/k8s/rbac.yaml` does.
 *
 * @module
 */
import { loadAllYaml } from "@kubernetes/client-node";

/** One rule of a Role. */
export interface PolicyRule {
  apiGroups: string[];
  resources: string[];
  verbs: string[];
}

/** What a request asks for. */
export interface Access {
  group: string;
  resource: string;
  verb: string;
  namespace: string;
  name?: string;
}

/** The rules of the Role named `name` in a multi-document YAML file. */
export function loadRole(path: string, name = "reins-controller"): PolicyRule[] {
  const docs = loadAllYaml(Deno.readTextFileSync(path));
  const role = docs.find((d) => d?.kind === "Role" && d?.metadata?.name === name);
  if (!role) throw new Error(`${path}: no Role ${name}`);
  return role.rules;
}

/**
 * The access a request needs (null for paths outside the namespaced API).
 *
 * @example
 * ```ts ignore
 * accessOf("GET", new URL("http://x/apis/batch/v1/namespaces/ns/jobs?watch=true"));
 * // → { group: "batch", resource: "jobs", verb: "watch", namespace: "ns" }
 * ```
 */
export function accessOf(method: string, url: URL): Access | null {
  const m = url.pathname.match(
    /^\/(?:api\/v1|apis\/([^/]+)\/[^/]+)\/namespaces\/([^/]+)\/([^/]+)(?:\/([^/]+)(?:\/([^/]+))?)?$/,
  );
  if (!m) return null;
  const [, group = "", namespace, plural, name, sub] = m;
  const resource = sub ? `${plural}/${sub}` : plural;
  const verb = method === "GET"
    ? name ? "get" : url.searchParams.get("watch") === "true" ? "watch" : "list"
    : method === "POST"
    ? "create"
    : method === "PUT"
    ? "update"
    : method === "PATCH"
    ? "patch"
    : method === "DELETE"
    ? name ? "delete" : "deletecollection"
    : method.toLowerCase();
  return { group, resource, verb, namespace, ...(name ? { name } : {}) };
}

/** Whether the rules grant the access. */
export function allowed(rules: PolicyRule[], access: Access): boolean {
  return rules.some((r) =>
    (r.apiGroups.includes(access.group) || r.apiGroups.includes("*")) &&
    (r.resources.includes(access.resource) || r.resources.includes("*")) &&
    (r.verbs.includes(access.verb) || r.verbs.includes("*"))
  );
}
