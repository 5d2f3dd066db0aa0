/**
 * The rollout controller (SPEC §9): makes execution match the gateway's declared rollouts.
 *
 * - {@link Reconciler} is the loop: claim with a lease, run through a backend, renew, stream
 *   logs, report (`succeeded`, `requeuing` while attempts remain, `failed`), recover after a
 *   restart (re-adopt or fail-and-retry, never run one attempt twice at once);
 * - {@link LocalBackend} runs each attempt as a process group on this machine, optionally in
 *   the stage-wise bubblewrap {@link prepareSandbox | sandbox}, with reward hooks computed
 *   outside the agent's reach;
 * - `K8sBackend` runs each attempt as a Kubernetes Job rendered from a template; import it from
 *   `lib/controller/k8s_backend.ts` (kept out of this module so that importing reins does not load
 *   the Kubernetes client).
 *
 * @example
 * ```ts ignore
 * import { GatewayClient } from "../gateway/mod.ts";
 * import { LocalBackend, Reconciler } from "./mod.ts";
 * const gateway = new GatewayClient("http://127.0.0.1:8420", { apiKey: "ra_admin-key" });
 * const loop = new Reconciler(gateway, new LocalBackend({ root: "runs/controller" }), {
 *   worker: "ctl-1",
 *   concurrency: 8,
 *   gatewayUrl: "http://127.0.0.1:8420",
 * });
 * await loop.start();
 * // rollouts whose config.harness is { name: "command", options: { command: [...] } } now run
 * await loop.stop("drain");
 * ```
 *
 * @module
 */
export {
  type AttemptHandle,
  type AttemptOutcome,
  type AttemptSpec,
  type ExecutionBackend,
  type LogChunk,
  SpecError,
} from "./backend.ts";
export {
  type ControllerGateway,
  Reconciler,
  type ReconcilerOptions,
  type ReconcilerStats,
} from "./reconciler.ts";
export {
  type HarnessResolver,
  LocalBackend,
  type LocalBackendOptions,
  resolveLocalHarness,
} from "./local_backend.ts";
export {
  buildVerifyTree,
  parseRewardOutput,
  type RewardContext,
  type RewardFunction,
  type RewardResult,
  runRewardHook,
} from "./reward_hooks.ts";
export {
  type HiddenPaths,
  openRelays,
  type PreparedSandbox,
  prepareSandbox,
  probeSandbox,
  type Relays,
  type RelaySpec,
  resolveHidden,
  type SandboxRequest,
  type SandboxSupport,
  SandboxUnavailableError,
} from "./sandbox.ts";
export * from "./schema.ts";
