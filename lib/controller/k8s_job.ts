/**
 * The Job of a Kubernetes attempt, without API calls: its deterministic name, its rendering
 * from the user's template (labels, annotations, deadlines, the harness env) and how its
 * status reads as an attempt outcome. `k8s_backend.ts` creates, watches and deletes them.
 *
 * @module
 */
import type { V1Job } from "@kubernetes/client-node";
import { parseOrThrow, ValidationError } from "../schema.ts";
import { JobTemplateSchema } from "./schema.ts";
import type { AttemptOutcome, AttemptSpec } from "./backend.ts";
import { attemptEnv, SpecError } from "./backend.ts";

/** The label and annotation prefix of everything reins creates. */
export const LABEL = "reins.dev";

/**
 * Makes a string a valid label value (≤63 chars, alphanumeric at both ends).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { labelValue } from "./k8s_job.ts";
 * assert.equal(labelValue("r:1@x"), "r-1-x");
 * ```
 */
export function labelValue(value: string): string {
  const cleaned = value.replace(/[^A-Za-z0-9._-]/g, "-").slice(0, 63);
  return cleaned.replace(/^[^A-Za-z0-9]+/, "").replace(/[^A-Za-z0-9]+$/, "") || "x";
}

async function sha1Hex(text: string): Promise<string> {
  const digest = await crypto.subtle.digest("SHA-1", new TextEncoder().encode(text));
  return [...new Uint8Array(digest)].map((b) => b.toString(16).padStart(2, "0")).join("");
}

/**
 * The Job name of an attempt: deterministic, DNS-1123, ≤63 chars.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { jobName } from "./k8s_job.ts";
 * assert.match(await jobName("a1-7d9a4f6d"), /^reins-[0-9a-f]{20}$/);
 * ```
 */
export async function jobName(attemptId: string): Promise<string> {
  return `reins-${(await sha1Hex(attemptId)).slice(0, 20)}`;
}

/**
 * Renders the Job of an attempt from a template (pure: no API calls).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { openSqliteStore } from "../gateway/sqlite_store.ts";
 * import { renderJob } from "./k8s_job.ts";
 * // A claimed attempt, as the controller gets it from the gateway.
 * const store = openSqliteStore(":memory:");
 * await store.createRollouts([{ rollout_id: "r1", input: "task", config: { timeout_s: 600 } }]);
 * const [{ rollout, attempt }] = await store.claimRollouts({
 *   worker: "ctl-1",
 *   limit: 1,
 *   lease_ms: 60_000,
 * });
 * const spec = { rollout, attempt, token: "rk_…", gatewayUrl: "http://10.0.0.12:8420" };
 * const job = await renderJob(spec, { spec: { template: { spec: { containers: [
 *   { name: "agent", image: "ghcr.io/me/agent:1" },
 * ] } } } }, { controller: "ctl-1", ttlSecondsAfterFinished: 600 });
 * assert.equal(job.spec?.activeDeadlineSeconds, 600); // the rollout's timeout
 * await store.close();
 * ```
 */
export async function renderJob(
  spec: Pick<AttemptSpec, "rollout" | "attempt" | "token" | "gatewayUrl">,
  template: unknown,
  options: { controller: string; ttlSecondsAfterFinished: number },
): Promise<V1Job> {
  let parsed;
  try {
    parsed = parseOrThrow(JobTemplateSchema, template, "config.template");
  } catch (error) {
    if (error instanceof ValidationError) throw new SpecError(error.field, error.message);
    throw error;
  }
  const { rollout, attempt } = spec;
  const job = structuredClone(parsed) as unknown as V1Job & { spec: NonNullable<V1Job["spec"]> };
  const name = await jobName(attempt.attempt_id);
  const labels = {
    [`${LABEL}/managed-by`]: "reins",
    [`${LABEL}/controller`]: labelValue(options.controller),
    [`${LABEL}/rollout-id`]: labelValue(rollout.rollout_id),
    [`${LABEL}/attempt-id`]: labelValue(attempt.attempt_id),
  };
  job.apiVersion = "batch/v1";
  job.kind = "Job";
  job.metadata = {
    ...(job.metadata ?? {}),
    name,
    labels: { ...(job.metadata?.labels ?? {}), ...labels },
    annotations: {
      ...(job.metadata?.annotations ?? {}),
      [`${LABEL}/rollout-id`]: rollout.rollout_id,
      [`${LABEL}/attempt-id`]: attempt.attempt_id,
      [`${LABEL}/attempt-index`]: String(attempt.index),
    },
  };
  delete job.metadata.namespace;
  delete (job.metadata as Record<string, unknown>).generateName;
  job.spec.backoffLimit = 0;
  job.spec.activeDeadlineSeconds = Math.max(1, Math.ceil(rollout.config.timeout_s));
  job.spec.ttlSecondsAfterFinished = options.ttlSecondsAfterFinished;
  const pod = job.spec.template;
  pod.metadata = {
    ...(pod.metadata ?? {}),
    labels: { ...(pod.metadata?.labels ?? {}), ...labels },
  };
  pod.spec!.restartPolicy = "Never";
  const gateway = spec.gatewayUrl.replace(/\/+$/, "");
  const env: Record<string, string> = {
    ...attemptEnv(gateway, rollout.rollout_id, attempt.attempt_id, spec.token),
    REINS_INPUT: JSON.stringify(rollout.input),
  };
  for (const container of pod.spec!.containers) {
    const own = (container.env ?? []).filter((e) => !(e.name in env));
    container.env = [...own, ...Object.entries(env).map(([name, value]) => ({ name, value }))];
  }
  return job;
}

/**
 * How a Job's status reads as an attempt outcome (null while it runs).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { jobOutcome } from "./k8s_job.ts";
 * const failed = { type: "Failed", status: "True", reason: "DeadlineExceeded" };
 * assert.equal(jobOutcome({ status: { conditions: [failed] } })?.status, "timeout");
 * ```
 */
export function jobOutcome(job: V1Job): Pick<AttemptOutcome, "status" | "error"> | null {
  const conditions = job.status?.conditions ?? [];
  const failed = conditions.find((c) => c.type === "Failed" && c.status === "True");
  if (failed) {
    if (failed.reason === "DeadlineExceeded") {
      return { status: "timeout", error: `job deadline exceeded: ${failed.message ?? ""}`.trim() };
    }
    return { status: "failed", error: `job failed: ${failed.reason ?? "unknown"}` };
  }
  if (
    conditions.some((c) => c.type === "Complete" && c.status === "True") ||
    (job.status?.succeeded ?? 0) > 0
  ) {
    return { status: "succeeded", error: null };
  }
  return null;
}
