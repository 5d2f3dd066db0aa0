/**
 * The reins trainer engine: a PyTorch worker (`worker/`, CPU or GPU) and its typed client.
 *
 * @example
 * ```ts ignore
 * import { startLocalWorker } from "./mod.ts";
 * await using worker = await startLocalWorker();
 * const { client } = worker;
 * await client.init({
 *   model: {
 *     kind: "builtin",
 *     config: {
 *       vocab_size: 64, d_model: 32, n_layers: 2, n_heads: 4, n_kv_heads: 2, d_ff: 64,
 *       max_seq_len: 128,
 *     },
 *     seed: 0,
 *   },
 *   optimizer: { lr: 1e-3 },
 * });
 * const sample = await client.generate({ prompt_ids: [1, 2], max_tokens: 4, seed: 7 });
 * await client.forwardBackward({
 *   rows: [{
 *     rollout_id: "r1", group_id: "g1",
 *     tokens: [1, 2, ...sample.ids],
 *     loss_mask: [0, 0, ...sample.ids.map(() => 1 as const)],
 *     advantages: [0, 0, ...sample.ids.map(() => 1)],
 *     loss_weights: [0, 0, ...sample.ids.map(() => 1 / sample.ids.length)],
 *     rollout_logprobs: [0, 0, ...sample.logprobs],
 *   }],
 *   loss: { kind: "ppo" },
 * });
 * await client.optimStep(); // policy_version 1
 * ```
 *
 * @module
 */
export { connect, TrainerClient, TrainerWorkerError } from "./client.ts";
export type { GenerateInput, GenerateStreamDone, TrainerClientOptions } from "./client.ts";
export {
  describeCpu,
  MissingPythonError,
  probePython,
  resolvePython,
  startLocalWorker,
  TORCH_INSTALL_HINT,
  workerEnv,
  workerPackageDir,
} from "./local_worker.ts";
export type { LocalWorker, LocalWorkerOptions, PythonInfo } from "./local_worker.ts";
export { launch } from "./launch.ts";
export type { LaunchedWorker, LaunchOptions } from "./launch.ts";
export {
  WORKER_CONTRACT_URL,
  type WorkerContract,
  workerContract,
  workerContractText,
} from "./contract.ts";
