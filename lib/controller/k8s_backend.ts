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
 * - Verification (a harness spec named `k8s`, see `k8s_pod.ts`): the agent runs as an init
 *   container, the verifier after it, and the reporter — the only container that mounts the
 *   reporter key — posts the reward; the controller reads what was posted from the reporter's
 *   termination message (`info.verification`) and posts the verifier's logs as `system` events.
 *   The agent's capability token cannot post a reward (the gateway refuses it: 403).
 * - Images are probed before the first Job that uses them (`k8s_probe.ts`).
 *
 * @module
 */
import {
  BatchV1Api,
  CoreV1Api,
  type KubeConfig,
  NetworkingV1Api,
  type V1ConfigMap,
  type V1Job,
  type V1Secret,
  Watch,
} from "@kubernetes/client-node";
import type { JsonObject } from "../schema.ts";
import type { AttemptHandle, AttemptOutcome, AttemptSpec, ExecutionBackend } from "./backend.ts";
import { SpecError } from "./backend.ts";
import { jobName, jobOutcome, LABEL, labelValue } from "./k8s_job.ts";
import {
  type NetworkPolicyConfig,
  ownedBy,
  type SharedObject,
  sharedObjects,
} from "./k8s_manifests.ts";
import { apiMessage, codeOf, collectPods } from "./k8s_outcome.ts";
import { renderAttempt, type RenderedAttempt, VERIFIER_COMMAND } from "./k8s_pod.ts";
import { ImageProbe } from "./k8s_probe.ts";

export { jobName, jobOutcome, labelValue, renderJob } from "./k8s_job.ts";
export type { EgressRule, NetworkPolicyConfig, SharedObject } from "./k8s_manifests.ts";

export { type RenderedAttempt, VERIFIER_COMMAND } from "./k8s_pod.ts";
export { dryRunObjects, type DryRunOptions, dryRunYaml } from "./k8s_dry_run.ts";

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
  /**
   * The gateway's reporter key: stored in a Secret mounted only into each verified pod's
   * reporter container. Needed by rollouts whose harness spec is named `k8s`.
   */
  reporterKey?: string;
  /** Image of the verifier and reporter containers (default `reins-runner:latest`). */
  runnerImage?: string;
  /** Command of `k8s_verifier.ts` in the runner image (default {@link VERIFIER_COMMAND}). */
  verifierCommand?: string[];
  /** Probe each image with a Pod before Jobs use it (default on, 300 s per image). */
  imageCheck?: { timeoutMs?: number; pollMs?: number } | false;
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
  readonly #options:
    & Required<
      Omit<K8sBackendOptions, "template" | "networkPolicy" | "reporterKey" | "imageCheck">
    >
    & {
      template: JsonObject | undefined;
      networkPolicy: K8sBackendOptions["networkPolicy"];
      reporterKey: string | undefined;
    };
  readonly #probe: ImageProbe | null;
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
      runnerImage: "reins-runner:latest",
      verifierCommand: VERIFIER_COMMAND,
      ...options,
      template: options.template,
      networkPolicy: options.networkPolicy,
      reporterKey: options.reporterKey,
    };
    this.#batch = options.kubeConfig.makeApiClient(BatchV1Api);
    this.#core = options.kubeConfig.makeApiClient(CoreV1Api);
    this.#net = options.kubeConfig.makeApiClient(NetworkingV1Api);
    this.#watch = new Watch(options.kubeConfig);
    this.#probe = options.imageCheck === false ? null : new ImageProbe(
      this.#core,
      options.namespace,
      options.controller,
      { timeoutMs: 300_000, pollMs: 500, ...options.imageCheck },
    );
  }

  get #selector(): string {
    return `${LABEL}/managed-by=reins,${LABEL}/controller=${labelValue(this.#options.controller)}`;
  }

  /** Creates the NetworkPolicy and starts the watch and the repairing list (once). */
  #init(): Promise<void> {
    this.#ready ??= (async () => {
      for (const object of this.sharedObjects()) await this.#apply(object);
      this.#startWatch();
      this.#resync = setInterval(() => this.#repair(), this.#options.resyncMs);
    })();
    return this.#ready;
  }

  /** The controller-wide objects this backend applies: NetworkPolicy, reporter Secret, shim. */
  sharedObjects(): SharedObject[] {
    return sharedObjects(
      this.#options.controller,
      this.#options.networkPolicy,
      this.#options.reporterKey,
    );
  }

  /** Creates an object, or replaces it when it exists (409). */
  async #apply(body: SharedObject): Promise<void> {
    const namespace = this.#options.namespace;
    const name = body.metadata!.name!;
    try {
      if (body.kind === "NetworkPolicy") {
        await this.#net.createNamespacedNetworkPolicy({ namespace, body: body as never });
      } else if (body.kind === "Secret") {
        await this.#core.createNamespacedSecret({ namespace, body: body as never });
      } else await this.#core.createNamespacedConfigMap({ namespace, body: body as never });
    } catch (error) {
      if (codeOf(error) !== 409) throw error;
      if (body.kind === "NetworkPolicy") {
        await this.#net.replaceNamespacedNetworkPolicy({ namespace, name, body: body as never });
      } else if (body.kind === "Secret") {
        await this.#core.replaceNamespacedSecret({ namespace, name, body: body as never });
      } else await this.#core.replaceNamespacedConfigMap({ namespace, name, body: body as never });
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
    let failedStage: { container: string; exitCode: number } | null = null;
    try {
      const facts = await collectPods(this.#core, this.#options.namespace, name, spec.log);
      info.pods = facts.pods;
      exitCode = facts.exitCode;
      failedStage = facts.failedStage;
      if (facts.verification) info.verification = facts.verification;
    } catch (error) {
      info.log_error = apiMessage(error);
    }
    const stages = job.metadata?.annotations?.[`${LABEL}/sandbox-stages`];
    if (stages) info.sandbox_stages = JSON.parse(stages);
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
    let error = verdict.error;
    if (verdict.status === "failed") {
      error = failedStage && exitCode !== null && exitCode === 0 || failedStage && exitCode === null
        ? `${verdict.error} (${failedStage.container} exit code ${failedStage.exitCode})`
        : exitCode !== null
        ? `${verdict.error} (exit code ${exitCode})`
        : verdict.error;
    }
    return {
      status: verdict.status,
      exit_code: exitCode ?? (verdict.status === "succeeded" ? 0 : null),
      error,
      // A verified pod's reward was posted by its reporter (reporter key), never by the
      // controller on the pod's word: `info.verification` records what it posted.
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

  /**
   * Renders an attempt as the backend would create it (no API calls): the Job and, for a
   * verified harness (`config.harness.name === "k8s"`), the pod layout and its objects.
   */
  render(
    spec: Pick<AttemptSpec, "rollout" | "attempt" | "token" | "gatewayUrl">,
  ): Promise<RenderedAttempt> {
    return renderAttempt(spec, {
      controller: this.#options.controller,
      template: this.#options.template,
      ttlSecondsAfterFinished: this.#options.ttlSecondsAfterFinished,
      runnerImage: this.#options.runnerImage,
      verifierCommand: this.#options.verifierCommand,
      reporterKey: this.#options.reporterKey,
      networkPolicy: Boolean(this.#options.networkPolicy),
    });
  }

  async start(spec: AttemptSpec): Promise<AttemptHandle> {
    const { job: body, objects } = await this.render(spec);
    await this.#init();
    const pod = body.spec!.template.spec!;
    await this.#probe?.ensure(pod);
    const name = body.metadata!.name!;
    const watched = this.#track(spec, name);
    await this.#rateLimit();
    try {
      // The objects the pod mounts first: a pod waits for a missing one, but why make it.
      for (const object of [objects.configMap, objects.secret]) {
        if (object) await this.#create(object);
      }
      const created = await this.#batch.createNamespacedJob({
        namespace: this.#options.namespace,
        body,
      });
      watched.createdAt = Date.now();
      // Owned by the Job from now on: the TTL's deletion (or anyone's) takes them along.
      for (const object of [objects.configMap, objects.secret]) {
        if (object) await this.#own(ownedBy(object, created)).catch(() => {});
      }
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
      await this.#delete(name).catch(() => {}); // the task files and answers made for it
      if (code === 422 || code === 400) {
        throw new SpecError("config.template", `rejected by the API server: ${apiMessage(error)}`);
      }
      throw new Error(`creating job ${name} failed: ${apiMessage(error)}`);
    }
    return watched.handle;
  }

  /** Replaces a per-attempt object with its owned copy (best effort: release deletes it too). */
  async #own(body: V1ConfigMap | V1Secret): Promise<void> {
    const namespace = this.#options.namespace;
    const name = body.metadata!.name!;
    if (body.kind === "Secret") await this.#core.replaceNamespacedSecret({ namespace, name, body });
    else await this.#core.replaceNamespacedConfigMap({ namespace, name, body });
  }

  /** Creates a per-attempt ConfigMap or Secret (409: this attempt's own, from an earlier try). */
  async #create(body: V1ConfigMap | V1Secret): Promise<void> {
    const namespace = this.#options.namespace;
    try {
      if (body.kind === "Secret") await this.#core.createNamespacedSecret({ namespace, body });
      else await this.#core.createNamespacedConfigMap({ namespace, body });
    } catch (error) {
      if (codeOf(error) !== 409) throw error;
    }
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
    const namespace = this.#options.namespace;
    const gone = (error: unknown) => {
      if (codeOf(error) !== 404) throw error;
    };
    await this.#batch.deleteNamespacedJob({ namespace, name, propagationPolicy: "Background" })
      .catch(gone);
    // The task files and answers of a verified attempt (none for others: 404).
    await this.#core.deleteNamespacedConfigMap({ namespace, name: `${name}-task` }).catch(gone);
    await this.#core.deleteNamespacedSecret({ namespace, name: `${name}-answers` }).catch(gone);
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
