/**
 * Image readiness: before the backend creates Jobs with an image, it starts a probe Pod with it
 * (`probePod` in `k8s_manifests.ts`) and waits until the kubelet pulled it (the container
 * started, or ended, or reports an image id) or failed to (`ErrImagePull`, `ImagePullBackOff`,
 * `InvalidImageName`, …). A Job whose image cannot be pulled would otherwise sit `Pending`
 * until its deadline, once per attempt; the probe fails the rollout at once with the reason.
 * Each image is probed once per controller (concurrent starts share the probe); a failed probe
 * is forgotten, so the next attempt probes again (a registry may come back).
 *
 * Hand-written: `@kubernetes/client-node` has no "wait for image" helper.
 *
 * @module
 */
import type { CoreV1Api, V1Pod, V1PodSpec } from "@kubernetes/client-node";
import { SpecError } from "./backend.ts";
import { probePod } from "./k8s_manifests.ts";
import { codeOf } from "./k8s_outcome.ts";

/** Waiting reasons that mean the image will not come (the kubelet's own strings). */
export const PULL_FAILURES = new Set([
  "ErrImagePull",
  "ImagePullBackOff",
  "InvalidImageName",
  "ErrImageNeverPull",
  "RegistryUnavailable",
]);

/** Reasons no retry can fix: the rollout fails at once. */
const PERMANENT = new Set(["InvalidImageName", "ErrImageNeverPull"]);

/**
 * Reads a probe Pod's status: `ready`, a failure reason, or null while it is still pulling.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { probeVerdict } from "./k8s_probe.ts";
 * const waiting = (reason: string) => ({
 *   status: { containerStatuses: [{ name: "probe", image: "x", imageID: "", ready: false,
 *     restartCount: 0, state: { waiting: { reason, message: "not found" } } }] },
 * });
 * assert.deepEqual(probeVerdict(waiting("ContainerCreating")), null);
 * assert.deepEqual(probeVerdict(waiting("ErrImagePull")), {
 *   ready: false,
 *   reason: "ErrImagePull",
 *   message: "not found",
 * });
 * ```
 */
export function probeVerdict(
  pod: V1Pod,
): { ready: true } | { ready: false; reason: string; message: string } | null {
  const status = pod.status?.containerStatuses?.[0];
  if (!status) return pod.status?.phase === "Succeeded" ? { ready: true } : null;
  if (status.state?.running || status.state?.terminated || status.imageID) return { ready: true };
  const waiting = status.state?.waiting;
  if (waiting?.reason && PULL_FAILURES.has(waiting.reason)) {
    return { ready: false, reason: waiting.reason, message: waiting.message ?? "" };
  }
  return null;
}

/** Probes images with Pods in one namespace. */
export class ImageProbe {
  readonly #ready = new Map<string, Promise<void>>();
  /** Images whose probe passed, in order (for `info` and tests). */
  readonly checked: string[] = [];

  constructor(
    readonly core: CoreV1Api,
    readonly namespace: string,
    readonly controller: string,
    readonly options: { timeoutMs: number; pollMs: number } = { timeoutMs: 300_000, pollMs: 500 },
  ) {}

  /**
   * Resolves once every image of `pod` (a Job's pod spec, whose pull secrets, account and node
   * selection the probe copies) is pullable; throws naming the image otherwise.
   */
  async ensure(pod: V1PodSpec): Promise<void> {
    const images = [...(pod.initContainers ?? []), ...pod.containers].map((c) => c.image!);
    await Promise.all([...new Set(images)].map((image) => {
      let ready = this.#ready.get(image);
      if (!ready) {
        ready = this.#probe(image, pod);
        this.#ready.set(image, ready);
        ready.then(() => this.checked.push(image), () => this.#ready.delete(image));
      }
      return ready;
    }));
  }

  async #probe(image: string, like: V1PodSpec): Promise<void> {
    const body = await probePod(this.controller, image, like);
    const name = body.metadata!.name!;
    const namespace = this.namespace;
    try {
      await this.core.createNamespacedPod({ namespace, body });
    } catch (error) {
      if (codeOf(error) !== 409) throw error; // 409: another controller's probe; read it.
    }
    const end = Date.now() + this.options.timeoutMs;
    try {
      while (true) {
        const verdict = probeVerdict(await this.core.readNamespacedPod({ namespace, name }));
        if (verdict?.ready) return;
        if (verdict) {
          const text = `image ${image} cannot be pulled: ${verdict.reason} ${verdict.message}`;
          if (PERMANENT.has(verdict.reason)) {
            throw new SpecError("config.template", text.trim());
          }
          throw new Error(text.trim());
        }
        if (Date.now() > end) {
          throw new Error(`image ${image}: not pulled within ${this.options.timeoutMs} ms`);
        }
        await new Promise((resolve) => setTimeout(resolve, this.options.pollMs));
      }
    } finally {
      await this.core.deleteNamespacedPod({ namespace, name }).catch(() => {});
    }
  }
}
