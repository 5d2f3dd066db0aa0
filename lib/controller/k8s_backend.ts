/**
 * The Kubernetes backend: one Job per attempt, rendered from a user template.
 *
 * - Rendering: the rollout's `config.template` (or the backend's default) is a Job fragment;
 *   reins sets the name (derived from the attempt id, so a retried create is a 409 that adopts
 *   the Job instead of starting a second one), labels (`reins.dev/*`, also on the pod),
 *   annotations with the full ids, `backoffLimit: 0` (retries are the controller's, with a new
 *   attempt id), `activeDeadlineSeconds` (the rollout's timeout), `ttlSecondsAfterFinished`,
 *   `restartPolicy: Never`, and the harness env in every container.
 * - Status: a watch on this controller's Jobs gives low latency; a periodic list repairs
 *   whatever a dropped watch missed (the watch restarts after each drop).
 * - Creation is rate limited (a token bucket), pod logs are fetched when a Job finishes and
 *   handed to the log sink, and a NetworkPolicy lets the pods reach only the gateway, DNS and
 *   an allow-list.
 *
 * @module
 */
import {
  BatchV1Api,
  CoreV1Api,
  type KubeConfig,
  NetworkingV1Api,
  type V1Job,
  type V1NetworkPolicy,
  Watch,
} from "@kubernetes/client-node";
import type { JsonObject } from "../schema.ts";
import type {
  AttemptHandle,
  AttemptOutcome,
  AttemptSpec,
  ExecutionBackend,
  LogChunk,
} from "./backend.ts";
import { SpecError } from "./backend.ts";
import { jobName, jobOutcome, LABEL, labelValue, renderJob } from "./k8s_job.ts";

export { jobName, jobOutcome, labelValue, renderJob } from "./k8s_job.ts";

/** An egress destination of the NetworkPolicy. */
export interface EgressRule {
  /** CIDR, e.g. `10.0.0.12/32`. */
  cidr: string;
  /** TCP ports (all when empty). */
  ports?: number[];
}

/** Options of {@link K8sBackend}. */
export interface K8sBackendOptions {
  kubeConfig: KubeConfig;
  namespace: string;
  /** The controller's worker id (labels select this controller's Jobs). */
  controller: string;
  /** Job template used when a rollout has no `config.template`. */
  template?: JsonObject;
  /** `ttlSecondsAfterFinished` of each Job (default 600). */
  ttlSecondsAfterFinished?: number;
  /** Job creations per second (default 5). */
  createPerSecond?: number;
  /** Period of the repairing list (default 10 s). */
  resyncMs?: number;
  /** Delete Jobs when their outcome is recorded (default true; the TTL is the fallback). */
  deleteFinished?: boolean;
  /**
   * NetworkPolicy for the attempt pods: egress only to the gateway, DNS and `allow`.
   * `false` creates none (e.g. a cluster without a policy-enforcing CNI).
   */
  networkPolicy?: NetworkPolicyConfig | false;
}

/** Egress the attempt pods get: the gateway, DNS (default on) and an allow-list. */
export interface NetworkPolicyConfig {
  gateway: EgressRule;
  allow?: EgressRule[];
  dns?: boolean;
}

function codeOf(error: unknown): number | null {
  if (error && typeof error === "object" && "code" in error) {
    const code = (error as { code: unknown }).code;
    return typeof code === "number" ? code : null;
  }
  return null;
}

function apiMessage(error: unknown): string {
  if (error && typeof error === "object" && "body" in error) {
    const body = (error as { body: unknown }).body;
    try {
      const parsed = typeof body === "string" ? JSON.parse(body) : body;
      if (parsed && typeof parsed === "object" && "message" in parsed) {
        return String((parsed as { message: unknown }).message);
      }
    } catch { /* not JSON */ }
  }
  return error instanceof Error ? error.message.split("\n")[0] : String(error);
}

interface Watched {
  spec: AttemptSpec;
  name: string;
  killed: { status: "cancelled" | "lost" | "timeout"; reason: string } | null;
  resolve: (outcome: AttemptOutcome) => void;
  settled: boolean;
  /** When the Job was known to exist (0 until then): a list older than that proves nothing. */
  createdAt: number;
  handle: AttemptHandle;
}

/**
 * Runs attempts as Kubernetes Jobs.
 *
 * @example
 * ```ts ignore
 * import { KubeConfig } from "@kubernetes/client-node";
 * import { K8sBackend } from "./k8s_backend.ts";
 * const kubeConfig = new KubeConfig();
 * kubeConfig.loadFromDefault();
 * const backend = new K8sBackend({ kubeConfig, namespace: "reins", controller: "ctl-1",
 *   networkPolicy: { gateway: { cidr: "10.0.0.12/32", ports: [8420] } } });
 * ```
 */
export class K8sBackend implements ExecutionBackend {
  readonly name = "k8s";
  readonly #options: Required<Omit<K8sBackendOptions, "template" | "networkPolicy">> & {
    template: JsonObject | undefined;
    networkPolicy: K8sBackendOptions["networkPolicy"];
  };
  readonly #batch: BatchV1Api;
  readonly #core: CoreV1Api;
  readonly #net: NetworkingV1Api;
  readonly #watch: Watch;
  readonly #watched = new Map<string, Watched>();
  #ready: Promise<void> | null = null;
  #closed = false;
  #watchAbort: AbortController | null = null;
  #watchRestart: ReturnType<typeof setTimeout> | undefined;
  #resync: ReturnType<typeof setInterval> | undefined;
  #nextCreateAt = 0;
  #finishing = new Set<Promise<void>>();

  constructor(options: K8sBackendOptions) {
    this.#options = {
      ttlSecondsAfterFinished: 600,
      createPerSecond: 5,
      resyncMs: 10_000,
      deleteFinished: true,
      ...options,
      template: options.template,
      networkPolicy: options.networkPolicy,
    };
    this.#batch = options.kubeConfig.makeApiClient(BatchV1Api);
    this.#core = options.kubeConfig.makeApiClient(CoreV1Api);
    this.#net = options.kubeConfig.makeApiClient(NetworkingV1Api);
    this.#watch = new Watch(options.kubeConfig);
  }

  get #selector(): string {
    return `${LABEL}/managed-by=reins,${LABEL}/controller=${labelValue(this.#options.controller)}`;
  }

  /** Creates the NetworkPolicy and starts the watch and the repairing list (once). */
  #init(): Promise<void> {
    this.#ready ??= (async () => {
      if (this.#options.networkPolicy) await this.#ensureNetworkPolicy(this.#options.networkPolicy);
      this.#startWatch();
      this.#resync = setInterval(() => this.#repair(), this.#options.resyncMs);
    })();
    return this.#ready;
  }

  /** The NetworkPolicy this backend applies (exported for inspection and docs). */
  networkPolicy(config: NetworkPolicyConfig): V1NetworkPolicy {
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
      metadata: {
        name: `reins-egress-${labelValue(this.#options.controller)}`.slice(0, 63),
        labels: { [`${LABEL}/managed-by`]: "reins" },
      },
      spec: {
        podSelector: {
          matchLabels: {
            [`${LABEL}/managed-by`]: "reins",
            [`${LABEL}/controller`]: labelValue(this.#options.controller),
          },
        },
        policyTypes: ["Egress"],
        egress,
      },
    };
  }

  async #ensureNetworkPolicy(config: NetworkPolicyConfig) {
    const body = this.networkPolicy(config);
    const namespace = this.#options.namespace;
    try {
      await this.#net.createNamespacedNetworkPolicy({ namespace, body });
    } catch (error) {
      if (codeOf(error) !== 409) throw error;
      await this.#net.replaceNamespacedNetworkPolicy({
        namespace,
        name: body.metadata!.name!,
        body,
      });
    }
  }

  #startWatch(): void {
    if (this.#closed) return;
    const path = `/apis/batch/v1/namespaces/${this.#options.namespace}/jobs`;
    this.#watch.watch(
      path,
      { labelSelector: this.#selector },
      (type: string, job: V1Job) => this.#onJob(type, job),
      () => {
        // Dropped (server timeout, network): list to catch up on what was missed, re-watch.
        this.#watchAbort = null;
        if (this.#closed) return;
        this.#repair();
        this.#watchRestart = setTimeout(() => this.#startWatch(), 200);
      },
    ).then((abort) => {
      this.#watchAbort = abort;
      if (this.#closed) abort.abort();
    }, () => {
      if (!this.#closed) this.#watchRestart = setTimeout(() => this.#startWatch(), 1000);
    });
  }

  /** Periodic list: repairs missed watch events (finished and vanished Jobs). */
  async #repair(): Promise<void> {
    if (this.#closed || this.#watched.size === 0) return;
    let items: V1Job[];
    const listedAt = Date.now();
    try {
      const list = await this.#batch.listNamespacedJob({
        namespace: this.#options.namespace,
        labelSelector: this.#selector,
      });
      items = list.items;
    } catch {
      return; // The next period tries again.
    }
    const seen = new Set<string>();
    for (const job of items) {
      seen.add(job.metadata?.name ?? "");
      this.#onJob("MODIFIED", job);
    }
    for (const watched of this.#watched.values()) {
      if (watched.createdAt > 0 && watched.createdAt < listedAt && !seen.has(watched.name)) {
        this.#onJob("DELETED", { metadata: { name: watched.name } });
      }
    }
  }

  #onJob(type: string, job: V1Job): void {
    const attemptId = job.metadata?.annotations?.[`${LABEL}/attempt-id`];
    const watched = attemptId
      ? this.#watched.get(attemptId)
      : [...this.#watched.values()].find((w) => w.name === job.metadata?.name);
    if (!watched || watched.settled) return;
    if (type === "DELETED") {
      this.#settle(watched, job, watched.killed ?? { status: "lost", reason: "job was deleted" });
      return;
    }
    const outcome = jobOutcome(job);
    if (outcome) this.#settle(watched, job, null);
  }

  #settle(watched: Watched, job: V1Job, killed: Watched["killed"]): void {
    if (watched.settled) return;
    watched.settled = true;
    const finishing = (async () => {
      const outcome = await this.#outcome(watched.spec, watched.name, job, killed);
      this.#watched.delete(watched.spec.attempt.attempt_id);
      watched.resolve(outcome);
    })();
    this.#finishing.add(finishing);
    finishing.finally(() => this.#finishing.delete(finishing));
  }

  async #outcome(
    spec: AttemptSpec,
    name: string,
    job: V1Job,
    killed: Watched["killed"],
  ): Promise<AttemptOutcome> {
    const info: JsonObject = { backend: "k8s", job: name, namespace: this.#options.namespace };
    let exitCode: number | null = null;
    try {
      const pods = await this.#core.listNamespacedPod({
        namespace: this.#options.namespace,
        labelSelector: `job-name=${name}`,
      });
      info.pods = pods.items.map((p) => p.metadata?.name ?? "");
      let offset = 0;
      for (const pod of pods.items) {
        const terminated = pod.status?.containerStatuses?.[0]?.state?.terminated;
        if (terminated) exitCode = terminated.exitCode;
        const log = await this.#core.readNamespacedPodLog({
          namespace: this.#options.namespace,
          name: pod.metadata!.name!,
          container: pod.spec?.containers?.[0]?.name,
        }).catch(() => "");
        if (log) {
          const text = String(log);
          const end = offset + new TextEncoder().encode(text).length;
          spec.log({ stream: "stdout", offset, end, text } satisfies LogChunk);
          offset = end;
        }
      }
    } catch (error) {
      info.log_error = apiMessage(error);
    }
    if (killed) {
      return {
        status: killed.status,
        exit_code: exitCode,
        error: killed.reason,
        reward: null,
        info,
      };
    }
    const verdict = jobOutcome(job) ?? { status: "lost" as const, error: "job vanished" };
    return {
      status: verdict.status,
      exit_code: exitCode ?? (verdict.status === "succeeded" ? 0 : null),
      error: verdict.status === "failed" && exitCode !== null
        ? `${verdict.error} (exit code ${exitCode})`
        : verdict.error,
      reward: null,
      info,
    };
  }

  #track(spec: AttemptSpec, name: string): Watched {
    let resolve!: (outcome: AttemptOutcome) => void;
    const done = new Promise<AttemptOutcome>((r) => resolve = r);
    const watched: Watched = {
      spec,
      name,
      killed: null,
      resolve,
      settled: false,
      createdAt: 0,
      handle: {
        rollout_id: spec.rollout.rollout_id,
        attempt_id: spec.attempt.attempt_id,
        info: { backend: "k8s", job: name, namespace: this.#options.namespace },
        done,
      },
    };
    this.#watched.set(spec.attempt.attempt_id, watched);
    return watched;
  }

  /** Waits for a creation slot of the token bucket. */
  async #rateLimit(): Promise<void> {
    const interval = 1000 / this.#options.createPerSecond;
    const now = Date.now();
    const at = Math.max(now, this.#nextCreateAt);
    this.#nextCreateAt = at + interval;
    if (at > now) await new Promise((resolve) => setTimeout(resolve, at - now));
  }

  async start(spec: AttemptSpec): Promise<AttemptHandle> {
    const template = spec.rollout.config.template ?? this.#options.template;
    if (!template) {
      throw new SpecError("config.template", "the k8s backend needs a Job template");
    }
    const body = await renderJob(spec, template, {
      controller: this.#options.controller,
      ttlSecondsAfterFinished: this.#options.ttlSecondsAfterFinished,
    });
    await this.#init();
    const name = body.metadata!.name!;
    const watched = this.#track(spec, name);
    await this.#rateLimit();
    try {
      await this.#batch.createNamespacedJob({ namespace: this.#options.namespace, body });
      watched.createdAt = Date.now();
    } catch (error) {
      const code = codeOf(error);
      if (code === 409) {
        watched.createdAt = Date.now();
        // Created by an earlier try of this very attempt: adopt it rather than run it twice.
        watched.handle.info.adopted = true;
        this.#repairOne(watched);
        return watched.handle;
      }
      this.#watched.delete(spec.attempt.attempt_id);
      if (code === 422 || code === 400) {
        throw new SpecError("config.template", `rejected by the API server: ${apiMessage(error)}`);
      }
      throw new Error(`creating job ${name} failed: ${apiMessage(error)}`);
    }
    return watched.handle;
  }

  async #repairOne(watched: Watched): Promise<void> {
    try {
      const job = await this.#batch.readNamespacedJob({
        namespace: this.#options.namespace,
        name: watched.name,
      });
      this.#onJob("MODIFIED", job);
    } catch (error) {
      if (codeOf(error) === 404) this.#onJob("DELETED", { metadata: { name: watched.name } });
    }
  }

  async adopt(spec: AttemptSpec): Promise<AttemptHandle | AttemptOutcome | null> {
    const name = await jobName(spec.attempt.attempt_id);
    let job: V1Job;
    try {
      job = await this.#batch.readNamespacedJob({ namespace: this.#options.namespace, name });
    } catch (error) {
      if (codeOf(error) === 404) return null;
      throw error;
    }
    if (jobOutcome(job)) return await this.#outcome(spec, name, job, null);
    await this.#init();
    const watched = this.#track(spec, name);
    watched.createdAt = Date.now();
    watched.handle.info.adopted = true;
    this.#repairOne(watched);
    return watched.handle;
  }

  async kill(attemptId: string, status: "cancelled" | "lost" | "timeout", reason: string) {
    const watched = this.#watched.get(attemptId);
    if (watched) watched.killed ??= { status, reason };
    await this.#delete(watched?.name ?? await jobName(attemptId));
    if (watched) {
      this.#onJob("DELETED", { metadata: { name: watched.name } });
      await watched.handle.done;
    }
  }

  async #delete(name: string): Promise<void> {
    try {
      await this.#batch.deleteNamespacedJob({
        namespace: this.#options.namespace,
        name,
        propagationPolicy: "Background",
      });
    } catch (error) {
      if (codeOf(error) !== 404) throw error;
    }
  }

  async known(): Promise<Array<{ rollout_id: string; attempt_id: string }>> {
    const list = await this.#batch.listNamespacedJob({
      namespace: this.#options.namespace,
      labelSelector: this.#selector,
    });
    return list.items.flatMap((job) => {
      const a = job.metadata?.annotations ?? {};
      const rollout_id = a[`${LABEL}/rollout-id`];
      const attempt_id = a[`${LABEL}/attempt-id`];
      return rollout_id && attempt_id ? [{ rollout_id, attempt_id }] : [];
    });
  }

  async release(attemptId: string): Promise<void> {
    if (!this.#options.deleteFinished) return;
    await this.#delete(await jobName(attemptId));
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearInterval(this.#resync);
    clearTimeout(this.#watchRestart);
    this.#watchAbort?.abort();
    await Promise.allSettled([...this.#finishing]);
  }
}
