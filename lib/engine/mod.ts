/**
 * Inference engines beside the torch worker. Today: llama.cpp through `node-llama-cpp`, fed by
 * the worker's GGUF export of the built-in Qwen3-style decoder, and the checkpoint conversion
 * (GGUF, Hugging Face layout) that feeds it.
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
export type { ParityInput, ParityResult } from "./parity.ts";
