/**
 * The verified pod of a Kubernetes attempt, without API calls: how a rendered Job becomes
 * "agent, then verifier, then reporter" in one pod, with the volumes each container sees.
 *
 * Init containers run one after another and the next starts only once the previous exited 0:
 *
 * 1. `reins-prepare` (the agent's image; when `workspace` is set): copies the image's pristine
 *    workspace into the `pristine` volume and into the `workspace` volume, the latter without
 *    `.git`.
 * 2. the template's containers (the agent): the `workspace` volume mounted over the image's
 *    workspace path (so the image's copy, history included, is out of sight), `git` replaced by
 *    a shim, `hide` directories covered by empty volumes, the attempt's capability token in its
 *    environment — and nothing else of reins'.
 * 3. `reins-verify` (the runner image): reads the agent's tree read-only, restores `restore`
 *    paths and `.git` from `pristine`, lays the task files (a ConfigMap) into its copy, runs the
 *    reward command with the answers (a Secret) readable, and writes `result.json`. No token and
 *    no reporter key: the tests it runs may execute code the agent wrote.
 * 4. `reins-report` (the only regular container; the runner image): the one container that
 *    mounts the reporter key (a Secret), reads `result.json` and posts the reward; its
 *    termination message tells the controller what it posted. It runs no agent code.
 *
 * The pod gets no service-account token (`automountServiceAccountToken: false`: the agent
 * cannot call the Kubernetes API to read the Secrets) and no service links.
 *
 * @module
 */
import type { V1ConfigMap, V1Container, V1Job, V1Secret, V1Volume } from "@kubernetes/client-node";
import type { JsonObject } from "../schema.ts";
import type { K8sHarness } from "./schema.ts";
import { parseOrThrow, ValidationError } from "../schema.ts";
import { K8sHarnessSchema } from "./schema.ts";
import { type AttemptSpec, SpecError } from "./backend.ts";
import { LABEL, renderJob } from "./k8s_job.ts";
import { sharedNames } from "./k8s_manifests.ts";
import { schemaErrors } from "./k8s_schema.ts";

/** Where the reins containers find their volumes. */
export const POD_PATHS = {
  workspace: "/reins/workspace",
  pristine: "/reins/pristine",
  task: "/reins/task",
  answers: "/reins/answers",
  result: "/reins/result",
  scratch: "/reins/scratch",
  reporter: "/reins/reporter",
} as const;

/** Container names reins adds. */
export const CONTAINERS = {
  prepare: "reins-prepare",
  verify: "reins-verify",
  report: "reins-report",
} as const;

/** What the verified pod needs besides the attempt's spec. */
export interface VerifiedPodOptions {
  /** The runner image (Deno and reins) of the verifier and reporter containers. */
  runnerImage: string;
  /** Command of `lib/controller/k8s_verifier.ts` in that image; `verify`/`report` is appended. */
  verifierCommand: string[];
  /** The Secret holding the reporter key (key `key`). */
  reporterSecret: string;
  /** The ConfigMap holding the `git` shim (key `git`). */
  shimConfigMap: string;
  /** Event key of the reward post (unguessable: the agent cannot pre-empt it). */
  eventKey: string;
}

/** The per-attempt objects created before the Job (task files, answers). */
export interface AttemptObjects {
  configMap: V1ConfigMap | null;
  secret: V1Secret | null;
}

/** Paths of `git` covered by the shim (a subPath mount over each). */
export const GIT_PATHS = ["/usr/bin/git"];

function items(files: Record<string, string>): {
  data: Record<string, string>;
  items: Array<{ key: string; path: string }>;
} {
  const data: Record<string, string> = {};
  const list: Array<{ key: string; path: string }> = [];
  Object.entries(files).forEach(([path, text], i) => {
    // Keys must match [-._a-zA-Z0-9]+: the path goes in `items`, not in the key.
    data[`f${i}`] = text;
    list.push({ key: `f${i}`, path });
  });
  return { data, items: list };
}

function mount(name: string, mountPath: string, readOnly = false) {
  return { name, mountPath, ...(readOnly ? { readOnly: true } : {}) };
}

function env(values: Record<string, string>) {
  return Object.entries(values).map(([name, value]) => ({ name, value }));
}

/**
 * Turns a rendered Job into the verified pod and returns the per-attempt ConfigMap/Secret it
 * mounts (named after the Job). Pure: the caller creates them. Throws on a template that
 * cannot take the layout (the caller reports it as a spec error).
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "../schema.ts";
 * import { K8sHarnessSchema } from "./schema.ts";
 * import { verifiedPod } from "./k8s_pod.ts";
 * const job = { metadata: { name: "reins-1" }, spec: { template: { spec: {
 *   containers: [{ name: "agent", image: "me/agent:1" }],
 * } } } };
 * const harness = parseOrThrow(K8sHarnessSchema, {
 *   reward: { command: ["sh", "tests/run.sh"] },
 *   files: { "tests/run.sh": "echo 1" },
 * });
 * const { configMap } = verifiedPod(job, harness, {
 *   runnerImage: "me/runner:1",
 *   verifierCommand: ["deno", "run", "-A", "/opt/reins/lib/controller/k8s_verifier.ts"],
 *   reporterSecret: "reins-reporter",
 *   shimConfigMap: "reins-shims",
 *   eventKey: "reward:x",
 * });
 * const pod = job.spec.template.spec as Record<string, unknown[]>;
 * assert.deepEqual(pod.initContainers.map((c) => (c as { name: string }).name), [
 *   "agent",
 *   "reins-verify",
 * ]);
 * assert.equal(configMap?.metadata?.name, "reins-1-task");
 * ```
 */
export function verifiedPod(
  job: V1Job,
  harness: K8sHarness,
  options: VerifiedPodOptions,
): AttemptObjects {
  const name = job.metadata!.name!;
  const pod = job.spec!.template.spec!;
  if (pod.initContainers?.length) {
    throw new Error("spec.template.spec.initContainers: must be empty (reins orders the pod)");
  }
  const labels = { [`${LABEL}/managed-by`]: "reins" };
  const annotations = { ...(job.metadata?.annotations ?? {}) };
  const meta = (suffix: string) => ({ name: `${name}-${suffix}`, labels, annotations });
  const task = items(harness.files);
  const answers = items(harness.answers);
  const volumes: V1Volume[] = [
    { name: "reins-workspace", emptyDir: {} },
    { name: "reins-pristine", emptyDir: {} },
    { name: "reins-result", emptyDir: {} },
    { name: "reins-scratch", emptyDir: {} },
    {
      name: "reins-reporter",
      secret: {
        secretName: options.reporterSecret,
        items: [{ key: "key", path: "key" }],
        // Readable by the runner image's unprivileged user: what keeps the key from the agent
        // is that only the reporter container mounts it.
        defaultMode: 0o444,
      },
    },
  ];
  const configMap: V1ConfigMap | null = task.items.length
    ? { apiVersion: "v1", kind: "ConfigMap", metadata: meta("task"), data: task.data }
    : null;
  const secret: V1Secret | null = answers.items.length
    ? {
      apiVersion: "v1",
      kind: "Secret",
      metadata: meta("answers"),
      type: "Opaque",
      stringData: answers.data,
    }
    : null;
  if (configMap) {
    volumes.push({
      name: "reins-task",
      configMap: { name: configMap.metadata!.name!, items: task.items },
    });
  }
  if (secret) {
    volumes.push({
      name: "reins-answers",
      secret: { secretName: secret.metadata!.name!, items: answers.items, defaultMode: 0o444 },
    });
  }
  if (harness.hide_git) {
    volumes.push({
      name: "reins-shims",
      configMap: { name: options.shimConfigMap, defaultMode: 0o555 },
    });
  }
  harness.hide.forEach((_, i) => volumes.push({ name: `reins-hide-${i}`, emptyDir: {} }));

  const agentImage = pod.containers[0].image!;
  const workdir = harness.workspace ?? POD_PATHS.workspace;
  const agents: V1Container[] = pod.containers.map((container) => ({
    ...container,
    workingDir: container.workingDir ?? workdir,
    env: [
      ...(container.env ?? []),
      ...(harness.hide_git
        ? env({ GIT_DIR: "/nonexistent", GIT_CEILING_DIRECTORIES: "/", REINS_WORKDIR: workdir })
        : env({ REINS_WORKDIR: workdir })),
    ],
    volumeMounts: [
      ...(container.volumeMounts ?? []),
      mount("reins-workspace", workdir),
      ...(harness.hide_git
        ? GIT_PATHS.map((path) => ({ ...mount("reins-shims", path, true), subPath: "git" }))
        : []),
      ...harness.hide.map((path, i) => mount(`reins-hide-${i}`, path, true)),
    ],
  }));
  const prepare: V1Container[] = harness.workspace
    ? [{
      name: CONTAINERS.prepare,
      image: agentImage,
      command: [
        "sh",
        "-c",
        'set -e; cp -a "$REINS_SOURCE/." "$REINS_PRISTINE/"; cp -a "$REINS_SOURCE/." ' +
        '"$REINS_WORKSPACE/"; if [ "$REINS_HIDE_GIT" = 1 ]; then rm -rf "$REINS_WORKSPACE/.git"; fi',
      ],
      env: env({
        REINS_SOURCE: harness.workspace,
        REINS_PRISTINE: POD_PATHS.pristine,
        REINS_WORKSPACE: POD_PATHS.workspace,
        REINS_HIDE_GIT: harness.hide_git ? "1" : "0",
      }),
      volumeMounts: [
        mount("reins-pristine", POD_PATHS.pristine),
        mount("reins-workspace", POD_PATHS.workspace),
      ],
    }]
    : [];
  const ids = (c: V1Container) =>
    Object.fromEntries(
      (c.env ?? []).filter((e) =>
        ["REINS_ROLLOUT_ID", "REINS_ATTEMPT_ID", "REINS_INPUT"].includes(e.name)
      ).map((e) => [e.name, e.value ?? ""]),
    );
  const attemptIds = ids(pod.containers[0]);
  const verify: V1Container = {
    name: CONTAINERS.verify,
    image: options.runnerImage,
    command: [...options.verifierCommand, "verify"],
    env: env({ ...attemptIds, REINS_REWARD: JSON.stringify(harness.reward) }),
    volumeMounts: [
      mount("reins-workspace", POD_PATHS.workspace, true),
      mount("reins-pristine", POD_PATHS.pristine, true),
      mount("reins-result", POD_PATHS.result),
      mount("reins-scratch", POD_PATHS.scratch),
      ...(configMap ? [mount("reins-task", POD_PATHS.task, true)] : []),
      ...(secret ? [mount("reins-answers", POD_PATHS.answers, true)] : []),
    ],
  };
  const gateway = (pod.containers[0].env ?? []).find((e) => e.name === "REINS_GATEWAY_URL");
  const report: V1Container = {
    name: CONTAINERS.report,
    image: options.runnerImage,
    command: [...options.verifierCommand, "report"],
    env: env({
      REINS_ROLLOUT_ID: attemptIds.REINS_ROLLOUT_ID ?? "",
      REINS_ATTEMPT_ID: attemptIds.REINS_ATTEMPT_ID ?? "",
      REINS_GATEWAY_URL: gateway?.value ?? "",
      REINS_EVENT_KEY: options.eventKey,
    }),
    volumeMounts: [
      mount("reins-result", POD_PATHS.result, true),
      mount("reins-reporter", POD_PATHS.reporter, true),
    ],
    terminationMessagePolicy: "File",
  };
  pod.initContainers = [...prepare, ...agents, verify];
  pod.containers = [report];
  pod.volumes = [...(pod.volumes ?? []), ...volumes];
  pod.automountServiceAccountToken = false;
  pod.enableServiceLinks = false;
  return { configMap, secret };
}

/** Refuses a rendered Job the API server would refuse (or the client would silently cut). */
function checkSchema(job: V1Job): void {
  const errors = schemaErrors(JSON.parse(JSON.stringify(job)));
  if (errors.length) {
    throw new SpecError("config.template", `the rendered Job is invalid: ${errors.join("; ")}`);
  }
}

/** What {@link renderAttempt} needs of the backend's settings. */
export interface RenderOptions {
  controller: string;
  template: JsonObject | undefined;
  ttlSecondsAfterFinished: number;
  runnerImage: string;
  verifierCommand: string[];
  reporterKey: string | undefined;
  /** Whether the backend applies its egress NetworkPolicy. */
  networkPolicy: boolean;
}

/** An attempt as the backend would create it: the Job and the objects it mounts. */
export interface RenderedAttempt {
  job: V1Job;
  objects: AttemptObjects;
  /** Sandbox stages, as `info.sandbox_stages` (null when the rollout is not verified). */
  stages: { requested: string[]; applied: string[]; skipped: Record<string, string> } | null;
}

/** The runner image's default command of `k8s_verifier.ts` (see `deploy/runner.Dockerfile`). */
export const VERIFIER_COMMAND = ["deno", "run", "-A", "/opt/reins/lib/controller/k8s_verifier.ts"];

/**
 * Renders an attempt (no API calls): the Job from the template and, for a harness spec named
 * `k8s`, the verified pod, its objects and the sandbox stages it applies. Throws
 * {@link SpecError} naming the field of a bad spec.
 */
export async function renderAttempt(
  spec: Pick<AttemptSpec, "rollout" | "attempt" | "token" | "gatewayUrl">,
  options: RenderOptions,
): Promise<RenderedAttempt> {
  const template = spec.rollout.config.template ?? options.template;
  if (!template) {
    throw new SpecError("config.template", "the k8s backend needs a Job template");
  }
  const job = await renderJob(spec, template, {
    controller: options.controller,
    ttlSecondsAfterFinished: options.ttlSecondsAfterFinished,
  });
  const harnessSpec = spec.rollout.config.harness;
  if (!harnessSpec || harnessSpec.name !== "k8s") {
    job.spec!.template.spec!.automountServiceAccountToken ??= false;
    checkSchema(job);
    return { job, objects: { configMap: null, secret: null }, stages: null };
  }
  let harness;
  try {
    harness = parseOrThrow(K8sHarnessSchema, harnessSpec.options, "config.harness.options");
  } catch (error) {
    if (error instanceof ValidationError) throw new SpecError(error.field, error.message);
    throw error;
  }
  if (!harness.reward.command) {
    throw new SpecError(
      "config.harness.options.reward",
      "the k8s verifier runs a command (reward functions live in a local controller)",
    );
  }
  if (options.reporterKey === undefined) {
    throw new SpecError(
      "config.harness",
      "verified k8s rollouts need the controller's reporter key (--reporter-key-file)",
    );
  }
  const nonce = crypto.randomUUID().replaceAll("-", "");
  const names = sharedNames(options.controller);
  let objects: AttemptObjects;
  try {
    objects = verifiedPod(job, harness, {
      runnerImage: options.runnerImage,
      verifierCommand: options.verifierCommand,
      reporterSecret: names.reporterSecret,
      shimConfigMap: names.shimConfigMap,
      eventKey: `reward:${spec.attempt.attempt_id}:${nonce}`,
    });
  } catch (error) {
    throw new SpecError("config.template", (error as Error).message);
  }
  const stages = {
    requested: [] as string[],
    applied: [] as string[],
    skipped: {} as Record<string, string>,
  };
  const stage = (name: string, skipped?: string) => {
    stages.requested.push(name);
    if (skipped) stages.skipped[name] = skipped;
    else stages.applied.push(name);
  };
  if (harness.hide_git) {
    stage("before:hide_git");
    stage("before:disable_git");
  }
  if (harness.hide.length) stage("before:hide_paths");
  stage(
    "before:network_proxy_only",
    options.networkPolicy ? undefined : "no NetworkPolicy (--gateway-cidr not given)",
  );
  stage("before:no_api_credentials");
  stage("after:verify_restored");
  stage("after:verify_outside_agent");
  stage("after:report_with_reporter_key");
  if (harness.strict && Object.keys(stages.skipped).length) {
    const [name, reason] = Object.entries(stages.skipped)[0];
    throw new SpecError(
      "config.harness.options.strict",
      `stage ${name} cannot be applied: ${reason}`,
    );
  }
  job.metadata!.annotations![`${LABEL}/sandbox-stages`] = JSON.stringify(stages);
  checkSchema(job);
  return { job, objects, stages };
}
