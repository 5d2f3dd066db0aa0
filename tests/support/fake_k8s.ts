/**
 * An in-process fake of the Kubernetes API server, with the real JSON shapes, for testing the
 * Kubernetes backend without a cluster. It covers what the backend uses: Jobs (create with 409 on
 * conflict and 422 on invalid specs, get, list with label selectors, watch as chunked JSON lines
 * that a test can drop, delete), Pods of a Job (list, logs) and NetworkPolicies.
 *
 * Jobs "run" by a script the test sets: when a Job is created, `script(job)` says how it ends
 * (exit code, logs, delay) or that it hangs until its `activeDeadlineSeconds`.
 *
 * @module
 */
import { KubeConfig } from "@kubernetes/client-node";

/** A Kubernetes object as JSON. */
// deno-lint-ignore no-explicit-any
export type K8sObject = Record<string, any>;

/** How a fake Job ends. */
export type JobScript =
  | { exit_code: number; logs?: string; delay_ms?: number }
  | { hang: true; logs?: string };

interface WatchEvent {
  rv: number;
  type: "ADDED" | "MODIFIED" | "DELETED";
  object: K8sObject;
}

/** Parses an equality-based label selector (`a=b,c!=d,e`). */
function matches(labels: Record<string, string> | undefined, selector: string | null): boolean {
  if (!selector) return true;
  for (const term of selector.split(",").map((t) => t.trim()).filter(Boolean)) {
    const neq = term.match(/^([^!=]+)!=(.*)$/);
    const eq = term.match(/^([^!=]+)==?(.*)$/);
    if (neq) {
      if (labels?.[neq[1]] === neq[2]) return false;
    } else if (eq) {
      if (labels?.[eq[1]] !== eq[2]) return false;
    } else if (!(labels && term in labels)) {
      return false;
    }
  }
  return true;
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
  /** How each created Job ends (default: succeeds at once). */
  script: (job: K8sObject) => JobScript = () => ({ exit_code: 0 });
  /** When true, Job status changes are applied without a watch event (a missed event). */
  silent = false;
  readonly jobs = new Map<string, K8sObject>();
  readonly pods = new Map<string, K8sObject>();
  readonly networkPolicies = new Map<string, K8sObject>();
  readonly logs = new Map<string, string>();
  /** Every request, as `METHOD path?query` (for assertions on what the client did). */
  readonly requests: string[] = [];
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

  async close(): Promise<void> {
    for (const timer of this.#timers) clearTimeout(timer);
    this.#timers.clear();
    this.dropWatches();
    await this.#server.shutdown();
  }

  #emit(type: WatchEvent["type"], object: K8sObject): void {
    const event = { rv: this.#rv, type, object: structuredClone(object) };
    this.#history.push(event);
    if (this.silent && type === "MODIFIED") return;
    for (const watcher of this.#watchers) {
      if (matches(object.metadata?.labels, watcher.selector)) watcher.send(event);
    }
  }

  #later(ms: number, fn: () => void): void {
    const timer = setTimeout(() => {
      this.#timers.delete(timer);
      fn();
    }, ms);
    this.#timers.add(timer);
  }

  #finish(key: string, exitCode: number | null, reason: string | null): void {
    const job = this.jobs.get(key);
    if (!job || job.status?.completionTime || job.status?.conditions) return;
    const now = new Date().toISOString();
    const pod = [...this.pods.values()].find((p) =>
      p.metadata.labels["job-name"] === job.metadata.name
    );
    if (pod) {
      pod.status = {
        phase: exitCode === 0 ? "Succeeded" : "Failed",
        containerStatuses: exitCode === null ? [] : [{
          name: pod.spec.containers[0].name,
          state: { terminated: { exitCode, reason: exitCode === 0 ? "Completed" : "Error" } },
        }],
      };
    }
    this.#rv++;
    job.metadata.resourceVersion = String(this.#rv);
    if (exitCode === 0) {
      job.status = {
        succeeded: 1,
        active: 0,
        completionTime: now,
        conditions: [{ type: "Complete", status: "True", lastTransitionTime: now }],
      };
    } else {
      job.status = {
        failed: 1,
        active: 0,
        conditions: [{
          type: "Failed",
          status: "True",
          reason: reason ?? "BackoffLimitExceeded",
          message: reason === "DeadlineExceeded"
            ? "Job was active longer than specified deadline"
            : "Job has reached the specified backoff limit",
          lastTransitionTime: now,
        }],
      };
    }
    this.#emit("MODIFIED", job);
  }

  #createJob(ns: string, body: K8sObject): Response {
    const name = body?.metadata?.name;
    if (!name) return status(422, "Invalid", "Job.batch is invalid: metadata.name: Required value");
    const containers = body?.spec?.template?.spec?.containers;
    if (!Array.isArray(containers) || containers.length === 0) {
      return status(
        422,
        "Invalid",
        `Job.batch "${name}" is invalid: spec.template.spec.containers: Required value`,
      );
    }
    for (const [i, c] of containers.entries()) {
      if (!c?.image) {
        return status(
          422,
          "Invalid",
          `Job.batch "${name}" is invalid: spec.template.spec.containers[${i}].image: Required value`,
        );
      }
    }
    const key = `${ns}/${name}`;
    if (this.jobs.has(key)) {
      return status(409, "AlreadyExists", `jobs.batch "${name}" already exists`);
    }
    this.#rv++;
    const uid = crypto.randomUUID();
    const job: K8sObject = {
      apiVersion: "batch/v1",
      kind: "Job",
      ...structuredClone(body),
      metadata: {
        ...structuredClone(body.metadata),
        namespace: ns,
        uid,
        resourceVersion: String(this.#rv),
        creationTimestamp: new Date().toISOString(),
      },
      status: { active: 1 },
    };
    this.jobs.set(key, job);
    const podName = `${name}-${uid.slice(0, 5)}`;
    this.pods.set(`${ns}/${podName}`, {
      apiVersion: "v1",
      kind: "Pod",
      metadata: {
        name: podName,
        namespace: ns,
        labels: { ...(job.spec.template.metadata?.labels ?? {}), "job-name": name },
      },
      spec: structuredClone(job.spec.template.spec),
      status: { phase: "Running" },
    });
    this.#emit("ADDED", job);
    const script = this.script(job);
    this.logs.set(`${ns}/${podName}`, script.logs ?? "");
    if ("hang" in script) {
      const deadline = job.spec.activeDeadlineSeconds;
      if (typeof deadline === "number") {
        this.#later(deadline * 1000, () => this.#finish(key, null, "DeadlineExceeded"));
      }
    } else {
      this.#later(script.delay_ms ?? 0, () => this.#finish(key, script.exit_code, null));
    }
    return Response.json(job, { status: 201 });
  }

  #watch(selector: string | null, rv: string | null, objects: K8sObject[]): Response {
    const encoder = new TextEncoder();
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
            if (e.rv > Number(rv) && matches(e.object.metadata?.labels, selector)) {
              write(e.type, e.object);
            }
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

  async #handle(req: Request): Promise<Response> {
    const url = new URL(req.url);
    this.requests.push(`${req.method} ${url.pathname}${url.search}`);
    const selector = url.searchParams.get("labelSelector");
    let m = url.pathname.match(/^\/apis\/batch\/v1\/namespaces\/([^/]+)\/jobs(?:\/([^/]+))?$/);
    if (m) {
      const [, ns, name] = m;
      if (!name && req.method === "POST") return this.#createJob(ns, await req.json());
      if (!name && req.method === "GET") {
        const items = [...this.jobs.values()].filter((j) =>
          j.metadata.namespace === ns && matches(j.metadata.labels, selector)
        );
        if (url.searchParams.get("watch") === "true") {
          return this.#watch(selector, url.searchParams.get("resourceVersion"), items);
        }
        return Response.json({
          kind: "JobList",
          apiVersion: "batch/v1",
          metadata: { resourceVersion: String(this.#rv) },
          items,
        });
      }
      const key = `${ns}/${name}`;
      const job = this.jobs.get(key);
      if (!job) return status(404, "NotFound", `jobs.batch "${name}" not found`);
      if (req.method === "GET") return Response.json(job);
      if (req.method === "DELETE") {
        await req.body?.cancel();
        this.jobs.delete(key);
        for (const [podKey, pod] of this.pods) {
          if (pod.metadata.namespace === ns && pod.metadata.labels["job-name"] === name) {
            this.pods.delete(podKey);
          }
        }
        this.#rv++;
        this.#emit("DELETED", {
          ...job,
          metadata: { ...job.metadata, resourceVersion: String(this.#rv) },
        });
        return Response.json({ kind: "Status", apiVersion: "v1", status: "Success", metadata: {} });
      }
    }
    m = url.pathname.match(/^\/api\/v1\/namespaces\/([^/]+)\/pods(?:\/([^/]+)(\/log)?)?$/);
    if (m && req.method === "GET") {
      const [, ns, name, log] = m;
      if (!name) {
        const items = [...this.pods.values()].filter((p) =>
          p.metadata.namespace === ns && matches(p.metadata.labels, selector)
        );
        return Response.json({
          kind: "PodList",
          apiVersion: "v1",
          metadata: { resourceVersion: String(this.#rv) },
          items,
        });
      }
      const pod = this.pods.get(`${ns}/${name}`);
      if (!pod) return status(404, "NotFound", `pods "${name}" not found`);
      if (log) {
        return new Response(this.logs.get(`${ns}/${name}`) ?? "", {
          headers: { "content-type": "text/plain" },
        });
      }
      return Response.json(pod);
    }
    m = url.pathname.match(
      /^\/apis\/networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/networkpolicies(?:\/([^/]+))?$/,
    );
    if (m) {
      const [, ns, name] = m;
      if (!name && req.method === "POST") {
        const body = await req.json();
        const key = `${ns}/${body.metadata.name}`;
        if (this.networkPolicies.has(key)) {
          return status(409, "AlreadyExists", `networkpolicies "${body.metadata.name}" exists`);
        }
        const policy = { apiVersion: "networking.k8s.io/v1", kind: "NetworkPolicy", ...body };
        this.networkPolicies.set(key, policy);
        return Response.json(policy, { status: 201 });
      }
      if (name && req.method === "PUT") {
        const body = await req.json();
        this.networkPolicies.set(`${ns}/${name}`, body);
        return Response.json(body);
      }
      if (name && req.method === "GET") {
        const policy = this.networkPolicies.get(`${ns}/${name}`);
        return policy ? Response.json(policy) : status(404, "NotFound", `${name} not found`);
      }
    }
    await req.body?.cancel();
    return status(404, "NotFound", `the server could not find ${url.pathname}`);
  }
}
