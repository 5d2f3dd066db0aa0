/**
 * An in-process fake of the Kubernetes API server, with the real JSON shapes and the real
 * server's refusals, for testing the Kubernetes backend without a cluster:
 *
 * - every object written (Job, Pod, ConfigMap, Secret, NetworkPolicy) is validated against the
 *   Kubernetes OpenAPI definitions (`k8s_schema.ts`): types, required fields, unknown fields,
 *   names, label values, volume mounts — a 422 `Invalid` naming the field, as the server says;
 * - a Job's `spec.template` (and `spec.selector`) are immutable: a PUT or PATCH changing them is
 *   a 422 `field is immutable`;
 * - list and watch honour label selectors, equality- and set-based (`in`, `notin`, `!key`); a
 *   malformed selector is a 400;
 * - RBAC: each request needs the verb on the resource that the Role in `deploy/k8s/rbac.yaml`
 *   grants (403 `Forbidden` otherwise); `accessLog` lists what was asked;
 * - a Job creates its Pod, which the fake kubelet (`fake_kubelet.ts`) runs: init containers in
 *   order, then the containers; the Job reads `Complete` or `Failed` (`BackoffLimitExceeded`,
 *   `DeadlineExceeded` at `activeDeadlineSeconds`) from its Pod, as the Job controller does.
 *   Secrets store `stringData` as base64 `data`.
 *
 * @module
 */
import { KubeConfig } from "@kubernetes/client-node";
import { type Access, accessOf, allowed, loadRole, type PolicyRule } from "./fake_rbac.ts";
import { type JobScript, type KubeletHost, PodRun } from "./fake_kubelet.ts";
import { schemaErrors } from "../../lib/controller/k8s_schema.ts";

export type { JobScript } from "./fake_kubelet.ts";

/** A Kubernetes object as JSON. */
// deno-lint-ignore no-explicit-any
export type K8sObject = Record<string, any>;

interface WatchEvent {
  rv: number;
  type: "ADDED" | "MODIFIED" | "DELETED";
  object: K8sObject;
}

/** The Role the fake enforces by default: the one shipped in `deploy/`. */
export const RBAC_FILE = new URL("../../deploy/k8s/rbac.yaml", import.meta.url).pathname;

class SelectorError extends Error {}

/** Parses a label selector (`a=b,c!=d,e,!f,g in (x,y),h notin (z)`) into a predicate. */
export function selectorMatcher(
  selector: string | null,
): (labels: Record<string, string> | undefined) => boolean {
  if (!selector) return () => true;
  const terms = selector.match(/[^,(]+(\([^)]*\))?/g)?.map((t) => t.trim()).filter(Boolean) ?? [];
  const tests = terms.map((term) => {
    let m = term.match(/^([A-Za-z0-9./_-]+)\s+(in|notin)\s+\(([^)]*)\)$/);
    if (m) {
      const [, key, op, list] = m;
      const values = list.split(",").map((v) => v.trim());
      return (l: Record<string, string>) =>
        op === "in" ? key in l && values.includes(l[key]) : !(key in l && values.includes(l[key]));
    }
    m = term.match(/^([A-Za-z0-9./_-]+)\s*(==|=|!=)\s*([A-Za-z0-9._-]*)$/);
    if (m) {
      const [, key, op, value] = m;
      return (l: Record<string, string>) => op === "!=" ? l[key] !== value : l[key] === value;
    }
    m = term.match(/^(!?)([A-Za-z0-9./_-]+)$/);
    if (m) return (l: Record<string, string>) => (m![2] in l) !== (m![1] === "!");
    throw new SelectorError(`unable to parse requirement: "${term}"`);
  });
  return (labels) => tests.every((t) => t(labels ?? {}));
}

function status(code: number, reason: string, message: string): Response {
  return Response.json({
    kind: "Status",
    apiVersion: "v1",
    metadata: {},
    status: "Failure",
    message,
    reason,
    code,
  }, { status: code });
}

const KIND_OF: Record<string, { kind: string; apiVersion: string; group: string }> = {
  jobs: { kind: "Job", apiVersion: "batch/v1", group: "batch" },
  pods: { kind: "Pod", apiVersion: "v1", group: "" },
  configmaps: { kind: "ConfigMap", apiVersion: "v1", group: "" },
  secrets: { kind: "Secret", apiVersion: "v1", group: "" },
  networkpolicies: {
    kind: "NetworkPolicy",
    apiVersion: "networking.k8s.io/v1",
    group: "networking.k8s.io",
  },
};

/**
 * The fake API server.
 *
 * @example
 * ```ts ignore
 * const fake = new FakeK8s();
 * fake.script = () => ({ exit_code: 0, logs: "ok\n" });
 * const kc = fake.kubeConfig(); // point @kubernetes/client-node at it
 * await fake.close();
 * ```
 */
export class FakeK8s {
  /** How each Job's agent ends in `script` mode (default: succeeds at once). */
  script: (job: K8sObject) => JobScript = () => ({ exit_code: 0 });
  /** `script` (the default) or `exec` (containers really run; see `fake_kubelet.ts`). */
  mode: "script" | "exec" = "script";
  /** When true, Job status changes are applied without a watch event (a missed event). */
  silent = false;
  /** Images the fake kubelet cannot pull (their containers wait in `ErrImagePull`). */
  readonly unpullable = new Set<string>();
  /** `exec` mode: host paths every container sees read-only (what its image would hold). */
  readonly imagePaths: string[] = [];
  /** The Role's rules every request is checked against (null: everything is allowed). */
  role: PolicyRule[] | null = loadRole(RBAC_FILE);
  readonly jobs = new Map<string, K8sObject>();
  readonly pods = new Map<string, K8sObject>();
  readonly networkPolicies = new Map<string, K8sObject>();
  readonly configMaps = new Map<string, K8sObject>();
  readonly secrets = new Map<string, K8sObject>();
  /** Every request, as `METHOD path?query` (for assertions on what the client did). */
  readonly requests: string[] = [];
  /** The access each request needed, and whether RBAC granted it. */
  readonly accessLog: Array<Access & { allowed: boolean }> = [];
  /** The running pods (the kubelet's), by `namespace/name`. */
  readonly runs = new Map<string, PodRun>();
  #rv = 100;
  #history: WatchEvent[] = [];
  #watchers = new Set<
    { selector: string | null; send: (e: WatchEvent) => void; end: () => void }
  >();
  #timers = new Set<ReturnType<typeof setTimeout>>();
  #server: Deno.HttpServer<Deno.NetAddr>;

  constructor() {
    this.#server = Deno.serve(
      { hostname: "127.0.0.1", port: 0, onListen: () => {} },
      (req) => this.#handle(req),
    );
  }

  /** Base URL of the fake API server. */
  get url(): string {
    return `http://127.0.0.1:${this.#server.addr.port}`;
  }

  /** A KubeConfig that points `@kubernetes/client-node` at this fake. */
  kubeConfig(namespace = "default"): KubeConfig {
    const kc = new KubeConfig();
    kc.loadFromOptions({
      clusters: [{ name: "fake", server: this.url, skipTLSVerify: true }],
      users: [{ name: "fake", token: "fake-token" }],
      contexts: [{ name: "fake", cluster: "fake", user: "fake", namespace }],
      currentContext: "fake",
    });
    return kc;
  }

  /** Ends every open watch stream (as an API server or a load balancer may). */
  dropWatches(): void {
    for (const watcher of this.#watchers) watcher.end();
    this.#watchers.clear();
  }

  /** Number of open watch streams. */
  get watchCount(): number {
    return this.#watchers.size;
  }

  /** The logs of a pod's container (what `kubectl logs -c` prints). */
  podLog(key: string, container: string): string {
    return this.runs.get(key)?.logs.get(container) ?? "";
  }

  async close(): Promise<void> {
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    for (const run of this.runs.values()) run.stop();
    this.dropWatches();
    await this.#server.shutdown();
  }

  #emit(type: WatchEvent["type"], object: K8sObject): void {
    const event = { rv: this.#rv, type, object: structuredClone(object) };
    this.#history.push(event);
    if (this.silent && type === "MODIFIED") return;
    for (const watcher of this.#watchers) {
      if (selectorMatcher(watcher.selector)(object.metadata?.labels)) watcher.send(event);
    }
  }

  #later(ms: number, fn: () => void): void {
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      fn();
    }, ms);
    this.#timers.add(timer);
  }

  #bump(object: K8sObject): void {
    this.#rv++;
    object.metadata.resourceVersion = String(this.#rv);
  }

  /** The Job controller's verdict once its (single, backoffLimit 0) pod ended. */
  #finishJob(key: string, phase: "Succeeded" | "Failed" | "DeadlineExceeded"): void {
    const job = this.jobs.get(key);
    if (!job || job.status?.conditions?.length) return;
    const now = new Date().toISOString();
    const condition = (type: string, reason: string, message: string) => ({
      type,
      status: "True",
      reason,
      message,
      lastProbeTime: now,
      lastTransitionTime: now,
    });
    if (phase === "Succeeded") {
      job.status = {
        ...job.status,
        active: 0,
        ready: 0,
        succeeded: 1,
        completionTime: now,
        conditions: [
          condition(
            "SuccessCriteriaMet",
            "CompletionsReached",
            "Reached expected number of succeeded pods",
          ),
          condition("Complete", "CompletionsReached", "Reached expected number of succeeded pods"),
        ],
      };
    } else {
      const reason = phase === "DeadlineExceeded" ? "DeadlineExceeded" : "BackoffLimitExceeded";
      const message = phase === "DeadlineExceeded"
        ? "Job was active longer than specified deadline"
        : "Job has reached the specified backoff limit";
      job.status = {
        ...job.status,
        active: 0,
        ready: 0,
        failed: 1,
        conditions: [
          condition("FailureTarget", reason, message),
          condition("Failed", reason, message),
        ],
      };
    }
    this.#bump(job);
    this.#emit("MODIFIED", job);
  }

  #host(): KubeletHost {
    return {
      object: (kind, ns, name) =>
        (kind === "Secret" ? this.secrets : this.configMaps).get(`${ns}/${name}`),
      changed: () => {},
      unpullable: this.unpullable,
      mode: this.mode,
      script: this.script,
      imagePaths: this.imagePaths,
    };
  }

  #startPod(ns: string, pod: K8sObject, job: K8sObject | null): void {
    const key = `${ns}/${pod.metadata.name}`;
    this.pods.set(key, pod);
    const run = new PodRun(pod, job, this.#host());
    this.runs.set(key, run);
    run.run().then((phase) => {
      if (!job || phase === null) return;
      this.#finishJob(`${ns}/${job.metadata.name}`, phase);
    }, (error) => {
      console.error(`fake kubelet: pod ${key}: ${error}`);
      pod.status.phase = "Failed";
      if (job) this.#finishJob(`${ns}/${job.metadata.name}`, "Failed");
    });
  }

  #createJob(ns: string, body: K8sObject): Response {
    const name = body.metadata.name;
    const key = `${ns}/${name}`;
    if (this.jobs.has(key)) {
      return status(409, "AlreadyExists", `jobs.batch "${name}" already exists`);
    }
    this.#rv++;
    const uid = crypto.randomUUID();
    const now = new Date().toISOString();
    const job: K8sObject = {
      ...structuredClone(body),
      metadata: {
        ...structuredClone(body.metadata),
        namespace: ns,
        uid,
        resourceVersion: String(this.#rv),
        creationTimestamp: now,
        generation: 1,
      },
      status: { active: 1, ready: 0, startTime: now },
    };
    // The API server defaults the selector and the pod labels the Job controller matches on.
    const jobLabels = {
      "batch.kubernetes.io/controller-uid": uid,
      "batch.kubernetes.io/job-name": name,
    };
    job.spec.selector = { matchLabels: { "batch.kubernetes.io/controller-uid": uid } };
    job.spec.template.metadata = {
      ...(job.spec.template.metadata ?? {}),
      labels: { ...(job.spec.template.metadata?.labels ?? {}), ...jobLabels, "job-name": name },
    };
    this.jobs.set(key, job);
    this.#emit("ADDED", job);
    const pod: K8sObject = {
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name: `${name}-${uid.slice(0, 5)}`,
        namespace: ns,
        uid: crypto.randomUUID(),
        labels: structuredClone(job.spec.template.metadata.labels),
        ownerReferences: [{ apiVersion: "batch/v1", kind: "Job", name, uid, controller: true }],
      },
      spec: structuredClone(job.spec.template.spec),
      status: { phase: "Pending" },
    };
    this.#startPod(ns, pod, job);
    const deadline = job.spec.activeDeadlineSeconds;
    if (typeof deadline === "number") {
      this.#later(deadline * 1000, () => {
        const current = this.jobs.get(key);
        if (!current || current.status?.conditions?.length) return;
        this.runs.get(`${ns}/${pod.metadata.name}`)?.stop();
        pod.status.phase = "Failed";
        pod.status.reason = "DeadlineExceeded";
        this.#finishJob(key, "DeadlineExceeded");
      });
    }
    return Response.json(job, { status: 201 });
  }

  /** PUT/PATCH of a Job: the template and selector cannot change (422, as the real server). */
  #updateJob(key: string, job: K8sObject, body: K8sObject, patch: boolean): Response {
    const next = patch ? mergePatch(structuredClone(job), body) : body;
    for (const field of ["template", "selector"]) {
      const before = JSON.stringify(job.spec?.[field] ?? null);
      const after = JSON.stringify(next.spec?.[field] ?? (patch ? job.spec?.[field] : null));
      if (before !== after) {
        return status(
          422,
          "Invalid",
          `Job.batch "${job.metadata.name}" is invalid: spec.${field}: Invalid value: ` +
            `core.PodTemplateSpec{…}: field is immutable`,
        );
      }
    }
    next.status = job.status;
    next.metadata = { ...job.metadata, ...next.metadata, uid: job.metadata.uid };
    this.#bump(next);
    this.jobs.set(key, next);
    this.#emit("MODIFIED", next);
    return Response.json(next);
  }

  #watch(selector: string | null, rv: string | null, objects: K8sObject[]): Response {
    const encoder = new TextEncoder();
    const match = selectorMatcher(selector);
    let watcher: { selector: string | null; send: (e: WatchEvent) => void; end: () => void };
    const body = new ReadableStream<Uint8Array>({
      start: (controller) => {
        const write = (type: string, object: K8sObject) => {
          try {
            controller.enqueue(encoder.encode(JSON.stringify({ type, object }) + "\n"));
          } catch { /* closed */ }
        };
        if (rv) {
          for (const e of this.#history) {
            if (e.rv > Number(rv) && match(e.object.metadata?.labels)) write(e.type, e.object);
          }
        } else {
          for (const object of objects) write("ADDED", object);
        }
        watcher = {
          selector,
          send: (e) => write(e.type, e.object),
          end: () => {
            try {
              controller.close();
            } catch { /* closed */ }
          },
        };
        this.#watchers.add(watcher);
      },
      cancel: () => {
        this.#watchers.delete(watcher);
      },
    });
    return new Response(body, {
      headers: { "content-type": "application/json", "transfer-encoding": "chunked" },
    });
  }

  #store(plural: string): Map<string, K8sObject> {
    return plural === "jobs"
      ? this.jobs
      : plural === "pods"
      ? this.pods
      : plural === "configmaps"
      ? this.configMaps
      : plural === "secrets"
      ? this.secrets
      : this.networkPolicies;
  }

  /** Validates a written object as the API server does; a Response when it is refused. */
  #admit(ns: string, plural: string, body: K8sObject): Response | null {
    const { kind, apiVersion } = KIND_OF[plural];
    if (body?.kind !== kind || body?.apiVersion !== apiVersion) {
      return status(
        400,
        "BadRequest",
        `the body is a ${body?.apiVersion}/${body?.kind}, not a ${apiVersion}/${kind}`,
      );
    }
    if (body.metadata?.namespace && body.metadata.namespace !== ns) {
      return status(
        400,
        "BadRequest",
        "the namespace of the provided object does not match the namespace sent on the request",
      );
    }
    const errors = schemaErrors(body);
    if (errors.length) {
      return status(
        422,
        "Invalid",
        `${kind} "${body.metadata?.name ?? ""}" is invalid: ${errors.join(", ")}`,
      );
    }
    if (kind === "Secret" && body.stringData) {
      body.data = { ...(body.data ?? {}) };
      for (const [k, v] of Object.entries(body.stringData as Record<string, string>)) {
        body.data[k] = btoa(v);
      }
      delete body.stringData;
    }
    return null;
  }

  async #handle(req: Request): Promise<Response> {
    const url = new URL(req.url);
    this.requests.push(`${req.method} ${url.pathname}${url.search}`);
    const access = accessOf(req.method, url);
    if (!access) {
      await req.body?.cancel();
      return status(404, "NotFound", `the server could not find ${url.pathname}`);
    }
    const granted = this.role === null || allowed(this.role, access);
    this.accessLog.push({ ...access, allowed: granted });
    if (!granted) {
      await req.body?.cancel();
      const group = access.group ? `${access.resource}.${access.group}` : access.resource;
      return status(
        403,
        "Forbidden",
        `${group}${access.name ? ` "${access.name}"` : ""} is forbidden: User ` +
          `"system:serviceaccount:reins:reins-controller" cannot ${access.verb} resource ` +
          `"${access.resource}" in API group "${access.group}" in the namespace "${access.namespace}"`,
      );
    }
    let match: (labels: Record<string, string> | undefined) => boolean;
    try {
      match = selectorMatcher(url.searchParams.get("labelSelector"));
    } catch (error) {
      return status(400, "BadRequest", (error as Error).message);
    }
    const plural = access.resource.split("/")[0];
    if (!(plural in KIND_OF)) return status(404, "NotFound", `no resource ${plural}`);
    const { kind, apiVersion } = KIND_OF[plural];
    const store = this.#store(plural);
    const ns = access.namespace;
    const name = access.name;
    const body = ["POST", "PUT", "PATCH"].includes(req.method) ? await req.json() : null;
    if (!name && req.method === "POST") {
      const refused = this.#admit(ns, plural, body);
      if (refused) return refused;
      if (plural === "jobs") return this.#createJob(ns, body);
      const key = `${ns}/${body.metadata.name}`;
      if (store.has(key)) {
        return status(409, "AlreadyExists", `${plural} "${body.metadata.name}" already exists`);
      }
      const object = {
        ...body,
        metadata: { ...body.metadata, namespace: ns, uid: crypto.randomUUID() },
      };
      this.#bump(object);
      if (plural === "pods") this.#startPod(ns, object, null);
      else store.set(key, object);
      return Response.json(object, { status: 201 });
    }
    if (!name && req.method === "GET") {
      const items = [...store.values()].filter((o) =>
        o.metadata.namespace === ns && match(o.metadata.labels)
      );
      if (url.searchParams.get("watch") === "true") {
        return this.#watch(
          url.searchParams.get("labelSelector"),
          url.searchParams.get("resourceVersion"),
          items,
        );
      }
      return Response.json({
        kind: `${kind}List`,
        apiVersion,
        metadata: { resourceVersion: String(this.#rv) },
        items,
      });
    }
    const key = `${ns}/${name}`;
    const object = store.get(key);
    if (!object) return status(404, "NotFound", `${plural} "${name}" not found`);
    if (access.resource === "pods/log") {
      const containers = object.spec.containers.map((c: K8sObject) => c.name);
      const container = url.searchParams.get("container") ??
        (containers.length === 1 ? containers[0] : null);
      if (!container) {
        return status(
          400,
          "BadRequest",
          `a container name must be specified for pod ${name}, choose one of: [${
            containers.join(" ")
          }]`,
        );
      }
      return new Response(this.podLog(key, container), {
        headers: { "content-type": "text/plain" },
      });
    }
    if (req.method === "GET") return Response.json(object);
    if (req.method === "PUT" || req.method === "PATCH") {
      if (plural === "jobs") return this.#updateJob(key, object, body, req.method === "PATCH");
      const next = req.method === "PATCH" ? mergePatch(structuredClone(object), body) : body;
      const refused = this.#admit(ns, plural, next);
      if (refused) return refused;
      next.metadata = { ...next.metadata, namespace: ns, uid: object.metadata.uid };
      this.#bump(next);
      store.set(key, next);
      return Response.json(next);
    }
    if (req.method === "DELETE") {
      await req.body?.cancel();
      store.delete(key);
      if (plural === "pods") this.runs.get(key)?.stop();
      if (plural === "jobs") {
        for (const [podKey, pod] of this.pods) {
          if (pod.metadata.namespace === ns && pod.metadata.labels?.["job-name"] === name) {
            this.runs.get(podKey)?.stop();
            this.pods.delete(podKey);
          }
        }
        // The garbage collector: what the Job owns goes with it.
        for (const owned of [this.configMaps, this.secrets]) {
          for (const [k, o] of owned) {
            if (o.metadata.ownerReferences?.some((r: K8sObject) => r.uid === object.metadata.uid)) {
              owned.delete(k);
            }
          }
        }
        this.#rv++;
        this.#emit("DELETED", {
          ...object,
          metadata: { ...object.metadata, resourceVersion: String(this.#rv) },
        });
      }
      return Response.json({ kind: "Status", apiVersion: "v1", status: "Success", metadata: {} });
    }
    return status(405, "MethodNotAllowed", `${req.method} is not supported`);
  }
}

/** RFC 7386 JSON merge patch (what `kubectl patch --type merge` sends). */
function mergePatch(target: K8sObject, patch: K8sObject): K8sObject {
  for (const [k, v] of Object.entries(patch ?? {})) {
    if (v === null) delete target[k];
    else if (typeof v === "object" && !Array.isArray(v) && typeof target[k] === "object") {
      target[k] = mergePatch(target[k] ?? {}, v);
    } else target[k] = v;
  }
  return target;
}
