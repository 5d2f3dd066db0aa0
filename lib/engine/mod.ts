/**
 * Inference engines beside the torch worker. Today: llama.cpp through `node-llama-cpp`, fed by
 * the worker's GGUF export of the built-in Qwen3-style decoder, and the checkpoint conversion
 * (GGUF, Hugging Face layout) that feeds it; the llama.cpp engine server (`server.ts`, the
 * worker's generate API, `deno task engine`) with its own sampler (`sampler.ts`); and the one
 * weight-sync protocol of every engine kind (`sync.ts`: worker, llama_cpp, sglang, vllm).
 *
 * @example Export a checkpoint and score sequences in llama.cpp
 * ```ts ignore
 * import { exportCheckpoint, loadGguf, teacherForcedLogprobs } from "./mod.ts";
 * await exportCheckpoint({
 *   checkpoint: "policy.pt", gguf: "policy.gguf", type: "f32", tokenizer: "data/tokenizers/char",
 * });
 * const model = await loadGguf("policy.gguf");
 * const logprobs = await teacherForcedLogprobs(model, [[12, 40, 41, 2]]);
 * await model.dispose();
 * ```
 *
 * @module
 */
export {
  exportCheckpoint,
  ExportError,
  ExportRequestSchema,
  ExportResultSchema,
  GGUF_TYPES,
  HF_DTYPES,
} from "./export.ts";
export type { ExportRequest, ExportResult } from "./export.ts";
export {
  llamaStatus,
  loadGguf,
  loadLlama,
  teacherForcedLogprobs,
  TeacherForcedOptionsSchema,
  vocabSize,
} from "./llama_eval.ts";
export type { LlamaGpu, LlamaStatus, LoadGgufOptions, TeacherForcedOptions } from "./llama_eval.ts";
export { llamaParity } from "./parity.ts";
export {
  EngineGenerateRequestSchema,
  type EngineServer,
  type EngineServerOptions,
  EngineSyncRequestSchema,
  startEngineServer,
} from "./server.ts";
export { LlamaPolicy, type PolicyLoadOptions } from "./policy.ts";
export {
  PLAIN_SAMPLING,
  type SampledToken,
  sampleToken,
  type SamplingParams,
  seededUniform,
  type Uniform,
} from "./sampler.ts";
export {
  type EngineKind,
  EngineSyncError,
  type Exporter,
  LlamaCppSync,
  type LlamaCppSyncOptions,
  pythonExporter,
  requireSync,
  SglangSync,
  type SglangSyncOptions,
  type SyncReport,
  VllmSync,
  type VllmSyncOptions,
  type WeightSync,
  WorkerSync,
} from "./sync.ts";
export type { ParityInput, ParityResult } from "./parity.ts";
