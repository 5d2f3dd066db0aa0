/**
 * Schemas of the controller area: how a harness runs on the local backend (command, workspace,
 * reward hook, sandbox stages), what a Kubernetes Job template must hold, and the controller's
 * own settings.
 *
 * @example
 * ```ts
 * import assert from "node:assert/strict";
 * import { parseOrThrow } from "../schema.ts";
 * import { LocalHarnessSchema } from "./schema.ts";
 * const harness = parseOrThrow(LocalHarnessSchema, { command: ["python3", "agent.py"] });
 * assert.equal(harness.sandbox.enabled, false);
 * ```
 *
 * @module
 */
import { z } from "zod";
import { JsonObjectSchema } from "../schema/core.ts";

const argv = z.array(z.string().min(1, "must not be empty")).min(1, "must name a program");
const envMap = z.record(
  z.string().regex(/^[A-Za-z_][A-Za-z0-9_]*$/, "must be an environment variable name"),
  z.string(),
);
const hostPort = z.string().regex(/^[A-Za-z0-9.-]+:\d{1,5}$/, "must be host:port");
const relativePath = z.string().min(1).refine(
  (p) => !p.startsWith("/") && !p.split("/").includes(".."),
  "must be a relative path inside the workspace",
);

/**
 * The reward hook: a command (run outside the agent's sandbox, after it exits) or the name of an
 * in-process reward function registered with the local backend.
 */
export const RewardHookSchema = z.object({
  /** Command run in the verification tree; its last stdout line is the reward (see docs). */
  command: argv.optional(),
  /** Name of a reward function registered with the backend (`rewardFunctions`). */
  function: z.string().min(1).optional(),
  timeout_s: z.number().positive().max(24 * 3600).default(120),
  env: envMap.default({}),
  /**
   * Paths (relative to the workspace) restored from the pristine copy before the verifier runs,
   * e.g. `["tests"]`: the agent cannot win by editing the tests.
   */
  restore: z.array(relativePath).default([]),
  /** When a restored path was edited by the agent, the reward is forced to this value. */
  edited_restore_reward: z.number().nullable().default(null),
}).refine((hook) => (hook.command ? 1 : 0) + (hook.function ? 1 : 0) === 1, {
  message: "must set exactly one of command or function",
});
/** The reward hook. */
export type RewardHook = z.infer<typeof RewardHookSchema>;

/** Stage-wise sandbox settings of the local backend (bubblewrap). */
export const SandboxOptionsSchema = z.object({
  enabled: z.boolean().default(false),
  /** Refuse to run (fail the attempt) when any requested stage cannot be applied. */
  strict: z.boolean().default(false),
  /** Before: hide `.git` and make `git` unusable inside the sandbox. */
  hide_git: z.boolean().default(true),
  /** Before: `proxy_only` cuts the network except a forwarder to the gateway. */
  network: z.enum(["proxy_only", "host"]).default("proxy_only"),
  /** Extra `host:port` endpoints forwarded into the sandbox (same port on 127.0.0.1). */
  allow: z.array(hostPort).default([]),
  /** During: log every command a `bash` inside the sandbox runs. */
  command_log: z.boolean().default(true),
  /**
   * Before: host paths masked inside the sandbox (absolute, or relative to the controller's
   * working directory): an empty tmpfs over a directory, `/dev/null` (unreadable there) over a
   * file. For datasets that hold answers or hidden tests (the reward, which runs outside, still
   * reads them).
   */
  hide: z.array(z.string().min(1, "must not be empty")).default([]),
});
/** Stage-wise sandbox settings. */
export type SandboxOptions = z.infer<typeof SandboxOptionsSchema>;

/**
 * How the local backend runs a harness: the `options` of a harness spec named `command`, or what
 * a registered harness resolver returns for other names.
 */
export const LocalHarnessSchema = z.object({
  command: argv,
  env: envMap.default({}),
  /** A directory copied into the attempt's workdir as the agent's tree (its pristine copy). */
  workspace: z.string().min(1).optional(),
  reward: RewardHookSchema.optional(),
  sandbox: SandboxOptionsSchema.default({
    enabled: false,
    strict: false,
    hide_git: true,
    network: "proxy_only",
    allow: [],
    command_log: true,
    hide: [],
  }),
  /**
   * `process` (default): `command` runs as its own process group. `in_process`: the runner named
   * by `in_process.name` (registered with the backend as `inProcess`) runs inside the
   * controller's process, without a process start per attempt. In-process code is not
   * sandboxed: only for tool sets that execute no agent-written code (the backend refuses it
   * together with `sandbox.enabled`).
   */
  runner: z.enum(["process", "in_process"]).default("process"),
  /** What the in-process runner gets: its registered name and its options. */
  in_process: z.object({
    name: z.string().min(1, "must name a runner registered with the backend"),
    options: JsonObjectSchema.default({}),
  }).optional(),
}).refine((h) => h.runner !== "in_process" || h.in_process !== undefined, {
  message: 'runner "in_process" needs in_process: { name, options }',
  path: ["in_process"],
});
/** How the local backend runs a harness. */
export type LocalHarness = z.infer<typeof LocalHarnessSchema>;
/** How the local backend runs a harness, as a resolver writes it (defaults not filled in). */
export type LocalHarnessInput = z.input<typeof LocalHarnessSchema>;

/** Which sandbox stages applied to an attempt (recorded as `info.sandbox_stages`). */
export const SandboxStagesSchema = z.object({
  /** Every stage that was requested, with `applied` or the reason it was not. */
  requested: z.array(z.string()),
  applied: z.array(z.string()),
  skipped: z.record(z.string(), z.string()),
});
/** Which sandbox stages applied. */
export type SandboxStages = z.infer<typeof SandboxStagesSchema>;

/** The minimum a Kubernetes Job template (a rollout's `config.template`) must hold. */
export const JobTemplateSchema = z.object({
  metadata: z.object({
    labels: z.record(z.string(), z.string()).optional(),
    annotations: z.record(z.string(), z.string()).optional(),
  }).passthrough().optional(),
  spec: z.object({
    template: z.object({
      metadata: JsonObjectSchema.optional(),
      spec: z.object({
        containers: z.array(
          z.object({
            name: z.string().min(1),
            image: z.string().min(1, "must name an image"),
          }).passthrough(),
        ).min(1, "must hold at least one container"),
      }).passthrough(),
    }).passthrough(),
  }).passthrough(),
}).passthrough();
/** A Kubernetes Job template. */
export type JobTemplate = z.infer<typeof JobTemplateSchema>;

/**
 * How the Kubernetes backend verifies an attempt (the `options` of a harness spec named `k8s`):
 * the agent runs first, then a verifier container in the same pod computes the reward on the
 * tree it left, then a reporter container posts it with the reporter key (see docs/controller.md).
 */
export const K8sHarnessSchema = z.strictObject({
  /**
   * Absolute path, inside the agent's image, of the task's pristine workspace. It is copied into
   * the pod's workspace volume (without `.git` for the agent) and the volume is mounted over it
   * in the agent's container, so the image's copy (history included) is out of its sight.
   */
  workspace: z.string().regex(/^\/[^\0]*$/, "must be an absolute path").optional(),
  /** The reward command, run in the verifier container on the verification tree. */
  reward: RewardHookSchema,
  /** Files (relative path → text) mounted only into the verifier and laid into its tree. */
  files: z.record(relativePath, z.string()).default({}),
  /** Answer files (relative path → text): a Secret mounted only into the verifier. */
  answers: z.record(relativePath, z.string()).default({}),
  /** Before: the agent's copy has no `.git`, and `git` is replaced by a shim that exits 128. */
  hide_git: z.boolean().default(true),
  /** Before: directories of the agent's image covered by an empty volume in its container. */
  hide: z.array(z.string().regex(/^\/.+/, "must be an absolute path")).default([]),
  /** Refuse to start (fail the rollout) when a requested stage cannot be applied. */
  strict: z.boolean().default(false),
});
/** How the Kubernetes backend verifies an attempt. */
export type K8sHarness = z.infer<typeof K8sHarnessSchema>;

/** Settings of the controller's reconcile loop. */
export const ControllerOptionsSchema = z.object({
  /** Stable id of this controller: a restart with the same id re-adopts its attempts. */
  worker: z.string().min(1),
  concurrency: z.number().int().min(1).max(10_000).default(4),
  lease_ms: z.number().int().min(200).default(30_000),
  /** How often the loop claims new work when it has free slots. */
  poll_ms: z.number().int().min(10).default(500),
  /** How often expired leases of other (dead) controllers are swept. */
  sweep_ms: z.number().int().min(50).default(5_000),
  /**
   * Only claim rollouts whose labels hold every given key/value (e.g. `{ sandbox: "gpu" }`), so
   * that controllers specialised per harness or sandbox kind can share one gateway.
   */
  labels: z.record(z.string(), z.string()).optional(),
});
/** Settings of the controller's reconcile loop. */
export type ControllerOptions = z.input<typeof ControllerOptionsSchema>;
