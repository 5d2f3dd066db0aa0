/**
 * What a finished Kubernetes attempt left: its pods' container statuses and logs. The agent's
 * containers' logs become `stdout` log chunks; the verifier's and reporter's logs `system`
 * chunks (each under a header naming the container); the reporter's termination message (what it
 * posted with the reporter key) becomes `info.verification`.
 *
 * @module
 */
import type { CoreV1Api, V1ContainerStatus, V1Pod } from "@kubernetes/client-node";
import type { JsonObject } from "../schema.ts";
import type { LogChunk } from "./backend.ts";
import { CONTAINERS } from "./k8s_pod.ts";

/** What the pods of a Job say. */
export interface PodFacts {
  /** Exit code of the agent (its last container that ended), null when none ended. */
  exitCode: number | null;
  /** The first reins container that failed, with its exit code. */
  failedStage: { container: string; exitCode: number } | null;
  /** The reporter's termination message, parsed, when it posted. */
  verification: JsonObject | null;
  pods: string[];
}

const REINS = new Set<string>(Object.values(CONTAINERS));

function terminated(status: V1ContainerStatus | undefined) {
  return status?.state?.terminated ?? null;
}

/**
 * Reads the facts of a pod (no API calls).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { podFacts } from "./k8s_outcome.ts";
 * const ended = (name: string, exitCode: number, message?: string) => ({
 *   name, image: "x", imageID: "", ready: false, restartCount: 0,
 *   state: { terminated: { exitCode, ...(message ? { message } : {}) } },
 * });
 * const facts = podFacts([{
 *   metadata: { name: "p" },
 *   status: {
 *     initContainerStatuses: [ended("agent", 0), ended("reins-verify", 0)],
 *     containerStatuses: [ended("reins-report", 0, '{"reward":1,"posted":true}')],
 *   },
 * }]);
 * assert.equal(facts.exitCode, 0);
 * assert.deepEqual(facts.verification, { reward: 1, posted: true });
 * ```
 */
export function podFacts(pods: V1Pod[]): PodFacts {
  const facts: PodFacts = { exitCode: null, failedStage: null, verification: null, pods: [] };
  for (const pod of pods) {
    facts.pods.push(pod.metadata?.name ?? "");
    const statuses = [
      ...(pod.status?.initContainerStatuses ?? []),
      ...(pod.status?.containerStatuses ?? []),
    ];
    for (const status of statuses) {
      const ended = terminated(status);
      if (!ended) continue;
      if (!REINS.has(status.name)) facts.exitCode = ended.exitCode;
      else if (ended.exitCode !== 0 && !facts.failedStage) {
        facts.failedStage = { container: status.name, exitCode: ended.exitCode };
      }
      if (status.name === CONTAINERS.report && ended.exitCode === 0 && ended.message) {
        try {
          const parsed = JSON.parse(ended.message);
          if (parsed && typeof parsed === "object") facts.verification = parsed;
        } catch { /* not the reporter's JSON: no verification */ }
      }
    }
  }
  return facts;
}

/** Fetches the pods of a Job, posts their logs through `log`, and returns their facts. */
export async function collectPods(
  core: CoreV1Api,
  namespace: string,
  job: string,
  log: (chunk: LogChunk) => void,
): Promise<PodFacts> {
  const list = await core.listNamespacedPod({ namespace, labelSelector: `job-name=${job}` });
  const offsets = { stdout: 0, system: 0 };
  const encoder = new TextEncoder();
  const emit = (stream: "stdout" | "system", text: string) => {
    const end = offsets[stream] + encoder.encode(text).length;
    log({ stream, offset: offsets[stream], end, text });
    offsets[stream] = end;
  };
  for (const pod of list.items) {
    const containers = [...(pod.spec?.initContainers ?? []), ...(pod.spec?.containers ?? [])];
    for (const container of containers) {
      const text = String(
        await core.readNamespacedPodLog({
          namespace,
          name: pod.metadata!.name!,
          container: container.name,
        }).catch(() => ""),
      );
      if (!text) continue;
      if (REINS.has(container.name)) emit("system", `--- ${container.name} ---\n${text}`);
      else emit("stdout", text);
    }
  }
  return podFacts(list.items);
}

/** The HTTP status of a client error (null when it has none). */
export function codeOf(error: unknown): number | null {
  const code = (error as { code?: unknown } | null)?.code;
  return typeof code === "number" ? code : null;
}

/** The API server's message of a client error (its Status body), else the error's first line. */
export function apiMessage(error: unknown): string {
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
